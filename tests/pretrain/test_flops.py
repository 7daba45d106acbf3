"""Compute accounting against the paper's numbers."""

from __future__ import annotations

import pytest
import torch

from electra.model.config import generator_config, preset
from electra.model.encoder import ElectraDiscriminator, ElectraGenerator, num_parameters
from electra.pretrain.flops import (
    count_parameters,
    executed_matmul_flops_per_step,
    paper_train_flops_per_step,
)


def test_small_at_one_million_steps_matches_the_paper() -> None:
    total = paper_train_flops_per_step(preset("small"), 128, 128) * 1_000_000
    assert total == pytest.approx(1.4e18, rel=0.10)


def test_base_matches_the_paper() -> None:
    total = paper_train_flops_per_step(preset("base"), 256, 512, generator_size=1 / 3) * 766_000
    assert total == pytest.approx(6.4e19, rel=0.10)


def test_bert_small_matches_the_paper() -> None:
    total = paper_train_flops_per_step(preset("small"), 128, 128, objective="mlm") * 1_450_000
    assert total == pytest.approx(1.4e18, rel=0.10)


def test_executed_flops_match_the_measured_reference() -> None:
    # The reference count: 288 G per 32 x 128 step, generator 1/4.
    got = executed_matmul_flops_per_step(preset("small"), 32, 128, n_masked=19 * 32)
    assert got == pytest.approx(288e9, rel=0.02)


@pytest.mark.parametrize(
    "name, shape",
    [
        ("tiny", {}),
        ("small", {}),
        ("small", {"conv_kernel_size": 9}),
        ("tiny", {"conv_kernel_size": 3, "head_ratio": 1}),
    ],
)
def test_analytic_parameter_count_matches_the_module(name: str, shape: dict) -> None:
    cfg = preset(name, **shape)
    assert count_parameters(cfg, "disc") == num_parameters(ElectraDiscriminator(cfg))
    gen = generator_config(cfg, 0.25)
    assert count_parameters(gen, "mlm") == num_parameters(ElectraGenerator(gen))


def test_small_discriminator_has_14m_parameters() -> None:
    assert count_parameters(preset("small"), "disc") == pytest.approx(14e6, rel=0.05)
    assert count_parameters(preset("base"), "disc") == pytest.approx(110e6, rel=0.02)


@pytest.mark.parametrize("shape", [{}, {"conv_kernel_size": 5}])
def test_executed_flops_are_what_the_modules_run(shape: dict) -> None:
    """MFU's numerator against torch's own count of one forward (x3 for the backward):
    the discriminator on every token, the generator's head at the masked positions."""
    from torch.utils.flop_counter import FlopCounterMode

    cfg = preset("tiny", **shape)
    gen = generator_config(cfg, 0.25)
    ids = torch.randint(5, cfg.vocab_size, (2, 64))
    masked = torch.arange(0, 128, 7)
    # Training mode: with attention dropout on CPU the attention's two matmuls run as
    # matmuls, which the counter sees (it does not count CPU's fused SDPA kernel).
    disc, generator = ElectraDiscriminator(cfg).train(), ElectraGenerator(gen).train()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        disc(ids)
        generator(ids, positions=masked)
    want = executed_matmul_flops_per_step(cfg, 2, 64, n_masked=len(masked))
    assert 3 * counter.get_total_flops() == pytest.approx(want, rel=1e-9)


def test_the_corrective_lm_head_is_charged_what_it_runs() -> None:
    """A lever that adds work (the discriminator's corrective MLM head at the masked
    positions) is charged it by both counters, so at one budget it gets fewer steps;
    the executed count's extra is torch's own count of that head."""
    from torch.utils.flop_counter import FlopCounterMode

    from electra.model.encoder import GeneratorPredictions, TiedLMHead

    cfg = preset("tiny")
    masked = 19
    plain = executed_matmul_flops_per_step(cfg, 2, 64, n_masked=masked)
    lever = executed_matmul_flops_per_step(cfg, 2, 64, n_masked=masked, corrective_lm=True)
    disc = ElectraDiscriminator(cfg)
    predictions = GeneratorPredictions(cfg)
    head = TiedLMHead(disc.electra.embeddings.word_embeddings)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        head(predictions(torch.randn(masked, cfg.hidden_size)))
    assert lever - plain == pytest.approx(3 * counter.get_total_flops(), rel=1e-9)

    paper = paper_train_flops_per_step(cfg, 2, 64)
    paper_lever = paper_train_flops_per_step(cfg, 2, 64, corrective_lm=True)
    assert paper < paper_lever < paper * 1.2
    # Nothing to charge where there is no discriminator.
    mlm = paper_train_flops_per_step(cfg, 2, 64, objective="mlm")
    assert paper_train_flops_per_step(cfg, 2, 64, objective="mlm", corrective_lm=True) == mlm
