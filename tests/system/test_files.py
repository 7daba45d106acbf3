"""Atomic writes (electra.system.files): what a reader of the output directory sees."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from electra.system.files import atomic_write_json, atomic_write_text, sha256_file


def test_atomic_files_get_the_mode_a_plain_open_would_give(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
        atomic_write_json(tmp_path / "b.json", {"a": 1})
    finally:
        os.umask(old)
    for name in ("a.txt", "b.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name  # not mkstemp's 0600


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "c.json"
    atomic_write_json(target, {"v": 1})
    with pytest.raises(TypeError):
        atomic_write_json(target, {"v": object()})  # not JSON
    assert (
        target.read_text(encoding="utf-8").strip().replace(" ", "").replace("\n", "") == '{"v":1}'
    )
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]
    assert len(sha256_file(target)) == 64
