"""Pre-training blocks: ``electra prepare`` writes them, :class:`Blocks` reads them.

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
   as in BERT's tokenizer (see :func:`electra.tokenizer.encoding_tokenizer`).

The train/validation split is by document (all parts of a very long document
go the same way): a document goes to validation when a number drawn from the
seed, the file's sha256 and the document's index is below
``validation_fraction``, so identical files split identically.

On disk
-------
``manifest.json`` (written last, atomically: a directory without it is an
incomplete or interrupted run), the tokenizer files (``vocab.txt``,
``tokenizer.json``, ...) and per split shards ``<split>-00000.npy``: ``.npy``
arrays of shape ``(blocks, max_length)``, ``uint16`` when the vocabulary
fits in 16 bits, else ``uint32``, padded with ``[PAD]``. Token types are not
stored: they follow from the ``[SEP]`` positions. Each shard is written
under a temporary name, fsynced and renamed, so a shard name always means a
complete shard; the manifest lists every shard with its block count and
sha256, and the sources with their sizes and sha256. Running ``prepare``
again with the same inputs, tokenizer and options finds the finished
directory and reuses it; ``--overwrite`` rebuilds it.

Reading
-------
:func:`open_blocks` memory-maps the shards; ``Blocks.get(indices)`` returns
``(input_ids, token_type_ids)`` as ``int64`` arrays by fancy indexing, with
no per-token Python work. The order in which training visits blocks is a
pure function of ``(seed, position)``: the global stream is the
concatenation over epochs ``e = 0, 1, ...`` of
``numpy.random.default_rng([seed, e]).permutation(N)``; a global batch of
``G = world_size * per_rank_batch`` blocks at position ``p`` is
``stream[p : p + G]`` and rank ``r`` takes ``stream[p + r*b : p + (r+1)*b]``.
One process at batch ``G`` and two at ``G/2`` therefore see exactly the
same blocks per step, and resuming at a saved position continues exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import logging
import multiprocessing
import os
import random
import re
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from tokenizers import AddedToken, Tokenizer
from tqdm import tqdm

from electra import __version__
from electra.config import ConfigError
from electra.corpus import Corpus, CorpusError, CorpusOptions, ReadOptions
from electra.files import atomic_write_text, fsync_dir, sha256_file
from electra.log import setup_cli_logging
from electra.special import SpecialIds
from electra.tokenizer import (
    TOKENIZER_FILES,
    encoding_tokenizer,
    load_tokenizer,
    save_tokenizer_files,
    special_id_map,
    tokenizer_settings,
    tokenizer_sha256,
)

log = logging.getLogger("electra")

FORMAT_NAME = "electra-blocks"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SPLITS = ("train", "validation")
CHUNK_CHARS = 1 << 20  # text per unit of work sent to a worker
_SHARD_RE = re.compile(r"^(train|validation)-\d{5}\.npy$")
_HANGUL = re.compile("[\uac00-\ud7a3]")

_SENTENCE_END = re.compile(
    r"([.!?\u3002\uff01\uff1f\u2026]+[\"'\u201d\u2019\u300d\u300f)\]]*)\s+(?=\S)"
)


# ---------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------


@dataclass
class PrepareCommand(CorpusOptions):
    """Turn a raw corpus into packed pre-training blocks.

    The corpus options (``inputs``, ``--format``, ``--on-error`` ...) are those
    of :class:`~electra.corpus.CorpusOptions`, shared with ``electra tokenizer``.
    """

    tokenizer: str = field(
        metadata={"doc": "Tokenizer directory (or its tokenizer.json / vocab.txt)."}
    )
    output: str = field(metadata={"doc": "Output directory.", "short": "-o"})
    max_length: int = field(default=128, metadata={"doc": "Block length in tokens."})
    validation_fraction: float = field(
        default=0.01, metadata={"doc": "Share of documents held out for validation."}
    )
    seed: int = field(default=0, metadata={"doc": "Seed of the split and the block builder."})
    file_is_document: bool = field(
        default=False,
        metadata={"doc": "Plain text: a whole file is one document (books), not blank-line units."},
    )
    workers: int = field(
        default=0, metadata={"doc": "Tokenizer worker processes (0: one per CPU core)."}
    )
    shard_size: int = field(default=100_000, metadata={"doc": "Blocks per shard file."})
    overwrite: bool = field(
        default=False, metadata={"doc": "Rebuild even if the output directory is complete."}
    )
    progress: bool = field(default=True, metadata={"doc": "Show a progress bar."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 8 <= self.max_length <= 65535:
            raise ConfigError(f"max_length must be in [8, 65535], got {self.max_length}")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ConfigError(
                f"validation_fraction must be in [0, 1), got {self.validation_fraction}"
            )
        if self.seed < 0:
            raise ConfigError(f"seed must be >= 0, got {self.seed}")
        if self.workers < 0:
            raise ConfigError(f"workers must be >= 0, got {self.workers}")
        if self.shard_size < 1:
            raise ConfigError(f"shard_size must be positive, got {self.shard_size}")

    def read_options(self, **extra: Any) -> ReadOptions:
        """The corpus options, with ``--file-is-document`` (a flag of this command only)."""
        return super().read_options(file_is_document=self.file_is_document, **extra)


# ---------------------------------------------------------------------------
# Block building (runs in the worker processes)
# ---------------------------------------------------------------------------


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: at line breaks and after sentence-final punctuation."""
    return [s for s in _SENTENCE_END.sub("\\1\n", text).split("\n") if s and not s.isspace()]


# Between sentences, the worker's text carries this marker, registered as an added
# token: a whole document is then encoded as one sequence and the marker's id shows
# where its sentences end (one Encoding per document instead of one per sentence).
# Private-use characters; any occurrence in the input is replaced by a space.
SENTENCE_MARK = "\ue000\ue001"


def _marked(text: str) -> str:
    """``text`` (lines joined by newlines) with a marker after every sentence."""
    if "\ue000" in text:
        text = text.replace(SENTENCE_MARK, " ")
    text = _SENTENCE_END.sub("\\1" + SENTENCE_MARK, text)
    return text.replace("\n", SENTENCE_MARK)


@dataclass
class BuildParams:
    max_length: int
    cls: int
    sep: int
    pad: int
    validation_fraction: float
    dtype: str

    @property
    def piece(self) -> int:
        return max(1, self.max_length // 2)


# one document (part) of a unit of work: builder seed, split number, first part?, text
_Doc = tuple[int, float, bool, str]

_STAT_KEYS = (
    "blocks",
    "documents",
    "tokens",
    "tokens_dropped",
    "single_segment",
    "random_target",
    "sentences",
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
    ``ExampleBuilder`` (see the module docstring) working on lengths.
    """
    max_length, piece = params.max_length, params.piece
    target = max_length
    if rng.random() < 0.05:
        target = rng.randint(5, max_length)
        stats["random_target"] += 1
    current: list[tuple[int, int]] = []
    length = 0

    def create() -> None:
        nonlocal target
        first_target = 100000 if rng.random() < 0.1 else (target - 3) // 2
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
        first, kept_first = _truncate(first, max_length - 2)
        second, kept_second = _truncate(second, max(0, max_length - kept_first - 3))
        if not second:
            stats["single_segment"] += 1
        plan.add(first, second, max_length)
        stats["tokens"] += kept_first + kept_second
        stats["tokens_dropped"] += n_first + n_second - kept_first - kept_second
        stats["blocks"] += 1
        if rng.random() < 0.05:
            target = rng.randint(5, max_length)
            stats["random_target"] += 1
        else:
            target = max_length

    for start, n in zip(starts, lengths, strict=True):
        if not n:
            continue
        stats["sentences"] += 1
        for i in range(0, n, piece):
            m = min(piece, n - i)
            current.append((start + i, m))
            length += m
            if length >= target:
                create()
                current.clear()
                length = 0
    if current:
        create()


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


def _empty_stats() -> dict[str, int]:
    return dict.fromkeys(_STAT_KEYS, 0)


class _Builder:
    """Tokenize a chunk of documents and build their blocks."""

    def __init__(self, tokenizer_json: str, params: BuildParams) -> None:
        self.tok = Tokenizer.from_str(tokenizer_json)
        self.tok.add_special_tokens([AddedToken(SENTENCE_MARK, normalized=False, special=True)])
        self.mark = self.tok.token_to_id(SENTENCE_MARK)
        self.params = params

    def __call__(self, chunk: list[_Doc]) -> dict[str, Any]:
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
        plans = {s: BlockPlan() for s in SPLITS}
        stats = {s: _empty_stats() for s in SPLITS}
        for k, (seed, u, first_part, _) in enumerate(chunk):
            split = "validation" if u < params.validation_fraction else "train"
            if first_part:
                stats[split]["documents"] += 1
            a, b = first_sentence[k], first_sentence[k + 1]
            build_document_blocks(
                starts_l[a:b], lengths_l[a:b], random.Random(seed), params, plans[split],
                stats[split],
            )  # fmt: skip
        return {s: (plans[s].assemble(tokens, params), stats[s]) for s in SPLITS}


_WORKER: _Builder | None = None


def _init_worker(tokenizer_json: str, params: BuildParams) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one process per core already
    global _WORKER
    _WORKER = _Builder(tokenizer_json, params)


def _work(chunk: list[_Doc]) -> dict[str, Any]:
    assert _WORKER is not None
    return _WORKER(chunk)


_M64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """splitmix64's finaliser: a well-mixed 64-bit function of ``x``."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _file_key(seed: int, file_sha: str) -> int:
    h = hashlib.blake2b(f"{seed}:{file_sha}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little")


def _doc_keys(file_key: int, index: int, part: int) -> tuple[int, float]:
    """The seed of a document part's builder and the uniform number of its split."""
    doc = _mix64(file_key ^ _mix64(index))
    return _mix64(doc ^ _mix64(part + 0x5EED)), doc / 2.0**64


# ---------------------------------------------------------------------------
# Shards and manifest
# ---------------------------------------------------------------------------


NPY_HEADER_BYTES = 128


def _npy_header(shape: tuple[int, ...], dtype: np.dtype) -> bytes:
    """A ``.npy`` (format 1.0) header of exactly ``NPY_HEADER_BYTES`` bytes."""
    descr = np.lib.format.dtype_to_descr(np.dtype(dtype))
    body = repr({"descr": descr, "fortran_order": False, "shape": tuple(shape)}).encode("latin1")
    pad = NPY_HEADER_BYTES - 10 - len(body) - 1
    if pad < 0:
        raise ValueError(f"shape {shape} does not fit a {NPY_HEADER_BYTES}-byte .npy header")
    return (
        b"\x93NUMPY\x01\x00"
        + (NPY_HEADER_BYTES - 10).to_bytes(2, "little")
        + body
        + b" " * pad
        + b"\n"
    )


class _ShardWriter:
    """Stream the blocks of one split into shards of ``shard_size`` blocks.

    A shard is written under a hidden temporary name, its header completed,
    fsynced and renamed; memory use is one unit of work, whatever the shard
    size.
    """

    def __init__(self, out: Path, split: str, shard_size: int, L: int, dtype: str) -> None:
        self.out, self.split, self.shard_size = out, split, shard_size
        self.L, self.dtype = L, np.dtype(dtype)
        self.shards: list[dict[str, Any]] = []
        self._file: BinaryIO | None = None
        self._rows = 0

    @property
    def _name(self) -> str:
        return f"{self.split}-{len(self.shards):05d}.npy"

    @property
    def _tmp(self) -> Path:
        return self.out / f".{self._name}.tmp"

    def add(self, arr: np.ndarray) -> None:
        start = 0
        while start < len(arr):
            if self._file is None:
                self._file = open(self._tmp, "wb")  # noqa: SIM115 - closed in _finish/abort
                self._file.write(b"\0" * NPY_HEADER_BYTES)
                self._rows = 0
            take = min(len(arr) - start, self.shard_size - self._rows)
            part = np.ascontiguousarray(arr[start : start + take], dtype=self.dtype)
            self._file.write(memoryview(part).cast("B"))
            self._rows += take
            start += take
            if self._rows == self.shard_size:
                self._finish()

    def _finish(self) -> None:
        f, tmp, final = self._file, self._tmp, self.out / self._name
        assert f is not None
        try:
            f.seek(0)
            f.write(_npy_header((self._rows, self.L), self.dtype))
            f.flush()
            os.fsync(f.fileno())
            f.close()
            sha = sha256_file(tmp)
            os.replace(tmp, final)
        except BaseException:
            f.close()
            tmp.unlink(missing_ok=True)
            self._file = None
            raise
        self.shards.append({"file": final.name, "blocks": self._rows, "sha256": sha})
        self._file = None

    def close(self) -> list[dict[str, Any]]:
        if self._file is not None:
            self._finish()
        return self.shards

    def abort(self) -> None:
        """Drop the shard being written (after an error or an interrupt)."""
        if self._file is not None:
            self._file.close()
            self._file = None
            self._tmp.unlink(missing_ok=True)


def _our_files(out: Path) -> list[Path]:
    names = set(TOKENIZER_FILES) | {MANIFEST}
    found = []
    for p in out.iterdir():
        if (
            p.name in names
            or _SHARD_RE.match(p.name)
            or p.name.startswith(".")
            and p.name.endswith(".tmp")
        ):
            found.append(p)
    return found


def _fingerprint(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _existing_complete(out: Path, fingerprint: str) -> dict[str, Any] | None:
    path = out / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        return None
    if manifest.get("fingerprint") != fingerprint:
        return None
    for split in manifest.get("splits", {}).values():
        for shard in split.get("shards", []):
            if not (out / shard["file"]).is_file():
                return None
    return manifest


# ---------------------------------------------------------------------------
# prepare
# ---------------------------------------------------------------------------


def _default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _chunks(
    corpus: Corpus, seed: int, shas: list[str], warn_hangul: bool = False
) -> Iterator[tuple[list[_Doc], int]]:
    """Documents grouped into units of work, with the input position after each."""
    chunk: list[_Doc] = []
    size = 0
    keys = [_file_key(seed, sha) for sha in shas]
    for file_index, doc in corpus.documents():
        if warn_hangul and _HANGUL.search(doc.lines[0]):
            log.warning(
                "the tokenizer strips accents, which decomposes Hangul syllables into jamo "
                "(%s has Korean text); use a tokenizer with strip_accents=false for Korean",
                corpus.files[file_index],
            )
            warn_hangul = False
        key, u = _doc_keys(keys[file_index], doc.index, doc.part)
        text = "\n".join(doc.lines)
        chunk.append((key, u, doc.part == 0, text))
        size += len(text)
        if size >= CHUNK_CHARS:
            yield chunk, corpus.position
            chunk, size = [], 0
    if chunk:
        yield chunk, corpus.position


def prepare(cmd: PrepareCommand) -> Path:
    """Build the blocks of ``cmd.inputs`` in ``cmd.output`` and return that directory."""
    t0 = time.time()
    opts = cmd.read_options()
    corpus = Corpus(cmd.inputs, opts)
    tok = load_tokenizer(cmd.tokenizer)
    special = special_id_map(tok)
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    settings = tokenizer_settings(tok)
    dtype = "uint16" if vocab_size <= 1 << 16 else "uint32"
    out = Path(cmd.output)
    if out.exists() and not out.is_dir():
        raise CorpusError(f"{out}: exists and is not a directory")

    sources = [
        {"path": str(f), "bytes": size, "sha256": sha256_file(f)}
        for f, size in zip(corpus.files, corpus.sizes, strict=True)
    ]
    options = {
        "max_length": cmd.max_length,
        "validation_fraction": cmd.validation_fraction,
        "seed": cmd.seed,
        "shard_size": cmd.shard_size,
        **dataclasses.asdict(opts),
    }
    builder_info = {
        "algorithm": "ELECTRA build_pretraining_dataset.py ExampleBuilder",
        "single_segment_prob": 0.1,
        "random_target_prob": 0.05,
        "random_target_range": [5, cmd.max_length],
        "sentence_piece_max_tokens": BuildParams(cmd.max_length, 0, 0, 0, 0, dtype).piece,
        "randomness": "per document: blake2b(seed, file sha256) mixed with the document index",
        "sentence_split": _SENTENCE_END.pattern,
    }
    fingerprint = _fingerprint(
        {
            "format_version": FORMAT_VERSION,
            "tokenizer_sha256": tokenizer_sha256(tok),
            "sources": [(s["sha256"], s["bytes"]) for s in sources],
            "options": options,
            "builder": builder_info,
        }
    )
    if out.is_dir():
        done = None if cmd.overwrite else _existing_complete(out, fingerprint)
        if done is not None:
            log.info("%s: already prepared from the same inputs and options; reusing it", out)
            return out
        ours = _our_files(out)
        others = [p for p in out.iterdir() if p not in ours]
        if ours and not cmd.overwrite:
            state = (
                "holds blocks prepared from other inputs or options"
                if (out / MANIFEST).exists()
                else "holds an incomplete prepare run (no manifest.json)"
            )
            raise CorpusError(f"{out}: {state}; use --overwrite to rebuild it")
        if others and not ours:
            raise CorpusError(
                f"{out}: is not empty and is not a prepared directory; choose another --output"
            )
        (out / MANIFEST).unlink(missing_ok=True)  # from now on the directory is incomplete
        for p in _our_files(out):
            p.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    save_tokenizer_files(tok, out)

    params = BuildParams(
        max_length=cmd.max_length,
        cls=special["cls"],
        sep=special["sep"],
        pad=special["pad"],
        validation_fraction=cmd.validation_fraction,
        dtype=dtype,
    )
    tok_json = encoding_tokenizer(tok).to_str()
    workers = cmd.workers or _default_workers()
    writers = {s: _ShardWriter(out, s, cmd.shard_size, cmd.max_length, dtype) for s in SPLITS}
    totals = {s: _empty_stats() for s in SPLITS}

    bar = None  # created at the first result: no tqdm thread yet when workers fork
    done_bytes = 0

    def consume(result: dict[str, Any], position: int) -> None:
        nonlocal done_bytes, bar
        for s in SPLITS:
            arr, stats = result[s]
            writers[s].add(arr)
            for k, v in stats.items():
                totals[s][k] += v
        if cmd.progress and bar is None:
            bar = tqdm(
                total=corpus.total_bytes,
                unit="B",
                unit_scale=True,
                desc="prepare",
                smoothing=0.1,
                dynamic_ncols=True,
            )
        if bar is not None:
            bar.update(position - done_bytes)
        done_bytes = position

    shas = [s["sha256"] for s in sources]
    chunks = _chunks(corpus, cmd.seed, shas, warn_hangul=settings["strip_accents"])
    try:
        if workers <= 1:
            build = _Builder(tok_json, params)
            for chunk, position in chunks:
                consume(build(chunk), position)
        else:
            _run_pool(chunks, workers, tok_json, params, consume)
        corpus.check_not_empty()
        shards = {s: writers[s].close() for s in SPLITS}
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    finally:
        if bar is not None:
            bar.close()
    if not totals["train"]["blocks"]:
        raise CorpusError("no training blocks: every document went to validation")
    if cmd.validation_fraction > 0 and not totals["validation"]["blocks"]:
        log.warning(
            "no document went to validation (validation_fraction %g of %d documents)",
            cmd.validation_fraction,
            totals["train"]["documents"],
        )

    splits = {}
    for s in SPLITS:
        splits[s] = {**totals[s], "shards": shards[s]}
    skipped = corpus.skipped_lines
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "fingerprint": fingerprint,
        "created_by": _version(),
        "block_length": cmd.max_length,
        "vocab_size": vocab_size,
        "dtype": dtype,
        "tokenizer": {
            "sha256": tokenizer_sha256(tok),
            "source": str(cmd.tokenizer),
            **settings,
        },
        "special_ids": special,
        "seed": cmd.seed,
        "splits": splits,
        "skipped_lines": skipped,
        "skipped_files": [s.path for s in corpus.stats if s.skipped_file],
        "empty_files": [s.path for s in corpus.stats if s.empty],
        "sources": [
            {**src, **stats.to_dict()} for src, stats in zip(sources, corpus.stats, strict=True)
        ],
        "options": options,
        "builder": builder_info,
        "seconds": round(time.time() - t0, 3),
    }
    body = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    _write_manifest(out, body)
    return out


def _write_manifest(out: Path, body: str) -> None:
    fsync_dir(out)  # the shards' renames first
    atomic_write_text(out / MANIFEST, body)
    fsync_dir(out)


def _run_pool(
    chunks: Iterator[tuple[list[_Doc], int]],
    workers: int,
    tok_json: str,
    params: BuildParams,
    consume: Any,
) -> None:
    # fork on Linux: no re-import of the caller's __main__ (spawn needs an importable,
    # guarded main module); the parent has used no tokenizer threads at this point.
    ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    window: deque[tuple[Future[dict[str, Any]], int]] = deque()
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(tok_json, params)
    ) as pool:
        try:
            for chunk, position in chunks:
                window.append((pool.submit(_work, chunk), position))
                if len(window) >= 2 * workers:
                    fut, pos = window.popleft()
                    consume(fut.result(), pos)
            while window:
                fut, pos = window.popleft()
                consume(fut.result(), pos)
        except BrokenProcessPool:
            raise CorpusError(
                "a tokenizer worker process died (out of memory, or killed?); "
                "run with --workers 1 to see the error in this process"
            ) from None
        except BaseException:
            for fut, _ in window:
                fut.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _version() -> str:
    return f"electra {__version__}"


def prepare_cli(cmd: PrepareCommand) -> int:
    """Turn a raw corpus into packed pre-training blocks.

    Writes memory-mappable shards of [CLS] A [SEP] B [SEP] blocks, the
    tokenizer files and manifest.json (written last) into --output.
    """
    setup_cli_logging()
    t0 = time.time()
    out = prepare(cmd)
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    tr, va = manifest["splits"]["train"], manifest["splits"]["validation"]
    mb = sum(s["bytes"] for s in manifest["sources"]) / 1e6
    dt = time.time() - t0
    fill = tr["tokens"] / max(1, tr["blocks"] * (manifest["block_length"] - 3))
    print(
        f"{out}: {tr['blocks']:,} train blocks ({tr['documents']:,} documents), "
        f"{va['blocks']:,} validation blocks ({va['documents']:,} documents) of "
        f"{manifest['block_length']} tokens, {100 * fill:.1f}% filled; "
        f"{mb:.1f} MB in {dt:.1f} s"
        + (f"; {manifest['skipped_lines']} bad lines skipped" if manifest["skipped_lines"] else "")
    )
    return 0


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


class Blocks:
    """The blocks of one split of a prepared directory, memory-mapped.

    ``get(indices)`` returns ``(input_ids, token_type_ids)``, both ``int64``
    of shape ``(len(indices), block_length)``, padded with ``[PAD]``.
    """

    MAX_OPEN_SHARDS = 256

    def __init__(self, directory: str | os.PathLike[str], split: str = "train") -> None:
        self.directory = Path(directory)
        path = self.directory / MANIFEST
        if not path.is_file():
            if not self.directory.exists():
                raise FileNotFoundError(f"{self.directory}: no such directory")
            raise CorpusError(
                f"{self.directory}: no {MANIFEST}; not a prepared directory, or an interrupted "
                "`electra prepare` run (run it again)"
            )
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CorpusError(f"{path}: unreadable manifest: {exc}") from None
        if (
            manifest.get("format") != FORMAT_NAME
            or manifest.get("format_version") != FORMAT_VERSION
        ):
            raise CorpusError(
                f"{path}: format {manifest.get('format')!r} version "
                f"{manifest.get('format_version')!r}; this electra reads {FORMAT_NAME!r} version "
                f"{FORMAT_VERSION}"
            )
        if split not in manifest["splits"]:
            raise CorpusError(
                f"{path}: no split {split!r}; choose one of {', '.join(manifest['splits'])}"
            )
        self.manifest: dict[str, Any] = manifest
        self.split = split
        self.block_length = int(manifest["block_length"])
        self.vocab_size = int(manifest["vocab_size"])
        self.dtype = np.dtype(manifest["dtype"])
        self.special_id_map: dict[str, int] = dict(manifest["special_ids"])
        self.pad_id = int(self.special_id_map["pad"])
        self.sep_id = int(self.special_id_map["sep"])
        self._shards = manifest["splits"][split]["shards"]
        counts = np.array([s["blocks"] for s in self._shards], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._open: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()
        for shard in self._shards:  # cheap size check of every shard
            p = self.directory / shard["file"]
            if not p.is_file():
                raise CorpusError(f"{p}: shard listed in the manifest is missing")
            expected = shard["blocks"] * self.block_length * self.dtype.itemsize
            if p.stat().st_size < expected:
                raise CorpusError(f"{p}: truncated shard (shorter than {shard['blocks']} blocks)")

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getstate__(self) -> dict[str, Any]:  # picklable (e.g. for DataLoader workers)
        state = dict(self.__dict__)
        state["_open"], state["_lock"] = {}, None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def special(self) -> SpecialIds:
        """The special token ids the objective needs."""
        return SpecialIds.from_map(self.special_id_map, self.vocab_size)

    def __repr__(self) -> str:
        return (
            f"Blocks({str(self.directory)!r}, split={self.split!r}, blocks={len(self)}, "
            f"block_length={self.block_length})"
        )

    def _shard(self, i: int) -> np.ndarray:
        with self._lock:
            arr = self._open.get(i)
            if arr is None:
                p = self.directory / self._shards[i]["file"]
                arr = np.load(p, mmap_mode="r")
                want = (self._shards[i]["blocks"], self.block_length)
                if arr.shape != want or arr.dtype != self.dtype:
                    raise CorpusError(
                        f"{p}: shape {arr.shape} {arr.dtype}, manifest says {want} {self.dtype}"
                    )
                if len(self._open) >= self.MAX_OPEN_SHARDS:
                    self._open.pop(next(iter(self._open)))
                self._open[i] = arr
            return arr

    def get(self, indices: np.ndarray | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """``(input_ids, token_type_ids)`` of the blocks at ``indices`` (int64, ``(n, L)``)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n, total = len(idx), len(self)
        if n and (idx.min() < 0 or idx.max() >= total):
            bad = idx[(idx < 0) | (idx >= total)][0]
            raise IndexError(f"block index {bad} out of range for {total} blocks ({self.split})")
        ids = np.empty((n, self.block_length), dtype=np.int64)
        if n:
            shard = np.searchsorted(self._starts, idx, side="right") - 1
            local = idx - self._starts[shard]
            for s in np.unique(shard):
                sel = np.nonzero(shard == s)[0]
                ids[sel] = self._shard(int(s))[local[sel]]
        return ids, token_types(ids, self.sep_id)

    def verify(self) -> None:
        """Check every shard's sha256 against the manifest (reads everything)."""
        for shard in self._shards:
            p = self.directory / shard["file"]
            if sha256_file(p) != shard["sha256"]:
                raise CorpusError(f"{p}: sha256 differs from the manifest (corrupt shard)")


def token_types(input_ids: np.ndarray, sep: int) -> np.ndarray:
    """Segment ids: 1 from after the first ``[SEP]`` through the second, else 0."""
    is_sep = input_ids == sep
    count = np.cumsum(is_sep, axis=1)
    has_b = count[:, -1:] >= 2
    second = ((count == 1) & ~is_sep & has_b) | ((count == 2) & is_sep)
    return second.astype(np.int64)


def open_blocks(directory: str | os.PathLike[str], split: str = "train") -> Blocks:
    """Open one split (``train`` or ``validation``) of a prepared directory."""
    return Blocks(directory, split)


# ---------------------------------------------------------------------------
# Order: epochs, positions, ranks
# ---------------------------------------------------------------------------


@lru_cache(maxsize=2)
def epoch_permutation(num_blocks: int, seed: int, epoch: int) -> np.ndarray:
    """The order of epoch ``epoch``: ``default_rng([seed, epoch]).permutation(num_blocks)``.

    Computed as a shuffle of a 32-bit ``arange`` (the same order, half the memory).
    """
    dtype = np.uint32 if num_blocks < 1 << 32 else np.int64
    perm = np.arange(num_blocks, dtype=dtype)
    np.random.default_rng([seed, epoch]).shuffle(perm)
    perm.setflags(write=False)
    return perm


def stream_slice(num_blocks: int, seed: int, start: int, count: int) -> np.ndarray:
    """``stream[start : start + count]`` of the endless epoch-by-epoch block stream."""
    if num_blocks <= 0:
        raise ValueError("no blocks to draw from")
    if start < 0 or count < 0:
        raise ValueError(f"start and count must be >= 0, got {start}, {count}")
    parts = []
    while count > 0:
        epoch, offset = divmod(start, num_blocks)
        take = min(count, num_blocks - offset)
        parts.append(epoch_permutation(num_blocks, seed, epoch)[offset : offset + take])
        start += take
        count -= take
    return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, dtype=np.int64)


def batch_indices(
    num_blocks: int,
    seed: int,
    position: int,
    per_rank_batch: int,
    rank: int = 0,
    world_size: int = 1,
) -> np.ndarray:
    """Block indices rank ``rank`` reads for the global batch starting at ``position``."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in a world of size {world_size}")
    if per_rank_batch < 1:
        raise ValueError(f"per_rank_batch must be positive, got {per_rank_batch}")
    return stream_slice(num_blocks, seed, position + rank * per_rank_batch, per_rank_batch)


class BlockLoader:
    """Endless batches of one rank, in the order fixed by ``(seed, position)``.

    Yields dicts of ``int64`` torch tensors ``input_ids``, ``token_type_ids``
    and ``attention_mask`` (``input_ids != [PAD]``), each ``(per_rank_batch,
    block_length)``. ``position`` is the global number of blocks consumed
    after the batch last yielded: save it, and a loader created with it
    continues exactly. ``prefetch`` batches are read ahead in a thread; the
    result does not depend on it. ``pin_memory`` (for a CUDA run) page-locks
    the batches in that thread, so their copy to the GPU is asynchronous.
    """

    def __init__(
        self,
        blocks: Blocks,
        per_rank_batch: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        position: int = 0,
        prefetch: int = 2,
        pin_memory: bool = False,
    ) -> None:
        if len(blocks) == 0:
            raise ValueError(f"{blocks!r} has no blocks")
        batch_indices(len(blocks), seed, position, per_rank_batch, rank, world_size)  # validate
        self.blocks = blocks
        self.per_rank_batch = per_rank_batch
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.position = position
        self.prefetch = max(0, prefetch)
        self.pin_memory = pin_memory
        self._next_pos = position
        self._queue: deque[Future[dict[str, Any]]] = deque()
        self._pool = ThreadPoolExecutor(max_workers=1) if self.prefetch else None

    @property
    def global_batch(self) -> int:
        return self.per_rank_batch * self.world_size

    def state_dict(self) -> dict[str, int]:
        return {
            "position": self.position,
            "seed": self.seed,
            "per_rank_batch": self.per_rank_batch,
            "world_size": self.world_size,
        }

    def _load(self, position: int) -> dict[str, Any]:
        import torch  # only the training loop asks: `electra prepare` stays torch-free

        idx = batch_indices(
            len(self.blocks), self.seed, position, self.per_rank_batch, self.rank, self.world_size
        )
        ids, types = self.blocks.get(idx)
        input_ids = torch.from_numpy(ids)
        batch = {
            "input_ids": input_ids,
            "token_type_ids": torch.from_numpy(types),
            "attention_mask": (input_ids != self.blocks.pad_id).long(),
        }
        if self.pin_memory:
            batch = {k: v.pin_memory() for k, v in batch.items()}
        return batch

    def __iter__(self) -> BlockLoader:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._pool is None:
            batch = self._load(self.position)
        else:
            while len(self._queue) < self.prefetch + 1:
                self._queue.append(self._pool.submit(self._load, self._next_pos))
                self._next_pos += self.global_batch
            batch = self._queue.popleft().result()
        self.position += self.global_batch
        return batch

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
