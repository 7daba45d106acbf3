"""rtd-ngram: replacements sampled from counted P(token | left, right), no generator."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import step_losses, tiny_config
from scipy.stats import chisquare

from electra.model import checkpoint as ckpt
from electra.pretrain.ngram import NGRAM_FILE, NgramSource, NgramTable, build_ngram_table
from electra.text.special import SpecialIds

SPECIAL = SpecialIds(pad=0, cls=1, sep=2, mask=3, vocab_size=12)
SETTINGS = {
    "ngram_top_k": 8,
    "ngram_min_count": 2,
    "ngram_max_contexts": 1000,
    "ngram_max_tokens": 10_000_000,
}
# Context (4, 5): centre 6 fifty times, 7 thirty, 8 twenty. Context (9, 10): 11 once
# (below ngram_min_count: backs off to what follows 9).
KNOWN = {6: 50, 7: 30, 8: 20}


class FakeBlocks:
    """The part of :class:`~electra.blocks.read.Blocks` the table reads, over an array."""

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = ids
        self.block_length = ids.shape[1]
        self.vocab_size = SPECIAL.vocab_size
        self.special = SPECIAL
        self.pad_id = SPECIAL.pad
        self.directory = Path("fake")

    def __len__(self) -> int:
        return len(self.ids)

    def get(self, indices):
        return self.ids[np.asarray(indices)], np.zeros_like(self.ids[np.asarray(indices)])


def _corpus() -> np.ndarray:
    rows = [[1, 4, t, 5, 2, 0] for t, n in KNOWN.items() for _ in range(n)]
    rows += [[1, 9, 11, 10, 2, 0], [1, 9, 6, 6, 2, 0], [1, 9, 6, 7, 2, 0]]
    return np.array(rows, dtype=np.int64)


@pytest.fixture(scope="module")
def table() -> NgramTable:
    return build_ngram_table(FakeBlocks(_corpus()), SETTINGS, progress=False)


def _draws(source: NgramSource, block: list[int], at: int, n: int, seed: int = 0) -> np.ndarray:
    ids = torch.tensor([block] * n)
    positions = torch.arange(n) * len(block) + at
    u = torch.rand(n, generator=torch.Generator().manual_seed(seed))
    return source.replacements(ids, positions, u).numpy()


def _histogram(draws: np.ndarray) -> dict[int, int]:
    ids, n = np.unique(draws, return_counts=True)
    return dict(zip(ids.tolist(), n.tolist(), strict=True))


def test_the_table_holds_the_known_counts(table: NgramTable) -> None:
    key = 4 * (SPECIAL.vocab_size + 1) + 5
    row = int(np.searchsorted(table.context_keys, key))
    assert table.context_keys[row] == key
    lo, hi = table.offsets[row], table.offsets[row + 1]
    assert (
        dict(zip(table.tokens[lo:hi].tolist(), table.counts[lo:hi].tolist(), strict=True)) == KNOWN
    )
    assert table.row_totals[row] == 100
    # (9, 10) was seen once: below ngram_min_count, so not a kept context
    assert 9 * (SPECIAL.vocab_size + 1) + 10 not in set(table.context_keys.tolist())
    specials = set(SPECIAL.never_masked)
    assert not specials & set(table.tokens.tolist())


def test_proposals_follow_the_counts_exactly(table: NgramTable) -> None:
    n = 20_000
    draws = _draws(NgramSource(table), [1, 4, 6, 5, 2, 0], 2, n)
    seen = _histogram(draws)
    assert set(seen) <= set(KNOWN)  # zero-count (and special) tokens: never
    total = sum(KNOWN.values())
    observed = [seen.get(t, 0) for t in KNOWN]
    expected = [n * c / total for c in KNOWN.values()]
    assert chisquare(observed, expected).pvalue > 1e-3
    # the test can fail: the same draws are far from a uniform proposal over the candidates
    assert chisquare(observed, [n / 3] * 3).pvalue < 1e-6
    # the original (6, half the counts) is proposed at most its share, within 4 sigma
    share = KNOWN[6] / total
    assert seen[6] / n <= share + 4 * np.sqrt(share * (1 - share) / n)


def test_a_temperature_flattens_but_never_adds_tokens(table: NgramTable) -> None:
    draws = _draws(NgramSource(table, temperature=4.0), [1, 4, 6, 5, 2, 0], 2, 20_000)
    seen = _histogram(draws)
    assert set(seen) == set(KNOWN)
    assert seen[8] / 20_000 > 0.25  # count 20 of 100, raised to 1/4: about 0.29


def test_rare_and_unseen_contexts_back_off(table: NgramTable) -> None:
    source = NgramSource(table)
    # (9, 10) seen once: what follows 9 (11 once, 6 twice)
    assert set(_histogram(_draws(source, [1, 9, 6, 10, 2, 0], 2, 3000))) == {6, 11}
    # left neighbour 11 occurs once as a left context: the unigram row
    unigram = set(_histogram(_draws(source, [1, 11, 6, 11, 2, 0], 2, 3000)))
    assert unigram <= {4, 5, 6, 7, 8, 9, 10, 11} and len(unigram) > 3
    assert not unigram & set(SPECIAL.never_masked)


def test_the_table_round_trips_without_pickle(table: NgramTable, tmp_path: Path) -> None:
    table.save(tmp_path / NGRAM_FILE)
    back = NgramTable.load(tmp_path / NGRAM_FILE)
    assert back.settings == table.settings and back.vocab_size == table.vocab_size
    for name in ("context_keys", "offsets", "tokens", "counts", "row_totals"):
        assert np.array_equal(getattr(back, name), getattr(table, name))
    (tmp_path / "bad.npz").write_bytes(b"not a table")
    with pytest.raises(ValueError, match="bad.npz"):
        NgramTable.load(tmp_path / "bad.npz")


# -- in the model and the trainer --------------------------------------------------------


def _run(blocks: Path, out: Path, *extra: str):
    return tiny_config(
        blocks,
        out,
        "objective.objective='rtd-ngram'",
        "optim.max_steps=6",
        "run.save_every=3",
        "run.log_every=1",
        "run.eval_every=0",
        *extra,
    )


def test_replacements_in_the_model_are_never_special(blocks: Path) -> None:
    from electra.blocks.read import open_blocks
    from electra.pretrain.config import ObjectiveConfig, resolve_model
    from electra.pretrain.ngram import table_settings
    from electra.pretrain.objective import ElectraForPretraining, SampleRNG

    train = open_blocks(blocks, "train")
    cfg = tiny_config(blocks, Path("unused"), "objective.objective='rtd-ngram'")
    model_cfg = resolve_model(cfg, train.vocab_size, "test")
    obj = ObjectiveConfig(objective="rtd-ngram")
    model = ElectraForPretraining(model_cfg, obj, train.special)
    assert model.generator is None
    with pytest.raises(RuntimeError, match="no replacement source"):
        model(torch.from_numpy(train.get(np.arange(2))[0]))
    model.attach_replacements(NgramSource(build_ngram_table(train, table_settings(obj), False)))
    ids = torch.from_numpy(train.get(np.arange(8))[0])
    out = model(ids, rng=SampleRNG(range(8)), keep_tensors=True)
    assert out.mlm_loss is None and out.disc_loss is not None
    changed = out.corrupted_ids != ids
    assert changed.any()
    assert not torch.isin(
        out.corrupted_ids[changed], torch.tensor(train.special.never_masked)
    ).any()


def test_an_interrupted_run_resumes_exactly(blocks: Path, tmp_path: Path) -> None:
    from electra.pretrain.trainer import Trainer

    ref, cut = tmp_path / "ref", tmp_path / "cut"
    Trainer(_run(blocks, ref, "run.export=false")).fit()
    Trainer(_run(blocks, cut, "run.export=false")).fit()
    assert (cut / NGRAM_FILE).is_file()
    shutil.rmtree(ckpt.step_dirs(cut / "checkpoints")[0].path)  # back to step 3
    summary = Trainer(_run(blocks, cut, "run.export=false"), resume=True).fit()
    assert summary["step"] == 6
    assert step_losses(cut) == step_losses(ref) and sorted(step_losses(ref)) == list(range(1, 7))
    want, _, _ = ckpt.load(ckpt.latest_valid(ref / "checkpoints").path)
    got, _, _ = ckpt.load(ckpt.latest_valid(cut / "checkpoints").path)
    assert not any(k.startswith("generator.") for k in want)
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


def test_a_resume_with_other_table_settings_is_refused(blocks: Path, tmp_path: Path) -> None:
    from electra.pretrain.trainer import Trainer

    run = tmp_path / "run"
    Trainer(_run(blocks, run, "run.export=false")).fit()
    with pytest.raises(ValueError, match="resume with the same config"):
        Trainer(_run(blocks, run, "objective.ngram_top_k=3", "optim.max_steps=8"), True).fit()


def test_flops_charge_the_discriminator_and_the_sampling_only() -> None:
    from electra.model.config import preset
    from electra.pretrain.flops import (
        NGRAM_SAMPLE_FLOPS,
        output_frac_for,
        paper_forward_flops_per_token,
        paper_train_flops_per_step,
    )

    disc = preset("small", vocab_size=8000)
    rtd = paper_train_flops_per_step(disc, 128, 128, "rtd")
    ngram = paper_train_flops_per_step(disc, 128, 128, "rtd-ngram")
    mlm = paper_train_flops_per_step(disc, 128, 128, "mlm")
    frac = output_frac_for(0.15)
    alone = paper_forward_flops_per_token(disc, 128, "disc", frac)
    assert ngram == pytest.approx((2 * alone + frac * NGRAM_SAMPLE_FLOPS) * 128 * 128)
    assert ngram < rtd and ngram < mlm


def test_export_has_no_generator_and_loads_in_transformers(blocks: Path, tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from electra.pretrain.trainer import Trainer

    run = tmp_path / "run"
    Trainer(_run(blocks, run)).fit()
    assert not (run / "hf" / "generator").exists()
    disc = run / "hf" / "discriminator"
    model, info = transformers.ElectraForPreTraining.from_pretrained(disc, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    card = (disc / "README.md").read_text()
    assert "rtd-ngram" in card and "without a generator" in card


def test_config_refuses_gdes_for_rtd_ngram() -> None:
    from electra.config import ConfigError
    from electra.pretrain.config import ObjectiveConfig

    with pytest.raises(ConfigError, match="rtd-ngram trains none"):
        ObjectiveConfig(objective="rtd-ngram", embedding_sharing="gdes")
    with pytest.raises(ConfigError, match="ngram_top_k"):
        ObjectiveConfig(objective="rtd-ngram", ngram_top_k=0)
