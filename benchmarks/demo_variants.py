"""``make demo`` with recipe changes, against the demo itself, over several fine-tuning seeds.

The demo answers "what did 10 minutes of pre-training add over a random start?" with one
fine-tuning seed. A recipe change (a lever of #29: no dropout, the paper's separate
generator, ...) is judged by the same question at the same wall-clock budget, so this
script runs the demo again with ``--set`` overrides of the ``cpu`` recipe, reusing the
base demo's corpus, vocabulary, blocks, fine-tuning plan, floors and random start (the
variant differs from the base only in its pre-training), then fine-tunes every
pre-trained model (and the random start, once) with more seeds at both label budgets,
and prints the medians side by side with the floors.

    python benchmarks/demo_variants.py --base runs/demo \\
        --variant nodrop:optim.dropout=false --variant separate:objective.generator_shared_layers=0 \\
        --seeds 1 2 3 4 5 --jobs 2

Every stage is reused when run again (the demo's own stage reuse, and each seed's
``results.json``), so a stopped run continues where it was. Seed 1 of every model is the
demo's own fine-tuning; seeds 2.. are written to ``<demo>/seeds/<budget>-s<seed>``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
from collections.abc import Iterable
from pathlib import Path

# Stages of a finished demo that a variant reuses unchanged (everything but pre-training and
# the pre-trained model's fine-tunings).
SHARED = (
    "corpus",
    "tokenizer",
    "blocks",
    "random-start",
    "floors",
    "finetune_plan.json",
    "nsmc-random-start",
    "nsmc-few-random-start",
)


def seed_variant(base: Path, out: Path) -> None:
    """Give ``out`` the base demo's shared stages (hard links: nothing is copied twice)."""
    out.mkdir(parents=True, exist_ok=True)
    for name in SHARED:
        src, dst = base / name, out / name
        if dst.exists() or not src.exists():
            continue
        if src.is_dir():
            shutil.copytree(src, dst, copy_function=os.link)
        else:
            os.link(src, dst)


def run_demo(out: Path, overrides: list[str], data_dir: str) -> dict:
    """``electra demo -o out --set OVERRIDE ...``: the demo's stages, the variant's recipe."""
    from electra.experiments.demo import demo
    from electra.experiments.options import DemoCommand

    return demo(DemoCommand(output=str(out), data_dir=data_dir, progress=False, set=overrides))


def budgets(demo_dir: Path) -> dict[str, int]:
    """The demo's fine-tuning folders by name and their training-review counts."""
    result = json.loads((demo_dir / "demo.json").read_text())
    out = {"nsmc": result["train_examples"]}
    if result.get("few_labels"):
        out["nsmc-few"] = result["few_labels"]["train_examples"]
    return out


def seed_jobs(demo_dir: Path, model: Path, prefix: str, seed: int, data_dir: str) -> list[tuple]:
    """``_finetune_job`` arguments: ``model`` fine-tuned at each label budget with ``seed``,
    one folder each (none for seed 1: the demo's own fine-tunings are that seed)."""
    from electra.experiments.options import DemoCommand

    if seed == 1:
        return []
    return [
        (
            DemoCommand(
                output=str(demo_dir),
                data_dir=data_dir,
                progress=False,
                seeds=[seed],
                nsmc_train_examples=n,
            ),
            model,
            demo_dir / "seeds" / f"{prefix}{name}-s{seed}",
            Path(data_dir),
            demo_dir / "floors",
            True,
        )
        for name, n in budgets(demo_dir).items()
    ]


def accuracy(path: Path) -> float | None:
    """A fine-tuning's test accuracy (its single seed's), or None while not finished."""
    from electra.finetune.results import results_complete

    if not results_complete(path):
        return None
    return json.loads(path.read_text())["summary"]["test"]["accuracy"]["median"]


def scores(demo_dir: Path, name: str, seeds: list[int], random: bool = False) -> dict[int, float]:
    """Test accuracy by seed of one model at one budget, the seeds finished so far (seed 1:
    the demo's own folder)."""
    got = {}
    for seed in seeds:
        if seed == 1:
            path = demo_dir / (f"{name}-random-start" if random else name) / "results.json"
        else:
            folder = f"{'random-' if random else ''}{name}-s{seed}"
            path = demo_dir / "seeds" / folder / "results.json"
        value = accuracy(path)
        if value is not None:
            got[seed] = 100 * value
    return got


def report(base: Path, variants: dict[str, Path], seeds: list[int]) -> None:
    """Per budget: each model's seeds, median, gain over the random start, and the floors."""
    from electra.finetune.baselines import floor_scores

    for name, n in budgets(base).items():
        random = scores(base, name, seeds, random=True)
        floors = json.loads((base / name / "results.json").read_text()).get("floors")
        tfidf = 100 * floor_scores(floors, "test", "accuracy").get("tfidf", float("nan"))
        med_r = statistics.median(random.values()) if random else float("nan")
        print(f"\n{n:,} training reviews (NSMC test accuracy; TF-IDF + LR {tfidf:.2f})")
        print(f"  {'random start':<14} {_seeds(random.values())}  median {med_r:.2f}")
        for label, d in {"base": base, **variants}.items():
            got = scores(d, name, seeds)
            if not got:
                continue
            med = statistics.median(got.values())
            above = sum(g > tfidf for g in got.values())
            print(
                f"  {label:<14} {_seeds(got.values())}  median {med:.2f}  over random start "
                f"{med - med_r:+.2f}  over TF-IDF {med - tfidf:+.2f} ({above}/{len(got)} seeds)"
            )
            paired = [got[k] - random[k] for k in got if k in random]  # same seed, same data
            print(f"  {'':<14} over the random start by seed: {_seeds(paired, '+')}")


def _seeds(values: Iterable[float], sign: str = "") -> str:
    return " / ".join(f"{v:{sign}.2f}" for v in values)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, required=True, help="a finished `electra demo` folder")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        help="name:override[,override...] of the cpu recipe, e.g. nodrop:optim.dropout=false",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--jobs", type=int, default=2, help="fine-tunings side by side")
    p.add_argument("--data-dir", default=str(Path("../shared/data")))
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()

    variants = {}
    for spec in args.variant:
        name, _, overrides = spec.partition(":")
        variants[name] = (args.base.parent / f"{args.base.name}-{name}", overrides.split(","))
    if not args.report_only:
        from electra.experiments.demo import _finetune_job
        from electra.finetune.results import results_complete
        from electra.system.workers import run_jobs

        for d, overrides in variants.values():
            seed_variant(args.base, d)
            run_demo(d, overrides, args.data_dir)
        # Seed by seed across models, so that a stopped run has the same seeds everywhere.
        random_model = args.base / "random-start" / "hf" / "discriminator"
        jobs = []
        for seed in args.seeds:
            jobs += seed_jobs(args.base, random_model, "random-", seed, args.data_dir)
            for d in [args.base] + [d for d, _ in variants.values()]:
                disc = d / "pretrain" / "hf" / "discriminator"
                jobs += seed_jobs(d, disc, "", seed, args.data_dir)
        run_jobs(_finetune_job, jobs, args.jobs, lambda a: results_complete(a[2] / "results.json"))
    report(args.base, {k: d for k, (d, _) in variants.items()}, args.seeds)


if __name__ == "__main__":
    main()
