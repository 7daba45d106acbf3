"""``electra demo`` (``make demo``): the main job, end to end, on a CPU.

1. a WordPiece vocabulary trained on the Korean corpus of the data directory
   (Korean Wikipedia text and NSMC movie reviews, minus every review of the
   NSMC dev and test splits: the text the demo scores is never pre-trained on);
2. packed blocks of 128 tokens;
3. ELECTRA pre-training with the CPU recipe (``electra/pretrain/configs/cpu.toml``) for a
   time budget (``--minutes``): the number of steps is planned from a quick
   timing of this machine, and re-planned from the first steps' measured time
   (``run.fit_minutes``), so the learning rate decays to zero on time;
4. fine-tuning of the discriminator on NSMC, built from the raw reviews and
   balanced 50/50 like the official corpus, and the same fine-tuning (same
   shape, recipe and seeds) from a randomly initialised encoder: what
   pre-training added. Both are run twice, with 12,000 training reviews and
   with 3,000 (few labels are where pre-training pays off most), two jobs
   side by side on one thread each;
5. a report (plots, HTML) and a results table: side by side on the balanced
   NSMC test set, at each label budget, the pre-trained model, the random
   start, the TF-IDF + logistic-regression floor trained on the same
   reviews, and the majority class, with the pre-training health verdict
   (``electra.pretrain.health``).

Pre-training and the fine-tunings use bf16 autocast where the CPU has it
natively (AVX512-BF16/AMX: about 1.6x faster) and fp32 elsewhere
(``electra.system.precision``: emulated bf16 is ~80x slower on AVX2-only CPUs).

Every stage shows progress and is reused when the demo is run again with the
same options; a stage built with other options (``--corpus``, ``--minutes``,
the fine-tuning flags) is refused with a message rather than silently reused
(delete the output directory to start over).

PyTorch, and the modules that import it, are imported inside the functions
that use them, so ``electra demo --help`` answers without loading it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import re
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from electra.blocks.options import PrepareCommand
from electra.blocks.prepare import prepare
from electra.blocks.read import open_blocks
from electra.experiments.heldout import unscored_reviews
from electra.experiments.options import CORPORA, DemoCommand
from electra.experiments.report import build_report
from electra.experiments.timing import estimate_finetune_seconds, estimate_step_seconds
from electra.finetune.results import results_complete
from electra.system.files import atomic_write_json
from electra.system.paths import default_data_dir
from electra.system.workers import processes_used, run_jobs
from electra.text.corpus import ReadOptions
from electra.text.vocabulary import train_tokenizer

STAGES = 5


# --smoke's fine-tuning: FinetuneArgs fields that replace the command's options.
SMOKE_FINETUNING = {
    "epochs": 1,
    "max_length": 32,
    "max_train_examples": 200,
    "max_eval_examples": 100,
}


def _stage(n: int, title: str) -> float:
    print(f"\n== [{n}/{STAGES}] {title}", flush=True)
    return time.time()


def korean_corpus(data_dir: Path, out: Path, corpus: str = "wiki+reviews") -> list[Path]:
    """The demo's pre-training (and vocabulary) text, written under ``out``.

    ``reviews``: the NSMC raw reviews that the fine-tuning never scores (see
    :func:`unscored_reviews`); ``wiki+reviews`` adds Korean Wikipedia
    (WikiExtractor output).
    """
    if corpus not in CORPORA:
        raise ValueError(f"--corpus must be one of {', '.join(CORPORA)}; got {corpus!r}")
    wiki = sorted((data_dir / "pretrain/ko/kowiki").glob("*/wiki_*"))
    nsmc = data_dir / "nsmc/raw_subset"
    if not wiki or not nsmc.is_dir():
        raise FileNotFoundError(
            f"{data_dir}: Korean data not found (expected pretrain/ko/kowiki/*/wiki_* and "
            "nsmc/raw_subset/). Point --data-dir (or ELECTRA_DATA_DIR) at a directory laid "
            "out like shared/data; see its MANIFEST.md"
        )
    reviews = unscored_reviews(data_dir, out / "nsmc_reviews.txt")
    return [*wiki, reviews] if corpus == "wiki+reviews" else [reviews]


def _check_same_corpus(out: Path, corpus: str) -> None:
    """Refuse to reuse a vocabulary and blocks built from another ``--corpus``."""
    stamp = out / "corpus" / "corpus.json"
    if _same_as_stamp(stamp, {"corpus": corpus}, out):
        return
    if (out / "tokenizer" / "vocab.txt").is_file():
        raise SystemExit(
            f"{out} holds a vocabulary of an older demo (built with the scored NSMC reviews); "
            "delete it or use another --output"
        )
    atomic_write_json(stamp, {"corpus": corpus})


def check_stage_options(stage_dir: Path, options: dict[str, Any]) -> None:
    """Refuse to reuse (or resume) a stage built with other options; stamp a new one.

    ``options`` are the demo flags the stage depends on (``--minutes`` for the
    pre-training, the fine-tuning flags for both fine-tunings). A stage built by
    a demo from before these stamps has none: it is reused as before.
    """
    stamp = stage_dir / "demo_options.json"
    if not _same_as_stamp(stamp, options, stage_dir) and not stage_dir.exists():
        stage_dir.mkdir(parents=True)
        atomic_write_json(stamp, options)


def _same_as_stamp(stamp: Path, options: dict[str, Any], built: Path) -> bool:
    """True if ``stamp`` exists and holds ``options``; stops naming each changed flag if it
    holds others; False if there is no stamp (the caller decides what an unstamped
    ``built`` directory means)."""
    if not stamp.is_file():
        return False
    was = json.loads(stamp.read_text())
    changed = [
        f"--{k.replace('_', '-')} {was.get(k)!r} -> {options.get(k)!r}"
        for k in [*options, *(k for k in was if k not in options)]  # given, or stamped only
        if was.get(k) != options.get(k)
    ]
    if changed:
        raise SystemExit(
            f"{built} was built with other options ({'; '.join(changed)}); "
            "delete it (the later stages too) or use another --output"
        )
    return True


def demo(cmd: DemoCommand) -> dict[str, Any]:
    """Run (or reuse) every stage; returns the results shown in the table."""
    t_all = time.time()
    if cmd.set:  # a mistyped override fails now, not after the vocabulary and blocks
        from electra.pretrain.config import load_config

        load_config("tiny" if cmd.smoke else "cpu", cmd.set)
    data_dir = Path(cmd.data_dir) if cmd.data_dir else default_data_dir()
    out = Path(cmd.output)
    out.mkdir(parents=True, exist_ok=True)
    files = korean_corpus(data_dir, out / "corpus", cmd.corpus)
    _check_same_corpus(out, cmd.corpus)
    if cmd.smoke:
        files = files[:1]  # one file is enough to exercise every stage
    times: dict[str, float] = {}

    t = _stage(1, f"vocabulary ({cmd.vocab_size if not cmd.smoke else 2000} WordPiece tokens)")
    tok = vocabulary_stage(cmd, files, out / "tokenizer")
    times["tokenizer_s"] = time.time() - t

    t = _stage(2, "packed blocks")
    blocks = blocks_stage(cmd, files, tok, out / "blocks")
    times["prepare_s"] = time.time() - t

    t = _stage(3, "ELECTRA pre-training" + (" (smoke)" if cmd.smoke else f" ({cmd.minutes:g} min)"))
    run_dir = out / "pretrain"
    pre = pretrain_stage(cmd, blocks, run_dir)
    times["pretrain_s"] = time.time() - t

    t = _stage(4, "fine-tuning on NSMC: the discriminator and a random start")
    discriminator = run_dir / "hf" / "discriminator"
    cmd = plan_finetuning(cmd, discriminator, out / "finetune_plan.json")
    random_model = random_start(discriminator, out / "random-start")
    ft = finetune_pairs(cmd, discriminator, random_model, out, data_dir)
    times["finetune_s"] = time.time() - t

    t = _stage(5, "report")
    html = build_report(run_dir)
    times["report_s"] = time.time() - t
    result = {
        **_results(pre, ft),
        "artefacts": _artefacts(out, ft, html),
        "times": times,
        "total_s": time.time() - t_all,
    }
    atomic_write_json(out / "demo.json", result)
    print_results(result)
    return result


def vocabulary_stage(cmd: DemoCommand, files: list[Path], tok: Path) -> Path:
    """Stage 1: the WordPiece vocabulary in ``tok`` (reused when there)."""
    if (tok / "vocab.txt").is_file():
        print(f"reusing {tok}")
        return tok
    report = train_tokenizer(
        [str(f) for f in files],
        tok,
        vocab_size=2000 if cmd.smoke else cmd.vocab_size,
        limit_mb=1.0 if cmd.smoke else None,
        read_options=ReadOptions(),
        progress=cmd.progress,
    )
    print(report.summary())
    return tok


def blocks_stage(cmd: DemoCommand, files: list[Path], tok: Path, blocks: Path) -> Path:
    """Stage 2: packed blocks of 128 tokens (64 for ``--smoke``), 2% held out."""
    prepare(
        PrepareCommand(
            inputs=[str(f) for f in files],
            tokenizer=str(tok),
            output=str(blocks),
            max_length=64 if cmd.smoke else 128,
            validation_fraction=0.02,
            progress=cmd.progress,
        )
    )
    return blocks


def pretrain_stage(cmd: DemoCommand, blocks: Path, run_dir: Path) -> dict[str, Any]:
    """Stage 3: pre-training for ``cmd.minutes`` (resumed when interrupted, reused when
    done); returns the run's ``summary.json``."""
    from electra.pretrain.trainer import Trainer

    options: dict[str, Any] = {"minutes": cmd.minutes, "smoke": cmd.smoke}
    if cmd.set:  # stamped only when given: the demos of before --set stay reusable
        options["set"] = list(cmd.set)
    check_stage_options(run_dir, options)
    summary_path = run_dir / "summary.json"
    if summary_path.is_file() and json.loads(summary_path.read_text()).get("stopped") != "signal":
        print(f"reusing {run_dir}")
    else:
        cfg = pretrain_config(cmd, blocks, run_dir)
        Trainer(cfg, resume=(run_dir / "checkpoints").is_dir()).fit()
    pre = json.loads(summary_path.read_text())
    if pre.get("stopped") == "signal":  # Ctrl-C / SIGTERM: checkpointed, nothing exported
        raise SystemExit(
            f"pre-training was interrupted at step {pre.get('step')} (checkpoint saved in "
            f"{run_dir}); run the demo again to resume it"
        )
    return pre


def pretrain_config(cmd: DemoCommand, blocks: Path, run_dir: Path) -> Any:
    """The ``cpu`` recipe (with ``cmd.set``'s overrides) with as many steps as this machine
    runs in ``cmd.minutes`` (the ``tiny`` one for 20 steps with ``--smoke``)."""
    from electra.pretrain.config import load_config

    base = [
        *cmd.set,  # the user's first: what the demo fixes below wins
        "run.progress=" + ("true" if cmd.progress else "false"),
        f"data.blocks={json.dumps(str(blocks))}",
        f"run.output_dir={json.dumps(str(run_dir))}",
    ]
    if cmd.smoke:
        return load_config("tiny", [*base, "optim.max_steps=20", "run.eval_every=10"])
    cfg = load_config("cpu", base)
    train_blocks = open_blocks(blocks, "train")
    per_step = estimate_step_seconds(cfg, train_blocks.block_length, train_blocks.vocab_size)
    steps = max(20, int(cmd.minutes * 60 / per_step))
    cfg.optim.max_steps = steps
    cfg.optim.warmup_steps = max(1, steps // 10)
    # Re-planned from the measured steps before warmup ends, so the learning rate
    # reaches zero at the budget (the estimate alone was off by up to 15%).
    cfg.run.fit_minutes = cmd.minutes
    cfg.run.max_minutes = cmd.minutes * 1.25  # a hard stop, whatever happens
    cfg.run.eval_every = max(1, steps // 5)
    cfg.run.save_every = max(1, steps // 4)
    print(f"planned {steps} steps of {per_step:.2f} s ({cfg.optim.batch_size} x 128 blocks)")
    return cfg


def _results(pre: dict[str, Any], ft: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """demo.json's scores: the pre-training summary and every fine-tuning's summary."""
    return {
        "pretrain": pre,
        "nsmc": ft["nsmc"]["summary"],
        "nsmc_random_start": ft["nsmc-random-start"]["summary"],
        "floors": ft["nsmc"].get("floors"),
        "nsmc_test": ft["nsmc"]["task"]["splits"]["test"],
        "train_examples": ft["nsmc"]["task"]["splits"]["train"]["examples"],
        **_few_results(ft),
    }


def _artefacts(out: Path, ft: dict[str, dict[str, Any]], html: Path) -> dict[str, str]:
    """demo.json's ``artefacts``: what each stage left, by name."""
    run_dir = out / "pretrain"
    few = {
        f"{name} results": str(out / name / "results.json")
        for name in ("nsmc-few", "nsmc-few-random-start")
        if name in ft
    }
    return {
        "vocabulary": str(out / "tokenizer"),
        "blocks": str(out / "blocks"),
        "pre-training run": str(run_dir),
        "discriminator (HF)": str(run_dir / "hf" / "discriminator"),
        "NSMC model (HF)": str(out / "nsmc" / "model"),
        "NSMC results": str(out / "nsmc" / "results.json"),
        "random-start results": str(out / "nsmc-random-start" / "results.json"),
        **few,
        "report": str(html),
    }


def plan_finetuning(cmd: DemoCommand, discriminator: Path, plan_path: Path) -> DemoCommand:
    """``cmd`` with as many NSMC training reviews as fit ``cmd.finetune_minutes``.

    Each fine-tuning trains ``epochs`` passes and evaluates dev after each and
    test once (a forward pass costs about a third of a training step). Both
    fine-tunings (pre-trained and random start) use the same plan, so they stay
    comparable; the plan is saved so a re-run reuses the same split sizes.
    """
    if cmd.smoke or cmd.finetune_minutes <= 0:
        return cmd
    key = [cmd.finetune_minutes, cmd.epochs, cmd.nsmc_train_examples, cmd.nsmc_eval_examples]
    plan = json.loads(plan_path.read_text()) if plan_path.is_file() else {}
    if plan.get("key") != key:
        from electra.finetune.run import finetune_options

        device = finetune_options(cmd).get("device", "auto")  # where fine-tuning will run
        per_example = estimate_finetune_seconds(discriminator, device=device)
        n_eval = cmd.nsmc_eval_examples or 6000
        eval_s = (cmd.epochs + 1) * n_eval * per_example / 3
        budget = cmd.finetune_minutes * 60 - eval_s
        wanted = cmd.nsmc_train_examples or 18000
        fits = int(budget / (cmd.epochs * per_example)) if budget > 0 else 0
        n = max(2000, min(wanted, fits))
        plan = {"key": key, "seconds_per_example": per_example, "train_examples": n}
        atomic_write_json(plan_path, plan)
    n = plan["train_examples"]
    print(
        f"fine-tuning plan: {n} training reviews x {cmd.epochs} epochs "
        f"({1000 * plan['seconds_per_example']:.1f} ms per example, "
        f"budget {cmd.finetune_minutes:g} min each)"
    )
    return dataclasses.replace(cmd, nsmc_train_examples=n)


def finetune_nsmc(
    cmd: DemoCommand, model: Path, out: Path, data_dir: Path, floors_cache: Path
) -> dict[str, Any]:
    """The demo's NSMC fine-tuning of ``model`` (reused when complete): one recipe for both."""
    from electra.finetune.run import finetune, finetune_args_from, finetune_options

    check_stage_options(out, {**finetune_options(cmd), "smoke": cmd.smoke})
    res_path = out / "results.json"
    if results_complete(res_path):
        print(f"reusing {out}")
        return json.loads(res_path.read_text())
    args = finetune_args_from(
        cmd,
        model=str(model),
        task="nsmc",
        output=str(out),
        data_dir=str(data_dir),
        max_length=64,
        bf16=None,  # where native: emulated bf16 is ~80x slower on AVX2 CPUs
        floors_cache=str(floors_cache),
        progress=cmd.progress,
    )
    if cmd.smoke:  # tiny whatever was asked, and never more reviews than asked
        args = dataclasses.replace(args, **SMOKE_FINETUNING)
        args.max_train_examples = min(args.max_train_examples, cmd.nsmc_train_examples or 1 << 30)
    return finetune(args)


def few_label_count(cmd: DemoCommand) -> int:
    """Training reviews of the second, smaller pair of fine-tunings (0: none)."""
    full = cmd.nsmc_train_examples
    if cmd.smoke:
        return min(cmd.few_labels, SMOKE_FINETUNING["max_train_examples"] // 2)
    return cmd.few_labels if 0 < cmd.few_labels and (full == 0 or cmd.few_labels < full) else 0


def finetune_pairs(
    cmd: DemoCommand, pretrained: Path, random_model: Path, out: Path, data_dir: Path
) -> dict[str, dict[str, Any]]:
    """The demo's NSMC fine-tunings, by output folder: ``nsmc`` and ``nsmc-random-start``
    (``cmd.nsmc_train_examples`` training reviews), and ``nsmc-few``,
    ``nsmc-few-random-start`` (:func:`few_label_count` of them, when not 0).

    Every one uses the same recipe, seeds, dev and test reviews, so they differ only in
    the start and the labels. Up to ``cmd.finetune_jobs`` run side by side, the largest
    first; each then writes its printout to its folder's ``finetune.log``.
    """
    few = few_label_count(cmd)
    plan = [("nsmc", pretrained, cmd), ("nsmc-random-start", random_model, cmd)]
    if few:
        few_cmd = dataclasses.replace(cmd, nsmc_train_examples=few)
        plan += [
            ("nsmc-few", pretrained, few_cmd),
            ("nsmc-few-random-start", random_model, few_cmd),
        ]

    pending = sum(not results_complete(out / name / "results.json") for name, _, _ in plan)
    side_by_side = processes_used(pending, cmd.finetune_jobs)
    args = [
        (
            dataclasses.replace(c, progress=False) if side_by_side else c,
            model,
            out / name,
            data_dir,
            out / "floors",
            bool(side_by_side),
        )
        for name, model, c in plan
    ]
    if side_by_side:
        print(
            f"{pending} fine-tunings, {side_by_side} side by side "
            "(each writes its printout to its folder's finetune.log)",
            flush=True,
        )
    results = run_jobs(
        _finetune_job, args, cmd.finetune_jobs, lambda a: results_complete(a[2] / "results.json")
    )
    return {n: res for (n, _, _), res in zip(plan, results, strict=True)}


def _finetune_job(
    cmd: DemoCommand, model: Path, out: Path, data_dir: Path, floors: Path, quiet: bool
) -> dict[str, Any]:
    """One of :func:`finetune_pairs`' fine-tunings. ``quiet`` (others run beside it): its
    printout goes to ``out/finetune.log`` as it happens, and the terminal gets one line
    per epoch and one when it is done, each naming the job."""
    if not quiet or results_complete(out / "results.json"):
        return finetune_nsmc(cmd, model, out, data_dir, floors)
    t = time.time()
    out.mkdir(parents=True, exist_ok=True)
    with (
        JobLog(out / "finetune.log", out.name, sys.__stdout__ or sys.stdout) as f,
        contextlib.redirect_stdout(f),
        contextlib.redirect_stderr(f),
    ):
        r = finetune_nsmc(cmd, model, out, data_dir, floors)
    print(
        f"  {out.name} ({r['task']['splits']['train']['examples']:,} training reviews): "
        f"test accuracy {100 * _median(r['summary']):.2f}% in {(time.time() - t) / 60:.1f} min",
        flush=True,
    )
    return r


class JobLog(io.TextIOBase):
    """A job's printout: every line into its log file as it comes (so ``tail -f`` works),
    the epoch summaries (``... epoch 2: train loss ...``) also to ``terminal``, prefixed
    with the job's name, so jobs running side by side show their progress."""

    SHOWN = re.compile(r" epoch \d+: ")

    def __init__(self, path: Path, name: str, terminal: TextIO) -> None:
        self._file = path.open("a", encoding="utf-8", buffering=1)
        self._name, self._terminal, self._partial = name, terminal, ""

    def write(self, s: str) -> int:
        self._file.write(s)
        self._file.flush()
        *lines, self._partial = (self._partial + s).split("\n")
        for line in lines:
            if self.SHOWN.search(line):
                print(f"  [{self._name}] {line.strip()}", file=self._terminal, flush=True)
        return len(s)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        super().close()  # flushes first
        self._file.close()


def random_start(pretrained: Path, out: Path, seed: int = 0) -> Path:
    """A discriminator of ``pretrained``'s shape and vocabulary, randomly initialised.

    Fine-tuned with the same recipe and seeds, it shows what pre-training added.
    """
    from electra.model.hf import export_random_discriminator, read_config

    cfg, _ = read_config(pretrained)
    return export_random_discriminator(cfg, out / "hf" / "discriminator", pretrained, seed)


def _median(summary: dict[str, Any], metric: str = "accuracy") -> float:
    part = summary.get("test") or summary["dev"]
    return part[metric]["median"]


def _few_results(ft: dict[str, dict]) -> dict[str, Any]:
    """demo.json's ``few_labels`` section: the fine-tunings on fewer training reviews."""
    if "nsmc-few" not in ft:
        return {}
    few = ft["nsmc-few"]
    return {
        "few_labels": {
            "train_examples": few["task"]["splits"]["train"]["examples"],
            "nsmc": few["summary"],
            "nsmc_random_start": ft["nsmc-few-random-start"]["summary"],
            "floors": few.get("floors"),
        }
    }


def _column(r: dict[str, Any]) -> list[float]:
    """One label budget's accuracies: pre-trained, random start, TF-IDF, majority."""
    from electra.finetune.baselines import floor_scores

    split = "test" if r["nsmc"].get("test") else "dev"
    floors = floor_scores(r.get("floors"), split, "accuracy")
    return [
        _median(r["nsmc"]),
        _median(r["nsmc_random_start"]),
        floors.get("tfidf", float("nan")),
        floors.get("majority", float("nan")),
    ]


ROWS = (
    "pre-trained ELECTRA (this run)",
    "same fine-tuning, random start",
    "TF-IDF + logistic regression",
    "majority class",
)


def side_by_side(r: dict[str, Any]) -> tuple[list[int], list[tuple[str, list[float]]]]:
    """The NSMC comparison: the training-review counts (fewest first) and, per row
    (pre-trained, random start, TF-IDF floor, majority), its accuracy at each."""
    budgets = [r["few_labels"]] if r.get("few_labels") else []
    budgets.append(r)
    counts = [b.get("train_examples", 0) for b in budgets]
    columns = [_column(b) for b in budgets]
    return counts, [(name, [c[i] for c in columns]) for i, name in enumerate(ROWS)]


def gains(counts: list[int], rows: list[tuple[str, list[float]]]) -> list[str]:
    """Plain lines: what pre-training added over the random start, and where it stands
    against the TF-IDF floor, at each label budget."""
    pre, rand, tfidf = (values for _, values in rows[:3])

    def over(floor: list[float]) -> str:
        diffs = [p - q for p, q in zip(pre, floor, strict=True)]
        return ", ".join(
            f"{100 * d:+.2f} points with {n:,} labels" for d, n in zip(diffs, counts, strict=True)
        )

    return [
        "pre-training over the random start: " + over(rand),
        "pre-trained against TF-IDF: " + over(tfidf),
    ]


def print_results(r: dict[str, Any]) -> None:
    pre = r["pretrain"]
    rows = [
        ("pre-training steps", f"{pre['step']}"),
        ("tokens seen", f"{pre['tokens'] / 1e6:.2f} M"),
        ("training FLOPs", f"{pre['train_flops']:.3g}"),
        (
            "final loss (gen MLM / disc)",
            f"{pre.get('mlm_loss', float('nan')):.3f} / {pre.get('disc_loss', float('nan')):.3f}",
        ),
        (
            "val replaced-token precision / recall",
            f"{pre.get('val/replaced_precision', float('nan')):.3f} / "
            f"{pre.get('val/replaced_recall', float('nan')):.3f}",
        ),
        ("total time", f"{r['total_s'] / 60:.1f} min"),
    ]
    counts, table = side_by_side(r)
    width = max(len(k) for k, _ in rows + [(name, "") for name, _ in table])
    print("\nResults")
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
    if pre.get("verdict"):
        print(f"  health: {pre['verdict']}")
    test = r.get("nsmc_test") or {}
    label_counts = ", ".join(f"{n} {k}" for k, n in (test.get("label_counts") or {}).items())
    seeds = r["nsmc"].get("test", r["nsmc"].get("dev", {})).get("accuracy", {}).get("n", 1)
    print(
        f"\nNSMC test accuracy, side by side ({test.get('examples', '?')} held-out reviews: "
        f"{label_counts}; median of {seeds} seed{'s' if seeds > 1 else ''})"
    )
    header = "".join(f"{f'{n:,} labels':>16}" for n in counts)
    print(f"  {'':<{width}}{header}")
    for name, values in table:
        print(f"  {name:<{width}}" + "".join(f"{f'{100 * v:.2f}%':>16}" for v in values))
    for line in gains(counts, table):
        print(f"  {line}")
    print("\nArtefacts")
    for k, v in r["artefacts"].items():
        print(f"  {k:<{width}}  {v}")


def demo_cli(cmd: DemoCommand) -> int:
    """Run ``electra demo`` (its ``--help`` is :class:`~electra.experiments.options.DemoCommand`'s docstring)."""
    demo(cmd)
    return 0
