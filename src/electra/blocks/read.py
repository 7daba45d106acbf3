"""Reading blocks, and the order training visits them in.

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
import hashlib
import json
import os
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from electra.blocks.format import FORMAT_NAME, FORMAT_VERSION, MANIFEST, shard_size_bytes
from electra.system.files import READ_BLOCK, sha256_file
from electra.text.corpus import CorpusError
from electra.text.special import SpecialIds
from electra.text.tokenizer import TokenizerError, load_tokenizer, tokenizer_sha256


class Blocks:
    """The blocks of one split of a prepared directory, memory-mapped.

    ``get(indices)`` returns ``(input_ids, token_type_ids)``, both ``int64``
    of shape ``(len(indices), block_length)``, padded with ``[PAD]``.
    """

    MAX_OPEN_SHARDS = 256

    def __init__(
        self, directory: str | os.PathLike[str], split: str = "train", check_sizes: bool = True
    ) -> None:
        self.directory = Path(directory)
        manifest = read_manifest(self.directory)
        path = self.directory / MANIFEST
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
        for shard in self._shards if check_sizes else []:  # cheap: each shard's size
            problem = self._size_problem(shard)
            if problem:
                raise CorpusError(problem)

    def _size_problem(self, shard: dict[str, Any]) -> str | None:
        """Why ``shard`` cannot be the one the manifest lists, by its size alone (or None)."""
        p = self.directory / shard["file"]
        if not p.is_file():
            return f"{p}: shard listed in the manifest is missing"
        expected = shard_size_bytes(shard["blocks"], self.block_length, self.dtype.itemsize)
        size = p.stat().st_size
        if size != expected:
            how = "truncated shard" if size < expected else "shard longer than it was written"
            return (
                f"{p}: {how} ({size:,} bytes; its {shard['blocks']} blocks in the manifest "
                f"make {expected:,}); prepare the blocks again"
            )
        return None

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
                self._check_ids(ids[sel], int(s))
        return ids, token_types(ids, self.sep_id)

    def _check_ids(self, ids: np.ndarray, shard: int) -> None:
        """Refuse ids outside the vocabulary: bytes that changed after ``prepare`` (a
        cheap check on every read; :meth:`verify` finds any change, valid ids too)."""
        if ids.size and int(ids.max()) >= self.vocab_size:
            p = self.directory / self._shards[shard]["file"]
            raise CorpusError(
                f"{p}: token id {int(ids.max())} is outside the vocabulary of "
                f"{self.vocab_size}: the shard changed after prepare (corrupt); prepare the "
                "blocks again (Blocks.verify() checks every shard against the manifest)"
            )

    def check_tokenizer(self) -> None:
        """Refuse tokenizer files in the blocks directory that are not the ones the blocks were
        made with (the manifest's ``tokenizer.sha256``): the export copies them into the model,
        which would then read text with another vocabulary than it was trained on."""
        if not (self.directory / "tokenizer.json").is_file() or self.split != "train":
            return
        want = self.manifest.get("tokenizer", {}).get("sha256")
        try:
            got = tokenizer_sha256(load_tokenizer(self.directory))
        except (TokenizerError, OSError, ValueError) as exc:
            raise CorpusError(f"{self.directory / 'tokenizer.json'}: unreadable ({exc})") from None
        if want and got != want:
            raise CorpusError(
                f"{self.directory / 'tokenizer.json'}: not the tokenizer these blocks were "
                f"prepared with (sha256 {got[:12]}, {self.directory / MANIFEST} says "
                f"{want[:12]}); the tokenizer files were replaced after prepare: prepare the "
                "blocks again, or put back the files prepare wrote"
            )

    def verify(self) -> None:
        """Check every shard's sha256 against the manifest (reads everything)."""
        for shard in self._shards:
            p = self.directory / shard["file"]
            if sha256_file(p) != shard["sha256"]:
                raise CorpusError(f"{p}: sha256 differs from the manifest (corrupt shard)")


def read_manifest(directory: Path) -> dict[str, Any]:
    """The ``manifest.json`` of a prepared directory, its format checked."""
    path = directory / MANIFEST
    if not path.is_file():
        if not directory.exists():
            raise FileNotFoundError(f"{directory}: no such directory")
        raise CorpusError(
            f"{directory}: no {MANIFEST}; not a prepared directory, or an interrupted "
            "`electra prepare` run (run it again)"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{path}: unreadable manifest: {exc}") from None
    if manifest.get("format") != FORMAT_NAME or manifest.get("format_version") != FORMAT_VERSION:
        raise CorpusError(
            f"{path}: format {manifest.get('format')!r} version "
            f"{manifest.get('format_version')!r}; this electra reads {FORMAT_NAME!r} version "
            f"{FORMAT_VERSION}"
        )
    return manifest


def verify_blocks(
    directory: str | os.PathLike[str], progress: bool = False
) -> tuple[int, list[str]]:
    """Check every shard of every split against ``manifest.json``: its size, then its
    sha256 (reads every byte, with a progress bar). (shards checked, one line per bad file)."""
    directory = Path(directory)
    splits = read_manifest(directory)["splits"]
    problems, whole, count = [], [], 0
    for split in splits:
        blocks = Blocks(directory, split, check_sizes=False)
        for shard in blocks._shards:
            count += 1
            problem = blocks._size_problem(shard)
            if problem:
                problems.append(problem)
            else:
                whole.append((directory / shard["file"], shard["sha256"]))
    total = sum(p.stat().st_size for p, _ in whole)
    with tqdm(total=total, unit="B", unit_scale=True, desc="verify", disable=not progress) as bar:
        for p, digest in whole:
            if _sha256(p, bar) != digest:
                problems.append(f"{p}: sha256 differs from {MANIFEST} (the bytes changed)")
    return count, problems


def _sha256(path: Path, bar: tqdm) -> str:
    """Hex sha256 of ``path``, advancing ``bar`` by the bytes read."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(READ_BLOCK):
            h.update(block)
            bar.update(len(block))
    return h.hexdigest()


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
