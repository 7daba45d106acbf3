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

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from electra.system.files import atomic_write_bytes, atomic_write_json
from electra.text.special import SpecialIds

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


class TokenizerError(ValueError):
    """A tokenizer file is missing, malformed or unusable; the message says which."""


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
    directory, chosen = _tokenizer_file(Path(path))
    config_file = directory / "tokenizer_config.json"
    config = _read_config(config_file) if config_file.is_file() else None
    if chosen.name.endswith(".json"):
        try:
            tok = Tokenizer.from_file(str(chosen))
        except Exception as exc:  # tokenizers raises a bare Exception
            raise TokenizerError(f"{chosen}: cannot load: {exc}") from None
        if config is not None:
            _warn_if_config_disagrees(tok, config, config_file, chosen)
        _check_json_holds_the_vocabulary(tok, chosen, directory / "vocab.txt")
        return tok
    tokens = _read_vocab_txt(chosen)
    return build_tokenizer(tokens, **_build_kwargs(_vocab_settings(tokens, config, chosen)))


def _check_json_holds_the_vocabulary(tok: Tokenizer, chosen: Path, vocab_file: Path) -> None:
    """Refuse a ``tokenizer.json`` far smaller than the ``vocab.txt`` beside it.

    ``transformers`` 5 writes a ``tokenizer.json`` of only the special tokens for
    ``BertTokenizerFast(vocab_file=...)``; read as it is, every word becomes [UNK].
    """
    if not vocab_file.is_file() or chosen == vocab_file:
        return
    size = tok.get_vocab_size(with_added_tokens=True)
    with vocab_file.open(encoding="utf-8") as f:
        listed = sum(1 for line in f if line.strip())
    if size < listed // 2:
        raise TokenizerError(
            f"{chosen}: {size:,} tokens, but {vocab_file} beside it lists {listed:,}; this "
            "tokenizer.json does not hold the vocabulary (transformers 5 writes one of only "
            f"the special tokens for BertTokenizerFast(vocab_file=...)). Pass {vocab_file} "
            "itself, or delete the tokenizer.json"
        )


def _tokenizer_file(p: Path) -> tuple[Path, Path]:
    """The directory and the file to load: ``tokenizer.json`` before ``vocab.txt``."""
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such tokenizer file or directory")
    if not p.is_dir():
        return p.parent, p
    json_file, vocab_file = p / "tokenizer.json", p / "vocab.txt"
    if not json_file.is_file() and not vocab_file.is_file():
        raise TokenizerError(f"{p}: neither tokenizer.json nor vocab.txt in this directory")
    return p, json_file if json_file.is_file() else vocab_file


def _warn_if_config_disagrees(
    tok: Tokenizer, config: dict[str, Any], config_file: Path, chosen: Path
) -> None:
    """Warn for each casing setting where ``tokenizer_config.json`` and the file differ."""
    try:
        actual = tokenizer_settings(tok)
    except TokenizerError:
        return
    for key in ("do_lower_case", "strip_accents", "tokenize_chinese_chars"):
        want = config.get(key)
        if key == "strip_accents" and want is None:
            want = config.get("do_lower_case", actual["do_lower_case"])
        if want is not None and bool(want) != actual[key]:
            log.warning(
                "%s says %s=%s but %s has %s; using %s (transformers would follow the config)",
                config_file,
                key,
                want,
                chosen.name,
                actual[key],
                chosen.name,
            )


def _vocab_settings(
    tokens: list[str], config: dict[str, Any] | None, chosen: Path
) -> dict[str, Any]:
    """Normalisation of a bare ``vocab.txt``: from its config, else guessed from its tokens."""
    if config is not None:
        return {
            "do_lower_case": bool(config.get("do_lower_case", True)),
            "strip_accents": config.get("strip_accents"),
            "tokenize_chinese_chars": bool(config.get("tokenize_chinese_chars", True)),
        }
    lower = _guess_casing(tokens)
    log.info(
        "%s: no tokenizer_config.json; the vocabulary looks %s, so do_lower_case=%s",
        chosen,
        "uncased" if lower else "cased",
        lower,
    )
    return {"do_lower_case": lower, "strip_accents": None}


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
