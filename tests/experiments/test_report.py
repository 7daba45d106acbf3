"""``electra report`` renders plots and a self-contained page from a real tiny run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from electra.cli import main
from electra.experiments.report import build_report, read_metrics, tokens_html, validation_example


def test_report_renders_pngs_and_html(tiny_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    assert main(["report", str(run)]) == 0
    pngs = {p.stem for p in (run / "report").glob("*.png")}
    assert {"losses", "accuracy", "replaced", "lr", "throughput"} <= pngs
    for p in (run / "report").glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    page = (run / "report" / "index.html").read_text()
    assert page.count("data:image/png;base64,") == len(pngs)  # self-contained
    assert "as the discriminator sees it" in page and 'class="tok' in page
    assert "tensorboard --logdir" in page


def test_validation_example_marks_replacements(tiny_run: Path) -> None:
    view = validation_example(tiny_run)
    assert view is not None and len(view) > 10
    assert view[0].token == "[CLS]"
    assert any(t.replaced for t in view)
    assert all(0.0 <= t.prob <= 1.0 for t in view)
    assert all(t.token != t.original for t in view if t.replaced)
    html = tokens_html(view)
    assert html.count("<span") == len(view)


def test_torn_last_metrics_line_is_ignored(tiny_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 99, "lo')  # a run killed mid-write
    records = read_metrics(run)
    assert records[-1]["step"] == 30
    assert build_report(run).is_file()


def test_missing_metrics_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        build_report(tmp_path)


def test_corrupt_metrics_line_names_the_line(tiny_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[1] = "{not json"
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"metrics\.jsonl:2"):
        read_metrics(run)
    assert json.loads(lines[0])["step"] == 5
