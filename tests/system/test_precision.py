"""Which autocast precision ``auto`` picks, and the warning for emulated bf16."""

from __future__ import annotations

import contextlib
import logging

import pytest
import torch

from electra.system import precision
from electra.system.precision import autocast_for, cpu_has_native_bf16, resolve_precision

CPU, GPU = torch.device("cpu"), torch.device("cuda", 0)


@pytest.fixture
def no_torch_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decide from /proc/cpuinfo flags alone (torch's own probes report this machine)."""
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    monkeypatch.setattr(precision.platform, "machine", lambda: "x86_64")


@pytest.mark.parametrize(
    ("flags", "native"),
    [
        ({"avx", "avx2", "fma"}, False),  # AVX2 only (AMD Zen 3, older laptops): emulated
        ({"avx2", "avx512f", "avx512_bf16"}, True),  # AMD Zen 4, Intel Cooper Lake
        ({"avx2", "avx512f", "amx_bf16", "amx_tile"}, True),  # Intel Sapphire Rapids
        (set(), False),  # /proc/cpuinfo unreadable
    ],
)
def test_native_bf16_from_cpu_flags(
    monkeypatch: pytest.MonkeyPatch, no_torch_probes: None, flags: set[str], native: bool
) -> None:
    monkeypatch.setattr(precision, "_cpu_flags", lambda: frozenset(flags))
    assert cpu_has_native_bf16() is native


def test_arm_reads_the_bf16_feature(monkeypatch: pytest.MonkeyPatch, no_torch_probes) -> None:
    monkeypatch.setattr(precision.platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(precision, "_cpu_flags", lambda: frozenset({"asimd", "bf16"}))
    assert cpu_has_native_bf16()
    monkeypatch.setattr(precision, "_cpu_flags", lambda: frozenset({"asimd"}))
    assert not cpu_has_native_bf16()


@pytest.mark.parametrize(("native", "expected"), [(True, "bf16"), (False, "fp32")])
def test_auto_on_cpu(monkeypatch: pytest.MonkeyPatch, native: bool, expected: str) -> None:
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    assert resolve_precision("auto", CPU) == expected


@pytest.mark.parametrize(("supported", "expected"), [(True, "bf16"), (False, "fp16")])
def test_auto_on_gpu(monkeypatch: pytest.MonkeyPatch, supported: bool, expected: str) -> None:
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: supported)
    assert resolve_precision("auto", GPU) == expected


def test_explicit_choices_are_kept_and_emulated_bf16_warns(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    with caplog.at_level(logging.WARNING, logger="electra"):
        assert resolve_precision("fp32", CPU) == "fp32"
        assert not caplog.records
        assert resolve_precision("bf16", CPU) == "bf16"
    assert "without native bf16" in caplog.text
    with pytest.raises(ValueError, match="'bf17'"):
        resolve_precision("bf17", CPU)


def test_autocast_contexts(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(autocast_for("fp32", CPU), contextlib.nullcontext)
    with autocast_for("bf16", CPU):
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert torch.is_autocast_enabled("cpu")
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert isinstance(autocast_for("auto", CPU), contextlib.nullcontext)
