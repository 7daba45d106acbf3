"""A replacement source for RTD that costs almost nothing: counted, not trained.

``objective.objective = "rtd-ngram"`` trains the discriminator alone. At each
position the objective chose, the replacement is drawn from the training
blocks' own statistics, P(token | left neighbour, right neighbour), counted
once before step 0 the way the PPMI table is (:mod:`electra.pretrain.cooccurrence`),
so the discriminator gets plausible replacements from the first step and the
whole FLOPs budget goes to it (Di Liello et al., EMNLP 2022, replace from
token statistics with no generator; see ``shared/reference/SMALL-BUDGET.md``).

The table (:func:`build_ngram_table`), choices made:

* the context of a position is its two neighbours in the *original* block
  (``[CLS]``, ``[SEP]`` and ``[PAD]`` are contexts like any token; outside the
  block is one more id, ``vocab_size``); centre tokens are never special, so a
  special token is never proposed;
* contexts are kept exactly (a sorted array of ``left * (V + 1) + right``
  keys, looked up by binary search), not hashed: the same memory bound as a
  hash table of that size, without two contexts' counts mixing. Only contexts
  seen at least ``ngram_min_count`` times are kept, at most
  ``ngram_max_contexts`` of them (the most frequent), and per context the
  ``ngram_top_k`` most frequent centre tokens (ties by id) with their counts;
* a position whose context is not kept backs off to P(token | left
  neighbour) (top-k of that row, where the row has ``ngram_min_count``
  occurrences), else to the unigram distribution over every ordinary token
  seen (all of them, not a top-k);
* counting reads at most ``ngram_max_tokens`` tokens from the start of the
  split (stored shuffled, so a sample), chunk by chunk with numpy; memory is
  about 16 bytes per distinct (left, token, right) triple seen, merged after
  every chunk.

All levels live in one compressed table (rows of candidates: the contexts,
then one row per left neighbour, then the unigram row) whose weights are the
counts raised to ``1 / ngram_temperature`` (1: exactly the counts).
:class:`NgramSource` samples from it with one uniform number per position by
inverse CDF over the running sum of the weights (float64: exact for integer
counts), the same per-sample noise the RTD path draws for its generator
sample, so a block is corrupted identically wherever it lands and a resumed
run repeats an uninterrupted one. A sample is the original token with exactly
that token's share of its row's counts (then it is labelled original, as in
RTD); a token of zero count in the row used is never drawn.

The table is saved once in the run directory (:data:`NGRAM_FILE`, an ``.npz``
of plain arrays, never a pickle) and read back on ``--resume``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

if TYPE_CHECKING:
    from electra.blocks.read import Blocks
    from electra.pretrain.config import ObjectiveConfig

NGRAM_FILE = "ngram_table.npz"
# The settings a table was built with: a saved table is reused only when they match.
SETTINGS = ("ngram_top_k", "ngram_min_count", "ngram_max_contexts", "ngram_max_tokens")
_CHUNK_TOKENS = 1 << 20
_MAX_VOCAB = 1 << 20  # keys (V + 1)^2 * V must fit in int64


@dataclass
class NgramTable:
    """The counted candidates, all levels in one compressed table (numpy, int64).

    Row ``r`` holds ``tokens[offsets[r]:offsets[r + 1]]`` with their ``counts``.
    Rows ``0 .. len(context_keys) - 1`` are the kept contexts (``context_keys``
    sorted), the next ``V + 1`` rows the left-neighbour rows (``V``: outside the
    block), the last row the unigram distribution; ``row_totals`` are the sums
    of counts per row *before* the top-k cut (the backoff decision reads them).
    """

    vocab_size: int
    context_keys: np.ndarray
    offsets: np.ndarray
    tokens: np.ndarray
    counts: np.ndarray
    row_totals: np.ndarray
    settings: dict[str, int]

    @property
    def n_contexts(self) -> int:
        return int(self.context_keys.size)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the arrays (and settings) as an ``.npz`` atomically (no pickle)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp.npz")
        arrays = {k: getattr(self, k) for k in _ARRAYS}
        np.savez(tmp, vocab_size=np.int64(self.vocab_size), **arrays, **_settings_arrays(self))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> NgramTable:
        """The table :meth:`save` wrote; ValueError naming the file when it is not one."""
        try:
            with np.load(path, allow_pickle=False) as z:
                settings = {k: int(z[f"setting_{k}"]) for k in SETTINGS}
                return cls(int(z["vocab_size"]), *(z[k] for k in _ARRAYS), settings=settings)
        except (KeyError, ValueError, OSError) as exc:
            raise ValueError(f"{path}: not an n-gram table written by electra ({exc})") from None


_ARRAYS = ("context_keys", "offsets", "tokens", "counts", "row_totals")


def _settings_arrays(table: NgramTable) -> dict[str, np.ndarray]:
    return {f"setting_{k}": np.int64(table.settings[k]) for k in SETTINGS}


def _chunk_triples(ids: np.ndarray, v: int, special: tuple[int, ...]) -> np.ndarray:
    """Sorted unique (left, right, centre) keys of a chunk of blocks and their counts, (2, n)."""
    edge = np.full((ids.shape[0], 1), v, dtype=np.int64)
    left = np.concatenate([edge, ids[:, :-1]], axis=1)
    right = np.concatenate([ids[:, 1:], edge], axis=1)
    ordinary = ~np.isin(ids, np.asarray(special, dtype=np.int64))
    keys = (left * (v + 1) + right) * v + ids
    uniq, n = np.unique(keys[ordinary], return_counts=True)
    return np.stack([uniq, n.astype(np.int64)])


def _merge(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two (2, n) key/count arrays as one, keys unique and sorted."""
    keys = np.concatenate([a[0], b[0]])
    uniq, inverse = np.unique(keys, return_inverse=True)
    counts = np.bincount(inverse, weights=np.concatenate([a[1], b[1]]), minlength=uniq.size)
    return np.stack([uniq, counts.astype(np.int64)])


def count_triples(
    blocks: Blocks, max_tokens: int, progress: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(keys, counts) of every (left, token, right) seen in the first ``max_tokens``
    tokens: keys ``(left * (V + 1) + right) * V + token``, sorted and unique."""
    from electra.pretrain.cooccurrence import blocks_read

    v, length = blocks.vocab_size, blocks.block_length
    if v > _MAX_VOCAB:
        raise ValueError(f"rtd-ngram: a vocabulary of {v} tokens is above {_MAX_VOCAB}")
    n_blocks = blocks_read(blocks, max_tokens)
    per_chunk = max(1, _CHUNK_TOKENS // length)
    total = np.zeros((2, 0), dtype=np.int64)
    special = blocks.special.never_masked
    starts = range(0, n_blocks, per_chunk)
    bar = tqdm(starts, desc="n-gram table", unit="chunk", disable=not progress, leave=False)
    for start in bar:
        ids, _ = blocks.get(np.arange(start, min(n_blocks, start + per_chunk)))
        total = _merge(total, _chunk_triples(ids.astype(np.int64), v, special))
    return total[0], total[1]


def _top_k_rows(
    rows: np.ndarray, tokens: np.ndarray, counts: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row (``rows`` sorted), its ``k`` most frequent tokens (ties: lower id first):
    (row of each kept entry, token, count), grouped by row."""
    order = np.lexsort((tokens, -counts, rows))
    rows, tokens, counts = rows[order], tokens[order], counts[order]
    first = np.r_[True, rows[1:] != rows[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(rows.size), 0))
    keep = np.arange(rows.size) - start < k
    return rows[keep], tokens[keep], counts[keep]


def _row_sums(rows: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unique rows, summed counts) of sorted ``rows``."""
    uniq, inverse = np.unique(rows, return_inverse=True)
    return uniq, np.bincount(inverse, weights=counts, minlength=uniq.size).astype(np.int64)


def _context_level(
    ctx: np.ndarray, tokens: np.ndarray, counts: np.ndarray, s: dict[str, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(kept context keys, their row totals, entries' row index, tokens, counts)."""
    keys, totals = _row_sums(ctx, counts)
    kept = totals >= s["ngram_min_count"]
    if kept.sum() > s["ngram_max_contexts"]:  # the most frequent (ties: lower key)
        order = np.lexsort((keys, -totals))[: s["ngram_max_contexts"]]
        kept = np.zeros_like(kept)
        kept[order] = True
    keys, totals = keys[kept], totals[kept]
    inside = np.isin(ctx, keys)
    rows = np.searchsorted(keys, ctx[inside])
    r, t, c = _top_k_rows(rows, tokens[inside], counts[inside], s["ngram_top_k"])
    return keys, totals, r, t, c


def build_ngram_table(
    blocks: Blocks, settings: dict[str, int], progress: bool = True
) -> NgramTable:
    """Count the blocks and build the three-level table (see the module docstring)."""
    v = blocks.vocab_size
    keys, counts = count_triples(blocks, settings["ngram_max_tokens"], progress)
    if keys.size == 0:
        raise ValueError(f"{blocks.directory}: no ordinary tokens to count for rtd-ngram")
    ctx, token = keys // v, keys % v
    c_keys, c_totals, c_rows, c_tok, c_cnt = _context_level(ctx, token, counts, settings)
    left = ctx // (v + 1)
    lt, inverse = np.unique(left * v + token, return_inverse=True)
    lt_counts = np.bincount(inverse, weights=counts).astype(np.int64)
    b_rows, b_tok = lt // v, lt % v
    b_rows, b_tok, b_cnt = _top_k_rows(b_rows, b_tok, lt_counts, settings["ngram_top_k"])
    b_totals = np.bincount(lt // v, weights=lt_counts, minlength=v + 1).astype(np.int64)
    u_tok, u_cnt = _row_sums(token, counts)
    rows = np.concatenate([c_rows, b_rows + c_keys.size, np.full(u_tok.size, c_keys.size + v + 1)])
    n_rows = c_keys.size + v + 2
    offsets = np.zeros(n_rows + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(np.bincount(rows, minlength=n_rows))
    return NgramTable(
        vocab_size=v,
        context_keys=c_keys.astype(np.int64),
        offsets=offsets,
        tokens=np.concatenate([c_tok, b_tok, u_tok]).astype(np.int64),
        counts=np.concatenate([c_cnt, b_cnt, u_cnt]).astype(np.int64),
        row_totals=np.concatenate([c_totals, b_totals, [int(u_cnt.sum())]]).astype(np.int64),
        settings=dict(settings),
    )


def table_settings(objective: ObjectiveConfig) -> dict[str, int]:
    """The table-building settings of an objective config (what :data:`SETTINGS` names)."""
    return {k: int(getattr(objective, k)) for k in SETTINGS}


class NgramSource:
    """Samples replacements from an :class:`NgramTable`, on a device.

    :meth:`row_of` picks each position's row (context, else left neighbour,
    else unigram); :meth:`sample` draws one token per position from its row
    with the given uniform numbers.
    """

    def __init__(
        self, table: NgramTable, temperature: float = 1.0, device: torch.device | str = "cpu"
    ) -> None:
        if temperature <= 0:
            raise ValueError(f"ngram_temperature must be positive, got {temperature}")
        self.table, self.v = table, table.vocab_size
        self.min_count = table.settings["ngram_min_count"]
        dev = torch.device(device)
        weights = table.counts.astype(np.float64) ** (1.0 / temperature)
        cum = np.concatenate([[0.0], np.cumsum(weights)])
        self.keys = torch.from_numpy(table.context_keys).to(dev)
        self.tokens = torch.from_numpy(table.tokens).to(dev)
        self.cum = torch.from_numpy(cum).to(dev)  # (entries + 1,) float64
        self.offsets = torch.from_numpy(table.offsets).to(dev)
        left_totals = table.row_totals[table.n_contexts : -1]  # V + 1 left-neighbour rows
        self.left_ok = torch.from_numpy(left_totals >= max(self.min_count, 1)).to(dev)

    def row_of(self, input_ids: Tensor, positions: Tensor) -> Tensor:
        """(N,) the table row for each flat position of (B, L) original ``input_ids``."""
        B, L = input_ids.shape
        flat = input_ids.reshape(-1)
        col = positions % L
        left = torch.where(col > 0, flat[(positions - 1).clamp(min=0)], self.v)
        right = torch.where(col < L - 1, flat[(positions + 1).clamp(max=B * L - 1)], self.v)
        key = left * (self.v + 1) + right
        n_ctx = self.keys.numel()
        if n_ctx:
            at = torch.searchsorted(self.keys, key).clamp(max=n_ctx - 1)
            found = self.keys[at] == key
        else:
            at, found = torch.zeros_like(key), torch.zeros_like(key, dtype=torch.bool)
        fallback = torch.where(self.left_ok[left], n_ctx + left, n_ctx + self.v + 1)
        return torch.where(found, at, fallback)

    def sample(self, rows: Tensor, u: Tensor) -> Tensor:
        """(N,) one token per row of the table, by inverse CDF with ``u`` (N,) in [0, 1)."""
        lo, hi = self.offsets[rows], self.offsets[rows + 1]
        base, top = self.cum[lo], self.cum[hi]
        point = base + u.to(torch.float64) * (top - base)
        idx = torch.searchsorted(self.cum, point, right=True) - 1
        idx = torch.minimum(torch.maximum(idx, lo), hi - 1)  # guard float rounding
        return self.tokens[idx]

    def replacements(self, input_ids: Tensor, positions: Tensor, u: Tensor) -> Tensor:
        """(N,) replacements at flat ``positions`` of (B, L) original ``input_ids``."""
        if positions.numel() == 0:
            return input_ids.new_empty(0)
        return self.sample(self.row_of(input_ids, positions), u)


def ngram_source(
    blocks: Blocks,
    objective: ObjectiveConfig,
    run_dir: Path,
    device: torch.device,
    *,
    reuse: bool,
    write: bool,
    progress: bool = True,
) -> tuple[NgramSource, dict[str, Any]]:
    """The run's source: the saved table when ``reuse`` (a resume) and its settings match,
    else built from ``blocks`` (and saved when ``write``, rank 0). Also what was done."""
    path = run_dir / NGRAM_FILE
    settings = table_settings(objective)
    t = time.perf_counter()
    table = NgramTable.load(path) if reuse and path.is_file() else None
    if table is not None and (table.settings != settings or table.vocab_size != blocks.vocab_size):
        raise ValueError(
            f"{path}: built with {table.settings} over {table.vocab_size} tokens, but the "
            f"run asks for {settings} over {blocks.vocab_size}: resume with the same config"
        )
    built = table is None
    if built:
        table = build_ngram_table(blocks, settings, progress)
        if write:
            run_dir.mkdir(parents=True, exist_ok=True)
            table.save(path)
    info = {
        "table": str(path),
        "built": built,
        "contexts": table.n_contexts,
        "entries": int(table.tokens.size),
        "seconds": round(time.perf_counter() - t, 1),
    }
    return NgramSource(table, objective.ngram_temperature, device), info
