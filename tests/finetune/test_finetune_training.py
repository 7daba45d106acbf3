"""The fine-tuning loop: batching (every example once, seeded, little padding), early stop."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from electra.config import ConfigError
from electra.finetune.recipe import Recipe
from electra.finetune.training import GROUP_BATCHES, BestEpoch, epoch_batches, stalled


def _lengths(n: int, seed: int = 0) -> list[int]:
    """Skewed lengths like short reviews: mostly short, a long tail up to 64."""
    u = torch.rand(n, generator=torch.Generator().manual_seed(seed))
    return (-18 * torch.log(u)).clamp(2, 64).int().tolist()  # exponential, mean ~18


def _padded(batches: list[list[int]], lengths: list[int]) -> int:
    """Tokens a dynamically padded batch computes: batch size x its longest example."""
    return sum(len(b) * max(lengths[i] for i in b) for b in batches)


@pytest.mark.parametrize("by_length", [False, True])
@pytest.mark.parametrize("n", [1, 31, 32, 4000, 32 * GROUP_BATCHES + 7])
def test_every_example_once_in_full_batches(n: int, by_length: bool) -> None:
    lengths = _lengths(n)
    batches = epoch_batches(lengths, 32, torch.Generator().manual_seed(1), by_length)
    assert sorted(i for b in batches for i in b) == list(range(n))
    assert len(batches) == math.ceil(n / 32)  # the schedule's steps_per_epoch
    assert sum(len(b) < 32 for b in batches) <= 1


def test_plain_batches_are_the_seeded_permutation_in_order() -> None:
    """Off, batching is what it was before grouping existed (old results reproduce)."""
    lengths = _lengths(100)
    perm = torch.randperm(100, generator=torch.Generator().manual_seed(5)).tolist()
    batches = epoch_batches(lengths, 32, torch.Generator().manual_seed(5), False)
    assert [i for b in batches for i in b] == perm


def test_grouped_batches_are_seeded() -> None:
    lengths = _lengths(4000)
    a = epoch_batches(lengths, 32, torch.Generator().manual_seed(3), True)
    b = epoch_batches(lengths, 32, torch.Generator().manual_seed(3), True)
    c = epoch_batches(lengths, 32, torch.Generator().manual_seed(4), True)
    assert a == b
    assert a != c


def test_grouped_batches_cut_padding() -> None:
    """Within a group, batches hold disjoint length ranges; padding falls well below random."""
    lengths = _lengths(32 * GROUP_BATCHES)  # exactly one group
    grouped = epoch_batches(lengths, 32, torch.Generator().manual_seed(0), True)
    ranges = sorted((min(lengths[i] for i in b), max(lengths[i] for i in b)) for b in grouped)
    for (_, hi), (lo, _) in itertools.pairwise(ranges):
        assert hi <= lo
    plain = epoch_batches(lengths, 32, torch.Generator().manual_seed(0), False)
    real = sum(lengths)
    assert _padded(grouped, lengths) < 1.1 * real
    assert _padded(plain, lengths) > 2 * real


def test_grouped_batch_order_is_shuffled() -> None:
    """Batches are not served longest first (the schedule would see lengths drift)."""
    lengths = _lengths(32 * GROUP_BATCHES)
    batches = epoch_batches(lengths, 32, torch.Generator().manual_seed(2), True)
    longest = [max(lengths[i] for i in b) for b in batches]
    assert longest != sorted(longest, reverse=True)
    assert longest != sorted(longest)


@pytest.mark.parametrize(
    ("patience", "best", "epoch", "stop"),
    [
        (0, 1, 9, False),  # 0: every epoch runs
        (2, 3, 4, False),  # one epoch without a better score
        (2, 3, 5, True),  # two in a row
        (2, 9, 10, False),  # the last epoch: nothing left to skip
        (3, 6, 9, True),
    ],
)
def test_patience_ends_a_seed_after_epochs_without_a_better_dev_score(
    patience: int, best: int, epoch: int, stop: bool
) -> None:
    recipe = Recipe(epochs=10, patience=patience)
    kept = BestEpoch(recipe)
    kept.epoch = best
    assert stalled(recipe, kept, epoch) is stop


def test_patience_must_not_be_negative() -> None:
    with pytest.raises(ConfigError, match="patience"):
        Recipe(patience=-1)
