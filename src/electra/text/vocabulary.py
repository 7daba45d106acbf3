"""``electra tokenizer``: training a WordPiece vocabulary on a corpus (Korean included).

The alphabet is chosen from exact character counts and the ``##c`` pieces
registered in a fixed order, so the same corpus and options give the same
``vocab.txt`` (see :mod:`electra.text.tokenizer` for the pipeline, the
Korean rules and the morpheme-aware option).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import tempfile
import time
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers
from tokenizers import trainers as tk_trainers
from tqdm import tqdm

from electra.config import ConfigError
from electra.system.files import atomic_write_json
from electra.system.log import setup_cli_logging
from electra.text.corpus import Corpus, ReadOptions
from electra.text.options import TokenizerCommand
from electra.text.tokenizer import (
    MORPHEME_MARK,
    SPECIAL_TOKENS,
    UNK,
    build_tokenizer,
    encoding_tokenizer,
    save_tokenizer_files,
)

log = logging.getLogger("electra")


_HANGUL = re.compile("[\uac00-\ud7a3]")


def _morpheme_marker(kiwi: Any) -> Any:
    """A function marking morpheme boundaries inside words of a batch of lines."""

    def is_word_char(c: str) -> bool:
        if not c.isalnum():
            return False
        return not unicodedata.name(c, "").startswith("CJK UNIFIED")

    def mark(lines: list[str]) -> list[str]:
        out = []
        for line, tokens in zip(lines, kiwi.tokenize(lines), strict=True):
            cuts = []
            end = 0
            for t in tokens:
                start = t.start
                if start >= end and 0 < start < len(line):
                    a, b = line[start - 1], line[start]
                    if is_word_char(a) and is_word_char(b):
                        cuts.append(start)
                end = max(end, t.start + t.len)
            if not cuts:
                out.append(line)
                continue
            pieces, prev = [], 0
            for c in cuts:
                pieces.append(line[prev:c])
                prev = c
            pieces.append(line[prev:])
            out.append((" " + MORPHEME_MARK).join(pieces))
        return out

    return mark


def _iter_training_lines(corpus: Corpus, limit_bytes: int | None) -> Iterator[str]:
    """Lines of the corpus; with a limit, an evenly spread sample of about that size.

    A document is kept while the text kept so far is below the limit times
    the share of the input files read so far, so the sample spreads over all
    files whatever their format or compression.
    """
    kept = 0
    total = max(corpus.total_bytes, 1)
    for _, doc in corpus.documents():
        if limit_bytes is not None:
            if kept >= limit_bytes * min(1.0, corpus.position / total):
                continue
            kept += doc.nbytes
        yield from doc.lines


def _char_counts(path: Path, normalizer: Any) -> dict[str, int]:
    """Exact counts of the non-space characters the trainer will see."""
    counts = np.zeros(0x110000, dtype=np.int64)
    with open(path, encoding="utf-8") as f:
        while True:
            lines = f.readlines(1 << 22)
            if not lines:
                break
            text = normalizer.normalize_str("".join(lines))
            cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
            counts += np.bincount(cps, minlength=0x110000)
    present = np.nonzero(counts)[0]
    return {chr(c): int(counts[c]) for c in present if not chr(c).isspace()}


_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _always_alone(c: str, chinese: bool = True) -> bool:
    """Characters BERT's pre-tokenization always makes words of their own.

    Punctuation (ASCII or Unicode category P*) and, with Chinese-character
    handling, CJK ideographs never continue a word, so they need no ``##``
    form.
    """
    if (c.isascii() and not c.isalnum() and c.isprintable() and not c.isspace()) or (
        unicodedata.category(c).startswith("P")
    ):
        return True
    cp = ord(c)
    return chinese and any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


CHARACTER_COVERAGE = 0.9995


ALPHABET_SHARE = 0.8


def _choose_alphabet(
    counts: dict[str, int], vocab_size: int, limit: int | None = None
) -> tuple[list[str], float]:
    """The characters of the vocabulary, most frequent first (ties by code point).

    By default as many as cover ``CHARACTER_COVERAGE`` of the character
    occurrences (SentencePiece's rule for scripts with many characters);
    ``limit`` asks for that many instead. Either way the characters and
    their ``##`` forms may take at most ``ALPHABET_SHARE`` of the vocabulary
    (all of it but one slot with an explicit limit), so that a Korean corpus
    with thousands of syllables still gets a vocabulary of the size asked
    for. Returns the characters (sorted by code point) and their coverage.
    """
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], ord(kv[0])))
    total = max(sum(counts.values()), 1)
    room = vocab_size - len(SPECIAL_TOKENS)
    budget = room - 1 if limit is not None else int(ALPHABET_SHARE * room)
    chosen: list[str] = []
    used = covered = 0
    for c, n in ranked:
        if limit is not None and len(chosen) >= limit:
            break
        if limit is None and covered >= CHARACTER_COVERAGE * total:
            break
        cost = 1 if _always_alone(c) else 2  # the character and its ## form
        if used + cost > budget:
            if limit is not None:
                log.warning(
                    "limit_alphabet %d does not fit a vocabulary of %d with the ## forms; "
                    "keeping the %d most frequent characters",
                    limit,
                    vocab_size,
                    len(chosen),
                )
            break
        chosen.append(c)
        used += cost
        covered += n
    return sorted(chosen, key=ord), covered / total


@dataclass
class TrainReport:
    """What :func:`train_tokenizer` did."""

    out_dir: Path
    vocab_size: int
    lowercase: bool
    strip_accents: bool
    morpheme: bool
    training_bytes: int
    training_lines: int
    seconds: float
    unk_rate: float
    tokens_per_word: float
    hangul_round_trip: bool | None
    alphabet_size: int = 0
    character_coverage: float = 0.0
    sources: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> str:
        """One line for people: size, casing, the text read, coverage, UNK rate."""
        skipped = sum(s.get("skipped_lines", 0) for s in self.sources)
        rt = self.hangul_round_trip
        return (
            f"{self.out_dir}: {self.vocab_size} tokens "
            f"({'uncased' if self.lowercase else 'cased'}, strip_accents={self.strip_accents}"
            f"{', morpheme-aware' if self.morpheme else ''}) from "
            f"{self.training_bytes / 1e6:.1f} MB in {self.seconds:.1f} s; "
            f"{self.alphabet_size} characters ({100 * self.character_coverage:.2f}% of the "
            f"text), UNK {100 * self.unk_rate:.2f}%, {self.tokens_per_word:.2f} tokens/word"
            + ("" if rt is None else f", Hangul round trip {'ok' if rt else 'FAILED'}")
            + (f"; {skipped} bad lines skipped" if skipped else "")
        )


def _check_options(
    vocab_size: int, min_frequency: int, limit_mb: float | None, limit_alphabet: int | None
) -> None:
    if vocab_size < len(SPECIAL_TOKENS) + 10:
        raise ConfigError(
            f"vocab_size must be at least {len(SPECIAL_TOKENS) + 10}, got {vocab_size}"
        )
    if min_frequency < 0:
        raise ConfigError(f"min_frequency must be >= 0, got {min_frequency}")
    if limit_mb is not None and limit_mb <= 0:
        raise ConfigError(f"limit_mb must be positive, got {limit_mb}")
    if limit_alphabet is not None and limit_alphabet < 1:
        raise ConfigError(f"limit_alphabet must be positive, got {limit_alphabet}")


def _segmenter(morpheme: bool) -> Any:
    """The kiwipiepy morpheme marker for ``morpheme=True``, else None."""
    if not morpheme:
        return None
    try:
        from kiwipiepy import Kiwi
    except ImportError:
        raise ConfigError(
            "--morpheme needs kiwipiepy: pip install 'electra[korean]' (or kiwipiepy)"
        ) from None
    return _morpheme_marker(Kiwi(num_workers=os.cpu_count() or 1))


@dataclass
class _TrainingText:
    """The cleaned (and segmented) training text written to ``path``, and what it held."""

    path: Path
    lines: int = 0
    bytes: int = 0
    hangul: bool = False
    sample: list[str] = field(default_factory=list)  # evenly spread, 1000-2000 lines
    _seen: int = 0
    _stride: int = 1

    def keep(self, line: str) -> None:
        """Count a line for the sample and the Hangul check (it is written in batches)."""
        self._seen += 1
        if self._seen % self._stride == 0:
            self.sample.append(line)
            if len(self.sample) >= 2000:
                self.sample = self.sample[1::2]
                self._stride *= 2
        if not self.hangul and _HANGUL.search(line):
            self.hangul = True


def _write_training_text(
    corpus: Corpus, text: _TrainingText, marker: Any, limit_mb: float | None, progress: bool
) -> None:
    """Stream the corpus into ``text.path``, 4096 lines at a time, with progress."""
    bar = None
    if progress:
        what = "segment morphemes" if marker is not None else "read corpus"
        bar = tqdm(total=corpus.total_bytes, unit="B", unit_scale=True, desc=what)
    limit_bytes = int(limit_mb * 1e6) if limit_mb else None
    batch: list[str] = []
    with open(text.path, "w", encoding="utf-8") as f:

        def flush() -> None:
            lines = batch
            text.lines += len(lines)
            text.bytes += sum(len(s.encode("utf-8")) + 1 for s in lines)
            if marker is not None:
                lines = marker([s.replace(MORPHEME_MARK, " ") for s in lines])
            f.write("\n".join(lines) + "\n")
            batch.clear()
            if bar is not None:
                bar.update(corpus.position - bar.n)

        for line in _iter_training_lines(corpus, limit_bytes):
            text.keep(line)
            batch.append(line)
            if len(batch) >= 4096:
                flush()
        if batch:
            flush()
    if bar is not None:
        bar.update(corpus.total_bytes - bar.n)
        bar.close()
    corpus.check_not_empty()


def _strip_for(strip: bool, asked: bool | None, hangul: bool) -> bool:
    """Accent stripping as trained: never on Hangul (refused when asked for explicitly)."""
    if not (strip and hangul):
        return strip
    if asked:
        raise ConfigError(
            "accent stripping decomposes Hangul syllables into jamo (NFD), and this "
            "corpus contains Hangul; use --no-strip-accents (lowercasing alone keeps "
            "Hangul intact)"
        )
    log.warning(
        "the corpus contains Hangul: accent stripping (implied by --lowercase) would "
        "decompose syllables into jamo, so it is turned off (strip_accents=false)"
    )
    return False


@dataclass(frozen=True)
class _Trained:
    tokens: list[str]
    alphabet: list[str]
    coverage: float


def _train_wordpiece(
    path: Path,
    normalizer: Any,
    vocab_size: int,
    min_frequency: int,
    limit_alphabet: int | None,
    marker: Any,
    progress: bool,
) -> _Trained:
    """A deterministic alphabet (exact counts), then the ``tokenizers`` WordPiece trainer."""
    counts = _char_counts(path, normalizer)
    alphabet, coverage = _choose_alphabet(counts, vocab_size, limit_alphabet)
    if marker is not None and MORPHEME_MARK not in alphabet:
        alphabet = sorted([*alphabet, MORPHEME_MARK], key=ord)
    continuations = [f"##{c}" for c in alphabet if not _always_alone(c)]
    margin = vocab_size // 10 if marker is not None else 0
    trainer = tk_trainers.WordPieceTrainer(
        vocab_size=vocab_size + margin,
        min_frequency=min_frequency,
        special_tokens=[*SPECIAL_TOKENS, *continuations],
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
        continuing_subword_prefix="##",
        show_progress=progress,
    )
    model = Tokenizer(models.WordPiece(unk_token=UNK))
    model.normalizer = normalizer
    model.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    model.train([str(path)], trainer)
    trained = sorted(model.get_vocab(with_added_tokens=False).items(), key=lambda kv: kv[1])
    tokens = _finish_vocab([t for t, _ in trained], vocab_size, morpheme=marker is not None)
    return _Trained(tokens, alphabet, coverage)


def train_tokenizer(
    files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    vocab_size: int = 32000,
    lowercase: bool = False,
    strip_accents: bool | None = None,
    morpheme: bool = False,
    min_frequency: int = 2,
    limit_alphabet: int | None = None,
    limit_mb: float | None = None,
    read_options: ReadOptions | None = None,
    progress: bool = False,
) -> TrainReport:
    """Train a WordPiece vocabulary on ``files`` and write a tokenizer directory.

    ``strip_accents=None`` follows ``lowercase`` except that Hangul is never
    decomposed (see the module docstring); the characters kept are those
    covering 99.95% of the text, or the ``limit_alphabet`` most frequent (see
    :func:`_choose_alphabet`), so that the vocabulary keeps its size on
    scripts with thousands of characters; ``limit_mb``
    trains on an evenly spread sample of about that many megabytes.
    """
    t0 = time.time()
    opts = read_options or ReadOptions()
    _check_options(vocab_size, min_frequency, limit_mb, limit_alphabet)
    corpus = Corpus(files, opts)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    marker = _segmenter(morpheme)
    fd, tmp_name = tempfile.mkstemp(prefix=".training-text-", suffix=".tmp", dir=out)
    os.close(fd)
    text = _TrainingText(Path(tmp_name))
    try:
        _write_training_text(corpus, text, marker, limit_mb, progress)
        strip = _strip_for(
            lowercase if strip_accents is None else strip_accents, strip_accents, text.hangul
        )
        probe = build_tokenizer([UNK], lowercase=lowercase, strip_accents=strip)
        trained = _train_wordpiece(
            text.path, probe.normalizer, vocab_size, min_frequency, limit_alphabet, marker, progress
        )
    finally:
        text.path.unlink(missing_ok=True)
    tok = build_tokenizer(trained.tokens, lowercase=lowercase, strip_accents=strip)
    save_tokenizer_files(tok, out)
    flags = (lowercase, strip, morpheme)
    report = _report(out, tok, text, trained, corpus, time.time() - t0, flags)
    options = {
        "vocab_size": vocab_size,
        "min_frequency": min_frequency,
        "limit_alphabet": limit_alphabet,
        "limit_mb": limit_mb,
        **dataclasses.asdict(opts),
    }
    _write_training_info(out, report, options)
    return report


def _report(
    out: Path,
    tok: Tokenizer,
    text: _TrainingText,
    trained: _Trained,
    corpus: Corpus,
    seconds: float,
    flags: tuple[bool, bool, bool],
) -> TrainReport:
    """The report of a trained vocabulary, its quality measured on the text's sample.

    ``flags``: (lowercase, strip_accents, morpheme) as trained.
    """
    unk_rate, per_word, round_trip = _quality(tok, text.sample)
    lowercase, strip, morpheme = flags
    return TrainReport(
        out_dir=out,
        vocab_size=len(trained.tokens),
        lowercase=lowercase,
        strip_accents=strip,
        morpheme=morpheme,
        training_bytes=text.bytes,
        training_lines=text.lines,
        seconds=seconds,
        unk_rate=unk_rate,
        tokens_per_word=per_word,
        hangul_round_trip=round_trip,
        alphabet_size=len(trained.alphabet),
        character_coverage=trained.coverage,
        sources=[{"path": s.path, **s.to_dict()} for s in corpus.stats],
    )


def _write_training_info(out: Path, report: TrainReport, options: dict[str, Any]) -> None:
    """``vocab_training.json``: the report and every option, beside the vocabulary."""
    info = {
        k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(report).items()
    }
    info["options"] = options
    atomic_write_json(out / "vocab_training.json", info, ensure_ascii=False)


def _finish_vocab(tokens: list[str], vocab_size: int, morpheme: bool) -> list[str]:
    """Specials first, morpheme markers renamed, duplicates dropped, cut to size."""
    out = list(SPECIAL_TOKENS)
    seen = set(out)
    for t in tokens:
        if morpheme and MORPHEME_MARK in t:
            if not t.startswith(MORPHEME_MARK) or MORPHEME_MARK in t[1:] or len(t) == 1:
                continue
            t = "##" + t[1:]
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out[:vocab_size]


def _quality(tok: Tokenizer, sample: list[str]) -> tuple[float, float, bool | None]:
    """UNK rate, tokens per word, and whether Hangul decodes back to the same syllables."""
    if not sample:
        return 0.0, 0.0, None
    enc = encoding_tokenizer(tok)
    unk = tok.token_to_id(UNK)
    encodings = enc.encode_batch(sample, add_special_tokens=False)
    n_tokens = sum(len(e.ids) for e in encodings)
    n_unk = sum(e.ids.count(unk) for e in encodings)
    n_words = sum(
        len(enc.pre_tokenizer.pre_tokenize_str(enc.normalizer.normalize_str(s))) for s in sample
    )
    korean = [
        (s, e)
        for s, e in zip(sample, encodings, strict=True)
        if _HANGUL.search(s) and unk not in e.ids
    ][:200]
    round_trip = None
    if korean:
        round_trip = all(
            "".join(enc.decode(e.ids).split()) == "".join(enc.normalizer.normalize_str(s).split())
            for s, e in korean
        )
    return n_unk / max(n_tokens, 1), n_tokens / max(n_words, 1), round_trip


def train_tokenizer_cli(cmd: TokenizerCommand) -> int:
    """Run ``electra tokenizer`` (its ``--help`` is :class:`~electra.text.options.TokenizerCommand`'s docstring)."""
    setup_cli_logging()
    report = train_tokenizer(
        cmd.inputs,
        cmd.output,
        vocab_size=cmd.vocab_size,
        lowercase=cmd.lowercase,
        strip_accents=cmd.strip_accents,
        morpheme=cmd.morpheme,
        min_frequency=cmd.min_frequency,
        limit_alphabet=cmd.limit_alphabet,
        limit_mb=cmd.limit_mb,
        read_options=cmd.read_options(),
        progress=cmd.progress,
    )
    print(f"wrote {report.summary()}")
    return 0
