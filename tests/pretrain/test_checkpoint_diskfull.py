"""A full disk while checkpointing or exporting: nothing already written is lost, the
error says what needed how much where, and ``--resume`` continues exactly once space is
free. ENOSPC is raised inside the writers by :class:`builders.FullDisk`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from builders import FullDisk, tiny_config
from safetensors.torch import load_file

from electra.cli import main
from electra.model import checkpoint as ckpt
from electra.pretrain.export import export_run
from electra.pretrain.trainer import Trainer
from electra.system.diskspace import DiskFullError


def _state(seed: int) -> tuple[dict, dict]:
    g = torch.Generator().manual_seed(seed)
    model = {"w": torch.randn(64, 64, generator=g), "b": torch.randn(64, generator=g)}
    train = {
        "step": seed,
        "optimizer": {"state": {0: {"exp_avg": torch.randn(64, 64, generator=g)}}},
    }
    return model, train


@pytest.mark.parametrize("fills_in", [*ckpt.FILES, "meta.json"])
def test_a_full_disk_in_a_checkpoint_keeps_the_previous_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fills_in: str
) -> None:
    root = tmp_path / "checkpoints"
    ckpt.save(root, 3, *_state(3), {"run": 3})
    order = [*ckpt.FILES, "meta.json"]  # the order save writes them in, same sizes at step 6
    before = order[: order.index(fills_in)]
    free = sum((root / "step-00000003" / name).stat().st_size for name in before) + 5
    disk = FullDisk(free).install(monkeypatch)
    with pytest.raises(DiskFullError) as info:
        ckpt.save(root, 6, *_state(6), {"run": 6})
    assert disk.hits >= 1  # torch writes again (its zip end record) after the first refusal
    message = str(info.value)
    assert f"no space left on device while writing checkpoint step-00000006 to {root}" in message
    assert "it needs about 33.0 kB, 0 B free there" in message  # 2 x 64x64 + 64 float32
    assert "checkpoints already there are intact" in message
    assert [p.name for p in root.iterdir()] == ["step-00000003"]  # no temporary left
    ckpt.verify(root / "step-00000003")
    model, train, config = ckpt.load(root / "step-00000003")
    assert torch.equal(model["w"], _state(3)[0]["w"]) and train["step"] == 3
    assert config == {"run": 3}


def _args(blocks: Path, run: Path) -> list[str]:
    args = ["pretrain", "--config", "tiny", "--data", str(blocks), "-o", str(run)]
    args += ["--optim.max_steps", "6", "--run.save_every", "3", "--run.log_every", "3"]
    return [*args, "--no-run.progress", "--run.device", "cpu", "--no-run.export"]


@pytest.mark.usefixtures("one_thread")
def test_pretrain_on_a_full_disk_stops_clearly_and_resumes_exactly(
    blocks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main(_args(blocks, ref)) == 0
    disk = FullDisk(50_000, armed=False)
    save, calls = ckpt.save, [0]

    def save_then_fill(*args, **kwargs):
        calls[0] += 1
        disk.armed = calls[0] >= 2  # step 3 is written; the disk fills during step 6
        return save(*args, **kwargs)

    with monkeypatch.context() as patched:
        disk.install(patched)
        patched.setattr(ckpt, "save", save_then_fill)
        capsys.readouterr()
        assert main(_args(blocks, run)) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "no space left on device while writing checkpoint step-00000006" in err
    assert f"to {run / 'checkpoints'}: it needs about" in err
    last = run / "checkpoints" / "step-00000003"
    assert f"the last good checkpoint is {last} (step 3)" in err and "--resume" in err
    assert [c.step for c in ckpt.step_dirs(run / "checkpoints")] == [3]
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]
    ckpt.load(last)
    assert main([*_args(blocks, run), "--resume"]) == 0  # space is free again
    assert "resuming from" in capsys.readouterr().err
    want = load_file(str(ref / "checkpoints" / "step-00000006" / "model.safetensors"))
    got = load_file(str(run / "checkpoints" / "step-00000006" / "model.safetensors"))
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


def test_a_full_disk_during_an_export_names_it_and_keeps_the_checkpoint(
    blocks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    Trainer(tiny_config(blocks, run, "optim.max_steps=2", "run.export=false")).fit()
    FullDisk(10_000).install(monkeypatch)
    step = run / "checkpoints" / "step-00000002"
    with pytest.raises(DiskFullError) as info:
        export_run(run, run / "hf")
    message = str(info.value)
    assert f"while writing the Hugging Face export of step-00000002 to {run / 'hf'}" in message
    assert f"`electra export {step} -o {run / 'hf'}`" in message
    assert not list((run / "hf").rglob(".*.tmp"))  # the partial weights file removed
    monkeypatch.undo()
    ckpt.load(step)
    assert set(export_run(run, run / "hf")) == {"discriminator", "generator"}
