"""The recorded crossover studies draw with compare's own plot (the README's figures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "benchmarks" / "results" / "crossover_1e15.json"
SHARED = ROOT / "benchmarks" / "results" / "crossover_shared_fp32.json"


def test_the_recorded_study_draws_and_its_table_reads(tmp_path: Path) -> None:
    from electra.experiments.compare_report import markdown_table

    png = tmp_path / "x.png"
    script = ROOT / "benchmarks" / "plot_recorded.py"
    subprocess.run([sys.executable, str(script), str(RECORDED), str(png)], check=True)
    assert png.read_bytes()[:4] == b"\x89PNG"
    result = json.loads(RECORDED.read_text())
    rtd = [p for p in result["points"] if p["arm"] == "rtd"]
    assert [p["flops"] for p in rtd] == [2e14, 4e14, 1e15]
    table = markdown_table(
        {**result, "points": [p for p in result["points"] if len(p["scores"]) == 3]}
    )
    assert "| TF-IDF floor | – | – | – | 81.3 | 77.5 | – | – |" in table


def test_the_shared_layer_study_draws_with_both_arms_and_the_controls(tmp_path: Path) -> None:
    png = tmp_path / "x.png"
    script = ROOT / "benchmarks" / "plot_recorded.py"
    subprocess.run([sys.executable, str(script), str(SHARED), str(png)], check=True)
    assert png.read_bytes()[:4] == b"\x89PNG"
    arms = {p["arm"] for p in json.loads(SHARED.read_text())["points"]}
    assert {"none", "ppmi table only", "rtd", "mlm"} <= arms
