"""Packing documents into blocks, as the official ``ExampleBuilder`` does.

Building (as the official ``build_pretraining_dataset.py`` ``ExampleBuilder``)
------------------------------------------------------------------------------
Each document is split into sentences (at line breaks and after ``. ! ? 。
！ ？ …`` plus closing quotes/brackets when whitespace follows, which serves
Korean and English alike) and the sentences are tokenized. Sentences are
accumulated until their length reaches the target length; then

* 10% of the time the block gets a single segment (first-segment target
  100000), otherwise the first segment's target is ``(target - 3) // 2``;
* sentence by sentence, a sentence goes to the first segment if that is
  empty, or if it fits under the target, or — when the second segment is
  still empty and the first under target — with probability 1/2; all others
  go to the second segment;
* segments are truncated to ``max_length - 2`` and
  ``max(0, max_length - len(first) - 3)`` tokens;
* the block is ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]``, token types 0
  for ``[CLS] A [SEP]`` and 1 for ``B [SEP]``, padded with ``[PAD]``;
* the target length of the next block is ``max_length``, except 5% of the
  time a random length ``randint(5, max_length)``;
* the end of a document ends the block being built (blocks never mix
  documents).

(The rates are easily swapped in summaries, "10% of blocks shorter, 5%
single-segment"; the official code does the reverse — 10% single segment, 5%
random length — and we follow the code.)

Deviations, all documented in the manifest's ``builder`` entry:

1. Randomness is per document: a ``random.Random`` seeded from the seed, the
   file's sha256 and the document's position draws the document's first
   target length (same 5% rule, where the official code carries the last
   target over from the previous document) and everything else. The output
   is therefore identical for any number of worker processes and for any
   split of the work, and a document's blocks do not change when other
   files are added.
2. A "sentence" longer than ``max_length // 2`` tokens is cut into pieces of
   that size. The official code keeps it whole, and truncation then throws
   away all of a long line beyond one block (and often the next sentence);
   with half-block pieces a run of long sentences fills blocks with only the
   3 tokens per block that the official recipe always loses. Tokens lost to
   truncation are counted in the manifest (``tokens_dropped``; about 13% at
   ``max_length`` 128 on Korean Wikipedia, as with the official code).
3. Special-token strings in the text (a literal ``[SEP]``) are plain text,
   as in BERT's tokenizer (see :func:`electra.text.tokenizer.encoding_tokenizer`).

The train/validation split is by document (all parts of a very long document
go the same way): a document goes to validation when a number drawn from the
seed, the file's sha256 and the document's index is below
``validation_fraction``, so identical files split identically.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import AddedToken, Tokenizer

from electra.blocks.format import SPLITS

HANGUL = re.compile("[\uac00-\ud7a3]")


SENTENCE_END = re.compile(
    r"([.!?\u3002\uff01\uff1f\u2026]+[\"'\u201d\u2019\u300d\u300f)\]]*)\s+(?=\S)"
)


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: at line breaks and after sentence-final punctuation."""
    return [s for s in SENTENCE_END.sub("\\1\n", text).split("\n") if s and not s.isspace()]


# Between sentences, the worker's text carries this marker, registered as an added
# token: a whole document is then encoded as one sequence and the marker's id shows
# where its sentences end (one Encoding per document instead of one per sentence).
# Private-use characters; any occurrence in the input is replaced by a space.
SENTENCE_MARK = "\ue000\ue001"


def _marked(text: str) -> str:
    """``text`` (lines joined by newlines) with a marker after every sentence."""
    if "\ue000" in text:
        text = text.replace(SENTENCE_MARK, " ")
    text = SENTENCE_END.sub("\\1" + SENTENCE_MARK, text)
    return text.replace("\n", SENTENCE_MARK)


@dataclass
class BuildParams:
    max_length: int
    cls: int
    sep: int
    pad: int
    validation_fraction: float
    dtype: str
    unk: int = -1  # the [UNK] id, counted per split (-1: none counted)

    @property
    def piece(self) -> int:
        return max(1, self.max_length // 2)


# one document (part) of a unit of work: builder seed, split number, first part?, text
Doc = tuple[int, float, bool, str]


_STAT_KEYS = (
    "blocks",
    "documents",
    "tokens",
    "tokens_dropped",
    "single_segment",
    "random_target",
    "sentences",
    "encoded_tokens",  # the documents' tokens before packing (sentence marks not counted)
    "unk_tokens",  # how many of those are [UNK]: a tokenizer that cannot read the text
)


class BlockPlan:
    """Blocks as pieces of a flat token array, assembled at once by :meth:`assemble`."""

    def __init__(self) -> None:
        self.src: list[int] = []  # piece start in the token array
        self.length: list[int] = []  # piece length
        self.block: list[int] = []  # block of the piece
        self.dst: list[int] = []  # offset of the piece in its block
        self.seps: list[int] = []  # flat positions (block * L + offset) of [SEP]s
        self.n_blocks = 0

    def add(self, first: list[tuple[int, int]], second: list[tuple[int, int]], L: int) -> None:
        b = self.n_blocks
        offset = 1
        for segment in (first, second):
            if segment is second and not second:
                break
            for start, n in segment:
                self.src.append(start)
                self.length.append(n)
                self.block.append(b)
                self.dst.append(offset)
                offset += n
            self.seps.append(b * L + offset)
            offset += 1
        self.n_blocks += 1

    def assemble(self, tokens: np.ndarray, params: BuildParams) -> np.ndarray:
        """The ``(blocks, max_length)`` array: ``[CLS] A [SEP] (B [SEP])`` and padding."""
        L = params.max_length
        out = np.full((self.n_blocks, L), params.pad, dtype=params.dtype)
        if not self.n_blocks:
            return out
        out[:, 0] = params.cls
        flat = out.reshape(-1)
        flat[np.asarray(self.seps, dtype=np.int64)] = params.sep
        lengths = np.asarray(self.length, dtype=np.int64)
        total = int(lengths.sum())
        if total:
            which = np.repeat(np.arange(len(lengths)), lengths)
            within = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
            src = np.asarray(self.src, dtype=np.int64)[which] + within
            dst = (
                np.asarray(self.block, dtype=np.int64)[which] * L
                + np.asarray(self.dst, dtype=np.int64)[which]
                + within
            )
            flat[dst] = tokens[src]
        return out


def build_document_blocks(
    starts: Sequence[int],
    lengths: Sequence[int],
    rng: random.Random,
    params: BuildParams,
    plan: BlockPlan,
    stats: dict[str, int],
) -> None:
    """Plan the blocks of one document, given its sentences as token ranges.

    Sentence ``i`` is ``tokens[starts[i] : starts[i] + lengths[i]]`` of the
    array later given to :meth:`BlockPlan.assemble`. This is the official
    ``ExampleBuilder`` (see the module docstring) working on lengths: sentences
    (cut into pieces of at most ``params.piece`` tokens) are gathered until they
    reach the target length, then become one block.
    """
    piece = params.piece
    target = _next_target(rng, params.max_length, stats)
    current: list[tuple[int, int]] = []
    length = 0
    for start, n in zip(starts, lengths, strict=True):
        if not n:
            continue
        stats["sentences"] += 1
        for i in range(0, n, piece):
            m = min(piece, n - i)
            current.append((start + i, m))
            length += m
            if length >= target:
                _add_block(current, target, rng, params, plan, stats)
                target = _next_target(rng, params.max_length, stats)
                current, length = [], 0
    if current:
        _add_block(current, target, rng, params, plan, stats)
        _next_target(rng, params.max_length, stats)  # as the official loop draws it


def _next_target(rng: random.Random, max_length: int, stats: dict[str, int]) -> int:
    """The next block's length: full, or (5% of the time) a random shorter one, so that
    the model also sees short inputs."""
    if rng.random() < 0.05:
        stats["random_target"] += 1
        return rng.randint(5, max_length)
    return max_length


def _add_block(
    current: list[tuple[int, int]],
    target: int,
    rng: random.Random,
    params: BuildParams,
    plan: BlockPlan,
    stats: dict[str, int],
) -> None:
    """Split the gathered pieces (``target`` tokens wanted) into segments A and B,
    truncate, and plan the block."""
    max_length = params.max_length
    first, second = _split_segments(current, rng, (target - 3) // 2)
    n_first, n_second = sum(n for _, n in first), sum(n for _, n in second)
    first, kept_first = _truncate(first, max_length - 2)
    second, kept_second = _truncate(second, max(0, max_length - kept_first - 3))
    if not second:
        stats["single_segment"] += 1
    plan.add(first, second, max_length)
    stats["tokens"] += kept_first + kept_second
    stats["tokens_dropped"] += n_first + n_second - kept_first - kept_second
    stats["blocks"] += 1


def _split_segments(
    current: list[tuple[int, int]], rng: random.Random, half: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Segments A and B: A takes about ``half`` the tokens (10% of the time all of
    them), with a coin flip for the piece that crosses the middle."""
    first_target = 100000 if rng.random() < 0.1 else half
    first: list[tuple[int, int]] = []
    second: list[tuple[int, int]] = []
    n_first = n_second = 0
    for s in current:
        n = s[1]
        if (
            not n_first
            or n_first + n < first_target
            or (not n_second and n_first < first_target and rng.random() < 0.5)
        ):
            first.append(s)
            n_first += n
        else:
            second.append(s)
            n_second += n
    return first, second


def _truncate(segment: list[tuple[int, int]], limit: int) -> tuple[list[tuple[int, int]], int]:
    """The first ``limit`` tokens of a segment given as ranges, and their number."""
    out, total = [], 0
    for start, n in segment:
        if total + n >= limit:
            if limit > total:
                out.append((start, limit - total))
            return out, limit
        out.append((start, n))
        total += n
    return out, total


class BlockPacker:
    """Fold consecutive part-filled blocks into one (``electra prepare --pack``).

    The official builder ends a block at every document's end, so a corpus of short
    documents (Wikipedia stubs, reviews) leaves much of each block as padding: in
    ``electra compare``'s default corpus a third of the positions a step is charged for.
    Packing, as RoBERTa's FULL-SENTENCES and Cramming do, folds a part-filled block into
    the one before it while both fit: ``[CLS] first [SEP] rest [SEP]``, the first block's
    tokens as segment A and the following blocks' as segment B. A block that is full, or
    that nothing could join, is written unchanged. No token is dropped or reordered.

    Streaming: :meth:`add` takes each unit of work's blocks in corpus order and returns
    the finished ones; the last part-filled block waits for the next unit (:meth:`flush`
    at the end), so the output does not depend on how the work was cut.
    """

    def __init__(self, params: BuildParams) -> None:
        self.params = params
        self.pending: list[np.ndarray] = []  # rows waiting to be folded together
        self.pending_tokens = 0  # their text tokens (no [CLS], [SEP], [PAD])
        self.folded = 0  # blocks folded into another so far

    def _text(self, row: np.ndarray) -> np.ndarray:
        p = self.params
        return row[(row != p.cls) & (row != p.sep) & (row != p.pad)]

    def add(self, blocks: np.ndarray) -> np.ndarray:
        """The finished blocks once ``blocks`` (``(n, max_length)``) are added."""
        out: list[np.ndarray] = []
        full = blocks[:, -1] != self.params.pad
        for row, is_full in zip(blocks, full, strict=True):
            if is_full:
                out += self._emit()
                out.append(row)
                continue
            n = len(self._text(row))
            if self.pending and self.pending_tokens + n + 3 > self.params.max_length:
                out += self._emit()
            self.pending.append(row)
            self.pending_tokens += n
        return np.stack(out) if out else blocks[:0]

    def flush(self) -> np.ndarray:
        """The last block waiting, if any (``(0 or 1, max_length)``)."""
        rows = self._emit()
        return np.stack(rows) if rows else np.zeros((0, self.params.max_length), np.int64)

    def _emit(self) -> list[np.ndarray]:
        rows, self.pending, self.pending_tokens = self.pending, [], 0
        if len(rows) <= 1:
            return rows
        p = self.params
        first = self._text(rows[0])
        rest = np.concatenate([self._text(r) for r in rows[1:]])
        block = np.full(p.max_length, p.pad, dtype=rows[0].dtype)
        a, b = len(first), len(rest)
        block[0], block[1 + a], block[2 + a + b] = p.cls, p.sep, p.sep
        block[1 : 1 + a], block[2 + a : 2 + a + b] = first, rest
        self.folded += len(rows) - 1
        return [block]


def empty_stats() -> dict[str, int]:
    return dict.fromkeys(_STAT_KEYS, 0)


class Builder:
    """Tokenize a chunk of documents and build their blocks."""

    def __init__(self, tokenizer_json: str, params: BuildParams) -> None:
        self.tok = Tokenizer.from_str(tokenizer_json)
        self.tok.add_special_tokens([AddedToken(SENTENCE_MARK, normalized=False, special=True)])
        self.mark = self.tok.token_to_id(SENTENCE_MARK)
        self.params = params

    def __call__(self, chunk: list[Doc]) -> dict[str, Any]:
        params = self.params
        encodings = self.tok.encode_batch_fast(
            [_marked(text) for *_, text in chunk], add_special_tokens=False
        )
        doc_len = np.fromiter((len(e) for e in encodings), dtype=np.int64, count=len(encodings))
        tokens = np.fromiter(
            itertools.chain.from_iterable(e.ids for e in encodings),
            dtype=np.int64,
            count=int(doc_len.sum()),
        )
        doc_end = np.cumsum(doc_len)
        doc_start = doc_end - doc_len
        marks = np.flatnonzero(tokens == self.mark)
        # sentences: [doc start | after a mark] .. [a mark | doc end]
        starts = np.sort(np.concatenate([doc_start, marks + 1]))
        ends = np.sort(np.concatenate([marks, doc_end]))
        first_sentence = np.searchsorted(marks, doc_start) + np.arange(len(chunk))
        first_sentence = np.append(first_sentence, len(starts))
        starts_l, lengths_l = starts.tolist(), (ends - starts).tolist()
        encoded, unk = _per_document(tokens, doc_start, doc_end, self.mark, params.unk)
        plans = {s: BlockPlan() for s in SPLITS}
        stats = {s: empty_stats() for s in SPLITS}
        for k, (seed, u, first_part, _) in enumerate(chunk):
            split = "validation" if u < params.validation_fraction else "train"
            if first_part:
                stats[split]["documents"] += 1
            stats[split]["encoded_tokens"] += encoded[k]
            stats[split]["unk_tokens"] += unk[k]
            a, b = first_sentence[k], first_sentence[k + 1]
            build_document_blocks(
                starts_l[a:b], lengths_l[a:b], random.Random(seed), params, plans[split],
                stats[split],
            )  # fmt: skip
        return {s: (plans[s].assemble(tokens, params), stats[s]) for s in SPLITS}


def _per_document(
    tokens: np.ndarray, doc_start: np.ndarray, doc_end: np.ndarray, mark: int, unk: int
) -> tuple[list[int], list[int]]:
    """Per document: its tokens (sentence marks not counted) and how many are ``unk``."""
    marks = np.concatenate([[0], np.cumsum(tokens == mark)])
    unks = np.concatenate([[0], np.cumsum(tokens == unk)])
    n_marks = marks[doc_end] - marks[doc_start]
    encoded = (doc_end - doc_start) - n_marks
    return encoded.tolist(), (unks[doc_end] - unks[doc_start]).tolist()


_M64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """splitmix64's finaliser: a well-mixed 64-bit function of ``x``."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def file_key(seed: int, file_sha: str) -> int:
    h = hashlib.blake2b(f"{seed}:{file_sha}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little")


def doc_keys(file_key: int, index: int, part: int) -> tuple[int, float]:
    """The seed of a document part's builder and the uniform number of its split."""
    doc = _mix64(file_key ^ _mix64(index))
    return _mix64(doc ^ _mix64(part + 0x5EED)), doc / 2.0**64
