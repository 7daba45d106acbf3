"""Experiment tracking: MLflow (local file store) and W&B (offline), read back after a tiny
run and compared with ``metrics.jsonl``; nothing imported when no tracker is chosen."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from builders import tiny_config

from electra.pretrain.trainer import Trainer
from electra.system.tracking import RUN_FILE, flat_params, numeric


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _expected(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Every numeric key of metrics.jsonl with its (step, value) pairs."""
    want: dict[str, list[tuple[int, float]]] = {}
    for r in _records(run):
        for k, v in numeric(r).items():
            want.setdefault(k.replace("@", "_at_"), []).append((r["step"], v))
    return want


@pytest.fixture()
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No network, no telemetry, no home-directory writes."""
    for k, v in {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(tmp_path / "wandb-home"),
        "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
        "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"),
        "WANDB_DISABLE_GIT": "true",
        "WANDB_DISABLE_CODE": "true",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "1",
    }.items():
        monkeypatch.setenv(k, v)


def test_mlflow_gets_the_config_every_metric_and_the_summary(
    blocks: Path, tmp_path: Path, offline: None
) -> None:
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    run = tmp_path / "run"
    cfg = tiny_config(blocks, run, "optim.max_steps=6", "run.log_every=2", "run.tracker='mlflow'")
    Trainer(cfg).fit()
    run_id = json.loads((run / RUN_FILE).read_text())["run_id"]
    client = MlflowClient(tracking_uri=(run / "mlruns").resolve().as_uri())
    got = client.get_run(run_id)
    config = json.loads((run / "config.json").read_text())
    assert got.data.params["optim.max_steps"] == "6"
    assert set(got.data.params) == set(flat_params(config))
    want = _expected(run)
    assert set(got.data.metrics) == set(want) and "loss" in want
    for key, pairs in want.items():
        history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
        assert [h[0] for h in history] == [p[0] for p in sorted(pairs)], key
        assert [h[1] for h in history] == pytest.approx([p[1] for p in sorted(pairs)]), key
    summary = json.loads((run / "summary.json").read_text())
    path = client.download_artifacts(run_id, "summary.json", str(tmp_path))
    assert json.loads(Path(path).read_text())["step"] == summary["step"] == 6
    assert got.info.status == "FINISHED"
    # --resume continues the same MLflow run, its metrics at the new steps.
    cfg = tiny_config(blocks, run, "optim.max_steps=8", "run.log_every=2", "run.tracker='mlflow'")
    Trainer(cfg, resume=True).fit()
    assert json.loads((run / RUN_FILE).read_text())["run_id"] == run_id
    assert len(client.search_runs([got.info.experiment_id])) == 1
    steps = {m.step for m in client.get_metric_history(run_id, "loss")}
    assert max(steps) == 8 and {2, 4, 6} <= steps


def test_wandb_offline_gets_the_metrics_and_the_summary(
    blocks: Path, tmp_path: Path, offline: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """wandb 0.2x+ keeps an offline run in a binary file only its own service reads, so the
    calls into the real wandb run are recorded on their way through (the real one writes)."""
    wandb = pytest.importorskip("wandb")
    logged: list[tuple[int, dict]] = []
    real_log = wandb.Run.log

    def log(self, data: dict, step: int | None = None, **k):  # noqa: ANN001, ANN003
        logged.append((step, dict(data)))
        return real_log(self, data, step=step, **k)

    monkeypatch.setattr(wandb.Run, "log", log)
    run = tmp_path / "run"
    cfg = tiny_config(blocks, run, "optim.max_steps=4", "run.log_every=2", "run.tracker='wandb'")
    trainer = Trainer(cfg)
    trainer.fit()
    run_id = json.loads((run / RUN_FILE).read_text())["run_id"]
    (offline_dir,) = (run / "wandb").glob(f"offline-run-*-{run_id}")
    assert (offline_dir / f"run-{run_id}.wandb").stat().st_size > 0
    want = {r["step"]: numeric(r) for r in _records(run)}
    got: dict[int, dict] = {}
    for step, data in logged:
        got.setdefault(step, {}).update(data)
    assert got == want
    tracked = trainer.tracker.run
    assert tracked.config["optim.max_steps"] == 4


def test_no_tracker_imports_neither_package(blocks: Path, tmp_path: Path) -> None:
    """A tiny run in a fresh interpreter: neither mlflow nor wandb is ever imported."""
    code = (
        "import sys\n"
        "from builders import tiny_config\n"
        "from electra.pretrain.trainer import Trainer\n"
        f"Trainer(tiny_config({str(blocks)!r}, {str(tmp_path / 'run')!r}, "
        "'optim.max_steps=2', 'run.export=false')).fit()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlflow', 'wandb')))\n"
    )
    tests = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tests, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_a_chosen_tracker_that_is_not_installed_names_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from electra.system.errors import RunError
    from electra.system.tracking import open_tracker

    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow raises ImportError
    with pytest.raises(RunError, match="pip install 'mlflow-skinny'"):
        open_tracker("mlflow", tmp_path)
    with pytest.raises(RunError, match="unknown tracker 'tensorboardx'"):
        open_tracker("tensorboardx", tmp_path)
