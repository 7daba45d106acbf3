"""Count-based token vectors (``init.token_embeddings = "ppmi"``) on known cases."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from electra.pretrain.cooccurrence import cooccurrence_counts, ppmi_vectors, warm_start_embeddings


class FakeBlocks:
    """The parts of :class:`electra.blocks.read.Blocks` the counts read."""

    def __init__(self, ids: np.ndarray, vocab_size: int) -> None:
        self.ids, self.vocab_size = ids, vocab_size
        self.block_length, self.pad_id = ids.shape[1], 0

    def __len__(self) -> int:
        return len(self.ids)

    def get(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.ids[indices], np.zeros_like(self.ids[indices])


def test_counts_weigh_pairs_by_distance_symmetrically_and_skip_padding() -> None:
    blocks = FakeBlocks(np.array([[5, 6, 7, 0, 0]]), vocab_size=10)
    c = cooccurrence_counts(blocks, window=2).toarray()
    assert c[5, 6] == c[6, 5] == 1.0 and c[6, 7] == c[7, 6] == 1.0
    assert c[5, 7] == c[7, 5] == 0.5  # distance 2 counts 1/2
    assert c[:, 0].sum() == c[0, :].sum() == 0  # padding never counts
    assert c.sum() == 5.0
    assert (c == c.T).all()


def test_tokens_used_alike_get_close_vectors() -> None:
    """Two groups of tokens that only ever co-occur within their group."""
    rng = np.random.default_rng(0)
    a, b = np.arange(5, 15), np.arange(15, 25)
    rows = [rng.choice(g, 16) for g in (a, b) for _ in range(200)]
    counts = cooccurrence_counts(FakeBlocks(np.stack(rows), vocab_size=30), window=3)
    vectors, seen = ppmi_vectors(counts, dim=4, skip=[0, 2, 3, 4])
    assert vectors.shape == (30, 4)
    assert seen[5:25].all() and not seen[:5].any() and not seen[25:].any()
    assert not vectors[~seen].any()  # unseen and special rows are left zero
    unit = vectors[5:25] / np.linalg.norm(vectors[5:25], axis=1, keepdims=True)
    cos = unit @ unit.T
    within = np.r_[cos[:10, :10][~np.eye(10, dtype=bool)], cos[10:, 10:][~np.eye(10, dtype=bool)]]
    assert within.mean() > 0.5
    assert cos[:10, 10:].mean() < 0.1
    again, _ = ppmi_vectors(counts, dim=4, skip=[0, 2, 3, 4])
    np.testing.assert_array_equal(vectors, again)  # deterministic


def test_no_cooccurrence_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no co-occurrences"):
        ppmi_vectors(sp.csr_matrix((8, 8)), dim=2)


@pytest.mark.parametrize("sharing", ["tied", "gdes"])
def test_warm_start_fills_the_shared_table_at_the_random_init_scale(
    blocks: Path, sharing: str
) -> None:
    from electra.blocks.read import open_blocks
    from electra.pretrain.config import ObjectiveConfig, load_config, resolve_model
    from electra.pretrain.objective import ElectraForPretraining

    train = open_blocks(blocks, "train")
    cfg = load_config("tiny", [f"data.blocks={json.dumps(str(blocks))}"])
    model_cfg = resolve_model(cfg, train.vocab_size, "config")
    torch.manual_seed(0)
    model = ElectraForPretraining(
        model_cfg, ObjectiveConfig(embedding_sharing=sharing), train.special
    )
    before = model.shared_embeddings.word_embeddings.weight.detach().clone()
    info = warm_start_embeddings(model, train)
    table = model.shared_embeddings.word_embeddings.weight.detach()
    changed = (table != before).any(dim=1)
    assert info["rows_replaced"] == int(changed.sum()) > 0.5 * train.vocab_size
    s = train.special
    assert not changed[[s.pad, s.cls, s.sep, s.mask]].any()  # special rows keep their init
    assert table[changed].std().item() == pytest.approx(model_cfg.initializer_range, rel=1e-3)
    # the discriminator reads the same table (tied: the same tensor; gdes: table + zero delta)
    disc = model.discriminator.electra.embeddings
    ids = torch.arange(train.vocab_size)[None]
    if sharing == "tied":
        assert disc.word_embeddings.weight is model.shared_embeddings.word_embeddings.weight
    else:
        torch.testing.assert_close(disc.table("word_embeddings")[ids[0]], table)


def test_a_ppmi_run_records_it_and_a_continued_run_refuses_it(blocks: Path, tmp_path: Path) -> None:
    from builders import tiny_config

    from electra.config import ConfigError
    from electra.pretrain.trainer import Trainer

    run = tmp_path / "run"
    cfg = tiny_config(
        blocks, run, "optim.max_steps=2", "run.eval_every=0", "init.token_embeddings='ppmi'"
    )
    summary = Trainer(cfg).fit()
    assert summary["token_embeddings"]["token_embeddings"] == "ppmi"
    assert json.loads((run / "token_embeddings.json").read_text())["rows_replaced"] > 0
    cont = tiny_config(
        blocks,
        tmp_path / "cont",
        f"init.discriminator={json.dumps(str(run / 'hf' / 'discriminator'))}",
        "init.token_embeddings='ppmi'",
    )
    with pytest.raises(ConfigError, match="init.token_embeddings"):
        Trainer(cont).fit()
