"""Compare's fine-tunings one at a time (every thread) against side by side (a share each).

Both sides run the same jobs through ``electra.experiments.compare.finetune_all`` (the code
``electra compare --finetune-jobs N`` runs): each model fine-tuned on each task,
one seed, compare's settings otherwise, each side in a fresh output directory.
The floors (TF-IDF, majority) are computed once by a warm-up job and shared, as
compare's cache shares them, so only fine-tuning is timed. Sides alternate A B A B ... so that
whatever else the machine does falls on both. Reported: wall seconds per side
and repeat, and the test accuracy of each job (the two sides should agree within
an example or two: only the thread count differs).

    python benchmarks/finetune_jobs.py --models runs/compare/none-X/hf/discriminator \\
        runs/compare/ppmi-Y/hf/discriminator --jobs 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from electra.experiments.compare import finetune_all
from electra.experiments.options import CompareCommand
from electra.system.paths import default_data_dir


def one_side(cmd: CompareCommand, models: list[str], out: Path) -> tuple[float, list[float]]:
    """Wall seconds of fine-tuning every model on every task, and each job's test accuracy."""
    points = [
        {"arm": f"m{i}", "run": f"m{i}", "steps": 0, "flops": 0.0, "model": m}
        for i, m in enumerate(models)
    ]
    t0 = time.perf_counter()
    finetune_all(cmd, points, out, default_data_dir())
    seconds = time.perf_counter() - t0
    return seconds, [p["scores"][t]["median"] for p in points for t in cmd.tasks]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", required=True, help="Encoders (HF directories).")
    ap.add_argument("--tasks", nargs="+", default=["nsmc", "sst2"])
    ap.add_argument("--jobs", type=int, default=2, help="Side-by-side jobs of side B.")
    ap.add_argument("--examples", type=int, default=4000, help="Training examples per job.")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    base = CompareCommand(
        tasks=args.tasks,
        seeds=[1],
        max_train_examples=args.examples,
        epochs=args.epochs,
        progress=False,
    )
    sides = {
        "one at a time": base,
        f"{args.jobs} side by side": dataclasses.replace(base, finetune_jobs=args.jobs),
    }
    print(f"torch threads: {torch.get_num_threads()}, jobs: {len(args.models) * len(args.tasks)}")
    times: dict[str, list[float]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory() as tmp:
        warm = Path(tmp) / "warm-up"
        one_side(dataclasses.replace(base, epochs=1), args.models[:1], warm)  # floors, caches
        for r in range(args.repeats):
            for i, (name, cmd) in enumerate(sides.items()):
                out = Path(tmp) / f"{r}-{i}"
                out.mkdir()
                (out / "floors").symlink_to(warm / "floors", target_is_directory=True)
                seconds, acc = one_side(cmd, args.models, out)
                times[name].append(seconds)
                print(f"repeat {r} {name}: {seconds:.1f} s, test accuracy {acc}", flush=True)
    summary = {name: statistics.median(t) for name, t in times.items()}
    print(json.dumps({"median_seconds": summary, "all_seconds": times}, indent=1))
    one, many = summary.values()
    print(f"side by side: {one / many:.2f}x the throughput of one at a time")


if __name__ == "__main__":
    main()
