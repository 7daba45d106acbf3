"""The main job in its CI-sized form (``--smoke``), and its clear error without data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from electra.cli import main
from electra.demo import DemoCommand, demo


def test_demo_smoke_runs_every_stage_and_reuses_them(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    cmd = DemoCommand(data_dir=str(data_dir), output=str(out), smoke=True, progress=False)
    result = demo(cmd)
    assert result["pretrain"]["step"] == 20
    acc = result["nsmc"]["test"]["accuracy"]["median"]
    assert 0.0 <= acc <= 1.0
    for path in result["artefacts"].values():
        assert Path(path).exists(), path
    assert json.loads((out / "demo.json").read_text())["pretrain"]["step"] == 20
    printed = capsys.readouterr().out
    assert "[5/5] report" in printed and "NSMC test accuracy" in printed
    stamp = (out / "pretrain" / "summary.json").stat().st_mtime
    demo(cmd)
    printed = capsys.readouterr().out
    assert printed.count("reusing") >= 3
    assert (out / "pretrain" / "summary.json").stat().st_mtime == stamp


def test_demo_without_data_says_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["demo", "--data-dir", str(tmp_path / "nowhere"), "-o", str(tmp_path / "o")])
    assert code == 2
    assert "Korean data not found" in capsys.readouterr().err
