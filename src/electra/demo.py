"""``electra demo`` (``make demo``): the main job, end to end, on a CPU.

1. a WordPiece vocabulary trained on the Korean corpus of the data directory
   (Korean Wikipedia text and NSMC movie reviews);
2. packed blocks of 128 tokens;
3. ELECTRA pre-training with the CPU recipe (``configs/cpu.toml``) for a
   time budget (``--minutes``): the number of steps is planned from a quick
   timing of this machine so the learning rate decays to zero on time;
4. fine-tuning of the discriminator on NSMC, built from the raw reviews;
5. a report (plots, HTML) and a short results table with where everything is.

Every stage shows progress and is reused when the demo is run again with the
same options (delete the output directory to start over).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class DemoCommand:
    """Vocabulary -> blocks -> ELECTRA pre-training -> NSMC fine-tuning, on this machine."""

    data_dir: str = field(default="", metadata={"doc": "Data directory (default: shared/data)."})
    output: str = field(default="runs/demo", metadata={"doc": "Output directory.", "short": "-o"})
    minutes: float = field(default=10.0, metadata={"doc": "Pre-training time budget."})
    vocab_size: int = field(default=16000, metadata={"doc": "Vocabulary size."})
    nsmc_train_examples: int = field(
        default=12000, metadata={"doc": "NSMC training reviews used (0: all 36k)."}
    )
    nsmc_eval_examples: int = field(
        default=4000, metadata={"doc": "NSMC dev and test reviews used (0: all 12k each)."}
    )
    epochs: int = field(default=3, metadata={"doc": "NSMC fine-tuning epochs."})
    seeds: list[int] = field(default_factory=lambda: [1], metadata={"doc": "Fine-tuning seeds."})
    smoke: bool = field(
        default=False, metadata={"doc": "A tiny version of every stage (about a minute)."}
    )
    progress: bool = field(default=True, metadata={"doc": "Show progress bars."})


def _stage(n: int, title: str) -> float:
    print(f"\n== [{n}/5] {title}", flush=True)
    return time.time()


def korean_corpus(data_dir: Path) -> list[Path]:
    """Korean Wikipedia (WikiExtractor output) and the NSMC raw review files."""
    wiki = sorted((data_dir / "pretrain/ko/kowiki").glob("*/wiki_*"))
    nsmc = data_dir / "nsmc/raw_subset"
    if not wiki or not nsmc.is_dir():
        raise FileNotFoundError(
            f"{data_dir}: Korean data not found (expected pretrain/ko/kowiki/*/wiki_* and "
            "nsmc/raw_subset/). Point --data-dir (or ELECTRA_DATA_DIR) at a directory laid "
            "out like shared/data; see its MANIFEST.md"
        )
    return [*wiki, nsmc]


def estimate_step_seconds(cfg, block_length: int, vocab_size: int, steps: int = 3) -> float:
    """Median seconds of a training step of ``cfg`` on random blocks (nothing written).

    Timed where and how the run will train: on ``run.device`` (a GPU when
    ``auto`` finds one) under ``run.precision``'s autocast, with the GPU
    synchronised around each step; a CPU timing would plan far too few steps
    for a GPU run.
    """
    import statistics

    import torch

    from electra.optim import adamw
    from electra.pretraining import ElectraForPretraining, SpecialIds
    from electra.train import autocast_for, resolve_device, resolve_model

    device = resolve_device(cfg.run.device)
    model_cfg = resolve_model(cfg, vocab_size, "demo")
    special = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=vocab_size)
    model = ElectraForPretraining(model_cfg, cfg.objective, special).to(device).train()
    opt = adamw(model.parameters(), lr=1e-4)
    g = torch.Generator(device=device).manual_seed(0)
    ids = torch.randint(
        5, vocab_size, (cfg.optim.batch_size, block_length), generator=g, device=device
    )
    ids[:, 0], ids[:, -1] = 2, 3
    times = []
    for i in range(steps + 1):
        _sync(device)
        t = time.perf_counter()
        with autocast_for(cfg.run.precision, device):
            loss = model(ids, rng=g).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync(device)
        if i:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def demo(cmd: DemoCommand) -> dict[str, Any]:
    """Run (or reuse) every stage; returns the results shown in the table."""
    from electra.corpus import ReadOptions
    from electra.data import PrepareCommand, open_blocks, prepare
    from electra.paths import default_data_dir
    from electra.tokenizer import train_tokenizer
    from electra.train import Trainer, load_config

    t_all = time.time()
    data_dir = Path(cmd.data_dir) if cmd.data_dir else default_data_dir()
    out = Path(cmd.output)
    out.mkdir(parents=True, exist_ok=True)
    files = korean_corpus(data_dir)
    if cmd.smoke:
        files = [files[0]]  # one Wikipedia file is enough to exercise every stage

    t = _stage(1, f"vocabulary ({cmd.vocab_size if not cmd.smoke else 2000} WordPiece tokens)")
    tok = out / "tokenizer"
    if (tok / "vocab.txt").is_file():
        print(f"reusing {tok}")
    else:
        report = train_tokenizer(
            [str(f) for f in files],
            tok,
            vocab_size=2000 if cmd.smoke else cmd.vocab_size,
            limit_mb=1.0 if cmd.smoke else None,
            read_options=ReadOptions(),
            progress=cmd.progress,
        )
        print(report)
    times = {"tokenizer_s": time.time() - t}

    t = _stage(2, "packed blocks")
    blocks = out / "blocks"
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
    train_blocks = open_blocks(blocks, "train")
    times["prepare_s"] = time.time() - t

    t = _stage(3, "ELECTRA pre-training" + (" (smoke)" if cmd.smoke else f" ({cmd.minutes:g} min)"))
    run_dir = out / "pretrain"
    summary_path = run_dir / "summary.json"
    if summary_path.is_file() and json.loads(summary_path.read_text()).get("stopped") != "signal":
        print(f"reusing {run_dir}")
    else:
        base = ["run.progress=" + ("true" if cmd.progress else "false")]
        base += [
            f"data.blocks={json.dumps(str(blocks))}",
            f"run.output_dir={json.dumps(str(run_dir))}",
        ]
        if cmd.smoke:
            cfg = load_config("tiny", [*base, "optim.max_steps=20", "run.eval_every=10"])
        else:
            cfg = load_config("cpu", base)
            per_step = estimate_step_seconds(
                cfg, train_blocks.block_length, train_blocks.vocab_size
            )
            steps = max(20, int(cmd.minutes * 60 / per_step))
            cfg.optim.max_steps = steps
            cfg.optim.warmup_steps = max(1, steps // 10)
            cfg.run.max_minutes = cmd.minutes * 1.25  # a hard stop if the estimate was optimistic
            cfg.run.eval_every = max(1, steps // 5)
            cfg.run.save_every = max(1, steps // 4)
            print(
                f"planned {steps} steps of {per_step:.2f} s ({cfg.optim.batch_size} x 128 blocks)"
            )
        Trainer(cfg, resume=(run_dir / "checkpoints").is_dir()).fit()
    pre = json.loads(summary_path.read_text())
    times["pretrain_s"] = time.time() - t

    t = _stage(4, "fine-tuning the discriminator on NSMC")
    from electra.finetune.run import FinetuneArgs, finetune

    ft_dir = out / "nsmc"
    res_path = ft_dir / "results.json"
    if res_path.is_file() and json.loads(res_path.read_text()).get("complete"):
        print(f"reusing {ft_dir}")
        ft = json.loads(res_path.read_text())
    else:
        ft = finetune(
            FinetuneArgs(
                model=str(run_dir / "hf" / "discriminator"),
                task="nsmc",
                output=str(ft_dir),
                data_dir=str(data_dir),
                seeds=list(cmd.seeds),
                epochs=1 if cmd.smoke else cmd.epochs,
                max_length=32 if cmd.smoke else 64,
                max_train_examples=200 if cmd.smoke else cmd.nsmc_train_examples,
                max_eval_examples=100 if cmd.smoke else cmd.nsmc_eval_examples,
                progress=cmd.progress,
            )
        )
    times["finetune_s"] = time.time() - t

    t = _stage(5, "report")
    from electra.report import build_report

    html = build_report(run_dir)
    times["report_s"] = time.time() - t
    result = {
        "pretrain": pre,
        "nsmc": ft["summary"],
        "artefacts": {
            "vocabulary": str(tok),
            "blocks": str(blocks),
            "pre-training run": str(run_dir),
            "discriminator (HF)": str(run_dir / "hf" / "discriminator"),
            "NSMC model (HF)": str(ft_dir / "model"),
            "NSMC results": str(res_path),
            "report": str(html),
        },
        "times": times,
        "total_s": time.time() - t_all,
    }
    (out / "demo.json").write_text(json.dumps(result, indent=2) + "\n")
    print_results(result)
    return result


def print_results(r: dict[str, Any]) -> None:
    pre = r["pretrain"]
    acc = r["nsmc"].get("test", {}).get("accuracy") or r["nsmc"]["dev"]["accuracy"]
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
        (
            "NSMC test accuracy",
            f"{100 * acc['median']:.2f}%"
            + (f" (median of {acc['n']} seeds)" if acc.get("n", 1) > 1 else ""),
        ),
        ("total time", f"{r['total_s'] / 60:.1f} min"),
    ]
    width = max(len(k) for k, _ in rows)
    print("\nResults")
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
    print("\nArtefacts")
    for k, v in r["artefacts"].items():
        print(f"  {k:<{width}}  {v}")


def demo_cli(cmd: DemoCommand) -> int:
    """The main job: vocabulary, blocks, pre-training, NSMC fine-tuning, report."""
    demo(cmd)
    return 0
