"""``benchmarks/gpu_check.py`` at CI size on the CPU, so the GPU check cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # end-to-end: left out of `make test-fast`

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))


def test_gpu_check_smoke_on_cpu_writes_every_section(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "gc"
    cmd = [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--device", "cpu"]
    cmd += ["--smoke", "--out", str(out), "--data-dir", str(data_dir)]
    subprocess.run(cmd, check=True, env={**_env(), "OMP_NUM_THREADS": "1"}, timeout=900)
    report = json.loads((out / "gpu_check.json").read_text())
    smoke = report["sections"]["smoke"]
    failed = {k: v.get("error") for k, v in smoke.items() if v["ok"] is not True}
    assert not failed, failed
    assert smoke["sigkill_resume_bf16"]["max_abs_loss_diff"] == 0.0
    assert smoke["export_parity"]["max_abs_diff"] < 1e-4
    plain, convbert = report["sections"]["throughput"].values()
    for bench in (plain, convbert):
        assert bench["ok"] and bench["ours_tokens_per_s"] > 0 and 0 < bench["ours_mfu"]
    assert (plain["conv_kernel_size"], convbert["conv_kernel_size"]) == (0, 9)
    assert "study" not in report["sections"]  # only with --study
    md = (out / "gpu_check.md").read_text()
    assert (
        "sigkill_resume_bf16**: ok" in md
        and "| tiny | 4x32 |" in md
        and "| tiny ConvBERT 9 | 4x32 |" in md
    )


def test_a_failing_check_is_recorded_and_the_rest_still_run(tmp_path: Path) -> None:
    import gpu_check

    ctx = gpu_check.Context(tmp_path, "cpu", True, False, time.time() + 60, tmp_path)

    def boom(ctx):
        raise RuntimeError("no such kernel")

    results = gpu_check.run_sections(
        {"a": {"broken": boom, "fine": lambda c: {"x": 1}}, "b": {"also": lambda c: {}}}, ctx
    )
    a = results["sections"]["a"]
    assert a["broken"]["ok"] is False and "no such kernel" in a["broken"]["error"]
    assert a["fine"] == {"x": 1, "ok": True, "seconds": a["fine"]["seconds"]}
    assert results["sections"]["b"]["also"]["ok"] is True
    assert "FAILED" in (tmp_path / "gpu_check.md").read_text()
    late = gpu_check.Context(tmp_path, "cpu", True, False, time.time() - 1, tmp_path)
    assert gpu_check.run_check(lambda c: {}, late)["ok"] is None  # past the budget: skipped


def _env() -> dict[str, str]:
    import os

    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO / "src") + os.pathsep + e.get("PYTHONPATH", "")
    return e


def test_gpu_check_gives_cuda_an_index(tmp_path: Path, monkeypatch) -> None:
    """``--device cuda`` must not reach ``set_device`` without an index (it raises)."""
    import gpu_check
    import torch
    from torch.cuda._utils import _get_device_index

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", _get_device_index)
    monkeypatch.setattr(gpu_check, "describe_device", lambda d: "fake GPU")
    monkeypatch.setattr(gpu_check, "sections", lambda ctx, study: {})
    assert gpu_check.main(["--out", str(tmp_path), "--device", "cuda"]) == 0
    assert json.loads((tmp_path / "gpu_check.json").read_text())["torch_device"] == "cuda:0"
