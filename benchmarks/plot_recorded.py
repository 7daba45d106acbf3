"""Draw a recorded ``electra compare`` result with compare's own plot.

For studies whose ``compare.json`` did not survive (a session's VM is not kept) but whose
medians and spreads were recorded: ``benchmarks/results/crossover_1e15.json`` holds those
of the 1e15 crossover study in compare.json's shape, and this draws it exactly as
``electra compare`` would have::

    python benchmarks/plot_recorded.py benchmarks/results/crossover_1e15.json docs/img/crossover-1e15.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from electra.experiments.compare_report import plot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", type=Path, help="a compare.json-shaped file")
    parser.add_argument("png", type=Path, help="where the plot goes")
    args = parser.parse_args()
    args.png.parent.mkdir(parents=True, exist_ok=True)
    plot(json.loads(args.result.read_text()), args.png)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
