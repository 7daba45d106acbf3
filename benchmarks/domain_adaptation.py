"""Domain adaptation by continued pre-training: does it help on the domain, and at what cost?

1. A "released" general model: a vocabulary and blocks from Korean Wikipedia,
   ``--base-minutes`` of ``cpu``-recipe pre-training, exported.
2. The domain corpus (NSMC movie reviews) prepared with the released
   directory's tokenizer, and ``--minutes`` of continued pre-training with the
   ``continue`` recipe in one command::

       electra pretrain --config continue --init-from BASE/hf/discriminator \\
           --init-generator BASE/hf/generator --data blocks-reviews -o continued

   ``optim.max_steps`` is set from the base run's measured speed so that the
   learning rate decays to zero at about ``--minutes``.
3. Both models on held-out blocks of both domains (reviews and Wikipedia):
   generator accuracy at masked positions, and discriminator ROC AUC for
   "replaced" (a) with each model's own generator and (b) on one shared
   corruption (the base generator's samples), which compares the two
   discriminators on the same task.
4. Downstream: NSMC sentiment fine-tuning of both discriminators (small).

Caveat written into the results: the review corpus is the raw NSMC subset the
NSMC task is also built from, so continued pre-training has seen the task's
review texts (never its labels): task-adaptive pre-training in the sense of
Gururangan et al. (2020), the common use of this feature.

    PYTHONPATH=src python benchmarks/domain_adaptation.py --out runs/domain_adaptation

Stages reuse finished work in ``--out``. Writes ``results.json`` and
``results.md`` there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cli(*args: str) -> None:
    """``python -m electra.cli ARGS`` with this checkout's sources."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    subprocess.run([sys.executable, "-m", "electra.cli", *args], check=True, env=env)


# -- stages -----------------------------------------------------------------------------------


def general_blocks(out: Path, data: Path, vocab_size: int) -> Path:
    from electra.blocks.options import PrepareCommand
    from electra.blocks.prepare import prepare
    from electra.text.vocabulary import train_tokenizer

    wiki = sorted((data / "pretrain/ko/kowiki").glob("*/wiki_*"))
    tok = out / "tokenizer"
    if not (tok / "vocab.txt").is_file():
        log(f"vocabulary of {vocab_size} tokens from {len(wiki)} Korean Wikipedia files")
        train_tokenizer([str(f) for f in wiki], tok, vocab_size=vocab_size)
    blocks = out / "blocks-wiki"
    prepare(
        PrepareCommand(
            inputs=[str(f) for f in wiki],
            tokenizer=str(tok),
            output=str(blocks),
            max_length=128,
            validation_fraction=0.03,
            progress=False,
        )
    )
    return blocks


# A model a shared 2-core VM can train for a few hundred steps in minutes: ELECTRA-Small's
# embedding width halved, 2 layers of 128 (1/16 of the `cpu` recipe's compute per token).
SHAPE = (
    "model.embedding_size=64",
    "model.hidden_size=128",
    "model.num_hidden_layers=2",
    "model.num_attention_heads=2",
    "model.intermediate_size=512",
)


def pretrain_base(out: Path, blocks: Path, minutes: float, args: argparse.Namespace) -> Path:
    run = out / "base"
    if not (run / "summary.json").is_file():
        log(f"base: {minutes} minutes of `cpu` pre-training on Korean Wikipedia")
        sets = [
            *(SHAPE if args.small else ()),
            f"run.max_minutes={minutes}",
            f'run.precision="{args.precision}"',
            f"run.threads={args.threads}",
            "run.progress=false",
            "run.eval_every=100000",
        ]
        cli("pretrain", "--config", "cpu", "--data", str(blocks), "-o", str(run), "--set", *sets)
    return run


def domain_blocks(out: Path, data: Path, base: Path) -> Path:
    blocks = out / "blocks-reviews"
    if not (blocks / "manifest.json").is_file():
        log("review blocks, prepared with the released directory's tokenizer")
        disc = base / "hf" / "discriminator"
        cli(
            "prepare",
            str(data / "nsmc/raw_subset"),
            "--tokenizer",
            str(disc),
            "-o",
            str(blocks),
            "--max-length",
            "128",
            "--validation-fraction",
            "0.03",
            "--no-progress",
        )
    return blocks


def steps_per_minute(run: Path) -> float:
    """Steps per minute of a run from its last metrics record (start-up excluded)."""
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if "tokens_per_s" in r]
    if last:
        return 60 * last[-1]["step"] / last[-1]["elapsed_s"]
    summary = json.loads((run / "summary.json").read_text())
    return summary["step"] / (summary["elapsed_s"] / 60)


def continue_domain(
    out: Path, base: Path, blocks: Path, minutes: float, args: argparse.Namespace
) -> Path:
    run = out / "continued"
    if (run / "summary.json").is_file():
        return run
    steps = max(1, int(steps_per_minute(base) * minutes))
    log(f"continued: {steps} steps (~{minutes} minutes at the base run's speed) on reviews")
    sets = [
        f"optim.max_steps={steps}",
        f"optim.warmup_steps={max(1, steps // 20)}",
        f"run.max_minutes={minutes * 1.2}",  # a safety net; the schedule ends first
        f'run.precision="{args.precision}"',
        f"run.threads={args.threads}",
        "run.progress=false",
        "run.eval_every=100000",
    ]
    cli(
        "pretrain",
        "--config",
        "continue",
        "--init-from",
        str(base / "hf" / "discriminator"),
        "--init-generator",
        str(base / "hf" / "generator"),
        "--data",
        str(blocks),
        "-o",
        str(run),
        "--set",
        *sets,
    )
    return run


# -- intrinsic evaluation -------------------------------------------------------------------


def load_pair(hf: Path):
    """Our pre-training model from an exported discriminator/generator pair."""
    from electra.model.hf import read_config
    from electra.pretrain.config import InitConfig, ObjectiveConfig
    from electra.pretrain.continued import load_start_weights
    from electra.pretrain.objective import ElectraForPretraining, SpecialIds
    from electra.text.tokenizer import load_tokenizer, special_id_map

    disc_cfg, _ = read_config(hf / "discriminator")
    gen_cfg, _ = read_config(hf / "generator")
    ids = special_id_map(load_tokenizer(hf / "discriminator"))
    special = SpecialIds(ids["pad"], ids["cls"], ids["sep"], ids["mask"], disc_cfg.vocab_size)
    model = ElectraForPretraining(disc_cfg, ObjectiveConfig(), special, gen_cfg)
    load_start_weights(model, InitConfig(str(hf / "discriminator"), str(hf / "generator")))
    return model.eval()


@torch.no_grad()
def intrinsic(models: dict[str, Any], blocks: Path, n_blocks: int, batch: int = 32) -> dict:
    """Generator accuracy and discriminator AUC of each model on held-out blocks.

    Masking is identical for every model (seeded per block). ``auc_own``
    scores each discriminator on its own generator's replacements;
    ``auc_shared`` on the replacements of the first model's generator.
    """
    from sklearn.metrics import roc_auc_score

    from electra.blocks.read import open_blocks
    from electra.pretrain.objective import SampleRNG

    val = open_blocks(blocks, "validation")
    n = min(n_blocks, len(val))
    first = next(iter(models))
    acc = {k: [] for k in models}
    mlm = {k: [] for k in models}
    own = {k: ([], []) for k in models}
    shared = {k: [] for k in models}
    shared_labels = []
    for start in range(0, n, batch):
        idx = np.arange(start, min(start + batch, n))
        ids_np, types_np = val.get(idx)
        ids, types = torch.from_numpy(ids_np), torch.from_numpy(types_np)
        mask = (ids != val.special.pad).long()
        real = mask.bool()
        seeds = SampleRNG.seeds_for(12345, idx.tolist())
        outs = {
            k: m(ids, mask, types, rng=SampleRNG(seeds), keep_tensors=True)
            for k, m in models.items()
        }
        corrupted, replaced = outs[first].corrupted_ids, outs[first].replaced
        shared_labels.append(replaced[real])
        for k, m in models.items():
            o = outs[k]
            acc[k].append(float(o.gen_accuracy))
            mlm[k].append(float(o.mlm_loss))
            own[k][0].append(o.replaced[real])
            own[k][1].append(o.disc_logits[real])
            shared[k].append(m.discriminator(corrupted, mask, types)[real])
    labels = torch.cat(shared_labels).numpy()
    return {
        k: {
            "gen_accuracy": float(np.mean(acc[k])),
            "mlm_loss": float(np.mean(mlm[k])),
            "disc_auc_own": float(
                roc_auc_score(torch.cat(own[k][0]).numpy(), torch.cat(own[k][1]).numpy())
            ),
            "disc_auc_shared": float(roc_auc_score(labels, torch.cat(shared[k]).numpy())),
            "blocks": int(n),
        }
        for k in models
    }


# -- downstream -----------------------------------------------------------------------------


def nsmc(model: Path, out: Path, data: Path, args: argparse.Namespace) -> dict:
    from electra.finetune.run import FinetuneArgs, finetune

    if (out / "results.json").is_file():
        results = json.loads((out / "results.json").read_text())
        if results.get("complete"):
            return results
    return finetune(
        FinetuneArgs(
            model=str(model),
            task="nsmc",
            output=str(out),
            data_dir=str(data),
            seeds=list(args.seeds),
            epochs=args.epochs,
            max_train_examples=args.train_examples,
            max_eval_examples=args.eval_examples,
            bf16=args.precision == "bf16",
            progress=False,
        )
    )


def test_accuracy(results: dict) -> dict:
    test = results["summary"].get("test") or results["summary"]["dev"]
    return test["accuracy"]


# -- report ---------------------------------------------------------------------------------


def markdown(r: dict) -> str:
    rows = [
        "| model | text | generator acc. | generator MLM loss | disc. AUC (own generator) "
        "| disc. AUC (same corruption) |",
        "|---|---|---|---|---|---|",
    ]
    for domain in ("reviews", "wiki"):
        for name in ("base", "continued"):
            m = r["intrinsic"][domain][name]
            rows.append(
                f"| {name} | {domain} | {m['gen_accuracy']:.4f} | {m['mlm_loss']:.3f} | "
                f"{m['disc_auc_own']:.4f} | "
                f"{m['disc_auc_shared']:.4f} |"
            )
    rows += ["", "| model | NSMC test accuracy (median ± std over seeds) |", "|---|---|"]
    for name, acc in r["nsmc"].items():
        rows.append(f"| {name} | {100 * acc['median']:.1f} ± {100 * acc['std']:.1f} |")
    return "\n".join(rows) + "\n"


def main() -> None:
    from electra.system.paths import default_data_dir

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="runs/domain_adaptation")
    p.add_argument("--data-dir", default="")
    p.add_argument("--vocab-size", type=int, default=16000)
    p.add_argument("--base-minutes", type=float, default=8.0)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--eval-blocks", type=int, default=256)
    p.add_argument("--threads", type=int, default=1, help="CPU threads per training process")
    p.add_argument(
        "--small",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the 2-layer shape of SHAPE instead of the `cpu` recipe's 4 layers of 256",
    )
    p.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default="fp32",
        help="bf16 only pays on CPUs with AVX512-BF16/AMX (or a GPU); AVX2 emulates it slowly",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--train-examples", type=int, default=2000)
    p.add_argument("--eval-examples", type=int, default=1000)
    args = p.parse_args()
    t0 = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = Path(args.data_dir) if args.data_dir else default_data_dir()

    wiki = general_blocks(out, data, args.vocab_size)
    base = pretrain_base(out, wiki, args.base_minutes, args)
    reviews = domain_blocks(out, data, base)
    cont = continue_domain(out, base, reviews, args.minutes, args)

    cache = out / "intrinsic.json"
    if cache.is_file():
        intr = json.loads(cache.read_text())
    else:
        log("held-out generator accuracy and discriminator AUC")
        models = {"base": load_pair(base / "hf"), "continued": load_pair(cont / "hf")}
        intr = {
            "reviews": intrinsic(models, reviews, args.eval_blocks),
            "wiki": intrinsic(models, wiki, args.eval_blocks),
        }
        cache.write_text(json.dumps(intr, indent=2) + "\n")
        log(json.dumps(intr))
    log("NSMC fine-tuning")
    down = {
        name: test_accuracy(nsmc(run / "hf" / "discriminator", out / f"nsmc-{name}", data, args))
        for name, run in (("base", base), ("continued", cont))
    }
    result = {
        "base": json.loads((base / "summary.json").read_text()),
        "continued": json.loads((cont / "summary.json").read_text()),
        "intrinsic": intr,
        "nsmc": down,
        "settings": vars(args),
        "caveat": "the review corpus includes the NSMC task's review texts (not labels)",
        "seconds": round(time.time() - t0, 1),
        "threads": torch.get_num_threads(),
    }
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "results.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
