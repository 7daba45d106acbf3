"""WordPiece vocabularies: train, save, load — the same ids as ``transformers``.

The tokenizer is BERT's: ``BertNormalizer`` (clean text, Chinese characters
as words, optional lowercasing and accent stripping), ``BertPreTokenizer``
(whitespace and punctuation) and a WordPiece model with ``##`` continuations
and words over 100 characters as ``[UNK]``. That is exactly the pipeline
``transformers.BertTokenizer`` / ``ElectraTokenizerFast`` builds, and in
``transformers`` 5 that class rebuilds its normaliser from
``tokenizer_config.json`` (``do_lower_case``, ``strip_accents``,
``tokenize_chinese_chars``), taking only the vocabulary from
``tokenizer.json``. So we write and read both files, always with explicit
values, and the ids agree whichever file a loader trusts.

Files of a tokenizer directory (:func:`save_tokenizer_files`): ``vocab.txt``,
``tokenizer.json``, ``tokenizer_config.json`` (``tokenizer_class:
ElectraTokenizer``) and ``special_tokens_map.json``; :func:`train_tokenizer`
adds ``vocab_training.json`` (sources, options, statistics).

Loading (:func:`load_tokenizer`) takes a directory or a file. Without
``tokenizer.json`` the tokenizer is built from ``vocab.txt`` and the casing
from ``tokenizer_config.json``; when that file is absent too (a bare BERT
``vocab.txt``), an *uncased* vocabulary — lowercase Latin word pieces and no
uppercase ones — is read as ``do_lower_case=True`` (BERT uncased), anything
else as cased (``do_lower_case=False``, as KoELECTRA); the choice is logged.
Special tokens are looked up by their strings, so any vocabulary works
(BERT's ``[PAD]=0 [UNK]=100 [CLS]=101 ...`` as well as ours).

Vocabularies we train put ``[PAD] [UNK] [CLS] [SEP] [MASK]`` at ids 0-4
(KoELECTRA's convention).

Korean. Accent stripping is NFD decomposition plus dropping combining marks;
NFD turns every Hangul syllable into conjoining jamo, which BERT never
recomposes, so an uncased-with-accent-stripping vocabulary of Korean text
would be a vocabulary of jamo. Training refuses that combination when the
corpus contains Hangul and accent stripping was asked for explicitly, and
when it only follows from ``--lowercase`` (BERT's default) it turns accent
stripping off and says so. Lowercasing alone leaves Hangul intact.

Morpheme-aware vocabularies (``morpheme=True``, KoELECTRA v3's finding):
the training text is segmented with ``kiwipiepy`` and WordPiece merges are
never allowed across a morpheme boundary inside a word, while the pieces
after a boundary still become ``##`` continuations. The result is an
ordinary WordPiece vocabulary: raw text is tokenized without the analyser
(by us and by ``transformers``), and greedy longest-match then tends to cut
words at morpheme boundaries because that is where the vocabulary's pieces
end. (Technically: a non-initial morpheme is given to the trainer as a word
with a marker character, ``갔다`` -> ``갔 ▁다``, and ``▁x`` pieces are
renamed ``##x``.) kiwipiepy analyses about 0.3-0.4 MB/s of Korean on two
cores; use ``limit_mb`` for big corpora.

Alphabet. Korean text has thousands of distinct characters; each kept
character costs two entries (``c`` and ``##c``). By default the characters
covering 99.95% of the text are kept (SentencePiece's rule for such
scripts), but they and their ``##`` forms never take more than 80% of the
vocabulary, so a small vocabulary keeps the size asked for and room for word
pieces; rarer characters become ``[UNK]``. ``vocab_training.json`` and the
command's summary report the number of characters, their coverage and the
UNK rate on a sample.

Determinism. The ``tokenizers`` WordPiece trainer breaks ties between equal
counts by hash order, so two runs give different vocabularies. We make it
deterministic by choosing the alphabet ourselves (exact character counts,
ties broken by code point) and registering the ``##c`` continuation of every
character that can continue a word in a fixed order before training, which
fixes all ids the trainer's tie-breaks depend on: the same corpus and
options give the same ``vocab.txt``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
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
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import trainers as tk_trainers
from tqdm import tqdm

from electra.config import ConfigError
from electra.corpus import Corpus, CorpusOptions, ReadOptions
from electra.files import atomic_write_bytes, atomic_write_json
from electra.log import setup_cli_logging
from electra.special import SpecialIds

log = logging.getLogger("electra")

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
MAX_INPUT_CHARS_PER_WORD = 100
MODEL_MAX_LENGTH = 512
MORPHEME_MARK = "\u2581"  # "▁": a symbol (So), not punctuation or whitespace for BERT

_HANGUL = re.compile("[\uac00-\ud7a3]")
_JAMO = re.compile("[\u1100-\u11ff]")


class TokenizerError(ValueError):
    """A tokenizer file is missing, malformed or unusable; the message says which."""


# ---------------------------------------------------------------------------
# Building, saving, loading
# ---------------------------------------------------------------------------


def build_tokenizer(
    vocab: Sequence[str] | dict[str, int],
    *,
    lowercase: bool,
    strip_accents: bool | None = None,
    tokenize_chinese_chars: bool = True,
) -> Tokenizer:
    """The BERT WordPiece tokenizer over ``vocab``, exactly as ``transformers`` builds it.

    ``strip_accents=None`` follows ``lowercase`` (BERT's rule); the stored
    value is always explicit.
    """
    if not isinstance(vocab, dict):
        vocab = {tok: i for i, tok in enumerate(vocab)}
    if UNK not in vocab:
        raise TokenizerError(f"the vocabulary has no {UNK} token")
    strip = lowercase if strip_accents is None else strip_accents
    tok = Tokenizer(
        models.WordPiece(
            vocab,
            unk_token=UNK,
            continuing_subword_prefix="##",
            max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD,
        )
    )
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=tokenize_chinese_chars,
        strip_accents=strip,
        lowercase=lowercase,
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    present = [t for t in SPECIAL_TOKENS if t in vocab]
    tok.add_special_tokens(present)
    if CLS in vocab and SEP in vocab:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{CLS}:0 $A:0 {SEP}:0",
            pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
            special_tokens=[(CLS, vocab[CLS]), (SEP, vocab[SEP])],
        )
    return tok


def _json(tok: Tokenizer) -> dict[str, Any]:
    return json.loads(tok.to_str())


def tokenizer_settings(tok: Tokenizer) -> dict[str, bool]:
    """``do_lower_case``, ``strip_accents``, ``tokenize_chinese_chars`` of a BERT tokenizer."""
    norm = _json(tok).get("normalizer") or {}
    if norm.get("type") == "Sequence":
        found = [n for n in norm.get("normalizers", []) if n.get("type") == "BertNormalizer"]
        norm = found[0] if found else {}
    if norm.get("type") != "BertNormalizer":
        raise TokenizerError(
            "not a BERT WordPiece tokenizer (its normalizer is "
            f"{norm.get('type', 'missing')!r}, expected BertNormalizer)"
        )
    lower = bool(norm.get("lowercase", True))
    strip = norm.get("strip_accents")
    return {
        "do_lower_case": lower,
        "strip_accents": lower if strip is None else bool(strip),
        "tokenize_chinese_chars": bool(norm.get("handle_chinese_chars", True)),
    }


def vocab_list(tok: Tokenizer) -> list[str]:
    """The tokens in id order (ids must be 0..V-1 without gaps)."""
    vocab = tok.get_vocab(with_added_tokens=True)
    inv = sorted(vocab.items(), key=lambda kv: kv[1])
    for i, (t, idx) in enumerate(inv):
        if idx != i:
            raise TokenizerError(f"vocabulary ids are not contiguous (token {t!r} has id {idx})")
    return [t for t, _ in inv]


def special_id_map(tok: Tokenizer) -> dict[str, int]:
    """``{"pad", "unk", "cls", "sep", "mask"}`` -> id, looked up by token string."""
    ids = {}
    for name in SPECIAL_TOKENS:
        idx = tok.token_to_id(name)
        if idx is None:
            raise TokenizerError(
                f"the vocabulary has no {name} token; ELECTRA needs {' '.join(SPECIAL_TOKENS)}"
            )
        ids[name.strip("[]").lower()] = idx
    return ids


def special_ids(tok: Tokenizer) -> SpecialIds:
    """The ids of ``[PAD] [CLS] [SEP] [MASK]`` looked up by token, and the vocabulary size."""
    return SpecialIds.from_map(special_id_map(tok), tok.get_vocab_size(with_added_tokens=True))


def tokenizer_sha256(tok: Tokenizer) -> str:
    """A hash of what decides the ids: the vocabulary and the normalisation settings."""
    body = {"vocab": vocab_list(tok), **tokenizer_settings(tok)}
    return hashlib.sha256(json.dumps(body, ensure_ascii=False).encode()).hexdigest()


def save_tokenizer_files(tok: Tokenizer, out_dir: str | os.PathLike[str]) -> Path:
    """Write ``vocab.txt``, ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``.

    The directory loads in ``transformers`` (``AutoTokenizer``,
    ``ElectraTokenizerFast``) and in :func:`load_tokenizer` with identical ids.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    settings = tokenizer_settings(tok)
    tokens = vocab_list(tok)
    bad = [t for t in tokens if "\n" in t or "\r" in t or t != t.strip() or not t]
    if bad:
        raise TokenizerError(f"tokens {bad[:3]!r} cannot be written to vocab.txt")
    canonical = build_tokenizer(tokens, **_build_kwargs(settings))
    specials = {
        "unk_token": UNK,
        "sep_token": SEP,
        "pad_token": PAD,
        "cls_token": CLS,
        "mask_token": MASK,
    }
    config = {
        "tokenizer_class": "ElectraTokenizer",
        **settings,
        "model_max_length": MODEL_MAX_LENGTH,
        "clean_up_tokenization_spaces": False,
        **specials,
    }
    atomic_write_bytes(out / "vocab.txt", ("\n".join(tokens) + "\n").encode("utf-8"))
    atomic_write_bytes(out / "tokenizer.json", canonical.to_str(pretty=True).encode("utf-8"))
    atomic_write_json(out / "tokenizer_config.json", config)
    atomic_write_json(out / "special_tokens_map.json", specials)
    return out


def _build_kwargs(settings: dict[str, Any]) -> dict[str, Any]:
    return {
        "lowercase": bool(settings["do_lower_case"]),
        "strip_accents": settings.get("strip_accents"),
        "tokenize_chinese_chars": bool(settings.get("tokenize_chinese_chars", True)),
    }


def _read_vocab_txt(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TokenizerError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    tokens = text.split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    tokens = [t[:-1] if t.endswith("\r") else t for t in tokens]
    if not tokens:
        raise TokenizerError(f"{path}: empty vocabulary")
    seen: dict[str, int] = {}
    for i, t in enumerate(tokens):
        if t in seen:
            raise TokenizerError(f"{path}:{i + 1}: token {t!r} repeats line {seen[t] + 1}")
        seen[t] = i
    return tokens


def _guess_casing(tokens: Sequence[str]) -> bool:
    """True (lowercase) for an uncased vocabulary: Latin pieces, none uppercase."""
    upper = lower = 0
    for t in tokens:
        if t.startswith("[") and t.endswith("]"):
            continue
        for c in t:
            if c.isupper():
                upper += 1
            elif c.islower() and c.isascii():
                lower += 1
    return upper == 0 and lower > 0


def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TokenizerError(f"{path}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise TokenizerError(f"{path}: expected a JSON object")
    return data


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """Load a tokenizer from a directory, ``tokenizer.json`` or ``vocab.txt``.

    See the module docstring for how casing is decided. A ``tokenizer.json``
    that disagrees with the ``tokenizer_config.json`` beside it is used as
    it is, with a warning (``transformers`` would follow the config).
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such tokenizer file or directory")
    if p.is_dir():
        directory = p
        json_file, vocab_file = p / "tokenizer.json", p / "vocab.txt"
        if not json_file.is_file() and not vocab_file.is_file():
            raise TokenizerError(f"{p}: neither tokenizer.json nor vocab.txt in this directory")
        chosen = json_file if json_file.is_file() else vocab_file
    else:
        directory, chosen = p.parent, p
    config_file = directory / "tokenizer_config.json"
    config = _read_config(config_file) if config_file.is_file() else None

    if chosen.name.endswith(".json"):
        try:
            tok = Tokenizer.from_file(str(chosen))
        except Exception as exc:  # tokenizers raises a bare Exception
            raise TokenizerError(f"{chosen}: cannot load: {exc}") from None
        if config is not None:
            try:
                actual = tokenizer_settings(tok)
            except TokenizerError:
                actual = None
            if actual is not None:
                for key in ("do_lower_case", "strip_accents", "tokenize_chinese_chars"):
                    want = config.get(key)
                    if key == "strip_accents" and want is None:
                        want = config.get("do_lower_case", actual["do_lower_case"])
                    if want is not None and bool(want) != actual[key]:
                        log.warning(
                            "%s says %s=%s but %s has %s; using %s (transformers would follow "
                            "the config)",
                            config_file,
                            key,
                            want,
                            chosen.name,
                            actual[key],
                            chosen.name,
                        )
        return tok

    tokens = _read_vocab_txt(chosen)
    if config is not None:
        settings = {
            "do_lower_case": bool(config.get("do_lower_case", True)),
            "strip_accents": config.get("strip_accents"),
            "tokenize_chinese_chars": bool(config.get("tokenize_chinese_chars", True)),
        }
    else:
        lower = _guess_casing(tokens)
        log.info(
            "%s: no tokenizer_config.json; the vocabulary looks %s, so do_lower_case=%s",
            chosen,
            "uncased" if lower else "cased",
            lower,
        )
        settings = {"do_lower_case": lower, "strip_accents": None}
    return build_tokenizer(tokens, **_build_kwargs(settings))


def encoding_tokenizer(tok: Tokenizer) -> Tokenizer:
    """A copy for encoding raw corpus text: no special-token matching, no truncation/padding.

    Text that happens to contain ``[SEP]`` must not become a separator inside
    a pre-training block (BERT's own builder splits it into ``[ SE ##P ]``).
    """
    data = _json(tok)
    data["added_tokens"] = []
    data["truncation"] = None
    data["padding"] = None
    data["post_processor"] = None
    return Tokenizer.from_str(json.dumps(data))


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------


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
    corpus = Corpus(files, opts)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    strip = lowercase if strip_accents is None else strip_accents

    marker = None
    if morpheme:
        try:
            from kiwipiepy import Kiwi
        except ImportError:
            raise ConfigError(
                "--morpheme needs kiwipiepy: pip install 'electra[korean]' (or kiwipiepy)"
            ) from None
        marker = _morpheme_marker(Kiwi(num_workers=os.cpu_count() or 1))

    # 1. The training text, cleaned (and segmented), into a temporary file.
    hangul = False
    n_lines = n_bytes = 0
    sample: list[str] = []
    seen, stride = 0, 1
    fd, tmp_name = tempfile.mkstemp(prefix=".training-text-", suffix=".tmp", dir=out)
    tmp = Path(tmp_name)
    try:
        bar = None
        if progress:
            what = "segment morphemes" if marker is not None else "read corpus"
            bar = tqdm(total=corpus.total_bytes, unit="B", unit_scale=True, desc=what)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            limit_bytes = int(limit_mb * 1e6) if limit_mb else None
            batch: list[str] = []

            def flush() -> None:
                nonlocal n_lines, n_bytes
                lines = batch
                n_lines += len(lines)
                n_bytes += sum(len(s.encode("utf-8")) + 1 for s in lines)
                if marker is not None:
                    lines = marker([s.replace(MORPHEME_MARK, " ") for s in lines])
                f.write("\n".join(lines) + "\n")
                batch.clear()
                if bar is not None:
                    bar.update(corpus.position - bar.n)

            for line in _iter_training_lines(corpus, limit_bytes):
                seen += 1
                if seen % stride == 0:  # an evenly spread sample of 1000-2000 lines
                    sample.append(line)
                    if len(sample) >= 2000:
                        sample = sample[1::2]
                        stride *= 2
                if not hangul and _HANGUL.search(line):
                    hangul = True
                batch.append(line)
                if len(batch) >= 4096:
                    flush()
            if batch:
                flush()
        if bar is not None:
            bar.update(corpus.total_bytes - bar.n)
            bar.close()
        corpus.check_not_empty()

        # 2. Korean and accent stripping.
        if strip and hangul:
            if strip_accents:
                raise ConfigError(
                    "accent stripping decomposes Hangul syllables into jamo (NFD), and this "
                    "corpus contains Hangul; use --no-strip-accents (lowercasing alone keeps "
                    "Hangul intact)"
                )
            log.warning(
                "the corpus contains Hangul: accent stripping (implied by --lowercase) would "
                "decompose syllables into jamo, so it is turned off (strip_accents=false)"
            )
            strip = False

        # 3. Deterministic alphabet, then the trainer.
        probe = build_tokenizer([UNK], lowercase=lowercase, strip_accents=strip)
        counts = _char_counts(tmp, probe.normalizer)
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
        model.normalizer = probe.normalizer
        model.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        model.train([str(tmp)], trainer)
    finally:
        tmp.unlink(missing_ok=True)

    trained = sorted(model.get_vocab(with_added_tokens=False).items(), key=lambda kv: kv[1])
    tokens = _finish_vocab([t for t, _ in trained], vocab_size, morpheme=marker is not None)
    tok = build_tokenizer(tokens, lowercase=lowercase, strip_accents=strip)
    save_tokenizer_files(tok, out)

    # 4. Statistics on a sample of the training text.
    unk_rate, per_word, round_trip = _quality(tok, sample)
    report = TrainReport(
        out_dir=out,
        vocab_size=len(tokens),
        lowercase=lowercase,
        strip_accents=strip,
        morpheme=morpheme,
        training_bytes=n_bytes,
        training_lines=n_lines,
        seconds=time.time() - t0,
        unk_rate=unk_rate,
        tokens_per_word=per_word,
        hangul_round_trip=round_trip,
        alphabet_size=len(alphabet),
        character_coverage=coverage,
        sources=[{"path": s.path, **s.to_dict()} for s in corpus.stats],
    )
    info = {
        k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(report).items()
    }
    info["options"] = {
        "vocab_size": vocab_size,
        "min_frequency": min_frequency,
        "limit_alphabet": limit_alphabet,
        "limit_mb": limit_mb,
        **{k: v for k, v in dataclasses.asdict(opts).items()},
    }
    atomic_write_json(out / "vocab_training.json", info, ensure_ascii=False)
    return report


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


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


@dataclass
class TokenizerCommand(CorpusOptions):
    """Train a WordPiece vocabulary (vocab.txt + tokenizer.json) on corpus files.

    The corpus options (``inputs``, ``--format``, ``--on-error`` ...) are those
    of :class:`~electra.corpus.CorpusOptions`, shared with ``electra prepare``.
    """

    output: str = field(
        metadata={"doc": "Directory for vocab.txt, tokenizer.json and configs.", "short": "-o"}
    )
    vocab_size: int = field(default=32000, metadata={"doc": "Vocabulary size, specials included."})
    lowercase: bool = field(default=False, metadata={"doc": "Lowercase the text (uncased model)."})
    strip_accents: bool | None = field(
        default=None,
        metadata={
            "doc": "Strip accents (default: as --lowercase, but off for a corpus with Hangul, "
            "which it would decompose into jamo; asking for it on Korean text is an error)."
        },
    )
    morpheme: bool = field(
        default=False,
        metadata={"doc": "Morpheme-aware vocabulary for Korean (kiwipiepy; slower)."},
    )
    min_frequency: int = field(
        default=2, metadata={"doc": "Minimum pair count for a WordPiece merge."}
    )
    limit_alphabet: int | None = field(
        default=None,
        metadata={
            "doc": "Most distinct characters kept (default: those covering 99.95%% of the "
            "text, at most 80%% of the vocabulary with their ## forms)."
        },
    )
    limit_mb: float | None = field(
        default=None, metadata={"doc": "Train on an evenly spread sample of about this many MB."}
    )
    progress: bool = field(default=True, metadata={"doc": "Show the trainer's progress bar."})


def train_tokenizer_cli(cmd: TokenizerCommand) -> int:
    """Train a WordPiece vocabulary on corpus files.

    Writes vocab.txt, tokenizer.json, tokenizer_config.json and
    special_tokens_map.json (loadable by transformers' ElectraTokenizerFast
    with identical ids) plus vocab_training.json.
    """
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
    skipped = sum(s["skipped_lines"] for s in report.sources)
    rt = report.hangul_round_trip
    print(
        f"wrote {report.out_dir}: {report.vocab_size} tokens "
        f"({'uncased' if report.lowercase else 'cased'}, strip_accents={report.strip_accents}"
        f"{', morpheme-aware' if report.morpheme else ''}) from "
        f"{report.training_bytes / 1e6:.1f} MB in {report.seconds:.1f} s; "
        f"{report.alphabet_size} characters ({100 * report.character_coverage:.2f}% of the "
        f"text), UNK {100 * report.unk_rate:.2f}%, {report.tokens_per_word:.2f} tokens/word"
        + ("" if rt is None else f", Hangul round trip {'ok' if rt else 'FAILED'}")
        + (f"; {skipped} bad lines skipped" if skipped else "")
    )
    return 0
