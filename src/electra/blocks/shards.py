"""Writing blocks: ``.npy`` shards written whole, then the manifest.

A shard is written under a temporary name, fsynced and renamed, so a shard
name always means a complete shard; ``manifest.json`` is written last, and a
directory with a manifest whose options fingerprint matches is reused.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from electra.blocks.format import MANIFEST, NPY_HEADER_BYTES, SHARD_NAME
from electra.system.files import atomic_write_text, fsync_dir, sha256_file
from electra.text.tokenizer import (
    TOKENIZER_FILES,
)


def _npy_header(shape: tuple[int, ...], dtype: np.dtype) -> bytes:
    """A ``.npy`` (format 1.0) header of exactly ``NPY_HEADER_BYTES`` bytes."""
    descr = np.lib.format.dtype_to_descr(np.dtype(dtype))
    body = repr({"descr": descr, "fortran_order": False, "shape": tuple(shape)}).encode("latin1")
    pad = NPY_HEADER_BYTES - 10 - len(body) - 1
    if pad < 0:
        raise ValueError(f"shape {shape} does not fit a {NPY_HEADER_BYTES}-byte .npy header")
    return (
        b"\x93NUMPY\x01\x00"
        + (NPY_HEADER_BYTES - 10).to_bytes(2, "little")
        + body
        + b" " * pad
        + b"\n"
    )


class ShardWriter:
    """Stream the blocks of one split into shards of ``shard_size`` blocks.

    A shard is written under a hidden temporary name, its header completed,
    fsynced and renamed; memory use is one unit of work, whatever the shard
    size.
    """

    def __init__(self, out: Path, split: str, shard_size: int, L: int, dtype: str) -> None:
        self.out, self.split, self.shard_size = out, split, shard_size
        self.L, self.dtype = L, np.dtype(dtype)
        self.shards: list[dict[str, Any]] = []
        self._file: BinaryIO | None = None
        self._rows = 0
        self.writing: str | None = None  # the shard begun and not finished (kept on an error)

    @property
    def _name(self) -> str:
        return f"{self.split}-{len(self.shards):05d}.npy"

    @property
    def _tmp(self) -> Path:
        return self.out / f".{self._name}.tmp"

    def add(self, arr: np.ndarray) -> None:
        start = 0
        while start < len(arr):
            if self._file is None:
                self.writing = self._name
                self._file = open(self._tmp, "wb")  # noqa: SIM115 - closed in _finish/abort
                self._file.write(b"\0" * NPY_HEADER_BYTES)
                self._rows = 0
            take = min(len(arr) - start, self.shard_size - self._rows)
            part = np.ascontiguousarray(arr[start : start + take], dtype=self.dtype)
            self._file.write(memoryview(part).cast("B"))
            self._rows += take
            start += take
            if self._rows == self.shard_size:
                self._finish()

    def _finish(self) -> None:
        f, tmp, final = self._file, self._tmp, self.out / self._name
        assert f is not None
        try:
            f.seek(0)
            f.write(_npy_header((self._rows, self.L), self.dtype))
            f.flush()
            os.fsync(f.fileno())
            f.close()
            sha = sha256_file(tmp)
            os.replace(tmp, final)
        except BaseException:
            f.close()
            tmp.unlink(missing_ok=True)
            self._file = None
            raise
        self.shards.append({"file": final.name, "blocks": self._rows, "sha256": sha})
        self._file, self.writing = None, None

    @property
    def shard_bytes(self) -> int:
        """The bytes of a full shard on disk."""
        return NPY_HEADER_BYTES + self.shard_size * self.L * self.dtype.itemsize

    def close(self) -> list[dict[str, Any]]:
        if self._file is not None:
            self._finish()
        return self.shards

    def abort(self) -> None:
        """Drop the shard being written (after an error or an interrupt)."""
        if self._file is not None:
            self._file.close()
            self._file = None
            self._tmp.unlink(missing_ok=True)


def our_files(out: Path) -> list[Path]:
    names = set(TOKENIZER_FILES) | {MANIFEST}
    found = []
    for p in out.iterdir():
        if (
            p.name in names
            or SHARD_NAME.match(p.name)
            or p.name.startswith(".")
            and p.name.endswith(".tmp")
        ):
            found.append(p)
    return found


def options_fingerprint(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def existing_complete(out: Path, fingerprint: str) -> dict[str, Any] | None:
    path = out / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        return None
    if manifest.get("fingerprint") != fingerprint:
        return None
    for split in manifest.get("splits", {}).values():
        for shard in split.get("shards", []):
            if not (out / shard["file"]).is_file():
                return None
    return manifest


def write_manifest(out: Path, body: str) -> None:
    fsync_dir(out)  # the shards' renames first
    atomic_write_text(out / MANIFEST, body)
    fsync_dir(out)
