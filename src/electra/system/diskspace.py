"""A full disk as an error that says what was being written, where, and how much.

Every writer of the toolkit (checkpoints, exports, fine-tuned models, ``prepare``'s
shards and manifest) runs inside :func:`reporting_full_disk`: an ``ENOSPC`` or
``EDQUOT`` raised anywhere inside it, also one a library wrapped in its own error
(``safetensors`` reports ``os error 28`` in a ``SafetensorError``, ``torch.save``
a ``RuntimeError`` whose context is the ``OSError``), becomes a
:class:`DiskFullError` naming the thing, the directory, the bytes it needed and
the bytes free. The writers clean up their temporary files first, so what was
there before stays whole. Torch-free.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from electra.system.errors import RunError

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_FULL_TEXT = ("no space left on device", "disk quota exceeded", "os error 28", "os error 122")


class DiskFullError(RunError, OSError):
    """No space (or no quota) left while writing; the message says what, where, how much.

    An :class:`OSError` (``errno`` is ``ENOSPC`` or ``EDQUOT``) and a
    :class:`~electra.system.errors.RunError`: the command line prints it and exits 1.
    """

    def __init__(self, message: str, code: int = errno.ENOSPC, filename: str | None = None):
        super().__init__(message)
        self.errno, self.strerror, self.filename = code, message, filename

    def __str__(self) -> str:
        return str(self.strerror)


def full_disk_errno(exc: BaseException | None) -> int | None:
    """``ENOSPC`` / ``EDQUOT`` when ``exc`` or an exception it came from is a full disk."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            return int(exc.errno)
        text = str(exc).lower()
        if any(t in text for t in _FULL_TEXT):
            quota = "quota" in text or "os error 122" in text
            return errno.EDQUOT if quota else errno.ENOSPC
        exc = exc.__cause__ or exc.__context__
    return None


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes free on the filesystem of ``path`` (or its nearest existing parent)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def human_bytes(n: int | None) -> str:
    """``1.5 MB``-style size (powers of 1000, as ``df -H``); ``?`` when unknown."""
    if n is None:
        return "?"
    size = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"  # pragma: no cover


@contextlib.contextmanager
def reporting_full_disk(
    what: str | Callable[[], str],
    where: str | os.PathLike[str],
    needed: int | None | Callable[[], int | None],
    then: str | Callable[[], str],
) -> Iterator[None]:
    """Turn a full disk inside the block into :class:`DiskFullError`.

    ``what`` is the thing being written ("checkpoint step-00001000"), ``where``
    its directory, ``needed`` an estimate of its bytes (None: unknown) and
    ``then`` what the user can do once space is free (how to resume); each may be
    a function, called when the disk is full (after the block cleaned up). Other
    errors pass unchanged; so does a :class:`DiskFullError` from an inner block.
    """
    try:
        yield
    except DiskFullError:
        raise
    except Exception as exc:
        code = full_disk_errno(exc)
        if code is None:
            raise
        reason = "disk quota exceeded" if code == errno.EDQUOT else "no space left on device"
        what, needed, then = (x() if callable(x) else x for x in (what, needed, then))
        free = free_bytes(where)
        raise DiskFullError(
            f"{reason} while writing {what} to {where}: it needs about "
            f"{human_bytes(needed)}, {human_bytes(free)} free there. {then}",
            code,
            os.fspath(where),
        ) from exc
