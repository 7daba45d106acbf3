"""An interrupted fine-tuning, run again, keeps the seeds it finished and trains the rest to
the same results as a run never stopped; with other settings or other weights it keeps none."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file, save_file

from electra.cli import main
from electra.finetune import commands
from electra.finetune.results import earlier_seeds
from electra.model.hf import weights_sha256


def _args(model: Path, train: Path, out: Path, *more: str) -> list[str]:
    args = ["finetune", "--model", str(model), "--task", "custom", "--task-type"]
    args += ["classification", "--train-file", str(train), "-o", str(out), "--epochs", "2"]
    args += ["--batch-size", "8", "--device", "cpu", "--no-bf16", "--no-floors", "--no-progress"]
    return [*args, "--seeds", "1", "2", "3", *more]


def _trained_seeds(monkeypatch: pytest.MonkeyPatch, stop_at: int | None = None) -> list[int]:
    """Record the seeds ``train_seed`` trains; a KeyboardInterrupt (a kill) at ``stop_at``."""
    trained: list[int] = []
    real = commands.train_seed

    def train_seed(job: Any, seed: int) -> dict[str, Any]:
        if seed == stop_at:
            raise KeyboardInterrupt
        trained.append(seed)
        return real(job, seed)

    monkeypatch.setattr(commands, "train_seed", train_seed)
    return trained


def _scores(out: Path) -> tuple[list[tuple], Any, dict]:
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["complete"]
    seeds = [(r["seed"], r["best_epoch"], r["dev"], r["test"]) for r in results["seeds"]]
    return seeds, results["best_seed"], results["summary"]


@pytest.mark.usefixtures("one_thread")
def test_an_interrupted_finetuning_resumes_to_the_results_of_one_never_stopped(
    toy: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert main(_args(*toy, whole)) == 0
    with monkeypatch.context() as patched:
        _trained_seeds(patched, stop_at=3)
        assert main(_args(*toy, resumed)) == 130  # killed after seeds 1 and 2
    stopped = json.loads((resumed / "results.json").read_text(encoding="utf-8"))
    assert not stopped["complete"] and [r["seed"] for r in stopped["seeds"]] == [1, 2]
    capsys.readouterr()
    with monkeypatch.context() as patched:
        trained = _trained_seeds(patched)
        assert main(_args(*toy, resumed)) == 0
    assert trained == [3]  # seeds 1 and 2 were kept, not trained again
    assert "seed(s) 1, 2 finished before with these settings are kept" in capsys.readouterr().err
    assert _scores(resumed) == _scores(whole)
    weights = [load_file(out / "model" / "model.safetensors") for out in (whole, resumed)]
    assert weights[0].keys() == weights[1].keys()
    assert all(weights[0][k].equal(weights[1][k]) for k in weights[0])


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("change", ["learning rate", "weights"])
def test_an_interrupted_finetuning_with_other_settings_or_weights_keeps_no_seed(
    change: str, toy: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, train = toy
    local = tmp_path / "model"
    shutil.copytree(model, local)
    out = tmp_path / "out"
    with monkeypatch.context() as patched:
        _trained_seeds(patched, stop_at=2)
        assert main(_args(local, train, out)) == 130  # seed 1 finished
    more: list[str] = []
    if change == "learning rate":
        more = ["--learning-rate", "1e-3"]
    else:  # the same path, exported again with other weights
        path = local / "model.safetensors"
        tensors = load_file(path)
        save_file({k: v + 0.01 if v.is_floating_point() else v for k, v in tensors.items()}, path)
    with monkeypatch.context() as patched:
        trained = _trained_seeds(patched)
        assert main(_args(local, train, out, *more)) == 0
    assert trained == [1, 2, 3]


def _results(out: Path, **changes: Any) -> dict[str, Any]:
    """A stopped run's results.json after seeds 1 and 2 (best: 2), its model saved as seed 2."""
    (out / "model").mkdir(parents=True)
    (out / "model" / "electra_task.json").write_text(json.dumps({"seed": 2}), encoding="utf-8")
    results = {
        "format": "electra-finetune-results/1",
        "complete": False,
        "task": {"name": "custom", "splits": {"train": {"examples": 60}}},
        "model": {"path": "/m", "weights_sha256": "abc"},
        "recipe": {"learning_rate": 1e-4, "seeds": [1, 2, 3]},
        "device": "cpu",
        "seeds": [{"seed": 1, "dev": {"accuracy": 0.5}}, {"seed": 2, "dev": {"accuracy": 0.6}}],
        "best_seed": 2,
        "saved_model": str(out / "model"),
    }
    (out / "results.json").write_text(json.dumps({**results, **changes}), encoding="utf-8")
    return {**results, "seeds": [], "complete": False}


def test_earlier_seeds_are_kept_only_from_a_stopped_run_whose_saved_model_is_its_best(
    tmp_path: Path,
) -> None:
    new = _results(tmp_path / "a")
    kept = earlier_seeds(tmp_path / "a", new)
    assert [r["seed"] for r in kept["seeds"]] == [1, 2] and kept["best_seed"] == 2
    assert earlier_seeds(tmp_path / "a", {**new, "recipe": {**new["recipe"], "seeds": [2, 5]}})[
        "seeds"
    ] == [{"seed": 2, "dev": {"accuracy": 0.6}}]  # another seed list: the seeds in both
    assert earlier_seeds(tmp_path / "a", {**new, "recipe": {**new["recipe"], "seeds": [1]}}) == {}
    assert earlier_seeds(tmp_path / "b", _results(tmp_path / "b", complete=True)) == {}
    new_c = _results(tmp_path / "c", best_seed=1)  # saved model (seed 2) is not the best named
    assert earlier_seeds(tmp_path / "c", new_c) == {}
    new_d = _results(tmp_path / "d")
    assert earlier_seeds(tmp_path / "d", {**new_d, "device": "cuda"}) == {}
    assert (
        earlier_seeds(tmp_path / "d", {**new_d, "model": {"path": "/m", "weights_sha256": "x"}})
        == {}
    )
    assert earlier_seeds(tmp_path / "e", new) == {}  # nothing there


def test_the_weights_digest_follows_the_weight_files_only(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"w1")
    (tmp_path / "config.json").write_text("{}")
    first = weights_sha256(tmp_path)
    (tmp_path / "config.json").write_text('{"a": 1}')
    assert weights_sha256(tmp_path) == first
    (tmp_path / "model.safetensors").write_bytes(b"w2")
    assert weights_sha256(tmp_path) != first
