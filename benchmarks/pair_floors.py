"""The floors of every sentence-pair task with local data: majority, joined TF-IDF, pair TF-IDF.

For each task the split fine-tuning uses (``electra finetune --task T``, split seed 42, every
example) is read and ``electra.finetune.baselines.compute_floors`` scores its floors, as
``--floors`` does beside a fine-tuning: the majority class (training mean for STS), TF-IDF
of the joined pair and TF-IDF pair features (a, b, |a-b|, a*b), each with logistic (ridge)
regression chosen on dev. Printed: a Markdown table of the test split's main metric (x100)
with the split sizes and seconds, and the CPU; ``--json`` also writes every number.

    .venv/bin/python benchmarks/pair_floors.py --json pair_floors.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from electra.finetune.baselines import compute_floors, floor_scores
from electra.finetune.tasks import DataOptions, load_task_data

PAIR_TASKS = ("mrpc", "rte", "qnli", "wnli", "stsb", "klue-nli", "klue-sts", "kornli", "korsts")


def cpu_name() -> str:
    """``lscpu``'s model name (the platform's processor string where it is unreadable)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def task_floors(task: str, data_dir: str) -> dict:
    """The task's floors on its fine-tuning split, with the split sizes and seconds."""
    data = load_task_data(task, DataOptions(data_dir=data_dir))
    s = data.splits
    t0 = time.perf_counter()
    floors = compute_floors(
        data.spec.family, data.labels, data.spec.main_metric, s.train, s.dev, s.test, None
    )
    seconds = time.perf_counter() - t0
    split = "test" if s.test else "dev"
    return {
        "task": task,
        "metric": data.spec.main_metric,
        "split": split,
        "sizes": {"train": len(s.train), "dev": len(s.dev), "test": len(s.test)},
        "scores": floor_scores(floors, split, data.spec.main_metric),
        "strengths": {k: (floors.get(k) or {}).get("strength") for k in ("tfidf", "tfidf_pair")},
        "seconds": seconds,
        "floors": floors,
    }


def table(rows: list[dict]) -> str:
    """Markdown: per task the metric, the sizes and the three floors (x100)."""
    lines = [
        "| task | metric (split) | train / dev / test | majority or mean | joined TF-IDF "
        "| pair TF-IDF | pair - joined | seconds |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        s, n = r["scores"], r["sizes"]
        const = s.get("majority", s.get("mean", float("nan")))
        joined, pair = s.get("tfidf", float("nan")), s.get("tfidf_pair", float("nan"))
        lines.append(
            f"| {r['task']} | {r['metric']} ({r['split']}) | {n['train']:,} / {n['dev']:,} / "
            f"{n['test']:,} | {100 * const:.1f} | {100 * joined:.1f} | {100 * pair:.1f} | "
            f"{100 * (pair - joined):+.1f} | {r['seconds']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=list(PAIR_TASKS))
    ap.add_argument("--data-dir", default="", help="Default: the project's shared data.")
    ap.add_argument("--json", default="", help="Also write every number here.")
    args = ap.parse_args()
    rows = []
    for task in args.tasks:
        rows.append(task_floors(task, args.data_dir))
        r = rows[-1]
        print(f"{task}: {r['scores']} ({r['seconds']:.0f} s)", flush=True)
    print(f"\nCPU: {cpu_name()}\n")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": cpu_name(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
