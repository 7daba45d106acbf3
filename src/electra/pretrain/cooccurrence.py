"""Count-based token vectors from prepared blocks: a warm start for the embedding table.

At a CPU budget (a few million tokens) neither RTD nor MLM moves the token
embeddings far from their random start, and a random table is what both
fine-tunings then begin from (``benchmarks/results/recipe_search.md``). Word
vectors from co-occurrence counts are the classic cheap alternative (Levy &
Goldberg 2014; Levy, Goldberg & Dagan 2015): count how often two tokens appear
within ``window`` positions of each other, keep the positive pointwise mutual
information (PPMI, context counts smoothed by ``alpha`` = 0.75), and take a
rank-``dim`` truncated SVD, ``U * sqrt(S)``. On 3M tokens of Korean text this
takes about 30 CPU-seconds and gives vectors in which tokens used alike are
close, which the transformer's pre-training and fine-tuning then start from.

:func:`ppmi_vectors` computes the table from a :class:`~electra.blocks.read.Blocks`
split; :func:`warm_start_embeddings` writes it into a pre-training model's
shared embedding table (``init.token_embeddings = "ppmi"``), scaled to the
random initialisation's standard deviation, so every other part of the
recipe (learning rate, layer norms) sees the usual magnitudes. Special tokens
and tokens never seen keep their random rows.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:
    from electra.blocks.read import Blocks
    from electra.pretrain.objective import ElectraForPretraining

# What init.token_embeddings = "ppmi" did, in the run directory: written at the start, so a
# resumed (or still running) run says it too.
WARM_START_FILE = "token_embeddings.json"

# Blocks read per chunk: bounds the pair arrays (2 * window entries per token).
_CHUNK_TOKENS = 1 << 20


def blocks_read(blocks: Blocks, max_tokens: int) -> int:
    """How many blocks (from the start of the split) hold at most ``max_tokens`` tokens."""
    return min(len(blocks), max(1, max_tokens // blocks.block_length))


def cooccurrence_counts(
    blocks: Blocks, window: int = 5, max_tokens: int = 20_000_000
) -> sp.csr_matrix:
    """Symmetric (V, V) counts of token pairs at distance 1..window in the same block.

    A pair at distance d counts 1/d (nearer neighbours say more). At most
    ``max_tokens`` tokens are read, from the start of the split (blocks are
    stored shuffled, so that is a sample of the corpus); padding never counts.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    v, length = blocks.vocab_size, blocks.block_length
    n_blocks = blocks_read(blocks, max_tokens)
    per_chunk = max(1, _CHUNK_TOKENS // length)
    total = sp.csr_matrix((v, v), dtype=np.float64)
    for start in range(0, n_blocks, per_chunk):
        ids, _ = blocks.get(np.arange(start, min(n_blocks, start + per_chunk)))
        rows, cols, weights = [], [], []
        for d in range(1, min(window, length - 1) + 1):
            a, b = ids[:, :-d].ravel(), ids[:, d:].ravel()
            keep = (a != blocks.pad_id) & (b != blocks.pad_id)
            a, b = a[keep], b[keep]
            rows += [a, b]
            cols += [b, a]
            weights.append(np.full(2 * a.size, 1.0 / d))
        pairs = sp.coo_matrix(
            (np.concatenate(weights), (np.concatenate(rows), np.concatenate(cols))),
            shape=(v, v),
        )
        total = total + pairs.tocsr()
    return total


def ppmi_vectors(
    counts: sp.spmatrix,
    dim: int,
    skip: list[int] | tuple[int, ...] = (),
    alpha: float = 0.75,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """(vectors (V, dim), seen (V,) bool): rank-``dim`` SVD of the PPMI of ``counts``.

    ``skip``: token ids (the special tokens) left out of the statistics; their
    rows, and those of tokens with no co-occurrence, are zero and ``seen`` is
    False there. Deterministic for a given ``seed``.
    """
    from sklearn.utils.extmath import randomized_svd

    c = sp.csr_matrix(counts, dtype=np.float64, copy=True)
    c.setdiag(0)
    if skip:
        mask = np.ones(c.shape[0])
        mask[list(skip)] = 0
        d = sp.diags(mask)
        c = d @ c @ d
    c.eliminate_zeros()
    total = c.sum()
    if total <= 0:
        raise ValueError("no co-occurrences to build vectors from (empty or one-token blocks)")
    row = np.asarray(c.sum(axis=1)).ravel()
    ctx = np.asarray(c.sum(axis=0)).ravel() ** alpha
    ctx *= total / ctx.sum()  # smoothed context distribution, as counts
    coo = c.tocoo()
    pmi = np.log(coo.data * total / (row[coo.row] * ctx[coo.col]))
    keep = pmi > 0
    ppmi = sp.csr_matrix((pmi[keep], (coo.row[keep], coo.col[keep])), shape=c.shape)
    k = min(dim, min(ppmi.shape) - 1)
    u, s, _ = randomized_svd(ppmi, k, n_iter=5, random_state=seed)
    vectors = np.zeros((c.shape[0], dim))
    vectors[:, :k] = u * np.sqrt(s)
    seen = row > 0
    vectors[~seen] = 0.0
    return vectors, seen


def ppmi_table(
    blocks: Blocks,
    dim: int,
    std: float,
    window: int = 5,
    max_tokens: int = 20_000_000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(row ids, their vectors (n, dim) at standard deviation ``std``, what was done).

    The rows are the tokens seen in ``blocks`` other than [PAD]/[CLS]/[SEP]/[MASK];
    the rest of a table keeps its random rows.
    """
    t = time.perf_counter()
    special = blocks.special
    skip = sorted({special.pad, special.cls, special.sep, special.mask})
    counts = cooccurrence_counts(blocks, window, max_tokens)
    vectors, seen = ppmi_vectors(counts, dim, skip=skip, seed=seed)
    rows = np.flatnonzero(seen)
    values = vectors[rows] * (std / max(float(vectors[rows].std()), 1e-12))
    info = {
        "token_embeddings": "ppmi",
        "window": window,
        "tokens_counted": blocks_read(blocks, max_tokens) * blocks.block_length,
        "rows_replaced": int(rows.size),
        "seconds": round(time.perf_counter() - t, 1),
    }
    return rows, values, info


def warm_start_embeddings(
    model: ElectraForPretraining,
    blocks: Blocks,
    window: int = 5,
    max_tokens: int = 20_000_000,
    seed: int = 0,
) -> dict[str, Any]:
    """Overwrite ``model``'s shared token table with PPMI-SVD vectors of ``blocks``.

    The vectors are scaled so the rows replaced have the standard deviation of
    the random initialisation (``initializer_range``); under tied sharing the
    generator and discriminator both read this table, under ``gdes`` the
    generator's table is the shared one and the discriminator's delta stays
    zero. Returns what was done, for the run's log and summary.
    """
    import torch

    table = model.shared_embeddings.word_embeddings.weight
    std = float(model.config.initializer_range)
    rows, values, info = ppmi_table(blocks, table.shape[1], std, window, max_tokens, seed)
    with torch.no_grad():
        index = torch.from_numpy(rows).to(table.device)
        table[index] = torch.from_numpy(values).to(table.dtype).to(table.device)
    return info
