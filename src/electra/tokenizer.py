"""TEMPORARY shim of the tokenizer API (the real module is written in another branch).

Only the two functions fine-tuning needs, with the agreed signatures:
:func:`load_tokenizer` and :func:`special_ids`. Drop this file at merge.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from electra.pretraining import SpecialIds


def _read_vocab(path: Path) -> dict[str, int]:
    vocab: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            token = line.rstrip("\n")
            if token and token not in vocab:
                vocab[token] = len(vocab)
    return vocab


def _wordpiece(vocab_file: Path, lowercase: bool) -> Tokenizer:
    vocab = _read_vocab(vocab_file)
    for name in ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"):
        if name not in vocab:
            raise ValueError(f"{vocab_file}: vocabulary has no {name} token")
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """A tokenizer from a directory (``tokenizer.json`` or ``vocab.txt``) or a file."""
    p = Path(path)
    if p.is_dir():
        if (p / "tokenizer.json").is_file():
            return Tokenizer.from_file(str(p / "tokenizer.json"))
        if (p / "vocab.txt").is_file():
            lower = False
            cfg = p / "tokenizer_config.json"
            if cfg.is_file():
                lower = bool(
                    json.loads(cfg.read_text(encoding="utf-8")).get("do_lower_case", False)
                )
            return _wordpiece(p / "vocab.txt", lower)
        raise FileNotFoundError(f"{p}: no tokenizer.json or vocab.txt")
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such tokenizer file")
    if p.suffix == ".json":
        return Tokenizer.from_file(str(p))
    return _wordpiece(p, False)


def special_ids(tok: Tokenizer) -> SpecialIds:
    """Ids of [PAD], [CLS], [SEP], [MASK] and the vocabulary size."""
    ids = {}
    for name in ("[PAD]", "[CLS]", "[SEP]", "[MASK]"):
        i = tok.token_to_id(name)
        if i is None:
            raise ValueError(f"tokenizer has no {name} token")
        ids[name] = i
    return SpecialIds(
        pad=ids["[PAD]"],
        cls=ids["[CLS]"],
        sep=ids["[SEP]"],
        mask=ids["[MASK]"],
        vocab_size=tok.get_vocab_size(),
    )
