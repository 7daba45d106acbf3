"""``electra prepare``: a raw corpus of any size into packed training blocks.

The work is cut into chunks of text sent to a pool of worker processes; the output is
identical for any number of workers (:mod:`electra.blocks.build`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer
from tqdm import tqdm

from electra import __version__
from electra.blocks.build import (
    HANGUL,
    SENTENCE_END,
    BlockPacker,
    Builder,
    BuildParams,
    Doc,
    doc_keys,
    empty_stats,
    file_key,
)
from electra.blocks.format import FORMAT_NAME, FORMAT_VERSION, MANIFEST, SPLITS
from electra.blocks.options import PrepareCommand
from electra.blocks.read import verify_blocks
from electra.blocks.shards import (
    ShardWriter,
    existing_complete,
    options_fingerprint,
    our_files,
    write_manifest,
)
from electra.system.diskspace import human_bytes, reporting_full_disk
from electra.system.locks import LOCK_NAME, DirectoryLock
from electra.system.log import setup_cli_logging
from electra.text.corpus import Corpus, CorpusError, source_sha256
from electra.text.tokenizer import (
    encoding_tokenizer,
    load_tokenizer,
    save_tokenizer_files,
    special_id_map,
    tokenizer_settings,
    tokenizer_sha256,
)

log = logging.getLogger("electra")


CHUNK_CHARS = 1 << 20  # text per unit of work sent to a worker
UNK_CHECK_TOKENS = 200_000  # tokens seen before the [UNK] rate is first judged
UNK_WARN_RATE = 0.02  # a finished prepare warns above this [UNK] rate


_WORKER: Builder | None = None


def _init_worker(tokenizer_json: str, params: BuildParams) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one process per core already
    global _WORKER
    _WORKER = Builder(tokenizer_json, params)


def _work(chunk: list[Doc]) -> dict[str, Any]:
    assert _WORKER is not None
    return _WORKER(chunk)


def _default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _chunks(
    corpus: Corpus, seed: int, shas: list[str], warn_hangul: bool = False
) -> Iterator[tuple[list[Doc], int]]:
    """Documents grouped into units of work, with the input position after each."""
    chunk: list[Doc] = []
    size = 0
    keys = [file_key(seed, sha) for sha in shas]
    for file_index, doc in corpus.documents():
        if warn_hangul and HANGUL.search(doc.lines[0]):
            log.warning(
                "the tokenizer strips accents, which decomposes Hangul syllables into jamo "
                "(%s has Korean text); use a tokenizer with strip_accents=false for Korean",
                corpus.files[file_index],
            )
            warn_hangul = False
        key, u = doc_keys(keys[file_index], doc.index, doc.part)
        text = "\n".join(doc.lines)
        chunk.append((key, u, doc.part == 0, text))
        size += len(text)
        if size >= CHUNK_CHARS:
            yield chunk, corpus.position
            chunk, size = [], 0
    if chunk:
        yield chunk, corpus.position


@dataclass
class _Plan:
    """What a prepare run reads and how, decided before any block is built."""

    corpus: Corpus
    tok: Tokenizer
    special: dict[str, int]
    settings: dict[str, bool]
    dtype: str
    out: Path
    sources: list[dict[str, Any]]
    options: dict[str, Any]
    builder: dict[str, Any]
    fingerprint: str


def _plan(cmd: PrepareCommand) -> _Plan:
    """Open the corpus and tokenizer, hash the sources, fingerprint the options."""
    opts = cmd.read_options()
    corpus = Corpus(cmd.inputs, opts)
    tok = load_tokenizer(cmd.tokenizer)
    dtype = "uint16" if tok.get_vocab_size(with_added_tokens=True) <= 1 << 16 else "uint32"
    out = Path(cmd.output)
    if out.exists() and not out.is_dir():
        raise CorpusError(f"{out}: exists and is not a directory")
    sources = [
        {"path": str(f), "bytes": size, "sha256": source_sha256(f)}
        for f, size in zip(corpus.files, corpus.sizes, strict=True)
    ]
    options = {
        "max_length": cmd.max_length,
        "validation_fraction": cmd.validation_fraction,
        "seed": cmd.seed,
        "shard_size": cmd.shard_size,
        **dataclasses.asdict(opts),
    }
    builder = {
        "algorithm": "ELECTRA build_pretraining_dataset.py ExampleBuilder",
        "single_segment_prob": 0.1,
        "random_target_prob": 0.05,
        "random_target_range": [5, cmd.max_length],
        "sentence_piece_max_tokens": BuildParams(cmd.max_length, 0, 0, 0, 0, dtype).piece,
        "randomness": "per document: blake2b(seed, file sha256) mixed with the document index",
        "sentence_split": SENTENCE_END.pattern,
    }
    if cmd.pack:  # only then: blocks built without it keep their fingerprint
        builder["pack"] = (
            "consecutive part-filled blocks folded into one while they fit: "
            "[CLS] first block's text [SEP] the next blocks' text [SEP]"
        )
    fingerprint = options_fingerprint(
        {
            "format_version": FORMAT_VERSION,
            "tokenizer_sha256": tokenizer_sha256(tok),
            "sources": [(s["sha256"], s["bytes"]) for s in sources],
            "options": options,
            "builder": builder,
        }
    )
    return _Plan(
        corpus,
        tok,
        special_id_map(tok),
        tokenizer_settings(tok),
        dtype,
        out,
        sources,
        options,
        builder,
        fingerprint,
    )


def _reuse_or_clear(out: Path, fingerprint: str, overwrite: bool) -> bool:
    """True when ``out`` already holds these blocks; else empty it of ours (or refuse)."""
    if not out.is_dir():
        return False
    if not overwrite and existing_complete(out, fingerprint) is not None:
        log.info("%s: already prepared from the same inputs and options; reusing it", out)
        return True
    ours = our_files(out)
    others = [p for p in out.iterdir() if p not in ours and p.name != LOCK_NAME]
    if ours and not overwrite:
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
    for p in our_files(out):
        p.unlink(missing_ok=True)
    return False


class _Collector:
    """Adds each unit of work's blocks to the shard writers and its counts to the totals."""

    def __init__(self, plan: _Plan, cmd: PrepareCommand, params: BuildParams) -> None:
        self.writers = {
            s: ShardWriter(plan.out, s, cmd.shard_size, cmd.max_length, plan.dtype) for s in SPLITS
        }
        self.packers = {s: BlockPacker(params) for s in SPLITS} if cmd.pack else None
        self.totals = {s: empty_stats() for s in SPLITS}
        self.total_bytes = plan.corpus.total_bytes
        self.progress = cmd.progress
        self.bar: tqdm | None = None  # made at the first result: no tqdm thread when workers fork
        self.done_bytes = 0
        self.unk_check = UnkCheck(cmd.tokenizer, cmd.max_unk_rate)
        self.out = plan.out

    def _write(self, split: str, blocks: Any) -> None:
        """Write ``blocks`` (through the packer with ``--pack``)."""
        if self.packers is not None:
            blocks = self.packers[split].add(blocks)
        self.writers[split].add(blocks)

    def close(self) -> dict[str, list]:
        """Write what the packers still hold, close the shards; the shards per split.

        With ``--pack`` a split's ``blocks`` count is what was written and
        ``blocks_folded`` says how many of the built blocks were folded into another."""
        for s in SPLITS:
            if self.packers is not None:
                self.writers[s].add(self.packers[s].flush())
                self.totals[s]["blocks"] -= self.packers[s].folded
                self.totals[s]["blocks_folded"] = self.packers[s].folded
        return {s: self.writers[s].close() for s in SPLITS}

    def writing(self) -> str:
        """What was being written when the disk filled, in words."""
        names = [w.writing for w in self.writers.values() if w.writing]
        return f"shard {names[0]}" if names else "the last shards"

    def then(self) -> str:
        """What a full disk leaves and what to do (prepare has no resume: the truth)."""
        done = [sh for w in self.writers.values() for sh in w.shards]
        size = self.writers["train"].shard_bytes
        return (
            f"The {len(done)} shards finished before it are whole (each sha256 is checked "
            f"when written), but prepare does not resume: once space is free, run the same "
            f"command with --overwrite, which builds the blocks again from the start "
            f"({len(done)} shards of up to {size:,} bytes took {human_bytes(self.written())} "
            "so far, and their manifest.json is written last)"
        )

    def written(self) -> int:
        """Bytes of the shards finished so far."""
        return sum(
            (self.out / sh["file"]).stat().st_size
            for w in self.writers.values()
            for sh in w.shards
            if (self.out / sh["file"]).is_file()
        )

    def __call__(self, result: dict[str, Any], position: int) -> None:
        for s in SPLITS:
            arr, stats = result[s]
            self._write(s, arr)
            for k, v in stats.items():
                self.totals[s][k] += v
        self.unk_check(self.totals, final=False)
        if self.progress and self.bar is None:
            self.bar = tqdm(
                total=self.total_bytes,
                unit="B",
                unit_scale=True,
                desc="prepare",
                smoothing=0.1,
                dynamic_ncols=True,
            )
        if self.bar is not None:
            self.bar.update(position - self.done_bytes)
        self.done_bytes = position


def unk_rate(totals: dict[str, dict[str, int]]) -> float:
    """The share of [UNK] among the corpus's tokens, all splits together."""
    encoded = sum(t.get("encoded_tokens", 0) for t in totals.values())
    return sum(t.get("unk_tokens", 0) for t in totals.values()) / max(1, encoded)


@dataclass
class UnkCheck:
    """Stops ``prepare`` as soon as the [UNK] rate shows the tokenizer cannot read the text.

    Judged once :data:`UNK_CHECK_TOKENS` tokens are in (a big corpus is refused in
    seconds, not hours) and again at the end (a small one).
    """

    tokenizer: str
    max_rate: float

    def __call__(self, totals: dict[str, dict[str, int]], final: bool) -> None:
        encoded = sum(t.get("encoded_tokens", 0) for t in totals.values())
        if self.max_rate >= 1.0 or not encoded or (encoded < UNK_CHECK_TOKENS and not final):
            return
        rate = unk_rate(totals)
        if rate > self.max_rate:
            raise CorpusError(
                f"{self.tokenizer}: {100 * rate:.1f}% of the first {encoded:,} tokens are "
                f"[UNK] (over --max-unk-rate {self.max_rate:g}): this tokenizer cannot read "
                "this corpus (a tokenizer.json holding only the special tokens looks like "
                "this). Train one on it with `electra tokenizer`, or pass --max-unk-rate 1 "
                "--overwrite to build the blocks anyway"
            )


def _build(plan: _Plan, cmd: PrepareCommand) -> tuple[dict[str, dict], dict[str, list]]:
    """Tokenize and pack the whole corpus into shards: (counts, shards) per split."""
    params = BuildParams(
        max_length=cmd.max_length,
        cls=plan.special["cls"],
        sep=plan.special["sep"],
        pad=plan.special["pad"],
        validation_fraction=cmd.validation_fraction,
        dtype=plan.dtype,
        unk=plan.special["unk"],
    )
    tok_json = encoding_tokenizer(plan.tok).to_str()
    workers = cmd.workers or _default_workers()
    collect = _Collector(plan, cmd, params)
    shas = [s["sha256"] for s in plan.sources]
    chunks = _chunks(plan.corpus, cmd.seed, shas, warn_hangul=plan.settings["strip_accents"])
    size = collect.writers["train"].shard_bytes
    with reporting_full_disk(collect.writing, plan.out, size, collect.then):
        return _build_into(collect, chunks, plan, cmd, (tok_json, params, workers))


def _build_into(
    collect: _Collector,
    chunks: Iterator[tuple[list[Doc], int]],
    plan: _Plan,
    cmd: PrepareCommand,
    how: tuple[str, BuildParams, int],
) -> tuple[dict[str, dict], dict[str, list]]:
    """:func:`_build` once the writers are made: an error drops the shard being written."""
    tok_json, params, workers = how
    try:
        if workers <= 1:
            build = Builder(tok_json, params)
            for chunk, position in chunks:
                collect(build(chunk), position)
        else:
            _run_pool(chunks, workers, tok_json, params, collect)
        plan.corpus.check_not_empty()
        collect.unk_check(collect.totals, final=True)
        shards = collect.close()
    except BaseException:
        for w in collect.writers.values():
            w.abort()
        raise
    finally:
        if collect.bar is not None:
            collect.bar.close()
    return collect.totals, shards


def _check_splits(totals: dict[str, dict], validation_fraction: float) -> None:
    if not totals["train"]["blocks"]:
        raise CorpusError("no training blocks: every document went to validation")
    if validation_fraction > 0 and not totals["validation"]["blocks"]:
        log.warning(
            "no document went to validation (validation_fraction %g of %d documents)",
            validation_fraction,
            totals["train"]["documents"],
        )


def _manifest(plan: _Plan, cmd: PrepareCommand, splits: dict[str, dict], t0: float) -> dict:
    """``manifest.json``: the format, the tokenizer, every split's shards and counts."""
    corpus = plan.corpus
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "fingerprint": plan.fingerprint,
        "created_by": _version(),
        "block_length": cmd.max_length,
        "vocab_size": plan.tok.get_vocab_size(with_added_tokens=True),
        "dtype": plan.dtype,
        "tokenizer": {
            "sha256": tokenizer_sha256(plan.tok),
            "source": str(cmd.tokenizer),
            **plan.settings,
        },
        "special_ids": plan.special,
        "unk_rate": round(unk_rate(splits), 6),
        "seed": cmd.seed,
        "splits": splits,
        "skipped_lines": corpus.skipped_lines,
        "skipped_files": [s.path for s in corpus.stats if s.skipped_file],
        "empty_files": [s.path for s in corpus.stats if s.empty],
        "sources": [
            {**src, **stats.to_dict()}
            for src, stats in zip(plan.sources, corpus.stats, strict=True)
        ],
        "options": plan.options,
        "builder": plan.builder,
        "seconds": round(time.time() - t0, 3),
    }


def prepare(cmd: PrepareCommand) -> Path:
    """Build the blocks of ``cmd.inputs`` in ``cmd.output`` and return that directory.

    The output directory is locked first (:mod:`electra.system.locks`): a second
    ``electra prepare`` on it refuses at once, naming this one.
    """
    t0 = time.time()
    out = Path(cmd.output)
    if out.exists() and not out.is_dir():
        raise CorpusError(f"{out}: exists and is not a directory")
    with DirectoryLock(out):
        return _prepare_locked(_plan(cmd), cmd, t0)


def _prepare_locked(plan: _Plan, cmd: PrepareCommand, t0: float) -> Path:
    """:func:`prepare` once the output directory is locked."""
    if _reuse_or_clear(plan.out, plan.fingerprint, cmd.overwrite):
        return plan.out
    plan.out.mkdir(parents=True, exist_ok=True)
    again = "Once space is free, run the same command with --overwrite"
    guess = 64 * plan.tok.get_vocab_size()  # vocab.txt and tokenizer.json
    with reporting_full_disk("the tokenizer files", plan.out, guess, again):
        save_tokenizer_files(plan.tok, plan.out)
    totals, shards = _build(plan, cmd)
    _check_splits(totals, cmd.validation_fraction)
    splits = {s: {**totals[s], "shards": shards[s]} for s in SPLITS}
    manifest = json.dumps(_manifest(plan, cmd, splits, t0), indent=2, ensure_ascii=False) + "\n"
    then = (
        "Every shard is whole, but without the manifest the blocks do not open and prepare "
        f"does not resume: {again[0].lower()}{again[1:]} (it builds them again)"
    )
    with reporting_full_disk(MANIFEST, plan.out, len(manifest.encode()), then):
        write_manifest(plan.out, manifest)
    return plan.out


def _run_pool(
    chunks: Iterator[tuple[list[Doc], int]],
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
    """Run ``electra prepare`` (its ``--help`` is :class:`~electra.blocks.options.PrepareCommand`'s docstring)."""
    setup_cli_logging()
    if cmd.verify:
        return verify_cli(Path(cmd.verify), cmd.progress)
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
        f"{mb:.1f} MB in {dt:.1f} s; [UNK] {100 * manifest.get('unk_rate', 0):.2f}% of tokens"
        + (f"; {manifest['skipped_lines']} bad lines skipped" if manifest["skipped_lines"] else "")
    )
    if manifest.get("unk_rate", 0) > UNK_WARN_RATE:
        log.warning(
            "%s: %.1f%% of the tokens are [UNK] (a vocabulary trained on this corpus usually "
            "gives under 1%%): the tokenizer reads this text poorly",
            cmd.tokenizer,
            100 * manifest["unk_rate"],
        )
    return 0


def verify_cli(directory: Path, progress: bool) -> int:
    """``electra prepare --verify DIR``: every shard against ``manifest.json``; 1 if any
    is bad, each named on stderr."""
    count, problems = verify_blocks(directory, progress=progress)
    for problem in problems:
        print(f"bad: {problem}", file=sys.stderr)
    if problems:
        print(
            f"{directory}: {len(problems)} of {count} shards do not match {MANIFEST}; prepare "
            "the blocks again (electra prepare ... --overwrite)",
            file=sys.stderr,
        )
        return 1
    print(f"{directory}: ok, all {count} shards match the sha256 in {MANIFEST}")
    return 0
