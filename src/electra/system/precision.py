"""The device a command runs on, which autocast precision is fast there, and its context.

bf16 autocast is a speed-up only where the hardware multiplies bf16 natively:
GPUs from Ampere on, and CPUs with AVX512-BF16 or AMX (x86) or the BF16
extension (Arm). Elsewhere PyTorch emulates it, and on an AVX2-only CPU (an
AMD Zen 3 VM, most laptops before 2023) a bf16 matmul ran at 0.49 GFLOP/s
against 40.9 in fp32 (one thread, torch 2.13): a bf16 training step there is
about 80x slower than fp32. So ``precision = "auto"`` (the default of every
built-in recipe) picks bf16 only where it is native, fp16 on older GPUs, and
fp32 otherwise; an explicit ``bf16`` on such a CPU still runs, with a warning.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import platform
from pathlib import Path

import torch

from electra.config import ConfigError

log = logging.getLogger("electra")

PRECISIONS = ("auto", "bf16", "fp16", "fp32")


def resolve_device(
    pref: str, local_rank: int = 0, world: int = 1, option: str = "run.device"
) -> torch.device:
    """The device this process runs on, always with an index when it is a GPU.

    ``auto`` (or empty) is CUDA when available, else CPU. A bare ``cuda``
    becomes ``cuda:LOCAL_RANK`` (``torch.cuda.set_device`` rejects a device
    without an index). Under ``torchrun`` (``world > 1``) every rank takes its
    own GPU, ``cuda:LOCAL_RANK``, even when ``cuda:N`` was asked for: a fixed
    index would put all ranks of a node on one GPU. ``option`` names the
    setting in the error when no GPU is there (``--device`` for fine-tuning).
    """
    if pref in ("", "auto"):
        pref = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(pref)
    if device.type != "cuda":
        return device
    if not torch.cuda.is_available():
        raise ConfigError(f"{option} = {pref!r}: no CUDA device is available (use cpu)")
    if world > 1 or device.index is None:
        return torch.device("cuda", local_rank)
    return device


@functools.cache
def _cpu_flags() -> frozenset[str]:
    """CPU feature flags from /proc/cpuinfo (empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return frozenset()
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return frozenset(flags)


def cpu_has_native_bf16() -> bool:
    """True where this CPU multiplies bf16 in hardware (AVX512-BF16, AMX, Arm BF16)."""
    probe = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    amx = getattr(torch.cpu, "_is_amx_tile_supported", None)
    if (probe and probe()) or (amx and amx()):
        return True
    flags = _cpu_flags()
    if platform.machine().lower() in ("aarch64", "arm64"):
        return "bf16" in flags
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def bf16_is_fast(device: torch.device) -> bool:
    """Whether bf16 autocast speeds up ``device`` (see the module docstring)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return cpu_has_native_bf16()
    return False


def resolve_precision(precision: str, device: torch.device) -> str:
    """``auto`` made concrete for ``device``; a warning for bf16 where it is emulated."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    if precision == "auto":
        if bf16_is_fast(device):
            return "bf16"
        return "fp16" if device.type == "cuda" else "fp32"
    if precision == "bf16" and device.type == "cpu" and not cpu_has_native_bf16():
        log.warning(
            "precision bf16 on a CPU without native bf16 (no AVX512-BF16/AMX): "
            "expect it to be many times slower than fp32; use precision auto or fp32"
        )
    return precision


def autocast_for(precision: str, device: torch.device):
    """The autocast context of a (resolved) precision on ``device`` (none for fp32)."""
    precision = resolve_precision(precision, device) if precision == "auto" else precision
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)
