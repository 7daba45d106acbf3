"""Files written whole or not at all, and their digests.

Every file the toolkit leaves behind (configs, manifests, weights, model
cards, prediction outputs) is written under a temporary name in the same
directory, fsynced and renamed over the target: a reader, or a run killed
half-way, never sees half a file. Torch-free and dependency-free, so the
ONNX runtime side and the corpus tools use the same functions.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

READ_BLOCK = 1 << 20  # bytes per read when hashing


def sha256_file(path: str | os.PathLike[str], chunk: int = READ_BLOCK) -> str:
    """Hex sha256 of a file's bytes, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Flush a file already written and closed to the disk."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make the renames inside a directory durable; a no-op where the filesystem refuses."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some filesystems do not allow opening directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    """The process umask (read by setting it, then restoring it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[str]:
    """A temporary file name beside ``path``: write it in the block; on success it is
    fsynced and renamed to ``path``, on an exception removed (``path`` untouched)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a plain open() would not
    try:
        yield tmp
        fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary name, fsync, rename)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` as UTF-8 to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(
    path: str | os.PathLike[str],
    obj: Any,
    *,
    ensure_ascii: bool = True,
    default: Callable[[Any], Any] | None = None,
) -> None:
    """``obj`` as indented JSON and a final newline, written atomically.

    Paths are written as strings and numpy scalars as numbers unless ``default``
    says otherwise; anything else not JSON is a TypeError naming its type.
    """
    body = json.dumps(obj, indent=2, ensure_ascii=ensure_ascii, default=default or _plain)
    atomic_write_text(path, body + "\n")


def _plain(obj: Any) -> Any:
    """JSON for the values results hold besides JSON's own: paths and numpy scalars."""
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if type(obj).__module__ == "numpy" and hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
