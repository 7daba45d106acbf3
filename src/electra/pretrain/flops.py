"""Parameter counts and training FLOPs, as the paper reports them.

Two counts, for two purposes:

* :func:`paper_train_flops` follows the official ``flops_computation.py``
  (Clark et al.): every operation counted (matmuls as 2*m*n, plus softmax,
  LayerNorm, GELU, dropout), *dense* embedding lookups (a one-hot matmul,
  2*E*V per token), the generator softmax at ``output_frac`` of the tokens,
  and backward = forward (so training = 2 x forward). This is the number to
  report next to results and to compare with the paper: ELECTRA-Small at 1M
  steps of 128 x 128 gives 1.29e18 (paper: 1.4e18; BERT-Small at 1.45M steps
  gives 1.42e18 here).
* :func:`executed_matmul_flops` counts the matmul FLOPs a training step
  really executes (forward + 2 x backward = 3 x forward; embedding lookups
  free; the generator head at the masked positions only). This is the
  numerator of MFU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from electra.model.config import ElectraConfig, generator_config, preset
from electra.pretrain.config import PRESETS, ObjectiveConfig
from electra.pretrain.objectives import objective_named
from electra.pretrain.options import FlopsCommand

# Per-element costs of the official script.
DROPOUT_FLOPS = 4  # random number, >=, mask multiply, rescale
LAYER_NORM_FLOPS = 5  # mean, variance, subtract/divide, scale, bias
ACTIVATION_FLOPS = 8  # tanh-GELU
SOFTMAX_FLOPS = 5  # max, subtract, exp, sum, divide

OFFICIAL_OUTPUT_FRAC = 0.15625  # generator softmax fraction used by the official script
# rtd-ngram's sampling at one masked position (electra.pretrain.ngram): a binary search over
# at most 2^32 context keys and one over the running sums (2 x 32 comparisons), the key,
# the backoff choice and the inverse-CDF point (about 20 more): 100 is an upper bound.
# Counted once, not doubled: nothing is differentiated through it.
NGRAM_SAMPLE_FLOPS = 100


def _mixing(c: ElectraConfig) -> tuple[float, int, int]:
    """Matmul FLOPs per token of one layer's token mixing, except the (L, L) products,
    with the attention width A and the number of self-attention heads.

    ELECTRA: q, k, v and output projections (8 h^2), A = h. ConvBERT's mixed attention
    (``conv_kernel_size``): q, k, v to A = h/2, the separable span convolution, the
    dynamic-kernel and convolution-value projections, the output (the K-tap weighted
    sum runs as elementwise products, not a matmul: see :func:`_block_flops`).
    """
    h = c.hidden_size
    if not c.conv_kernel_size:
        return 4 * 2 * h * h, h, c.num_attention_heads
    a, n, k = c.hidden_size // 2, c.mixed_heads, c.conv_kernel_size
    flops = 3 * 2 * h * a + 2 * h * k + 2 * h * a + 2 * a * n * k + 2 * h * a
    return flops + 2 * h * h, a, n


def _mixing_parameters(c: ElectraConfig) -> int:
    """Parameters of one layer's attention block before its output projection."""
    h = c.hidden_size
    if not c.conv_kernel_size:
        return 3 * (h * h + h)
    a, n, k = c.hidden_size // 2, c.mixed_heads, c.conv_kernel_size
    return 3 * (h * a + a) + h * k + h * a + a + (a * n * k + n * k) + (h * a + a)


def _block_flops(c: ElectraConfig, s: int) -> float:
    """Forward FLOPs of one transformer layer per token (official formula)."""
    h, i = c.hidden_size, c.intermediate_size
    mixing, a, heads = _mixing(c)
    return (
        mixing  # q, k, v projections, attention output (and ConvBERT's convolution)
        + 2 * a * c.conv_kernel_size  # ConvBERT's K-tap weighted sum (0 for ELECTRA)
        + 3 * a  # q, k, v biases
        + 2 * a * s  # attention scores
        + SOFTMAX_FLOPS * s * heads
        + DROPOUT_FLOPS * s * heads
        + s * heads  # scaling
        + 2 * a * s  # weighted sum of values
        + h  # bias
        + DROPOUT_FLOPS * h
        + h  # residual
        + LAYER_NORM_FLOPS  # (sic: the official script counts LN here as 5, not 5h)
        + 2 * h * i  # FFN up
        + ACTIVATION_FLOPS * i
        + i
        + 2 * h * i  # FFN down
        + h
        + DROPOUT_FLOPS * h
        + h
        + LAYER_NORM_FLOPS * h
    )


def _input_embedding_flops(c: ElectraConfig, s: int) -> float:
    e, h, v = c.embedding_size, c.hidden_size, c.vocab_size
    flops = 2 * e * v  # dense lookup (one-hot matmul)
    flops += 2 * e * (s + 2) + 2 * e + LAYER_NORM_FLOPS * e + DROPOUT_FLOPS * e
    if e != h:
        flops += 2 * h * e + h  # embeddings_project
    return flops


def _mlm_output_flops(c: ElectraConfig, output_frac: float) -> float:
    e, h, v = c.embedding_size, c.hidden_size, c.vocab_size
    per_pred = (
        2 * e * v  # tied output matmul
        + 2 * h * e
        + e  # dense to embedding width
        + ACTIVATION_FLOPS * e
        + LAYER_NORM_FLOPS * e
        + SOFTMAX_FLOPS * v
        + 2 * v  # target word
    )
    return output_frac * per_pred


def _selection_flops(c: ElectraConfig, output_frac: float, candidates: int) -> float:
    """Multi-word selection (``objective.mws_weight``) per token, trained (forward): the
    head's dense to the embedding width, its activation and LayerNorm, and the candidates'
    dot products and softmax at ``output_frac`` of the tokens."""
    e, h = c.embedding_size, c.hidden_size
    per_pred = (
        2 * h * e
        + e
        + ACTIVATION_FLOPS * e
        + LAYER_NORM_FLOPS * e
        + 2 * e * candidates
        + SOFTMAX_FLOPS * candidates
        + 2 * candidates
    )
    return output_frac * per_pred


def _drawing_flops(c: ElectraConfig, output_frac: float, candidates: int) -> float:
    """Drawing the other candidates from the generator's softmax per token, forward only:
    a pass over the vocabulary per draw (exp, chunk sums, search) at ``output_frac``."""
    return output_frac * (candidates - 1) * 3 * c.vocab_size


def _disc_output_flops(c: ElectraConfig) -> float:
    h = c.hidden_size
    return 2 * h * h + h + ACTIVATION_FLOPS * h + 2 * h


def paper_forward_flops_per_token(
    c: ElectraConfig, seq_len: int, head: str, output_frac: float = OFFICIAL_OUTPUT_FRAC
) -> float:
    """Forward FLOPs per token of one encoder with a ``"disc"`` or ``"mlm"`` head."""
    body = c.num_hidden_layers * _block_flops(c, seq_len) + _input_embedding_flops(c, seq_len)
    out = _disc_output_flops(c) if head == "disc" else _mlm_output_flops(c, output_frac)
    return body + out


def output_frac_for(mask_prob: float) -> float:
    """The official 0.15625 at mask rate 15%, scaled for other mask rates."""
    return OFFICIAL_OUTPUT_FRAC * mask_prob / 0.15


def trained_encoders(
    disc: ElectraConfig,
    objective: str,
    generator_size: float,
    generator: ElectraConfig | None = None,
) -> list[tuple[ElectraConfig, str]]:
    """(shape, head) of every encoder an objective trains, the full-size one first:
    the discriminator and a generator for RTD, the discriminator alone for
    rtd-ngram, one MLM encoder for MLM."""
    kind = objective_named(objective)
    encoders = [(disc, kind.main_head)]
    if kind.has_discriminator and kind.trains_generator:
        encoders.append((generator or generator_config(disc, generator_size), "mlm"))
    return encoders


def paper_train_flops_per_step(
    disc: ElectraConfig,
    batch_size: int,
    seq_len: int,
    objective: str = "rtd",
    generator_size: float = 0.25,
    mask_prob: float = 0.15,
    generator: ElectraConfig | None = None,
    corrective_lm: bool = False,
    generator_frozen: bool = False,
    selection_candidates: int = 0,
) -> float:
    """Training FLOPs of one step, official methodology (training = 2 x forward).

    ``generator`` gives the generator's shape when it is not ``generator_size``
    times the discriminator's (a released generator). rtd-ngram is charged its
    discriminator and the sampling at the masked positions
    (:data:`NGRAM_SAMPLE_FLOPS` each, forward only); the one-time counting of the
    table before step 0 (a few operations per token read) is not a per-step cost.
    ``corrective_lm`` (``objective.disc_mlm_weight > 0``) adds the discriminator's
    pre-training-only MLM head at the masked positions, counted as the generator's is,
    so a lever that does more work per step gets fewer steps for the same budget.
    ``generator_frozen`` (a step after ``objective.generator_freeze_at``) charges RTD's
    generator its forward alone: nothing of it is differentiated. ``selection_candidates``
    (``objective.mws_weight > 0``) adds the multi-word selection head to the
    discriminator, and the drawing of its candidates once (forward only).
    """
    frac = output_frac_for(mask_prob)
    encoders = trained_encoders(disc, objective, generator_size, generator)
    per_token = [paper_forward_flops_per_token(c, seq_len, head, frac) for c, head in encoders]
    if corrective_lm and objective_named(objective).has_discriminator:
        per_token[0] += _mlm_output_flops(disc, frac)
    sampling = (
        frac * NGRAM_SAMPLE_FLOPS if objective_named(objective).replacements == "ngram" else 0
    )
    if selection_candidates and objective_named(objective).has_discriminator:
        per_token[0] += _selection_flops(disc, frac, selection_candidates)
        sampling += _drawing_flops(disc, frac, selection_candidates)
    passes = [2.0] + [1.0 if generator_frozen else 2.0] * (len(per_token) - 1)
    trained = sum(n * f for n, f in zip(passes, per_token, strict=True))
    return (trained + sampling) * batch_size * seq_len


def executed_matmul_flops_per_step(
    disc: ElectraConfig,
    batch_size: int,
    seq_len: int,
    objective: str = "rtd",
    generator_size: float = 0.25,
    n_masked: int | None = None,
    corrective_lm: bool = False,
    generator_frozen: bool = False,
    generator: ElectraConfig | None = None,
    selection_candidates: int = 0,
) -> float:
    """Matmul FLOPs a training step executes (3 x forward), the numerator of MFU.

    ``n_masked`` is the number of masked positions in the batch (defaults to
    15% of the tokens); the generator head runs only there, and so does the
    discriminator's corrective MLM head when ``corrective_lm``. A frozen generator
    (``generator_frozen``) runs its forward alone. Multi-word selection
    (``selection_candidates``) adds its head's matmuls at the masked positions.
    """
    tokens = batch_size * seq_len
    if n_masked is None:
        n_masked = round(0.15 * tokens)

    def body(c: ElectraConfig) -> float:
        h, i, e = c.hidden_size, c.intermediate_size, c.embedding_size
        mixing, a, _ = _mixing(c)
        per_layer = mixing + 4 * h * i + 4 * a * seq_len  # qkv+out, FFN, scores+values
        proj = 2 * e * h if e != h else 0
        return tokens * (c.num_hidden_layers * per_layer + proj)

    def head_flops(c: ElectraConfig, head: str) -> float:
        if head == "disc":  # every token
            return tokens * 2 * c.hidden_size * (c.hidden_size + 1)
        return n_masked * (  # the masked positions only
            2 * c.hidden_size * c.embedding_size + 2 * c.embedding_size * c.vocab_size
        )

    encoders = trained_encoders(disc, objective, generator_size, generator)
    fwd = [body(c) + head_flops(c, head) for c, head in encoders]
    if corrective_lm and objective_named(objective).has_discriminator:
        fwd[0] += head_flops(disc, "mlm")
    if selection_candidates and objective_named(objective).has_discriminator:
        e = disc.embedding_size
        fwd[0] += n_masked * (2 * disc.hidden_size * e + 2 * e * selection_candidates)
    passes = [3.0] + [1.0 if generator_frozen else 3.0] * (len(fwd) - 1)
    return sum(n * f for n, f in zip(passes, fwd, strict=True))


@dataclass(frozen=True)
class FlopsPlan:
    """What a run's steps cost, step by step, by one counter.

    ``per_step`` until the generator freezes (``objective.generator_freeze_at``, the share
    ``freeze_at`` of the planned steps), ``frozen_step`` after: a run that never freezes
    costs ``per_step`` throughout. The freeze step depends on the plan, so every count
    takes the planned steps.
    """

    per_step: float
    frozen_step: float | None = None
    freeze_at: float = 0.0
    frozen_from: int | None = None  # the step it froze at, once it has: fixed from then on

    def freeze_step(self, planned: int) -> int | None:
        """The first step whose generator is frozen, in a run of ``planned`` steps
        (None: it never freezes). Once the run has frozen it (``frozen_from``), that step,
        whatever the plan became since (``run.fit_minutes`` re-plans)."""
        if self.freeze_at <= 0 or self.frozen_step is None:
            return None
        if self.frozen_from is not None:
            return self.frozen_from
        return max(1, round(self.freeze_at * planned))

    def through(self, step: int, planned: int) -> float:
        """FLOPs of the first ``step`` steps of a run of ``planned`` steps."""
        k = self.freeze_step(planned)
        if k is None or step <= k:
            return step * self.per_step
        return k * self.per_step + (step - k) * self.frozen_step

    def mean_step(self, planned: int) -> float:
        """FLOPs per step over a whole run of ``planned`` steps."""
        return self.through(planned, planned) / max(planned, 1)

    def steps_for(self, budget: float) -> int:
        """The most steps a run can plan whose whole schedule fits ``budget``."""
        if self.freeze_step(1) is None:
            return int(budget // self.per_step)
        mean = self.freeze_at * self.per_step + (1 - self.freeze_at) * self.frozen_step
        n = int(budget // mean)
        while n > 0 and self.through(n, n) > budget:
            n -= 1
        while self.through(n + 1, n + 1) <= budget:
            n += 1
        return n


def paper_flops_plan(
    disc: ElectraConfig,
    batch_size: int,
    seq_len: int,
    objective: ObjectiveConfig,
    generator: ElectraConfig | None = None,
) -> FlopsPlan:
    """The paper counter's :class:`FlopsPlan` of a run of ``objective`` at this shape
    (its generator's shape ``generator``, by default the one ``objective`` builds)."""
    if generator is None and objective.kind.trains_generator:
        generator = objective.generator_shape(disc)

    def per_step(frozen: bool) -> float:
        return paper_train_flops_per_step(
            disc,
            batch_size,
            seq_len,
            objective.objective,
            objective.generator_size,
            objective.mask_prob,
            generator=generator,
            corrective_lm=objective.disc_mlm_weight > 0,
            generator_frozen=frozen,
            selection_candidates=objective.mws_candidates if objective.mws_weight > 0 else 0,
        )

    freeze_at = objective.generator_freeze_at
    return FlopsPlan(per_step(False), per_step(True) if freeze_at > 0 else None, freeze_at)


def executed_flops_plan(
    disc: ElectraConfig, batch_size: int, seq_len: int, objective: ObjectiveConfig
) -> FlopsPlan:
    """The executed-matmul counter's :class:`FlopsPlan` (the generator ``objective``
    builds; ``objective.mask_prob`` of the positions masked)."""
    masked = round(objective.mask_prob * batch_size * seq_len)
    generator = objective.generator_shape(disc) if objective.kind.trains_generator else None

    def per_step(frozen: bool) -> float:
        return executed_matmul_flops_per_step(
            disc,
            batch_size,
            seq_len,
            objective.objective,
            objective.generator_size,
            masked,
            objective.disc_mlm_weight > 0,
            generator_frozen=frozen,
            generator=generator,
            selection_candidates=objective.mws_candidates if objective.mws_weight > 0 else 0,
        )

    freeze_at = objective.generator_freeze_at
    return FlopsPlan(per_step(False), per_step(True) if freeze_at > 0 else None, freeze_at)


def count_parameters(c: ElectraConfig, head: str = "none") -> int:
    """Analytic parameter count of one encoder (+ ``disc`` or ``mlm`` head)."""
    e, h, i, v = c.embedding_size, c.hidden_size, c.intermediate_size, c.vocab_size
    emb = (v + c.max_position_embeddings + c.type_vocab_size) * e + 2 * e
    proj = (e * h + h) if e != h else 0
    layer = _mixing_parameters(c) + (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    heads = {
        "none": 0,
        "disc": h * h + h + h + 1,
        "mlm": h * e + e + 2 * e + v,  # dense, LayerNorm, output bias (weight tied)
    }
    return emb + proj + c.num_hidden_layers * layer + heads[head]


def flops_cli(cmd: FlopsCommand) -> int:
    """Run ``electra flops`` (its ``--help`` is :class:`~electra.pretrain.options.FlopsCommand`'s docstring)."""
    disc = preset(cmd.preset)  # raises a clear error for an unknown name
    recipe = PRESETS[cmd.preset]
    batch = cmd.batch_size or recipe.batch_size
    seq = cmd.seq_len or recipe.max_seq_length
    steps = cmd.steps or recipe.max_steps
    gen = generator_config(disc, recipe.generator_size)
    per_step = paper_train_flops_per_step(
        disc, batch, seq, cmd.objective, recipe.generator_size, recipe.mask_prob
    )
    print(
        json.dumps(
            {
                "preset": cmd.preset,
                "discriminator_params": count_parameters(disc, "disc"),
                "generator_params_not_shared": count_parameters(gen, "mlm")
                - (disc.vocab_size + disc.max_position_embeddings + disc.type_vocab_size + 2)
                * disc.embedding_size,
                "batch_size": batch,
                "seq_len": seq,
                "steps": steps,
                "train_flops_per_step": per_step,
                "train_flops_total": per_step * steps,
            },
            indent=2,
        )
    )
    return 0
