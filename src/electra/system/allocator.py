"""Which memory allocator a training process runs with, chosen before it starts.

A CPU training step allocates and frees the same large temporaries (activations,
attention scores, gradients) every step. glibc's default malloc returns blocks
above its (dynamic) mmap threshold to the kernel and trims the heap's top, so
the next step faults the same memory in again, page by page: on the project's
benchmark VMs that was 0.4-3 s of system time per ELECTRA-Small step
(``benchmarks/allocator.py`` measures it). Two ways to keep the memory:

- ``tcmalloc``: preloaded when the Debian/Ubuntu package ``libtcmalloc-minimal4``
  is installed (the fastest where measured);
- ``glibc-tuned``: the default allocator with glibc tunables (no install needed):
  large blocks come from the heap instead of fresh ``mmap`` s, the heap is never
  trimmed, and the heap is backed by transparent huge pages where the kernel
  allows it (``madvise`` mode), which cuts the remaining faults 512-fold.

Both must be in place before the process starts (glibc reads its tunables once,
``LD_PRELOAD`` is read by the loader), so the training commands re-execute
themselves once with the environment set (:func:`reexec_for_speed`). The
environment variable ``ELECTRA_ALLOCATOR`` chooses: ``auto`` (default:
tcmalloc if installed, else glibc-tuned on glibc), ``tcmalloc``,
``glibc-tuned`` or ``default`` (change nothing). This module imports nothing
heavy: it runs before torch is loaded.
"""

from __future__ import annotations

import glob
import os
import platform
import sys
from collections.abc import Mapping, Sequence

ENV = "ELECTRA_ALLOCATOR"
CHOICES = ("auto", "tcmalloc", "glibc-tuned", "default")
_DONE = "ELECTRA_ALLOCATOR_SET"  # set in the re-executed process: never loop

_TCMALLOC_GLOBS = (
    "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib*/libtcmalloc_minimal.so*",
    "/usr/local/lib/libtcmalloc_minimal.so*",
)

# Blocks up to mmap_threshold come from the heap and stay there after free (no
# trimming), so a step reuses the previous step's pages. Setting either threshold
# switches off glibc's dynamic mmap threshold, so both are set: trim_threshold
# alone left the threshold at 128 KiB and made the step slower (measured: 2.4 s
# of system time per step instead of 0.46 s). hugetlb=1 asks for transparent
# huge pages on the heap (2 MiB faults instead of 4 KiB ones).
GLIBC_TUNABLES = {
    "glibc.malloc.mmap_threshold": str(1 << 30),
    "glibc.malloc.trim_threshold": str(1 << 32),
    "glibc.malloc.hugetlb": "1",
}


class AllocatorError(ValueError):
    """ELECTRA_ALLOCATOR names no known allocator, or one that is not available."""


def find_tcmalloc() -> str | None:
    """Path of libtcmalloc_minimal if installed (Debian: libtcmalloc-minimal4)."""
    for pattern in _TCMALLOC_GLOBS:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[0]
    return None


def is_glibc() -> bool:
    """Whether this Python runs on glibc (the tunables mean nothing elsewhere)."""
    return sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def choose(environ: Mapping[str, str]) -> str:
    """The allocator to run with: the user's ``ELECTRA_ALLOCATOR``, or the best available."""
    wanted = environ.get(ENV, "auto") or "auto"
    if environ.get("ELECTRA_NO_TCMALLOC") and wanted == "auto":
        wanted = "default"  # the older switch: keep the default allocator
    if wanted not in CHOICES:
        raise AllocatorError(f"{ENV}={wanted!r}: expected one of {', '.join(CHOICES)}")
    if wanted == "tcmalloc" and find_tcmalloc() is None:
        raise AllocatorError(
            f"{ENV}=tcmalloc: libtcmalloc_minimal is not installed "
            "(Debian/Ubuntu: apt install libtcmalloc-minimal4)"
        )
    if wanted != "auto":
        return wanted
    if find_tcmalloc() is not None:
        return "tcmalloc"
    return "glibc-tuned" if is_glibc() else "default"


def environment(choice: str, environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with what ``choice`` needs set (LD_PRELOAD or GLIBC_TUNABLES)."""
    env = dict(environ)
    if choice == "tcmalloc":
        lib = find_tcmalloc()
        assert lib is not None  # choose() checked
        env["LD_PRELOAD"] = ":".join(p for p in (lib, env.get("LD_PRELOAD", "")) if p)
    elif choice == "glibc-tuned":
        given = dict(
            item.split("=", 1) for item in env.get("GLIBC_TUNABLES", "").split(":") if "=" in item
        )
        merged = {**GLIBC_TUNABLES, **given}  # the user's own tunables win
        env["GLIBC_TUNABLES"] = ":".join(f"{k}={v}" for k, v in merged.items())
    env[_DONE] = choice
    return env


def current() -> str:
    """The allocator this process was started with (for logs and run summaries)."""
    if "tcmalloc" in os.environ.get("LD_PRELOAD", ""):
        return "tcmalloc"
    return os.environ.get(_DONE, "default")


def reexec_for_speed(interpreter_args: Sequence[str]) -> str:
    """Restart ``python *interpreter_args`` once with the chosen allocator's environment.

    ``interpreter_args`` is what follows the interpreter, e.g. ``["-m",
    "electra.cli", "pretrain", ...]`` or ``[script, *argv]``. Returns the
    allocator in use when no restart is needed: already restarted, the choice
    is ``default``, or the process already has what the choice needs. The
    restarted process keeps its PID (``execve``), so ``torchrun`` and job
    schedulers see no difference.
    """
    if os.environ.get(_DONE):
        return current()
    choice = choose(os.environ)
    if choice == "default" or (
        choice == "tcmalloc" and "tcmalloc" in os.environ.get("LD_PRELOAD", "")
    ):
        return current() if choice == "tcmalloc" else "default"
    env = environment(choice, os.environ)
    os.execve(sys.executable, [sys.executable, *interpreter_args], env)
    return choice  # not reached
