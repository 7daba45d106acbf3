"""``benchmarks/gpu_check.py``'s steps record every outcome (the whole check on the CPU:
``tests/benchmarks/test_gpu_run.py``)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # end-to-end: left out of `make test-fast`

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))


def test_a_failing_check_is_recorded_and_the_rest_still_run(tmp_path: Path) -> None:
    """Each step's outcome is one status: ok, failed (with its traceback), skipped (with
    why), timed-out (its own deadline reached); a step never raises."""

    import gpu_check

    ctx = gpu_check.Context(tmp_path, "cpu", True, time.time() + 60)

    def boom(ctx):
        raise RuntimeError("no such kernel")

    def late(ctx):
        raise subprocess.TimeoutExpired(["electra", "pretrain"], 3.0)

    def missing(ctx):
        raise gpu_check.SkipStep("no exported discriminator")

    broken = gpu_check.run_check(boom, ctx)
    assert broken["status"] == "failed" and "no such kernel" in broken["error"]
    assert "Traceback" in broken["traceback"]
    fine = gpu_check.run_check(lambda c: {"x": 1}, ctx)
    assert fine == {"x": 1, "ok": True, "status": "ok", "seconds": fine["seconds"]}
    assert gpu_check.run_check(lambda c: {"ok": False}, ctx)["status"] == "failed"
    timed = gpu_check.run_check(late, ctx)
    assert timed["status"] == "timed-out" and timed["error"].startswith("timed out after")
    skipped = gpu_check.run_check(missing, ctx)
    assert skipped["status"] == "skipped" and skipped["skipped"] == "no exported discriminator"
    assert ctx.timeout(600) <= 60  # subprocesses never outlive the step's deadline


def test_a_step_whose_module_is_missing_is_skipped_before_it_imports_anything(
    tmp_path: Path,
) -> None:
    import gpu_check

    env = {"unusable": {"transformers": "transformers is not installed"}}
    ctx = gpu_check.Context(tmp_path, "cpu", True, time.time() + 60, env)
    r = gpu_check.run_step("export_parity", ctx)
    assert r["status"] == "skipped" and "needs transformers" in r["skipped"]
    import gpu_plan

    assert gpu_check.blocked_by(gpu_plan.step_named("data", True), ctx.env) is None
    env = {"unusable": {"cuda": "--device cuda: torch sees no CUDA device"}}
    ctx = gpu_check.Context(tmp_path, "cuda:0", True, time.time() + 60, env)
    assert "no CUDA device" in gpu_check.run_step("sigkill_resume_bf16", ctx)["skipped"]


def test_gpu_check_gives_cuda_an_index(monkeypatch) -> None:
    """``--device cuda`` must not reach ``set_device`` without an index (it raises)."""
    from types import SimpleNamespace

    import gpu_preflight
    import torch

    props = SimpleNamespace(name="fake H200", major=9, minor=0, total_memory=141 * 2**30)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: props)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(gpu_preflight, "_driver_version", lambda: None)
    assert gpu_preflight.describe_gpu("cuda")["device"] == "cuda:0"
    assert gpu_preflight.describe_gpu("auto")["device"] == "cuda:0"
    gpu = gpu_preflight.describe_gpu("cuda:1")
    assert gpu["device"] == "cuda:1" and gpu["name"] == "fake H200"
    assert gpu["capability"] == "9.0" and gpu["memory_gib"] == 141.0


@pytest.mark.parametrize("own_session", [False, True])
def test_a_step_that_times_out_leaves_no_process_behind(tmp_path: Path, own_session) -> None:
    """A launcher killed at its timeout takes its workers with it (a torchrun worker left
    sleeping would hold the GPU for the checks after it), also a worker in a session of its
    own, where torchrun starts them."""
    import subprocess

    import gpu_check

    pid_file = tmp_path / "child.pid"
    grandchild = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
        f"start_new_session={own_session}); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    with pytest.raises(subprocess.TimeoutExpired):
        gpu_check._run([sys.executable, "-c", grandchild], timeout=3)
    status = Path(f"/proc/{int(pid_file.read_text())}/status")
    time.sleep(0.2)
    # gone, or a zombie waiting for init to reap it: not running either way
    assert not status.exists() or "State:\tZ" in status.read_text()


def test_a_step_stopped_by_its_time_limit_stops_its_children(tmp_path: Path) -> None:
    """gpu_run.sh's ``timeout`` sends SIGTERM to the step's group; the step's children run
    in groups of their own, so the step must stop them itself."""
    import signal

    pid_file = tmp_path / "child.pid"
    grandchild = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    step = (
        f"import signal, sys; sys.path.insert(0, {str(REPO / 'benchmarks')!r}); "
        "import gpu_check; signal.signal(signal.SIGTERM, gpu_check._stop_children); "
        f"gpu_check._run([sys.executable, '-c', {grandchild!r}], timeout=60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", step], cwd=REPO)
    deadline = time.time() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.time() < deadline, "the grandchild never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 128 + signal.SIGTERM
    status = Path(f"/proc/{int(pid_file.read_text())}/status")
    time.sleep(0.2)
    assert not status.exists() or "State:\tZ" in status.read_text()


def test_the_fine_tuning_check_compares_the_device_with_the_cpu() -> None:
    """Chance accuracy on both devices is parity, not a failure; a device that drifts from
    the CPU, or a loss that is not finite, fails the check."""
    import gpu_check

    def res(acc: float, loss: float) -> dict:
        seed = {"dev": {"accuracy": acc}, "test": {"accuracy": acc}, "dev_loss": loss}
        return {"seeds": [seed], "floors": {"majority": {"test": {"accuracy": 0.5}}}}

    same = gpu_check.finetune_parity(
        {"cuda:0": res(0.5, 0.693), "cpu": res(0.5, 0.6931)}, "cuda:0", 2000
    )
    assert same["ok"] and "majority 0.5" in same["summary"] and "the CPU: 0.5" in same["summary"]
    drift = gpu_check.finetune_parity(
        {"cuda:0": res(0.5, 0.75), "cpu": res(0.5, 0.693)}, "cuda:0", 2000
    )
    assert not drift["ok"] and drift["dev_loss_diff"] > gpu_check.FINETUNE_LOSS_TOLERANCE
    worse = gpu_check.finetune_parity(
        {"cuda:0": res(0.5, 0.69), "cpu": res(0.6, 0.69)}, "cuda:0", 2000
    )
    assert not worse["ok"]
    nan = gpu_check.finetune_parity({"cpu": res(0.5, float("nan"))}, "cpu", 200)
    assert not nan["ok"] and "not finite" in nan["summary"]
    assert gpu_check.finetune_parity({"cpu": res(0.5, 0.69)}, "cpu", 200)["ok"]
