"""The allocator's share of a CPU pre-training step: default glibc, glibc-tuned, tcmalloc.

Each allocator runs our RTD step (``pretrain_throughput.ours_step``: the same
model, batch and AdamW as ``electra pretrain``) in a fresh process, because
glibc tunables and ``LD_PRELOAD`` only act at start-up. The processes run one
after another, alternating the allocators for ``--rounds`` rounds, so a
neighbour's load hits all of them alike; each reports the median step time and
per step the system time and the minor page faults (what the allocator
changes), and its peak RSS.

    python benchmarks/allocator.py                       # small, 32 x 128, fp32
    python benchmarks/allocator.py --dtype bf16 --rounds 3
    python benchmarks/allocator.py --json

Measure on a quiet machine; the step-time ratio is the number to keep.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from electra.system import allocator  # noqa: E402


def child(args: argparse.Namespace) -> dict:
    """Time ``args.steps`` steps after ``args.warmup`` in this process; one JSON line out."""
    import torch

    sys.path.insert(0, str(HERE))
    import pretrain_throughput as pt

    torch.set_num_threads(args.threads)
    cfg = pt.preset(args.preset, vocab_size=pt.SPECIAL.vocab_size)
    torch.manual_seed(0)
    objective = pt.ObjectiveConfig(generator_size=args.gen_size)
    model = pt.ElectraForPretraining(cfg, objective, pt.SPECIAL).train()
    opt = pt.adamw(model.parameters(), lr=1e-4, eps=1e-6)
    batch = pt.make_batch(args.batch, args.seq, "cpu")
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    ctx = torch.autocast("cpu", dtype=dtype) if dtype != torch.float32 else nullcontext()
    times, sys_s, faults = [], [], []
    for i in range(args.warmup + args.steps):
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        step = functools.partial(pt.ours_step, model, batch, i * args.batch, ctx, "cpu")
        t = pt.timed(step, model, opt, "cpu")
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        if i >= args.warmup:
            times.append(t)
            sys_s.append(r1.ru_stime - r0.ru_stime)
            faults.append(r1.ru_minflt - r0.ru_minflt)
    return {
        "allocator": allocator.current(),
        "step_s": statistics.median(times),
        "sys_s_per_step": statistics.median(sys_s),
        "minor_faults_per_step": int(statistics.median(faults)),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_one(choice: str, args: argparse.Namespace) -> dict:
    """One child process under allocator ``choice``."""
    base = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "GLIBC_TUNABLES")}
    env = allocator.environment(choice, base)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k in _CHILD_FLAGS]
    out = subprocess.run(
        [sys.executable, __file__, "--child", *flags],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


_CHILD_FLAGS = ("preset", "batch", "seq", "gen_size", "dtype", "steps", "warmup", "threads")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--gen-size", type=float, default=0.25)
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", action="store_true")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    choices = ["default", "glibc-tuned"] if allocator.is_glibc() else ["default"]
    if allocator.find_tcmalloc():
        choices.append("tcmalloc")
    results: dict[str, list[dict]] = {c: [] for c in choices}
    t0 = time.time()
    for _ in range(args.rounds):
        for c in choices:
            results[c].append(run_one(c, args))
    summary = {}
    for c, runs in results.items():
        summary[c] = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "allocator"}
    base = summary["default"]["step_s"]
    tokens = args.batch * args.seq
    if args.json:
        print(json.dumps({"args": vars(args), "summary": summary, "runs": results}))
        return
    print(
        f"{args.preset} {args.batch}x{args.seq} {args.dtype}, {args.threads} threads, "
        f"median of {args.rounds} processes x {args.steps} steps ({time.time() - t0:.0f} s)"
    )
    print("| allocator | step s | tokens/s | vs default | sys s/step | faults/step | peak RSS MB |")
    print("|---|---|---|---|---|---|---|")
    for c, s in summary.items():
        print(
            f"| {c} | {s['step_s']:.3f} | {tokens / s['step_s']:.0f} | "
            f"{base / s['step_s']:.2f}x | {s['sys_s_per_step']:.3f} | "
            f"{s['minor_faults_per_step']:.0f} | {s['peak_rss_mb']:.0f} |"
        )


if __name__ == "__main__":
    main()
