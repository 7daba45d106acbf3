"""The pre-training objectives, whole: replaced token detection (RTD) and MLM.

RTD, as in the paper (Clark et al., 2020) and the official code
(``google-research/electra``):

1. choose 15% of the non-special, non-pad positions (at most
   ``max_predictions_per_seq = int((p + 0.005) * L)`` per sequence);
2. replace 85% of them with ``[MASK]`` and keep 15% (no random tokens);
3. the generator predicts the originals there (``L_MLM``, a mean over the
   masked positions), its LM head evaluated only at those positions;
4. a replacement is sampled from the generator's softmax, in fp32 and without
   gradient (by inverse CDF: one uniform number per masked position, where the
   official code's Gumbel-max draws one per vocabulary entry: same
   distribution, a vocabulary's worth fewer random numbers);
5. the discriminator labels every non-pad token replaced/original, where a
   sample equal to the original counts as original (``L_Disc``, a mean BCE
   over non-pad positions);
6. ``loss = gen_weight * L_MLM + disc_weight * L_Disc`` (1 and 50).

The MLM baseline trains the same encoder as BERT (15%, 80/10/10) so the two
objectives can be compared in one harness at equal compute.

All randomness of the objective (position choice, mask/keep split, random
tokens, sampling noise) comes from an injectable ``torch.Generator``, or from a
:class:`SampleRNG`: a counter-based hash of (sample seed, draw, position), computed
for the whole batch in a few integer ops. The training loop uses
the latter, seeded by each block's index in the global data stream: a block
is then masked and corrupted identically whatever batch, rank or
accumulation step it lands in, so a 2-process run reproduces a 1-process run
and a resumed run needs no objective RNG state. Dropout uses the global RNG,
whose state the training loop checkpoints.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from electra.config import ConfigError
from electra.model.config import ElectraConfig
from electra.model.encoder import (
    DisentangledEmbeddings,
    ElectraDiscriminator,
    ElectraEmbeddings,
    ElectraGenerator,
    GeneratorPredictions,
    TiedLMHead,
    init_weights,
)
from electra.pretrain.config import ObjectiveConfig
from electra.pretrain.ngram import NgramSource
from electra.text.special import SpecialIds

_M64 = (1 << 64) - 1


def _i64(x: int) -> int:
    """A 64-bit pattern as the signed int64 torch stores it."""
    x &= _M64
    return x - (1 << 64) if x >> 63 else x


_GOLDEN = _i64(0x9E3779B97F4A7C15)  # SplitMix64's increment
_MIX1, _MIX2 = _i64(0xBF58476D1CE4E5B9), _i64(0x94D049BB133111EB)


def _shr(z: Tensor, k: int) -> Tensor:
    """Logical right shift of int64 bit patterns (torch's ``>>`` is arithmetic)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def splitmix64(z: Tensor) -> Tensor:
    """SplitMix64's finaliser over an int64 tensor, bit for bit (products wrap mod 2**64).

    Integer arithmetic only, so every device computes the same bits.
    """
    z = (z ^ _shr(z, 30)) * _MIX1
    z = (z ^ _shr(z, 27)) * _MIX2
    return z ^ _shr(z, 31)


class SampleRNG:
    """Per-sample randomness from a counter-based hash, for the whole batch at once.

    Sample ``b`` owns the SplitMix64 stream started at ``splitmix64(seeds[b])``;
    the number at counter ``k`` is ``splitmix64(start + (k + 1) * golden)``, and
    each draw of the objective (position keys, mask/keep split, random tokens,
    sampling noise: always in that order) reads counters ``draw * 2**32 + j`` for
    column ``j``. A few vectorised integer ops per draw, whatever the batch
    size (no generator per sample, no kernel per row), and a sample's numbers
    depend only on its seed, the draw and the column: the same whichever rank,
    batch or accumulation step it lands in, and on every device (integer
    arithmetic; uniforms are 24-bit integers times 2**-24, exact in fp32).

    ``picks`` optionally gives, per sample, the number of positions the
    objective will mask, computed on the host from the CPU batch with
    :func:`picks_per_row`, for callers of :meth:`uniform_rows` without the
    device's counts.
    """

    def __init__(
        self,
        seeds: Sequence[int],
        device: torch.device | str = "cpu",
        picks: Sequence[int] | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.picks = None if picks is None else [int(n) for n in picks]
        host = torch.tensor([_i64(int(s)) for s in seeds], dtype=torch.int64)
        self.starts = splitmix64(host).to(self.device, non_blocking=True)  # (B,)
        self.draws = 0

    def __len__(self) -> int:
        return self.starts.shape[0]

    @staticmethod
    def seeds_for(base_seed: int, stream_indices: Sequence[int]) -> list[int]:
        """Seeds for samples at these positions of the global data stream."""
        return [
            (base_seed * 0x9E3779B97F4A7C15 + int(i) * 0xBF58476D1CE4E5B9 + 1)
            for i in stream_indices
        ]

    def _bits(self, rows: Tensor, cols: Tensor) -> Tensor:
        """64 random bits for each (sample ``rows``, column ``cols``) of the next draw."""
        draw, self.draws = self.draws, self.draws + 1
        counter = cols + (draw << 32) + 1
        return splitmix64(self.starts[rows] + counter * _GOLDEN)

    def _grid(self, width: int) -> Tensor:
        """(B, width) random bits, row b from sample b's stream."""
        cols = torch.arange(width, device=self.device, dtype=torch.int64)
        rows = torch.arange(len(self), device=self.device)
        return self._bits(rows[:, None], cols[None, :])

    def uniform(self, width: int) -> Tensor:
        """(B, width) fp32 uniforms in [0, 1), multiples of 2**-24."""
        return _shr(self._grid(width), 40).float() * (2.0**-24)

    def keys(self, width: int) -> Tensor:
        """(B, width) non-negative int64 sort keys (63 random bits)."""
        return _shr(self._grid(width), 1)

    def integers(self, high: int, width: int) -> Tensor:
        """(B, width) ints in [0, high): 53 random bits modulo ``high`` (bias < high / 2**53)."""
        return _shr(self._grid(width), 11) % high

    def uniform_rows(self, counts: Tensor | None, n: int) -> Tensor:
        """(n,) fp32 uniforms: ``counts[b]`` consecutive rows from sample b's stream
        (row k of sample b reads column k). ``output_size`` keeps it free of a sync."""
        if counts is None:
            if self.picks is None:
                raise ValueError("per-sample randomness needs the number of rows per sample")
            counts = torch.tensor(self.picks, dtype=torch.int64)
        counts = counts.to(self.device, torch.int64)
        if counts.shape[0] != len(self):
            raise ValueError(f"SampleRNG has {len(self)} seeds for {counts.shape[0]} counts")
        idx = torch.arange(len(self), device=self.device)
        rows = torch.repeat_interleave(idx, counts, output_size=n)
        first = torch.cumsum(counts, 0) - counts
        cols = torch.arange(n, device=self.device) - first[rows]
        return _shr(self._bits(rows, cols), 40).float() * (2.0**-24)


Randomness = Union[torch.Generator, SampleRNG, None]  # noqa: UP007 (runtime alias)


def _uniform(rng: Randomness, shape: tuple[int, int], device: torch.device) -> Tensor:
    if isinstance(rng, SampleRNG):
        _check_rows(rng, shape[0])
        return rng.uniform(shape[1])
    return torch.rand(shape, generator=rng, device=device)


def _sort_keys(rng: Randomness, shape: tuple[int, int], device: torch.device) -> Tensor:
    """Random sort keys: int64 hash bits with a SampleRNG (no ties in practice), else fp32."""
    if isinstance(rng, SampleRNG):
        _check_rows(rng, shape[0])
        return rng.keys(shape[1])
    return torch.rand(shape, generator=rng, device=device)


def _randint(rng: Randomness, high: int, shape: tuple[int, int], device: torch.device) -> Tensor:
    if isinstance(rng, SampleRNG):
        _check_rows(rng, shape[0])
        return rng.integers(high, shape[1])
    return torch.randint(0, high, shape, generator=rng, device=device)


def _uniform_rows(rng: Randomness, counts: Tensor | None, width: int, n: int, device) -> Tensor:
    """(n, width) uniform noise; with a SampleRNG, ``counts[b]`` rows from sample b."""
    if isinstance(rng, SampleRNG):
        if width != 1:
            raise ValueError("per-sample noise is drawn one number per row")
        return rng.uniform_rows(counts, n)[:, None]
    return torch.rand(n, width, generator=rng, device=device)


def _check_rows(rng: SampleRNG, rows: int) -> None:
    if len(rng) != rows:
        raise ValueError(f"SampleRNG has {len(rng)} seeds for a batch of {rows}")


def max_predictions_per_seq(mask_prob: float, seq_len: int) -> int:
    """The official cap on masked positions per sequence."""
    return int((mask_prob + 0.005) * seq_len)


@dataclass
class Masked:
    """Result of masking a batch."""

    input_ids: Tensor  # (B, L) ids with the chosen positions corrupted
    is_masked: Tensor  # (B, L) bool, the chosen positions
    positions: Tensor  # (N,) flat indices of the chosen positions into B*L
    labels: Tensor  # (N,) original ids there


def choose_positions(
    input_ids: Tensor,
    attention_mask: Tensor,
    special: SpecialIds,
    mask_prob: float,
    rng: Randomness,
) -> Tensor:
    """(B, L) bool mask of positions to predict.

    Per sequence, ``round(mask_prob * candidates)`` positions (at least one
    when there is a candidate, at most the official cap) are drawn uniformly
    without replacement among the non-special, non-pad tokens.
    """
    B, L = input_ids.shape
    candidate = _candidates(input_ids, attention_mask, special)
    n_pick = _n_pick(candidate, mask_prob)
    # Random keys; non-candidates sort last. The k smallest keys are a uniform
    # sample without replacement.
    keys = _sort_keys(rng, (B, L), input_ids.device)
    last = torch.iinfo(torch.int64).max if keys.dtype == torch.int64 else 2.0
    keys = keys.masked_fill(~candidate, last)
    order = keys.argsort(dim=-1, stable=True)  # ties (none in practice) broken by position
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(L, device=input_ids.device).expand(B, L))
    return (rank < n_pick[:, None]) & candidate


def _candidates(input_ids: Tensor, attention_mask: Tensor, special: SpecialIds) -> Tensor:
    """(B, L) bool: real tokens that are not special (compared with Python ints: no
    host-to-device copy of the special ids)."""
    candidate = attention_mask.bool()
    for token in special.never_masked:
        candidate = candidate & (input_ids != token)
    return candidate


def _n_pick(candidate: Tensor, mask_prob: float) -> Tensor:
    """(B,) positions to mask per sequence: the rounded share, at least one, at most the cap."""
    n_cand = candidate.sum(-1)
    cap = max_predictions_per_seq(mask_prob, candidate.shape[1])
    n_pick = torch.round(n_cand.float() * mask_prob).long().clamp(min=1, max=max(cap, 1))
    return torch.minimum(n_pick, n_cand)


def picks_per_row(
    input_ids: Tensor, attention_mask: Tensor, special: SpecialIds, mask_prob: float
) -> list[int]:
    """How many positions :func:`choose_positions` masks in each row, for CPU tensors.

    The training loop computes it from the batch before it goes to the GPU
    (see :class:`SampleRNG`); same function, so always the same numbers.
    """
    return _n_pick(_candidates(input_ids, attention_mask, special), mask_prob).tolist()


def mask_batch(
    input_ids: Tensor,
    attention_mask: Tensor,
    special: SpecialIds,
    mask_prob: float,
    rng: Randomness,
    style: Literal["electra", "bert"] = "electra",
    mask_token_prob: float = 0.85,
) -> Masked:
    """Choose positions and corrupt them.

    ``electra``: ``mask_token_prob`` of them become [MASK], the rest keep their
    token. ``bert``: 80% [MASK], 10% a random token, 10% kept.
    """
    is_masked = choose_positions(input_ids, attention_mask, special, mask_prob, rng)
    B, L = input_ids.shape
    u = _uniform(rng, (B, L), input_ids.device)
    # torch.where rather than boolean-mask assignment, which syncs (nonzero) on a GPU.
    if style == "electra":
        corrupted = torch.where(is_masked & (u < mask_token_prob), special.mask, input_ids)
    else:
        corrupted = torch.where(is_masked & (u < 0.8), special.mask, input_ids)
        random_pos = is_masked & (u >= 0.8) & (u < 0.9)
        random_ids = _randint(rng, special.vocab_size, (B, L), input_ids.device)
        corrupted = torch.where(random_pos, random_ids, corrupted)
    positions = flat_positions(is_masked, _known_count(rng))
    labels = input_ids.reshape(-1).index_select(0, positions)
    return Masked(corrupted, is_masked, positions, labels)


def _known_count(rng: Randomness) -> int | None:
    """How many positions the batch masks, when the host already knows it (a
    :class:`SampleRNG` given ``picks``, as the trainer gives it): no need to ask the device."""
    if isinstance(rng, SampleRNG) and rng.picks is not None:
        return sum(rng.picks)
    return None


def flat_positions(is_masked: Tensor, count: int | None = None) -> Tensor:
    """(N,) ascending flat indices of the True entries of (B, L) ``is_masked``.

    ``nonzero`` must copy N to the host before it can allocate its output: a sync per
    micro-batch on a GPU. With N known on the host (``count``) the output's size is known
    too: ``nonzero_static``, or where a device lacks it (CUDA before torch 2.6) a sort of
    the indices with the unmasked ones pushed last; the same indices in the same order.
    """
    flat = is_masked.reshape(-1)
    if count is None:
        return flat.nonzero().squeeze(-1)  # N varies per batch: a sync
    if flat.device.type not in _NO_NONZERO_STATIC:
        try:
            return torch.nonzero_static(flat, size=count).squeeze(-1)
        except (NotImplementedError, RuntimeError):  # no kernel: asked once per device type
            _NO_NONZERO_STATIC.add(flat.device.type)
    index = torch.arange(flat.numel(), device=flat.device)
    return torch.where(flat, index, flat.numel()).sort().values[:count]


_NO_NONZERO_STATIC: set[str] = set()
"""Device types found without a ``nonzero_static`` kernel: not tried (and caught) again."""


SAMPLE_CHUNK = 256
"""Ids per chunk in :func:`sample_from_weights`' two-level search."""


def sample_from_weights(weights: Tensor, u: Tensor) -> Tensor:
    """One id per row of (N, V) non-negative fp32 ``weights`` (unnormalised
    probabilities), by inverse CDF with ``u`` (N,) uniform in [0, 1).

    The first id whose cumulative weight exceeds ``u`` times the row's total:
    exactly the categorical distribution, from one random number per row (the
    Gumbel-max trick needs one per vocabulary entry, ~5% of a CPU step). The
    search is two-level: a chunk of :data:`SAMPLE_CHUNK` ids by the cumulative sums
    of the chunks' totals, then an id inside it; a cumulative sum over the whole
    row is a sequential scan, 8x slower on CPU than the chunk totals (a vectorised
    reduction) at a 30,522-id vocabulary. An id of zero weight is never chosen:
    the point inside the chosen chunk (of positive total) is kept below its last
    running sum. (Exact up to fp32 rounding of the running sums: an id whose weight
    is below their rounding error, ~1e-7 of the total mass, can be skipped.)
    """
    n, v = weights.shape
    chunk = SAMPLE_CHUNK
    full = v // chunk
    totals = weights[:, : full * chunk].reshape(n, full, chunk).sum(dim=-1)  # (N, C)
    if v > full * chunk:  # the last, shorter chunk
        totals = torch.cat([totals, weights[:, full * chunk :].sum(dim=-1, keepdim=True)], 1)
    cdf = totals.cumsum(dim=-1)  # (N, C)
    point = (u * cdf[:, -1]).unsqueeze(-1)  # (N, 1), below the row's total
    k = torch.searchsorted(cdf, point, right=True).clamp_(max=cdf.shape[-1] - 1)  # (N, 1)
    before = cdf.gather(1, (k - 1).clamp(min=0)) * (k > 0)  # mass of the chunks before
    ids = k * chunk + torch.arange(chunk, device=weights.device)  # (N, chunk)
    window = weights.gather(1, ids.clamp(max=v - 1)) * (ids < v)
    running = window.cumsum(dim=-1)  # (N, chunk)
    last = running[:, -1:]
    inside = torch.minimum(point - before, torch.nextafter(last, torch.zeros_like(last)))
    return (k * chunk + torch.searchsorted(running, inside, right=True)).squeeze(-1)


class _FusedMLMLoss(torch.autograd.Function):
    """Mean cross-entropy over (N, V) logits, and a sample from the same softmax pass.

    One fp32 pass computes the softmax; its ``(softmax - onehot) / N`` is the
    gradient, kept for backward, so no log-softmax backward and no (N, V)
    zero-fill is needed. It is kept in bf16 under bf16 autocast (fp32's
    exponent range, half the memory) but in fp32 under fp16: most entries are
    below fp16's smallest subnormal (6e-8) before the loss scale multiplies
    them, and would be flushed to zero; backward scales them first, then casts.
    The sample reuses the exponentials (:func:`sample_from_weights`); ``noise``
    is (N, 1) uniform in [0, 1).
    """

    @staticmethod
    def forward(ctx, logits: Tensor, labels: Tensor, noise: Tensor):  # type: ignore[override]
        n = logits.shape[0]
        grad = torch.empty(logits.shape, dtype=saved_grad_dtype(logits.dtype), device=logits.device)
        per_row = torch.empty(n, dtype=torch.float32, device=logits.device)
        sampled = torch.empty(n, dtype=torch.long, device=logits.device)
        argmax = torch.empty(n, dtype=torch.long, device=logits.device)
        step = FUSED_ROWS if logits.device.type == "cpu" else max(n, 1)
        for start in range(0, n, step):
            rows = slice(start, start + step)
            per_row[rows], sampled[rows], argmax[rows] = _fused_rows(
                logits[rows], labels[rows], noise[rows, 0], grad[rows], n
            )
        ctx.logits_dtype = logits.dtype
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(sampled, argmax)
        return per_row.mean(), sampled, argmax

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _s: Tensor, _a: Tensor):  # type: ignore[override]
        (grad,) = ctx.saved_tensors
        grad = grad.mul_(grad_loss.to(grad.dtype))  # backward runs once: in place
        return grad.to(ctx.logits_dtype), None, None


FUSED_ROWS = 16  # measured: 16 and 64 rows 1.6x, 8 rows 1.2x, 4 rows 1.0x (Zen 5, one thread)
"""Rows of the generator's (N, V) logits per pass of :class:`_FusedMLMLoss` on a CPU: their
fp32 copy (1 MB at a 16,000-id vocabulary) stays in a core's cache through the max, exp,
sum, sample and gradient passes instead of streaming (N, V) through memory five times. On a
GPU all rows go at once (every pass is one kernel launch)."""


def _fused_rows(
    logits: Tensor, labels: Tensor, noise: Tensor, grad: Tensor, n: int
) -> tuple[Tensor, Tensor, Tensor]:
    """One slice of rows of :class:`_FusedMLMLoss`: each row's loss term, its sample and its
    argmax; ``grad`` (the slice's rows of the saved gradient) is filled with
    ``(softmax - onehot) / n``. Every operation is row by row, so the result does not
    depend on how the rows are sliced."""
    x = logits.float()
    if x.data_ptr() == logits.data_ptr():
        x = x.clone()
    rows = torch.arange(x.shape[0], device=x.device)
    target = x[rows, labels]
    top, argmax = x.max(dim=-1)
    x.sub_(top[:, None]).exp_()  # unnormalised probabilities, max 1
    total = x.sum(dim=-1)
    sampled = sample_from_weights(x, noise)
    x.div_(total[:, None])
    x[rows, labels] -= 1.0
    grad.copy_(x.div_(max(n, 1)))
    return total.log() + top - target, sampled, argmax


def saved_grad_dtype(logits_dtype: torch.dtype) -> torch.dtype:
    """The dtype the fused MLM loss keeps its gradient in: never fp16 (underflow)."""
    return torch.float32 if logits_dtype == torch.float16 else logits_dtype


def mlm_loss_and_sample(
    logits: Tensor, labels: Tensor, rng: Randomness, rows_per_sample: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """(mean CE loss, a sample from the softmax, argmax) of (N, V) generator logits at temperature 1."""
    if logits.shape[0] == 0:
        empty = labels.new_empty(0)
        return logits.sum() * 0.0, empty, empty
    noise = _uniform_rows(rng, rows_per_sample, 1, logits.shape[0], logits.device)
    return _FusedMLMLoss.apply(logits, labels, noise)


@torch.no_grad()
def sample_softmax(
    logits: Tensor,
    rng: Randomness,
    temperature: float = 1.0,
    rows_per_sample: Tensor | None = None,
) -> Tensor:
    """Sample one id per row of (N, V) logits from softmax(logits / temperature), in fp32.

    The logits are upcast whatever the autocast dtype (an fp16 softmax of
    large logits overflows). ``rows_per_sample`` (B,) says how many
    consecutive rows belong to each sample (needed with a :class:`SampleRNG`).
    """
    x = logits.detach().float() / temperature
    weights = (x - x.max(dim=-1, keepdim=True).values).exp_()
    u = _uniform_rows(rng, rows_per_sample, 1, x.shape[0], x.device)
    return sample_from_weights(weights, u[:, 0])


@dataclass
class PretrainOutput:
    """Loss and diagnostics of one forward pass (scalars as 0-d tensors)."""

    loss: Tensor
    mlm_loss: Tensor | None = None  # the generator's (None for rtd-ngram: no generator)
    disc_loss: Tensor | None = None
    gen_accuracy: Tensor | None = None
    disc_accuracy: Tensor | None = None
    replaced_precision: Tensor | None = None
    replaced_recall: Tensor | None = None
    disc_mlm_loss: Tensor | None = None
    mws_loss: Tensor | None = None  # multi-word selection (objective.mws_weight)
    # For visualisation: (B, L) corrupted ids, replaced labels, discriminator logits.
    corrupted_ids: Tensor | None = None
    replaced: Tensor | None = None
    disc_logits: Tensor | None = None

    def metrics(self) -> tuple[list[str], Tensor]:
        """Names and a 1-d fp32 tensor of the scalar metrics present (no host sync)."""
        present = [(n, getattr(self, n)) for n in METRIC_NAMES if getattr(self, n) is not None]
        values = torch.stack([v.detach().float() for _, v in present])
        return [n for n, _ in present], values

    def scalars(self) -> dict[str, float]:
        """The scalar metrics as Python floats (one host sync)."""
        names, values = self.metrics()
        return dict(zip(names, values.tolist(), strict=True))


METRIC_NAMES = (
    "loss",
    "mlm_loss",
    "disc_loss",
    "gen_accuracy",
    "disc_accuracy",
    "replaced_precision",
    "replaced_recall",
    "disc_mlm_loss",
    "mws_loss",
)


FROZEN_KEY = "frozen_generator"
"""The model-state key saying a run's generator was frozen (``objective.generator_freeze_at``)."""


class ElectraForPretraining(nn.Module):
    """Generator + discriminator (RTD) or a single MLM encoder (BERT baseline).

    For RTD the generator is built from the discriminator config scaled by
    ``generator_size`` (or from ``generator_cfg``, e.g. a released generator's
    shape) and shares the discriminator's embedding module (word, position and
    token-type tables and their LayerNorm: the same ``Parameter`` objects). With
    ``objective.embedding_sharing = "gdes"`` the generator owns that module instead
    and the discriminator reads its tables through
    :class:`~electra.model.encoder.DisentangledEmbeddings` (stop-gradient plus its own
    delta). Either way the weights are drawn in the same order, so a gdes model
    starts with exactly the tied model's outputs. For MLM there is only
    ``generator``, at the full size.
    """

    def __init__(
        self,
        config: ElectraConfig,
        objective: ObjectiveConfig,
        special: SpecialIds,
        generator_cfg: ElectraConfig | None = None,
    ) -> None:
        super().__init__()
        if special.vocab_size != config.vocab_size:
            raise ConfigError(
                f"vocabulary has {special.vocab_size} tokens but model.vocab_size is "
                f"{config.vocab_size}"
            )
        self.config = config
        self.objective = objective
        self.special = special
        if objective.kind.has_discriminator:
            self.discriminator = ElectraDiscriminator(config)
            shared = self.discriminator.electra.embeddings
            if objective.embedding_sharing == "gdes":  # the generator becomes the owner
                self.discriminator.electra.embeddings = DisentangledEmbeddings(shared, config)
            self.generator = None  # rtd-ngram: replacements from counts (attach_replacements)
            if objective.kind.trains_generator:
                gen_cfg = generator_cfg or objective.generator_shape(config)
                self.generator = ElectraGenerator(gen_cfg, embeddings=shared)
                if objective.generator_shared_layers:
                    share_bottom_layers(
                        self.generator, self.discriminator, objective.generator_shared_layers
                    )
            if objective.disc_prior_bias:
                p = objective.mask_prob
                with torch.no_grad():
                    self.discriminator.discriminator_predictions.dense_prediction.bias.fill_(
                        math.log(p / (1 - p))
                    )
            if objective.disc_mlm_weight > 0:
                # Pre-training only: not part of the discriminator, so never exported.
                self.disc_mlm_predictions = GeneratorPredictions(config)
                init_weights(self.disc_mlm_predictions, config.initializer_range)
                disc_embeddings = self.discriminator.electra.embeddings
                self.disc_mlm_head = TiedLMHead(
                    disc_embeddings
                    if isinstance(disc_embeddings, DisentangledEmbeddings)
                    else disc_embeddings.word_embeddings
                )
            if objective.mws_weight > 0:  # pre-training only, never exported
                self.mws_predictions = GeneratorPredictions(config)
                init_weights(self.mws_predictions, config.initializer_range)
        else:
            self.discriminator = None
            self.generator = ElectraGenerator(config)
        self.replacements: NgramSource | None = None  # not a module: never in a checkpoint
        # RTD's sampling temperature; the trainer moves it after a freeze (frozen_temperature).
        self.sampling_temperature = objective.temperature
        if objective.generator_freeze_at > 0:
            # In the checkpoint, so a resumed run (and an export) rebuilds the frozen
            # generator before loading: see :func:`match_frozen_state`.
            self.register_buffer(FROZEN_KEY, torch.tensor(False))

    def attach_replacements(self, source: NgramSource) -> None:
        """rtd-ngram: the counted source its replacements are sampled from (the trainer
        builds or reloads it: :func:`electra.pretrain.ngram.ngram_source`)."""
        if self.objective.kind.replacements != "ngram":
            raise ValueError(f"objective {self.objective.objective!r} samples from its generator")
        self.replacements = source

    @property
    def generator_frozen(self) -> bool:
        """Whether the generator has stopped training (``objective.generator_freeze_at``)."""
        flag = getattr(self, FROZEN_KEY, None)
        return bool(flag) if flag is not None else False

    def freeze_generator(self) -> list[nn.Parameter]:
        """Stop training the generator; returns the parameters that no longer train.

        Under tied sharing the generator gets a frozen copy of the embedding module it
        was trained with (the discriminator goes on training the original, which would
        otherwise move the frozen generator's inputs and output layer); under gdes it
        owns the tables and only its own loss trained them, so they freeze with it and
        the discriminator goes on through its delta. The generator runs in eval mode
        (no dropout) from now on. Drop the returned parameters from the optimizer
        (:func:`drop_from_optimizer`).
        """
        if self.generator is None or self.discriminator is None:
            raise ValueError("only RTD's generator can be frozen")
        if getattr(self, FROZEN_KEY, None) is None:
            raise ValueError("objective.generator_freeze_at is 0: this model never freezes")
        if self.generator_frozen:
            return []
        if self.objective.embedding_sharing == "tied":
            own = copy.deepcopy(self.generator.electra.embeddings)
            self.generator.electra.embeddings = own
            self.generator.generator_lm_head.word_embeddings = [own.word_embeddings]
        frozen = [p for p in self.generator.parameters() if p.requires_grad]
        for p in self.generator.parameters():
            p.requires_grad_(False)
        getattr(self, FROZEN_KEY).fill_(True)
        self.generator.eval()
        return frozen

    def train(self, mode: bool = True) -> ElectraForPretraining:
        """``nn.Module.train``, except that a frozen generator stays in eval mode."""
        super().train(mode)
        if self.generator_frozen:
            self.generator.eval()
        return self

    @property
    def generator_config(self) -> ElectraConfig | None:
        """The generator's shape (None for rtd-ngram, which has none)."""
        return None if self.generator is None else self.generator.config

    @property
    def shared_embeddings(self) -> ElectraEmbeddings:
        """The embedding module the generator shares (RTD): the discriminator's when tied,
        the generator's own under gdes; the MLM encoder's for MLM; the discriminator's
        for rtd-ngram (nothing shares it)."""
        if self.generator is None:
            return self.discriminator.electra.embeddings
        return self.generator.electra.embeddings

    def encoder_to_keep(self) -> nn.Module:
        """The model users fine-tune: the discriminator (RTD) or the MLM encoder."""
        return self.discriminator if self.discriminator is not None else self.generator

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        rng: Randomness = None,
        keep_tensors: bool = False,
        full: bool | None = None,
    ) -> PretrainOutput:
        """Loss and metrics of a batch; ``full`` says, when the caller knows it from the
        host copy of the batch, whether every attention_mask entry is 1 (else it is
        read back from the device: a sync)."""
        if attention_mask is None:
            attention_mask = input_ids != self.special.pad
        if full is None:
            full = bool(attention_mask.all())
        # SDPA runs its fast kernel when there is no mask; full blocks need none.
        attn = None if full else attention_mask
        if not self.objective.kind.has_discriminator:
            return self._mlm(input_ids, attention_mask, attn, token_type_ids, rng)
        if self.generator is None:
            return self._rtd_ngram(
                input_ids, attention_mask, attn, token_type_ids, rng, keep_tensors
            )
        return self._rtd(input_ids, attention_mask, attn, token_type_ids, rng, keep_tensors)

    def _mlm(self, input_ids, attention_mask, attn, token_type_ids, rng) -> PretrainOutput:
        obj = self.objective
        m = mask_batch(
            input_ids, attention_mask, self.special, obj.mask_prob, rng, style=obj.kind.masking
        )
        logits = self.generator(m.input_ids, attn, token_type_ids, positions=m.positions)
        mlm_loss = F.cross_entropy(logits.float(), m.labels)
        with torch.no_grad():
            gen_acc = (logits.argmax(-1) == m.labels).float().mean()
        return PretrainOutput(loss=mlm_loss, mlm_loss=mlm_loss, gen_accuracy=gen_acc)

    def _mask(self, input_ids: Tensor, attention_mask: Tensor, rng: Randomness) -> Masked:
        """The objective's masking of a batch (positions, [MASK]/kept/random, labels)."""
        obj = self.objective
        return mask_batch(
            input_ids,
            attention_mask,
            self.special,
            obj.mask_prob,
            rng,
            style=obj.kind.masking,
            mask_token_prob=obj.mask_token_prob,
        )

    def _rtd(
        self, input_ids, attention_mask, attn, token_type_ids, rng, keep_tensors
    ) -> PretrainOutput:
        obj = self.objective
        m = self._mask(input_ids, attention_mask, rng)
        if self.generator_frozen:  # forward only: no loss term, nothing to differentiate
            with torch.no_grad():
                gen_logits = self.generator(m.input_ids, attn, token_type_ids, m.positions)
                mlm_loss, sampled, gen_pred = self._sample_replacements(gen_logits, m, rng)
            gen_term = None
        else:
            gen_logits = self.generator(m.input_ids, attn, token_type_ids, positions=m.positions)
            mlm_loss, sampled, gen_pred = self._sample_replacements(gen_logits, m, rng)
            gen_term = obj.gen_weight * mlm_loss
        negatives = None
        if obj.mws_weight > 0:
            rows = m.is_masked.sum(-1)
            negatives = draw_negatives(gen_logits, m.labels, obj.mws_candidates - 1, rng, rows)
        out = self._detect(
            input_ids, attention_mask, attn, token_type_ids, m, sampled, gen_term, negatives
        )
        out.mlm_loss = mlm_loss
        with torch.no_grad():
            out.gen_accuracy = (gen_pred == m.labels).float().mean()
        if not keep_tensors:
            out.corrupted_ids = out.replaced = out.disc_logits = None
        return out

    def _rtd_ngram(
        self, input_ids, attention_mask, attn, token_type_ids, rng, keep_tensors
    ) -> PretrainOutput:
        """RTD with replacements sampled from counts (:mod:`electra.pretrain.ngram`): the
        same positions and the same per-sample noise as RTD's generator sample, no
        generator; the loss is the discriminator's alone."""
        if self.replacements is None:
            raise RuntimeError(
                "rtd-ngram: no replacement source attached (the trainer builds it from the "
                "blocks: ElectraForPretraining.attach_replacements)"
            )
        m = self._mask(input_ids, attention_mask, rng)
        rows = m.is_masked.sum(-1)
        u = _uniform_rows(rng, rows, 1, m.positions.shape[0], input_ids.device)[:, 0]
        sampled = self.replacements.replacements(input_ids, m.positions, u)
        out = self._detect(input_ids, attention_mask, attn, token_type_ids, m, sampled)
        if not keep_tensors:
            out.corrupted_ids = out.replaced = out.disc_logits = None
        return out

    def _detect(
        self,
        input_ids,
        attention_mask,
        attn,
        token_type_ids,
        m: Masked,
        sampled: Tensor,
        gen_term: Tensor | None = None,
        negatives: Tensor | None = None,
    ) -> PretrainOutput:
        """The discriminator's part of RTD on ``sampled`` replacements at ``m``'s positions:
        ``loss = gen_term + disc_weight * L_Disc`` (+ the corrective LM loss, + the
        multi-word selection loss among the original and ``negatives``), with metrics."""
        obj = self.objective
        corrupted = input_ids.clone()
        corrupted.view(-1).index_copy_(0, m.positions, sampled)
        replaced = corrupted != input_ids  # a sample equal to the original is original
        disc_logits, disc_mlm_loss, mws_loss = self._discriminate(
            corrupted, attn, token_type_ids, m, negatives
        )
        weights = attention_mask.float()
        per_token = F.binary_cross_entropy_with_logits(
            disc_logits.float(), replaced.float(), reduction="none"
        )
        n_tokens = weights.sum().clamp(min=1.0)
        disc_loss = (per_token * weights).sum() / n_tokens
        loss = obj.disc_weight * disc_loss
        if gen_term is not None:
            loss = gen_term + loss
        if disc_mlm_loss is not None:
            loss = loss + obj.disc_mlm_weight * disc_mlm_loss
        if mws_loss is not None:
            loss = loss + obj.mws_weight * mws_loss
        with torch.no_grad():
            disc_acc, precision, recall = detection_metrics(disc_logits, replaced, attention_mask)
        return PretrainOutput(
            loss=loss,
            disc_loss=disc_loss,
            disc_accuracy=disc_acc,
            replaced_precision=precision,
            replaced_recall=recall,
            disc_mlm_loss=disc_mlm_loss,
            mws_loss=mws_loss,
            corrupted_ids=corrupted,
            replaced=replaced,
            disc_logits=disc_logits,
        )

    def _sample_replacements(
        self, gen_logits: Tensor, m: Masked, rng: Randomness
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The generator's MLM loss, one sampled token per masked position, and its argmax.

        Sampling is outside the graph: the generator learns only from L_MLM.
        """
        rows = m.is_masked.sum(-1)
        temperature = self.sampling_temperature
        if temperature == 1.0 and not self.generator_frozen:
            return mlm_loss_and_sample(gen_logits, m.labels, rng, rows)
        mlm_loss = F.cross_entropy(gen_logits.float(), m.labels)  # mean over masked
        sampled = sample_softmax(gen_logits, rng, temperature, rows)
        return mlm_loss, sampled, gen_logits.detach().argmax(-1)

    def _discriminate(
        self,
        corrupted: Tensor,
        attn: Tensor | None,
        token_type_ids: Tensor | None,
        m: Masked,
        negatives: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """The discriminator's logits ``(B, L)`` on the corrupted batch, and at the masked
        positions its corrective LM loss (with that head) and its multi-word selection
        loss (given ``negatives``, (N, K-1) ids)."""
        if not hasattr(self, "disc_mlm_head") and negatives is None:
            return self.discriminator(corrupted, attn, token_type_ids), None, None
        h = self.discriminator.electra(corrupted, attn, token_type_ids)  # (B, L, H)
        disc_logits = self.discriminator.discriminator_predictions(h)  # (B, L)
        at = h.reshape(-1, h.shape[-1]).index_select(0, m.positions)  # (N, H)
        lm_loss = mws_loss = None
        if hasattr(self, "disc_mlm_head"):
            lm_logits = self.disc_mlm_head(self.disc_mlm_predictions(at))
            lm_loss = F.cross_entropy(lm_logits.float(), m.labels)
        if negatives is not None:
            table = self.discriminator.electra.embeddings.word_embeddings.weight  # (V, E)
            mws_loss = selection_loss(self.mws_predictions(at), table, m.labels, negatives)
        return disc_logits, lm_loss, mws_loss


@torch.no_grad()
def draw_negatives(
    logits: Tensor,
    labels: Tensor,
    k: int,
    rng: Randomness,
    rows_per_sample: Tensor | None = None,
) -> Tensor:
    """(N, k) ids drawn from softmax(``logits``) (N, V) with each row's original
    (``labels``) removed: the other candidates of multi-word selection (TEAMS). A row
    whose mass is all on its original draws uniformly from the rest of the vocabulary."""
    x = logits.detach().float()
    weights = (x - x.max(dim=-1, keepdim=True).values).exp_()
    weights.scatter_(1, labels[:, None], 0.0)
    empty = weights.sum(-1, keepdim=True) <= 0
    if bool(empty.any()):
        rest = torch.ones_like(weights).scatter_(1, labels[:, None], 0.0)
        weights = torch.where(empty, rest, weights)
    draws = []
    for _ in range(k):
        u = _uniform_rows(rng, rows_per_sample, 1, x.shape[0], x.device)[:, 0]
        draws.append(sample_from_weights(weights, u))
    return torch.stack(draws, dim=1) if draws else labels.new_empty(labels.shape[0], 0)


def selection_loss(queries: Tensor, table: Tensor, labels: Tensor, negatives: Tensor) -> Tensor:
    """Multi-word selection: cross-entropy of picking the original among the candidates
    ``[labels, negatives]`` (N, 1 + K-1), each scored by its token vector's dot product
    with the position's query (N, E). The original is candidate 0; the scores do not
    depend on the order, so that says nothing to the model."""
    if labels.shape[0] == 0:  # no position chosen in the batch
        return queries.sum() * 0.0
    candidates = torch.cat([labels[:, None], negatives], dim=1)  # (N, K)
    vectors = table.index_select(0, candidates.reshape(-1)).view(*candidates.shape, -1)
    scores = torch.einsum("ne,nke->nk", queries.float(), vectors.float())  # (N, K)
    return F.cross_entropy(scores, torch.zeros_like(labels))


def share_bottom_layers(
    generator: ElectraGenerator, discriminator: ElectraDiscriminator, n: int
) -> None:
    """TEAMS' partial layer sharing: ``generator`` runs ``discriminator``'s embedding
    projection (and local convolution) and its bottom ``n`` layers, the same modules, so
    both losses train them. Each model still runs them on its own input (the masked and
    the corrupted tokens), so the layers' cost is counted for both."""
    gen, disc = generator.electra, discriminator.electra
    if gen.config.hidden_size != disc.config.hidden_size or n > len(gen.encoder.layer):
        raise ConfigError(
            f"a generator of {len(gen.encoder.layer)} layers of width {gen.config.hidden_size} "
            f"cannot share {n} layers of a discriminator of width {disc.config.hidden_size}"
        )
    for name in ("embeddings_project", "local_conv"):
        if hasattr(disc, name):
            setattr(gen, name, getattr(disc, name))
    for i in range(n):
        gen.encoder.layer[i] = disc.encoder.layer[i]


def detection_metrics(
    disc_logits: Tensor, replaced: Tensor, attention_mask: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Accuracy over real tokens, and precision and recall of "replaced" (logit > 0)."""
    real = attention_mask.bool()
    pred = disc_logits > 0
    n_tokens = real.sum().clamp(min=1)
    accuracy = ((pred == replaced) & real).sum() / n_tokens
    tp = (pred & replaced & real).sum().float()
    precision = tp / (pred & real).sum().clamp(min=1)
    recall = tp / (replaced & real).sum().clamp(min=1)
    return accuracy, precision, recall


def match_frozen_state(model: ElectraForPretraining, state: dict[str, Tensor]) -> None:
    """Freeze ``model``'s generator where the checkpoint ``state`` was saved frozen, so that
    the state's keys (the frozen copy of the tables) and the model's match before loading."""
    flag = state.get(FROZEN_KEY)
    if flag is not None and bool(flag) and not model.generator_frozen:
        model.freeze_generator()


def drop_from_optimizer(opt: torch.optim.Optimizer, params: Sequence[nn.Parameter]) -> None:
    """Take ``params`` (and their moments) out of ``opt``: a frozen generator's parameters,
    so that the optimizer holds exactly the parameters that train, as one built after a
    resume does (its saved state then matches)."""
    gone = {id(p) for p in params}
    for group in opt.param_groups:
        group["params"] = [p for p in group["params"] if id(p) not in gone]
    for p in params:
        opt.state.pop(p, None)


def frozen_temperature(
    objective: ObjectiveConfig, step: int, freeze_step: int, planned: int
) -> float:
    """The sampling temperature at ``step`` of a run whose generator freezes at
    ``freeze_step`` of ``planned``: ``objective.temperature`` before, then linear from
    ``frozen_temperature_start`` to ``frozen_temperature_end`` at the last step."""
    if step < freeze_step:
        return objective.temperature
    span = max(planned - freeze_step, 1)
    t = min(max((step - freeze_step) / span, 0.0), 1.0)
    start, end = objective.frozen_temperature_start, objective.frozen_temperature_end
    return start + (end - start) * t
