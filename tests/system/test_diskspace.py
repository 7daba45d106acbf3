"""A full disk as a clear error (electra.system.diskspace): what, where, how much, what next."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

from electra.system import diskspace
from electra.system.diskspace import (
    DiskFullError,
    full_disk_errno,
    human_bytes,
    reporting_full_disk,
)
from electra.system.errors import RunError


def _torch_save_on_a_full_disk(tmp_path: Path) -> BaseException:
    """What ``torch.save`` into a Python file raises when a write meets ENOSPC."""

    class Full:
        def __init__(self) -> None:
            self.f, self.calls = open(tmp_path / "x.pt", "wb"), 0  # noqa: SIM115

        def write(self, b) -> int:
            self.calls += 1
            if self.calls > 3:  # part of the file written, then the disk is full
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.f.write(b)

        def __getattr__(self, name):
            return getattr(self.f, name)

    try:
        torch.save({"a": torch.zeros(1000)}, Full())
    except Exception as exc:  # torch wraps it in a RuntimeError
        return exc
    raise AssertionError("torch.save did not fail")


def test_a_full_disk_is_recognised_however_the_library_reports_it(tmp_path: Path) -> None:
    assert full_disk_errno(OSError(errno.ENOSPC, "No space left on device")) == errno.ENOSPC
    assert full_disk_errno(OSError(errno.EDQUOT, "Disk quota exceeded")) == errno.EDQUOT
    st = SafetensorError(
        "Error while serializing: I/O error: No space left on device (os "
        'error 28) at path "/x/.tmpab"'
    )
    assert full_disk_errno(st) == errno.ENOSPC
    wrapped = _torch_save_on_a_full_disk(tmp_path)
    assert full_disk_errno(wrapped) == errno.ENOSPC  # torch 2.x: a RuntimeError, its context
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos") from None
    except RuntimeError as exc:
        assert full_disk_errno(exc) == errno.ENOSPC
    assert full_disk_errno(OSError(errno.EACCES, "Permission denied")) is None
    assert full_disk_errno(ValueError("bad value")) is None


def test_the_error_says_what_where_how_much_and_what_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(diskspace, "free_bytes", lambda path: 1_500)
    full = reporting_full_disk("checkpoint step-00000006", tmp_path, 2_400_000, "Resume.")
    with pytest.raises(DiskFullError) as info, full:
        raise OSError(errno.ENOSPC, "No space left on device")
    exc = info.value
    assert str(exc) == (
        f"no space left on device while writing checkpoint step-00000006 to {tmp_path}: it "
        "needs about 2.4 MB, 1.5 kB free there. Resume."
    )
    assert isinstance(exc, OSError) and isinstance(exc, RunError) and exc.errno == errno.ENOSPC
    assert isinstance(exc.__cause__, OSError)


def test_other_errors_pass_unchanged_and_the_inner_report_wins(tmp_path: Path) -> None:
    with pytest.raises(PermissionError), reporting_full_disk("x", tmp_path, 1, ""):
        raise PermissionError(errno.EACCES, "Permission denied")
    inner = DiskFullError("the inner one")
    full = reporting_full_disk("outer", tmp_path, 1, "")
    with pytest.raises(DiskFullError, match="^the inner one$"), full:
        raise inner


def test_what_and_then_may_be_decided_when_the_disk_fills(tmp_path: Path) -> None:
    state = {"shard": "none yet"}
    full = reporting_full_disk(
        lambda: f"shard {state['shard']}", tmp_path, lambda: 7, lambda: "2 done"
    )
    wanted = "quota exceeded .*shard train-00002.npy .*7 B.*2 done"
    with pytest.raises(DiskFullError, match=wanted), full:
        state["shard"] = "train-00002.npy"
        raise OSError(errno.EDQUOT, "Disk quota exceeded")


def test_free_space_is_read_from_the_nearest_existing_directory(tmp_path: Path) -> None:
    free = diskspace.free_bytes(tmp_path / "not" / "yet" / "made")
    assert free is not None and free > 0
    assert human_bytes(999) == "999 B" and human_bytes(12_345_678) == "12.3 MB"
    assert human_bytes(None) == "?"
