"""Pre-training health metrics on known cases, in a real run's logs, and the verdict."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from electra.cli import main
from electra.pretrain.health import (
    HealthProbe,
    mean_pairwise_cosine,
    most_frequent_token,
    roc_auc,
    swap_within_rows,
    verdict,
)
from electra.pretrain.objective import PretrainOutput, SpecialIds

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=50)


def test_auc_of_perfect_constant_and_one_class_discriminators() -> None:
    labels = np.array([0, 1, 0, 1, 1, 0])
    assert roc_auc(labels * 5.0 - 2.0, labels) == 1.0  # perfect
    assert roc_auc(-labels, labels) == 0.0  # perfectly wrong
    assert roc_auc(np.zeros(6), labels) == 0.5  # constant: the base rate
    assert math.isnan(roc_auc(np.arange(3.0), np.zeros(3)))  # one class: undefined


def test_cosine_of_identical_opposite_and_orthogonal_vectors() -> None:
    v = torch.randn(1, 16)
    assert mean_pairwise_cosine(v.repeat(7, 1)) == pytest.approx(1.0, abs=1e-5)
    assert mean_pairwise_cosine(torch.cat([v, -v])) == pytest.approx(-1.0, abs=1e-5)
    assert mean_pairwise_cosine(torch.eye(8) * 3) == pytest.approx(0.0, abs=1e-6)
    assert math.isnan(mean_pairwise_cosine(v))


def test_context_probe_keeps_each_rows_unigram_multiset() -> None:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 50, (6, 40), generator=g)
    ids[:, 0], ids[:, 30] = SPECIAL.cls, SPECIAL.sep
    ids[:, 31:] = SPECIAL.pad
    mask = (ids != SPECIAL.pad).long()
    ordinary = mask.bool() & (ids > 4)
    swapped, replaced = swap_within_rows(ids, ordinary, torch.Generator().manual_seed(1))
    for row, new in zip(ids, swapped, strict=True):
        assert sorted(row.tolist()) == sorted(new.tolist())  # the same tokens, moved
    assert torch.equal(swapped[~ordinary], ids[~ordinary])  # specials and pads stay
    assert torch.equal(replaced, swapped != ids) and replaced.any()
    assert replaced.sum(1).max() <= round(0.15 * 29) + 1
    again, _ = swap_within_rows(ids, ordinary, torch.Generator().manual_seed(1))
    assert torch.equal(again, swapped)  # its own generator: reproducible


def test_most_frequent_token_ignores_special_tokens() -> None:
    class FakeBlocks:
        data = np.array([[2, 7, 7, 9, 3, 0, 0, 0], [2, 9, 7, 11, 3, 0, 0, 0]])

        def __len__(self) -> int:
            return len(self.data)

        def get(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return self.data[idx], np.zeros_like(self.data[idx])

    assert most_frequent_token(FakeBlocks(), SPECIAL) == 7  # not [PAD], though more frequent


class _Keeper(torch.nn.Module):
    """Just enough of ElectraForPretraining for HealthProbe: a discriminator and its body."""

    def __init__(self) -> None:
        super().__init__()
        self.electra = torch.nn.Embedding(50, 8)
        self.discriminator = lambda ids, mask, types: torch.zeros(ids.shape)  # constant

    def encoder_to_keep(self) -> torch.nn.Module:
        return self


def test_probe_scores_a_perfect_and_a_constant_discriminator() -> None:
    ids = torch.randint(5, 50, (4, 20), generator=torch.Generator().manual_seed(3))
    ids[:, 0] = SPECIAL.cls
    mask = torch.ones_like(ids)
    replaced = torch.zeros_like(ids, dtype=torch.bool)
    replaced[:, 3::4] = True
    out = PretrainOutput(
        loss=torch.tensor(0.0),
        mlm_loss=torch.tensor(0.0),
        replaced=replaced,
        disc_logits=replaced.float() * 4 - 2,  # perfect on the generator's replacements
    )
    keeper = _Keeper()
    probe = HealthProbe(keeper, SPECIAL, mode_token=int(ids[0, 1]), seed=0)
    with probe.watching():
        keeper.electra(ids)
    probe.add(ids, torch.zeros_like(ids), mask, out)
    r = probe.result()
    assert r["disc_auc"] == 1.0 and r["swap_auc"] == 0.5  # a constant on the probe
    assert -1.0 <= r["token_cosine"] <= 1.0
    ordinary = ids[:, 1:]
    assert r["unigram_accuracy"] == pytest.approx(float((ordinary == ids[0, 1]).float().mean()))


def test_verdict_thresholds() -> None:
    stuck = {"val/disc_auc": 0.79, "val/swap_auc": 0.50, "val/token_cosine": 0.84}
    text = verdict(stuck)
    assert text.startswith("discriminator still at the base rate: context not learned yet")
    assert "unlikely to beat a random start" in text and "collapsed" in text
    assert verdict({"val/swap_auc": 0.60}).startswith("starting to learn context")
    learning = verdict({"val/swap_auc": 0.71, "val/token_cosine": 0.3})
    assert learning.startswith("learning context: in-row-swap AUC 0.71")
    assert "collapsed" not in learning
    weak = verdict({"val/gen_accuracy": 0.06, "val/unigram_accuracy": 0.05})
    assert "barely beats the unigram floor" in weak
    below = verdict({"val/gen_accuracy": 0.04, "val/unigram_accuracy": 0.05})
    assert "not above the unigram floor" in below
    assert verdict({"val/loss": 1.0}) is None
    # a run that started from PPMI vectors: the gain it may still give is the table's
    warm = verdict({**stuck, "token_embeddings": {"token_embeddings": "ppmi"}})
    assert "unlikely to beat a random start" not in warm and "PPMI" in warm


def test_a_run_logs_health_everywhere(tiny_run: Path, tmp_path: Path, capsys) -> None:
    records = [json.loads(x) for x in (tiny_run / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in records if "val/loss" in r]
    assert val and all(
        0.0 <= r["val/disc_auc"] <= 1.0 and 0.0 <= r["val/swap_auc"] <= 1.0 for r in val
    )
    assert all(-1.0 <= r["val/token_cosine"] <= 1.0 for r in val)
    assert all(0.0 < r["val/unigram_accuracy"] < 1.0 for r in val)
    summary = json.loads((tiny_run / "summary.json").read_text())
    assert summary["verdict"] == verdict(summary) and "AUC" in summary["verdict"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = EventAccumulator(str(tiny_run / "tensorboard")).Reload()
    assert {"val/disc_auc", "val/swap_auc", "val/token_cosine"} <= set(tb.Tags()["scalars"])
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    assert main(["report", str(run)]) == 0
    assert f"health: {summary['verdict']}" in capsys.readouterr().out
    assert (run / "report" / "health.png").is_file()
    assert "<h2>Health</h2>" in (run / "report" / "index.html").read_text()
