"""Compute accounting against the paper's numbers."""

from __future__ import annotations

import pytest

from electra.config import generator_config, preset
from electra.flops import (
    count_parameters,
    executed_matmul_flops_per_step,
    paper_train_flops_per_step,
)
from electra.model import ElectraDiscriminator, ElectraGenerator, num_parameters


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


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_analytic_parameter_count_matches_the_module(name: str) -> None:
    cfg = preset(name)
    assert count_parameters(cfg, "disc") == num_parameters(ElectraDiscriminator(cfg))
    gen = generator_config(cfg, 0.25)
    assert count_parameters(gen, "mlm") == num_parameters(ElectraGenerator(gen))


def test_small_discriminator_has_14m_parameters() -> None:
    assert count_parameters(preset("small"), "disc") == pytest.approx(14e6, rel=0.05)
    assert count_parameters(preset("base"), "disc") == pytest.approx(110e6, rel=0.02)
