"""Invariants of the RTD and MLM objectives (spec: the paper and the official code)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from electra.config import ConfigError
from electra.model.config import preset
from electra.pretrain.config import ObjectiveConfig
from electra.pretrain.objective import (
    ElectraForPretraining,
    SampleRNG,
    SpecialIds,
    choose_positions,
    mask_batch,
    max_predictions_per_seq,
    sample_from_weights,
    sample_softmax,
)

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=1000)


def blocks(B: int = 16, L: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] A [SEP] B [SEP] [PAD]... with random lengths."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, SPECIAL.vocab_size, (B, L), generator=g)
    lengths = torch.randint(8, L + 1, (B,), generator=g)
    lengths[0] = L
    for b, n in enumerate(lengths.tolist()):
        ids[b, 0] = SPECIAL.cls
        ids[b, n // 2] = SPECIAL.sep
        ids[b, n - 1] = SPECIAL.sep
        ids[b, n:] = SPECIAL.pad
    return ids, (ids != SPECIAL.pad).long()


def model(objective: str = "rtd", **kw) -> ElectraForPretraining:
    torch.manual_seed(0)
    cfg = preset("tiny")
    return ElectraForPretraining(cfg, ObjectiveConfig(objective=objective, **kw), SPECIAL)


def test_special_and_pad_never_masked_and_cap_respected() -> None:
    ids, mask = blocks(B=64, L=128)
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        chosen = choose_positions(ids, mask, SPECIAL, 0.15, g)
        assert not chosen[ids == SPECIAL.cls].any()
        assert not chosen[ids == SPECIAL.sep].any()
        assert not chosen[ids == SPECIAL.pad].any()
        cap = max_predictions_per_seq(0.15, 128)
        assert cap == 19
        assert int(chosen.sum(-1).max()) <= cap
        # 15% of the candidates (rounded), at least one.
        n_cand = ((mask == 1) & (ids > 4)).sum(-1)
        want = torch.clamp(torch.round(n_cand * 0.15), min=1, max=cap)
        assert torch.equal(chosen.sum(-1), want.long())


def test_electra_masking_keeps_15_percent_and_uses_no_random_tokens() -> None:
    ids, mask = blocks(B=256, L=128)
    m = mask_batch(ids, mask, SPECIAL, 0.15, torch.Generator().manual_seed(0))
    changed = m.input_ids != ids
    assert torch.all(m.input_ids[changed] == SPECIAL.mask)  # no random tokens
    assert not changed[~m.is_masked].any()  # nothing outside the chosen positions
    kept = (m.is_masked & ~changed).sum() / m.is_masked.sum()
    assert 0.12 < kept.item() < 0.18
    assert torch.equal(m.labels, ids.view(-1)[m.positions])


def test_bert_masking_is_80_10_10() -> None:
    ids, mask = blocks(B=256, L=128)
    m = mask_batch(ids, mask, SPECIAL, 0.15, torch.Generator().manual_seed(0), style="bert")
    sel = m.is_masked
    to_mask = (m.input_ids[sel] == SPECIAL.mask).float().mean().item()
    kept = (m.input_ids[sel] == ids[sel]).float().mean().item()
    assert 0.76 < to_mask < 0.84
    assert 0.07 < kept < 0.13


def test_sampling_is_fp32_and_follows_softmax() -> None:
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1]])).repeat(20000, 1).to(torch.bfloat16)
    s = sample_softmax(logits, torch.Generator().manual_seed(0))
    freq = torch.bincount(s, minlength=3).float() / len(s)
    assert torch.allclose(freq, torch.tensor([0.7, 0.2, 0.1]), atol=0.02)
    hot = sample_softmax(logits.float(), torch.Generator().manual_seed(0), temperature=0.5)
    sharp = torch.tensor([0.7, 0.2, 0.1]) ** 2
    freq = torch.bincount(hot, minlength=3).float() / len(hot)
    assert torch.allclose(freq, sharp / sharp.sum(), atol=0.02)
    big = torch.full((4, 10), 60000.0, dtype=torch.float16)  # fp16 would overflow
    s = sample_softmax(big, None)
    assert ((s >= 0) & (s < 10)).all()


def test_inverse_cdf_sampling_is_the_categorical_distribution() -> None:
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(2 * torch.randn(20, generator=g), -1)
    n = 200_000
    u = torch.rand(n, generator=g)
    s = sample_from_weights((probs * 7.0).repeat(n, 1), u)  # unnormalised weights
    freq = torch.bincount(s, minlength=20).float() / n
    assert torch.allclose(freq, probs, atol=0.004)  # an off-by-one id shift would fail
    # Ids of zero weight are never drawn, even at u = 0 or u just below 1.
    w = torch.tensor([[0.0, 1.0, 0.0, 2.0, 0.0]]).repeat(n, 1)
    u = torch.cat([torch.zeros(1), torch.full((1,), 1 - 2**-24), torch.rand(n - 2, generator=g)])
    s = sample_from_weights(w, u)
    counts = torch.bincount(s, minlength=5)
    assert counts[0] == counts[2] == counts[4] == 0
    assert abs(counts[3] / n - 2 / 3) < 0.01
    assert s[0] == 1 and s[1] == 3


def test_the_two_level_search_is_exact_across_chunks_and_the_short_last_one() -> None:
    """Weights spanning several chunks and a shorter last chunk, with zero-weight ids at
    both sides of each chunk border and at the row's end: frequencies match the weights
    (chi-square), zero weights are never drawn, and u = 0 / u -> 1 land on the first /
    last id of positive weight."""
    from scipy.stats import chisquare

    from electra.pretrain.objective import SAMPLE_CHUNK

    g = torch.Generator().manual_seed(1)
    v = 3 * SAMPLE_CHUNK + 37
    w = torch.rand(v, generator=g) ** 4
    zero = [0, 1, SAMPLE_CHUNK - 1, SAMPLE_CHUNK, 2 * SAMPLE_CHUNK, v - 2, v - 1]
    w[zero] = 0.0
    w[SAMPLE_CHUNK + 1 : 2 * SAMPLE_CHUNK] = 0.0  # a chunk holding one id of weight
    n = 400_000
    u = torch.cat([torch.zeros(1), torch.full((1,), 1 - 2**-24), torch.rand(n - 2, generator=g)])
    s = sample_from_weights(w.repeat(n, 1), u)
    counts = torch.bincount(s, minlength=v)
    assert len(counts) == v and counts[zero].sum() == 0
    assert s[0] == 2 and s[1] == v - 3
    expected = (w / w.sum() * n).double()
    keep = expected > 0
    assert chisquare(counts[keep].double(), expected[keep] / expected[keep].sum() * n).pvalue > 1e-4
    # A vocabulary below one chunk, and rows of different weights at once.
    rows = torch.tensor([[0.0, 3.0, 1.0], [5.0, 0.0, 0.0]]).repeat(n // 2, 1)
    s = sample_from_weights(rows, torch.rand(n, generator=g)).view(-1, 2)
    assert (s[:, 1] == 0).all() and abs((s[:, 0] == 1).float().mean() - 0.75) < 0.01


def test_sample_equal_to_original_is_labelled_original(monkeypatch: pytest.MonkeyPatch) -> None:
    import electra.pretrain.objective as P

    m = model()
    ids, mask = blocks()
    # A generator that always "samples" the original token.
    real_mask_batch = P.mask_batch
    captured = {}

    def spy(*a, **k):
        out = real_mask_batch(*a, **k)
        captured["labels"] = out.labels
        return out

    monkeypatch.setattr(P, "mask_batch", spy)
    real_fused = P.mlm_loss_and_sample

    def always_original(logits, labels, rng, rows):
        loss, _, pred = real_fused(logits, labels, rng, rows)
        return loss, captured["labels"], pred

    monkeypatch.setattr(P, "mlm_loss_and_sample", always_original)
    out = m(ids, mask, rng=torch.Generator().manual_seed(0), keep_tensors=True)
    assert not out.replaced.any()
    assert torch.equal(out.corrupted_ids, ids)


def test_padding_contributes_nothing_to_discriminator_loss() -> None:
    m = model().eval()
    ids, mask = blocks(B=4, L=32)
    garbage = torch.where(mask.bool(), ids, 777)  # same mask, other content in the padding
    a = m(ids, mask, rng=torch.Generator().manual_seed(5), keep_tensors=True)
    b = m(garbage, mask, rng=torch.Generator().manual_seed(5), keep_tensors=True)
    real = mask.bool()
    assert not torch.allclose(a.disc_logits[~real], b.disc_logits[~real])  # padding differs
    assert torch.allclose(a.disc_logits[real], b.disc_logits[real], atol=1e-5)
    assert torch.allclose(a.disc_loss, b.disc_loss, atol=1e-6)
    assert not b.replaced[~real].any()


def test_disc_loss_is_mean_over_non_pad_positions() -> None:
    import torch.nn.functional as F

    m = model().eval()
    ids, mask = blocks(B=4, L=32)
    out = m(ids, mask, rng=torch.Generator().manual_seed(3), keep_tensors=True)
    per = F.binary_cross_entropy_with_logits(
        out.disc_logits, out.replaced.float(), reduction="none"
    )
    want = per[mask.bool()].mean()
    assert torch.allclose(out.disc_loss, want, atol=1e-6)
    assert torch.allclose(out.loss, out.mlm_loss + 50 * out.disc_loss, atol=1e-5)


def test_no_gradient_reaches_generator_through_samples() -> None:
    m = model(gen_weight=0.0)  # only the discriminator loss remains
    ids, mask = blocks()
    out = m(ids, mask, rng=torch.Generator().manual_seed(0))
    out.loss.backward()
    gen_only = [p for n, p in m.generator.named_parameters() if "embeddings." not in n]
    assert gen_only
    assert all(p.grad is None or torch.count_nonzero(p.grad) == 0 for p in gen_only)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in m.discriminator.parameters())


def test_embeddings_are_shared_objects() -> None:
    m = model()
    ge, de = m.generator.electra.embeddings, m.discriminator.electra.embeddings
    assert ge.word_embeddings.weight is de.word_embeddings.weight
    assert ge.position_embeddings.weight is de.position_embeddings.weight
    assert ge.token_type_embeddings.weight is de.token_type_embeddings.weight
    assert m.generator.generator_lm_head.weight is de.word_embeddings.weight
    # Generator scaled in width, same depth.
    assert m.generator.config.hidden_size == m.discriminator.config.hidden_size // 4  # size 1/4
    assert m.generator.config.num_hidden_layers == m.discriminator.config.num_hidden_layers


def test_same_rng_same_result_and_rng_drives_the_objective() -> None:
    m = model().eval()
    ids, mask = blocks()
    a = m(ids, mask, rng=torch.Generator().manual_seed(9)).loss
    b = m(ids, mask, rng=torch.Generator().manual_seed(9)).loss
    c = m(ids, mask, rng=torch.Generator().manual_seed(10)).loss
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.parametrize("objective", ["rtd", "mlm"])
def test_loss_falls_on_a_repeated_batch(objective: str) -> None:
    m = model(objective)
    ids, mask = blocks(B=8, L=32)
    opt = torch.optim.Adam(m.parameters(), lr=2e-3)
    losses = []
    for _ in range(40):  # the same batch, masked the same way, every step
        out = m(ids, mask, rng=torch.Generator().manual_seed(0))
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.loss.item())
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5


def test_mlm_objective_has_no_discriminator() -> None:
    m = model("mlm")
    assert m.discriminator is None
    assert m.generator.config.hidden_size == preset("tiny").hidden_size
    out = m(*blocks(), rng=torch.Generator().manual_seed(0))
    assert out.disc_loss is None and set(out.scalars()) == {"loss", "mlm_loss", "gen_accuracy"}


def test_rtd_metrics_are_consistent() -> None:
    m = model().eval()
    ids, mask = blocks(B=8, L=64)
    out = m(ids, mask, rng=torch.Generator().manual_seed(0), keep_tensors=True)
    s = out.scalars()
    real = mask.bool()
    pred = out.disc_logits > 0
    acc = ((pred == out.replaced) & real).sum() / real.sum()
    assert s["disc_accuracy"] == pytest.approx(acc.item(), abs=1e-6)
    assert 0.0 <= s["replaced_precision"] <= 1.0 and 0.0 <= s["replaced_recall"] <= 1.0


def test_vocab_mismatch_is_a_clear_error() -> None:
    from electra.config import ConfigError

    with pytest.raises(ConfigError, match="vocab_size"):
        ElectraForPretraining(
            preset("tiny"), ObjectiveConfig(), dataclasses.replace(SPECIAL, vocab_size=999)
        )


def test_per_sample_randomness_does_not_depend_on_the_batch_split() -> None:
    m = model().eval()
    ids, mask = blocks(B=8, L=48)
    seeds = SampleRNG.seeds_for(7, range(100, 108))
    whole = m(ids, mask, rng=SampleRNG(seeds), keep_tensors=True)
    a = m(ids[:3], mask[:3], rng=SampleRNG(seeds[:3]), keep_tensors=True)
    b = m(ids[3:], mask[3:], rng=SampleRNG(seeds[3:]), keep_tensors=True)
    assert torch.equal(whole.corrupted_ids, torch.cat([a.corrupted_ids, b.corrupted_ids]))
    assert torch.equal(whole.replaced, torch.cat([a.replaced, b.replaced]))
    assert whole.replaced.any()
    other = m(ids, mask, rng=SampleRNG(SampleRNG.seeds_for(8, range(100, 108))), keep_tensors=True)
    assert not torch.equal(other.corrupted_ids, whole.corrupted_ids)


def test_fused_generator_loss_matches_cross_entropy_and_samples_softmax() -> None:
    from electra.pretrain.objective import mlm_loss_and_sample

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 50, generator=g, requires_grad=True)
    labels = torch.randint(0, 50, (6,), generator=g)
    loss, _, pred = mlm_loss_and_sample(logits, labels, g, None)
    loss.backward()
    ref_logits = logits.detach().clone().requires_grad_(True)
    ref = F.cross_entropy(ref_logits, labels)
    ref.backward()
    assert torch.allclose(loss, ref, atol=1e-6)
    assert torch.allclose(logits.grad, ref_logits.grad, atol=1e-6)
    assert torch.equal(pred, logits.argmax(-1))
    # Samples follow the softmax (inverse CDF over the same exponentials).
    probs = torch.tensor([0.6, 0.3, 0.1])
    many = torch.log(probs).repeat(30000, 1)
    _, s, _ = mlm_loss_and_sample(many, torch.zeros(30000, dtype=torch.long), g, None)
    freq = torch.bincount(s, minlength=3).float() / len(s)
    assert torch.allclose(freq, probs, atol=0.015)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fused_generator_loss_does_not_depend_on_its_row_slices(monkeypatch, dtype) -> None:
    """On a CPU the fused loss runs FUSED_ROWS rows at a time (cache-sized); loss, samples,
    argmax and gradient must be bit for bit those of one pass over all rows."""
    import electra.pretrain.objective as P

    g = torch.Generator().manual_seed(1)
    base = (3 * torch.randn(37, 300, generator=g)).to(dtype)  # 37: not a multiple of a slice
    labels = torch.randint(0, 300, (37,), generator=g)
    noise = torch.rand(37, 1, generator=g)

    def run(rows: int) -> tuple:
        monkeypatch.setattr(P, "FUSED_ROWS", rows)
        x = base.clone().requires_grad_(True)
        loss, sampled, argmax = P._FusedMLMLoss.apply(x, labels, noise)
        loss.backward()
        return loss.detach(), sampled, argmax, x.grad

    whole = run(1000)
    for rows in (1, 5, 16):
        assert all(torch.equal(a, b) for a, b in zip(run(rows), whole, strict=True)), rows


def test_disc_mlm_is_off_by_default_and_adds_a_corrective_lm_loss_when_on() -> None:
    assert ObjectiveConfig().disc_mlm_weight == 0.0
    plain = model().eval()  # no dropout: the two losses are compared
    assert not hasattr(plain, "disc_mlm_head")
    ids, mask = blocks(B=8, L=64)
    base = plain(ids, mask, rng=torch.Generator().manual_seed(0))
    assert base.disc_mlm_loss is None and "disc_mlm_loss" not in base.scalars()

    on = model(disc_mlm_weight=1.0).eval()
    # Same weights otherwise (the new head is built last), tied to the shared embeddings.
    for (name, a), (_, b) in zip(
        on.discriminator.state_dict().items(), plain.discriminator.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    assert on.disc_mlm_head.weight is on.discriminator.electra.embeddings.word_embeddings.weight
    out = on(ids, mask, rng=torch.Generator().manual_seed(0))
    assert out.disc_mlm_loss is not None and out.disc_mlm_loss.item() > 0
    expected = base.mlm_loss + 50.0 * base.disc_loss + out.disc_mlm_loss
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-5)
    out.loss.backward()
    assert on.disc_mlm_predictions.dense.weight.grad is not None
    # Pre-training only: the discriminator users fine-tune has no such head.
    assert not any("disc_mlm" in n for n, _ in on.discriminator.named_parameters())
    with pytest.raises(ConfigError):
        ObjectiveConfig(disc_mlm_weight=-1.0)


def test_disc_prior_bias_is_off_by_default_and_starts_at_the_base_rate() -> None:
    assert ObjectiveConfig().disc_prior_bias is False
    plain = model().eval()
    assert plain.discriminator.discriminator_predictions.dense_prediction.bias.item() == 0.0
    on = model(disc_prior_bias=True, mask_prob=0.2).eval()
    bias = on.discriminator.discriminator_predictions.dense_prediction.bias.item()
    assert bias == pytest.approx(math.log(0.2 / 0.8))
    ids, mask = blocks(B=8, L=64)
    out = on(ids, mask, rng=torch.Generator().manual_seed(0), keep_tensors=True)
    mean_p = torch.sigmoid(out.disc_logits)[mask.bool()].mean().item()
    assert mean_p == pytest.approx(0.2, abs=0.03)
    # Only that bias differs from the default initialisation.
    for (name, a), (_, b) in zip(
        on.state_dict().items(), model(mask_prob=0.2).state_dict().items(), strict=True
    ):
        assert torch.equal(a, b) or name.endswith("dense_prediction.bias"), name


def test_objective_names_come_from_the_registry() -> None:
    from electra.config import from_dict
    from electra.pretrain.objectives import OBJECTIVES, objective_named

    assert list(OBJECTIVES) == ["rtd", "mlm", "rtd-ngram"]
    assert objective_named("rtd").has_discriminator and not objective_named("mlm").has_discriminator
    assert (objective_named("rtd").kept_encoder, objective_named("mlm").kept_encoder) == (
        "discriminator",
        "generator",
    )
    ngram = objective_named("rtd-ngram")
    assert ngram.has_discriminator and not ngram.trains_generator
    assert ngram.kept_encoder == "discriminator"
    assert objective_named("rtd").trains_generator and objective_named("mlm").trains_generator
    with pytest.raises(ConfigError, match=r"'bert' is not one of \['rtd', 'mlm', 'rtd-ngram'\]"):
        from_dict(ObjectiveConfig, {"objective": "bert"}, "test")
    with pytest.raises(ValueError, match="unknown objective 'bert'"):
        objective_named("bert")
