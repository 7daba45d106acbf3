"""The objective's per-sample randomness (``SampleRNG``): a counter-based hash, bit for bit
the pure-Python reference, uniform and independent, the masking rates the objective asks
for, and a number of tensor ops that does not grow with the batch."""

from __future__ import annotations

import random

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from electra.pretrain.objective import SampleRNG, choose_positions, mask_batch, splitmix64
from electra.text.special import SpecialIds

M64 = (1 << 64) - 1
G = 0x9E3779B97F4A7C15
SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=100)


def ref_mix(z: int) -> int:
    """SplitMix64's finaliser on Python ints (the published algorithm)."""
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def ref_bits(seed: int, draw: int, col: int) -> int:
    return ref_mix(ref_mix(seed) + ((draw << 32) + col + 1) * G)


def as_unsigned(t: torch.Tensor) -> list[int]:
    return [v & M64 for v in t.tolist()]


def test_the_hash_is_splitmix64_bit_for_bit_in_int64() -> None:
    """Products wrap mod 2**64 and the shifts are logical: the reference's bits exactly,
    so any device computing int64 arithmetic draws the same numbers."""
    r = random.Random(0)
    values = [0, 1, M64, 1 << 63, (1 << 63) - 1] + [r.getrandbits(64) for _ in range(2000)]
    signed = torch.tensor([v - (1 << 64) if v >> 63 else v for v in values], dtype=torch.int64)
    assert as_unsigned(splitmix64(signed)) == [ref_mix(v) for v in values]


def test_draws_are_the_reference_stream_and_exact_in_fp32() -> None:
    seeds = SampleRNG.seeds_for(3, range(5, 9))
    rng = SampleRNG(seeds)
    keys, u = rng.keys(7), rng.uniform(7)  # draws 0 and 1
    for b, s in enumerate(seeds):
        for j in range(7):
            assert keys[b, j].item() == ref_bits(s, 0, j) >> 1
            want = (ref_bits(s, 1, j) >> 40) * 2.0**-24  # a 24-bit integer: exact in fp32
            assert u.dtype == torch.float32 and u[b, j].item() == want
    rows = SampleRNG(seeds)
    rows.draws = 3
    got = rows.uniform_rows(torch.tensor([2, 0, 3, 1]), 6).tolist()
    want = [(ref_bits(seeds[b], 3, k) >> 40) * 2.0**-24 for b, n in enumerate([2, 0, 3, 1])
            for k in range(n)]  # fmt: skip
    assert got == want


def _chi2(u: torch.Tensor, bins: int = 100) -> float:
    counts = torch.histc(u.double(), bins=bins, min=0.0, max=1.0)
    expected = u.numel() / bins
    return float(((counts - expected) ** 2 / expected).sum())


def _corr(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.corrcoef(torch.stack([a.flatten().double(), b.flatten().double()]))[0, 1])


def _randomness_checks(u: torch.Tensor, v: torch.Tensor) -> list[str]:
    """What fails among: uniform (chi-square, 100 bins, two-sided at ~5 sigma),
    independent across positions, across blocks, and between two draws (|r| < 0.015,
    about 5 sigma at 1e5 pairs). ``u``, ``v``: two (blocks, positions) draws."""
    failed = []
    if not 29 < _chi2(u) < 169:  # df = 99, sd 14
        failed.append("uniform")
    if abs(_corr(u[:, :-1], u[:, 1:])) > 0.015:
        failed.append("positions")
    if abs(_corr(u[:-1], u[1:])) > 0.015:
        failed.append("blocks")
    if abs(_corr(u, v)) > 0.015:
        failed.append("draws")
    return failed


def test_uniforms_are_uniform_and_independent() -> None:
    rng = SampleRNG(SampleRNG.seeds_for(1234, range(1000)))
    u, v = rng.uniform(128), rng.uniform(128)  # 128,000 numbers each
    assert _randomness_checks(u, v) == []
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0


def test_the_checks_catch_an_unmixed_counter() -> None:
    """The same checks fail a Weyl sequence (the hash's input without the hash): too even
    for chi-square and correlated between neighbours, so the test above can fail."""
    rows = torch.arange(1000, dtype=torch.int64)[:, None] * 128
    cols = torch.arange(128, dtype=torch.int64)[None, :]
    weyl = ((rows + cols) * (G - (1 << 64)) >> 40) & ((1 << 24) - 1)
    u = weyl.float() * 2.0**-24
    assert {"uniform", "positions"} <= set(_randomness_checks(u, u.roll(1, 0)))


def test_masking_rates_match_the_objective() -> None:
    """Every position is chosen equally often (9 of 64 per row, the cap); 85% of the chosen
    become [MASK]; BERT style: 80% [MASK], 10% random, 10% kept."""
    B, L = 4000, 64
    ids = torch.randint(10, 100, (B, L), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(B, L, dtype=torch.long)
    rng = SampleRNG(SampleRNG.seeds_for(5, range(B)))
    chosen = choose_positions(ids, mask, SPECIAL, 0.15, rng)
    assert (chosen.sum(-1) == 9).all()
    per_position = chosen.sum(0).double()  # 562.5 expected each
    assert float(((per_position - 562.5) ** 2 / 562.5).sum()) < 63 + 5 * (2 * 63) ** 0.5
    m = mask_batch(ids, mask, SPECIAL, 0.15, SampleRNG(SampleRNG.seeds_for(5, range(B))))
    share = float((m.input_ids[m.is_masked] == SPECIAL.mask).double().mean())
    assert abs(share - 0.85) < 0.015  # 36,000 chosen: sd 0.002
    bert = mask_batch(ids, mask, SPECIAL, 0.15, SampleRNG(SampleRNG.seeds_for(6, range(B))), "bert")
    got, orig = bert.input_ids[bert.is_masked], ids[bert.is_masked]
    masked, kept = (got == SPECIAL.mask), (got == orig)
    assert abs(float(masked.double().mean()) - 0.8) < 0.015
    assert abs(float(kept.double().mean()) - 0.1 - 0.1 / 90) < 0.015  # a random id may be it
    randoms = got[~masked & ~kept]
    assert randoms.min() >= 0 and randoms.max() < SPECIAL.vocab_size
    assert randoms.unique().numel() > 80  # spread over the vocabulary


class _OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _ops_of_one_micro_batch(B: int) -> list[str]:
    """The tensor ops of one micro-batch's randomness: masking (keys, split, BERT's random
    ids) and the generator's sampling noise."""
    ids = torch.randint(10, 100, (B, 32), generator=torch.Generator().manual_seed(B))
    mask = torch.ones(B, 32, dtype=torch.long)
    rng = SampleRNG(SampleRNG.seeds_for(0, range(B)))
    with _OpCounter() as counter:
        m = mask_batch(ids, mask, SPECIAL, 0.15, rng, style="bert")
        rng.uniform_rows(m.is_masked.sum(-1), int(m.positions.numel()))
    return counter.ops


def test_the_op_count_does_not_grow_with_the_batch() -> None:
    """One kernel per op on a GPU: a per-row loop (a generator per sample, as before) would
    launch ~B times as many; the hash launches the same few ops for 2 rows as for 256."""
    small, large = _ops_of_one_micro_batch(2), _ops_of_one_micro_batch(256)
    assert small == large
    assert len(small) < 160  # measured 138: masking's own ops and ~20 per draw
