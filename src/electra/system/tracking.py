"""Optional experiment tracking beside ``metrics.jsonl`` and TensorBoard: MLflow or W&B.

``run.tracker = "mlflow"`` logs to an MLflow tracking store (by default a local file store,
``RUN/mlruns``, which works offline; ``run.tracker_uri`` for a server);
``run.tracker = "wandb"`` to Weights & Biases (``WANDB_MODE=offline`` writes under the run
directory, ``wandb sync`` uploads later). Either gets the resolved config as flat
``section.key`` parameters, every record of ``metrics.jsonl`` at its step, and the summary.
The package is imported only when chosen, so a run without a tracker never loads it. The
tracker's run id is kept in the run directory (``tracker_run.json``), so ``--resume``
continues the same tracked run. Only the process that writes the run directory (rank 0)
tracks.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from pathlib import Path
from typing import Any

from electra.system.errors import RunError
from electra.system.files import atomic_write_json

TRACKERS = ("none", "mlflow", "wandb")
"""The values of ``run.tracker``."""

RUN_FILE = "tracker_run.json"
"""Where a run directory keeps its tracked run's id, for ``--resume``."""


class Tracker:
    """No tracking: every call does nothing (``run.tracker = "none"``)."""

    resumed = False

    def log_params(self, params: dict[str, Any]) -> None:
        """The run's configuration, flat (see :func:`flat_params`)."""

    def log_metrics(self, values: dict[str, float], step: int) -> None:
        """Numeric metrics of one record at training step ``step``."""

    def log_summary(self, summary: dict[str, Any]) -> None:
        """The run's closing summary (``summary.json``)."""

    def close(self) -> None:
        """End the tracked run (flushes what is buffered)."""


def flat_params(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"max_steps": 3}}`` -> ``{"optim.max_steps": 3}`` (lists as JSON)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flat_params(value, f"{name}."))
        else:
            flat[name] = json.dumps(value) if isinstance(value, list | tuple) else value
    return flat


def numeric(record: dict[str, Any]) -> dict[str, float]:
    """The finite-or-not numbers of a record, ``step`` and booleans left out."""
    return {
        k: float(v)
        for k, v in record.items()
        if k != "step" and isinstance(v, int | float) and not isinstance(v, bool)
    }


def _package(module: str, pip_name: str) -> Any:
    """Import ``module`` or stop naming the install command (``run.tracker`` chose it)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise RunError(
            f"run.tracker needs the {module} package: pip install '{pip_name}' "
            f"(or pip install 'electra[{module}]'); {e}"
        ) from None


def _saved_id(out: Path, kind: str) -> str | None:
    path = out / RUN_FILE
    if not path.is_file():
        return None
    saved = json.loads(path.read_text(encoding="utf-8"))
    return saved.get("run_id") if saved.get("tracker") == kind else None


class MlflowTracker(Tracker):
    """MLflow through its client API: one MLflow run per run directory."""

    def __init__(self, out: Path, uri: str, project: str, name: str) -> None:
        mlflow = _package("mlflow", "mlflow-skinny")
        if not uri:  # a file store: offline, no database; MLflow 3 asks for this opt-in
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self._entities = importlib.import_module("mlflow.entities")
        self.client = mlflow.MlflowClient(tracking_uri=uri or (out / "mlruns").resolve().as_uri())
        self.run_id = _saved_id(out, "mlflow")
        self.resumed = self.run_id is not None
        if self.run_id is None:
            found = self.client.get_experiment_by_name(project)
            exp = found.experiment_id if found else self.client.create_experiment(project)
            self.run_id = self.client.create_run(exp, run_name=name).info.run_id
            atomic_write_json(out / RUN_FILE, {"tracker": "mlflow", "run_id": self.run_id})

    def log_params(self, params: dict[str, Any]) -> None:
        Param = self._entities.Param
        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 per batch
            self.client.log_batch(self.run_id, params=items[i : i + 100])

    def log_metrics(self, values: dict[str, float], step: int) -> None:
        Metric, now = self._entities.Metric, int(time.time() * 1000)
        items = [Metric(k.replace("@", "_at_"), v, now, step) for k, v in values.items()]
        for i in range(0, len(items), 1000):
            self.client.log_batch(self.run_id, metrics=items[i : i + 1000])

    def log_summary(self, summary: dict[str, Any]) -> None:
        self.client.log_dict(self.run_id, summary, "summary.json")
        if summary.get("verdict"):
            self.client.set_tag(self.run_id, "health", str(summary["verdict"])[:5000])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class WandbTracker(Tracker):
    """Weights & Biases: one W&B run per run directory, resumed by its id."""

    def __init__(self, out: Path, project: str, name: str) -> None:
        wandb = _package("wandb", "wandb")
        run_id = _saved_id(out, "wandb")
        self.resumed = run_id is not None
        self.run = wandb.init(
            project=project, name=name, dir=str(out), id=run_id, resume="allow", reinit=True
        )
        if run_id is None:
            atomic_write_json(out / RUN_FILE, {"tracker": "wandb", "run_id": self.run.id})

    def log_params(self, params: dict[str, Any]) -> None:
        self.run.config.update(params, allow_val_change=True)

    def log_metrics(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def log_summary(self, summary: dict[str, Any]) -> None:
        for k, v in summary.items():
            if isinstance(v, int | float | str) and not isinstance(v, bool):
                self.run.summary[k] = v

    def close(self) -> None:
        self.run.finish()


def open_tracker(kind: str, out: Path, uri: str = "", project: str = "electra") -> Tracker:
    """The tracker ``run.tracker`` names, for the run directory ``out`` (its name names the
    tracked run); the package is imported here, only when chosen."""
    if kind == "none":
        return Tracker()
    if kind == "mlflow":
        return MlflowTracker(out, uri, project, out.resolve().name)
    if kind == "wandb":
        return WandbTracker(out, project, out.resolve().name)
    raise RunError(f"run.tracker: unknown tracker {kind!r}; one of {list(TRACKERS)}")
