"""A full disk while fine-tuning saves its model: the model saved before stays whole, no
temporary directory is left, and the error names what, where and how much."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import FullDisk

from electra.cli import main
from electra.finetune.modeling import load_finetuned


def _args(model: Path, train: Path, out: Path) -> list[str]:
    args = ["finetune", "--model", str(model), "--task", "custom", "--task-type"]
    args += ["classification", "--train-file", str(train), "-o", str(out), "--epochs", "1"]
    return [*args, "--batch-size", "8", "--device", "cpu", "--no-bf16", "--no-floors"]


@pytest.mark.usefixtures("one_thread")
def test_a_full_disk_saving_the_finetuned_model_keeps_the_one_before(
    toy: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    out = tmp_path / "out"
    assert main([*_args(*toy, out), "--no-progress"]) == 0
    before = (out / "model" / "model.safetensors").read_bytes()
    with monkeypatch.context() as patched:
        FullDisk(1000).install(patched)
        capsys.readouterr()
        assert main([*_args(*toy, out), "--no-progress", "--seeds", "7"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"no space left on device while writing the fine-tuned model model/ to {out}" in err
    assert "it needs about" in err and "the seeds already finished are kept" in err
    assert (out / "model" / "model.safetensors").read_bytes() == before
    assert not [p.name for p in out.iterdir() if p.name.startswith(".model")]
    load_finetuned(out / "model")
