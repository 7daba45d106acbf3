"""A checkpoint truncated or overwritten, the optimizer state included: ``--resume`` falls
back to the previous one naming the file, and continues; a ``train_state.pt`` holding a
pickled object of another class is refused naming the file (no pickled code ever runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from electra.cli import main
from electra.model import checkpoint as ckpt
from electra.system.files import sha256_file


def _args(blocks: Path, run: Path, steps: int) -> list[str]:
    args = ["pretrain", "--config", "tiny", "--data", str(blocks), "-o", str(run)]
    args += ["--optim.max_steps", str(steps), "--run.save_every", "3", "--run.log_every", "3"]
    return [*args, "--no-run.progress", "--run.device", "cpu", "--no-run.export"]


@pytest.fixture()
def six_steps(blocks: Path, tmp_path: Path) -> Path:
    """A run of 6 steps with checkpoints at steps 3 and 6."""
    run = tmp_path / "run"
    assert main(_args(blocks, run, 6)) == 0
    assert [c.step for c in ckpt.step_dirs(run / "checkpoints")] == [6, 3]
    return run


@pytest.mark.parametrize("damage", ["truncated", "overwritten"])
@pytest.mark.usefixtures("one_thread")
def test_a_broken_optimizer_state_falls_back_to_the_previous_checkpoint(
    blocks: Path, six_steps: Path, damage: str, capsys
) -> None:
    state = six_steps / "checkpoints" / "step-00000006" / "train_state.pt"
    raw = bytearray(state.read_bytes())
    if damage == "truncated":
        raw = raw[: len(raw) // 3]
    else:
        raw[len(raw) // 2 : len(raw) // 2 + 4000] = b"\0" * 4000  # the size unchanged
    state.write_bytes(bytes(raw))
    capsys.readouterr()
    assert main([*_args(blocks, six_steps, 8), "--resume"]) == 0
    err = capsys.readouterr().err
    assert f"skipping checkpoint step-00000006: {state}: checksum mismatch" in err
    assert f"resuming from {six_steps / 'checkpoints' / 'step-00000003'} (step 3)" in err
    assert json.loads((six_steps / "summary.json").read_text())["step"] == 8


class Planted:
    """Unpickled, it would create a file: proof that pickled code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_train_state_with_a_pickled_object_is_refused_naming_the_file(
    blocks: Path, six_steps: Path, tmp_path: Path, capsys
) -> None:
    step = six_steps / "checkpoints" / "step-00000006"
    marker = tmp_path / "code-ran"
    state = torch.load(step / "train_state.pt", weights_only=True)
    state["extra"] = Planted(marker)
    torch.save(state, step / "train_state.pt")
    meta = json.loads((step / "meta.json").read_text())
    meta["sha256"]["train_state.pt"] = sha256_file(step / "train_state.pt")  # checksums pass
    (step / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ckpt.CheckpointError) as info:
        ckpt.load(step)
    message = str(info.value)
    assert message.startswith(f"{step / 'train_state.pt'}: refused: it holds a pickled object")
    assert "weights_only=True" in message and not marker.exists()
    capsys.readouterr()
    assert main([*_args(blocks, six_steps, 6), "--resume"]) == 0  # falls back to step 3
    err = capsys.readouterr().err
    assert f"skipping checkpoint step-00000006: {step / 'train_state.pt'}: refused" in err
    assert not marker.exists()


def test_when_no_checkpoint_loads_resume_refuses_to_start_over(
    blocks: Path, six_steps: Path, capsys
) -> None:
    for c in ckpt.step_dirs(six_steps / "checkpoints"):
        weights = c.path / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
    assert main([*_args(blocks, six_steps, 8), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "no checkpoint there can be loaded" in err and "step-00000003" in err
    assert "starting from scratch" not in err
