"""``electra prepare --pack``: part-filled blocks folded together, no token lost or moved."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from electra.blocks.build import BlockPacker, BuildParams
from electra.blocks.format import MANIFEST
from electra.blocks.options import PrepareCommand
from electra.blocks.prepare import prepare
from electra.blocks.read import open_blocks, token_types

L = 16
PARAMS = BuildParams(max_length=L, cls=2, sep=3, pad=0, validation_fraction=0.0, dtype="uint16")


def block(a: list[int], b: list[int] = ()) -> np.ndarray:
    """``[CLS] a [SEP] (b [SEP])`` padded to ``L``."""
    row = [2, *a, 3] + ([*b, 3] if b else [])
    return np.array(row + [0] * (L - len(row)), dtype=np.uint16)


def text(rows: np.ndarray) -> list[int]:
    """Every row's text tokens, in order (no [CLS], [SEP], [PAD])."""
    flat = rows.reshape(-1)
    return flat[flat > 3].tolist()


def pack(rows: list[np.ndarray], cuts: tuple[int, ...] = ()) -> np.ndarray:
    """Pack ``rows`` given to the packer in pieces cut at ``cuts``, then flushed."""
    packer, out, edges = BlockPacker(PARAMS), [], [0, *cuts, len(rows)]
    for lo, hi in zip(edges, edges[1:], strict=False):
        out.append(packer.add(np.stack(rows[lo:hi]) if hi > lo else np.zeros((0, L), np.uint16)))
    out.append(packer.flush())
    return np.concatenate(out)


def test_part_filled_blocks_fold_while_they_fit_and_full_ones_stay() -> None:
    full = np.arange(100, 100 + L, dtype=np.uint16)
    full[0], full[7], full[-1] = 2, 3, 3  # [CLS] 6 tokens [SEP] 7 tokens [SEP]: no padding
    rows = [block([10, 11, 12]), block([20, 21], [22]), block([30]), full, block([40] * 12)]
    rows.append(block([50, 51]))
    out = pack(rows)
    # the first three fold: 3 + 3 + 1 text tokens + 3 specials = 10 <= 16
    assert out[0].tolist() == block([10, 11, 12], [20, 21, 22, 30]).tolist()
    assert out[1].tolist() == full.tolist()  # a full block is never touched
    # 12 + 2 + 3 = 17 > 16: the last two cannot fold, each is written as it was
    assert out[2].tolist() == rows[4].tolist() and out[3].tolist() == rows[5].tolist()
    assert len(out) == 4
    assert text(out) == text(np.stack(rows))  # no token lost, none moved


def test_the_packing_does_not_depend_on_how_the_stream_was_cut() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(200):
        n = int(rng.integers(1, L - 2))
        a = rng.integers(5, 900, size=n).tolist()
        cut = int(rng.integers(0, n))
        rows.append(block(a[: cut or n], a[cut:] if cut else []))
    whole = pack(rows)
    for cuts in [(1,), (50, 51, 120), tuple(range(0, 200, 7))]:
        assert np.array_equal(pack(rows, cuts), whole)
    assert text(whole) == text(np.stack(rows))
    assert len(whole) < 0.75 * len(rows)  # short blocks fold
    types = token_types(whole.astype(np.int64), PARAMS.sep)
    assert (whole[:, 0] == 2).all() and ((whole == 3).sum(1) <= 2).all()
    assert ((types == 1) <= (whole != 0)).all()  # segment B never covers padding


def _prepare(corpus: Path, tokenizer: Path, out: Path, **kw) -> Path:
    options = {"max_length": 64, "validation_fraction": 0.1, "workers": 1, **kw}
    return prepare(
        PrepareCommand(
            inputs=[str(corpus)],
            tokenizer=str(tokenizer),
            output=str(out),
            progress=False,
            **options,
        )
    )


@pytest.fixture(scope="module")
def both(tmp_path_factory, mixed_corpus: Path, tiny_tokenizer: Path) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("pack")
    plain = _prepare(mixed_corpus, tiny_tokenizer, tmp / "plain")
    return plain, _prepare(mixed_corpus, tiny_tokenizer, tmp / "packed", pack=True)


def test_prepare_pack_keeps_every_token_in_fewer_fuller_blocks(both: tuple[Path, Path]) -> None:
    plain, packed = both
    m0 = json.loads((plain / MANIFEST).read_text())
    m1 = json.loads((packed / MANIFEST).read_text())
    assert m0["fingerprint"] != m1["fingerprint"] and "pack" in m1["builder"]
    assert "pack" not in m0["builder"]  # blocks built before --pack keep their fingerprint
    for split in ("train", "validation"):
        a, b = open_blocks(plain, split), open_blocks(packed, split)
        ids_a, _ = a.get(np.arange(len(a)))
        ids_b, types_b = b.get(np.arange(len(b)))
        assert text(ids_b) == text(ids_a)  # the same tokens in the same order
        assert len(b) == m1["splits"][split]["blocks"] < len(a)
        assert m1["splits"][split]["blocks_folded"] == len(a) - len(b)
        assert m1["splits"][split]["tokens"] == m0["splits"][split]["tokens"]
        assert (ids_b != 0).mean() > (ids_a != 0).mean()
        assert ((types_b == 1) <= (ids_b != 0)).all()


def test_prepare_pack_is_the_same_for_any_number_of_workers(
    both: tuple[Path, Path], mixed_corpus: Path, tiny_tokenizer: Path, tmp_path: Path
) -> None:
    again = _prepare(mixed_corpus, tiny_tokenizer, tmp_path / "w2", pack=True, workers=2)
    m1 = json.loads((both[1] / MANIFEST).read_text())
    assert json.loads((again / MANIFEST).read_text())["splits"] == m1["splits"]
