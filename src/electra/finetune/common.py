"""Pieces shared by the task families: examples, errors, feature settings, batching.

The families themselves (what differs between classification, regression,
tagging and QA) are in :mod:`electra.finetune.families`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tokenizers import Tokenizer


class DatasetError(ValueError):
    """A data file is unusable; the message names the file, the line and the field."""


def where(path: str | os.PathLike[str], line: int | None = None, field: str | None = None) -> str:
    """``file, line N, field 'x'`` for error messages."""
    out = str(path)
    if line is not None:
        out += f", line {line}"
    if field is not None:
        out += f", field {field!r}"
    return out


# ---------------------------------------------------------------------------
# Examples
# ---------------------------------------------------------------------------


@dataclass
class TextExample:
    """One sentence (or sentence pair) with a class label or a real-valued score."""

    text: str
    text_pair: str | None = None
    label: str | float | None = None
    guid: str = ""
    source: str = ""  # "file, line N": where it came from, for messages


@dataclass
class TaggingExample:
    """A text cut into labelled units: words (``level="word"``) or characters (``"char"``).

    ``spans[i]`` is the character span of unit ``i`` in ``text``; ``tags[i]``
    its BIO tag (``None`` when unlabelled, for prediction).
    """

    text: str
    spans: list[tuple[int, int]]
    tags: list[str] | None = None
    level: str = "word"
    guid: str = ""
    source: str = ""

    @property
    def units(self) -> list[str]:
        return [self.text[s:e] for s, e in self.spans]

    @classmethod
    def from_words(
        cls, words: Sequence[str], tags: Sequence[str] | None = None, **kw: Any
    ) -> TaggingExample:
        """Join ``words`` with single spaces and remember where each word is."""
        spans, pos = [], 0
        for w in words:
            spans.append((pos, pos + len(w)))
            pos += len(w) + 1
        return cls(" ".join(words), spans, list(tags) if tags is not None else None, "word", **kw)

    @classmethod
    def from_chars(cls, text: str, tags: Sequence[str] | None = None, **kw: Any) -> TaggingExample:
        """One unit per character (KLUE-NER)."""
        spans = [(i, i + 1) for i in range(len(text))]
        return cls(text, spans, list(tags) if tags is not None else None, "char", **kw)


@dataclass
class Answer:
    text: str
    start: int


@dataclass
class QAExample:
    """One SQuAD v1.1 question on its context."""

    id: str
    question: str
    context: str
    answers: list[Answer] = field(default_factory=list)
    title: str = ""
    source: str = ""


@dataclass
class Splits:
    """Train/dev/test examples of a task and how each split was obtained."""

    train: list[Any]
    dev: list[Any]
    test: list[Any]
    notes: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------
# Feature settings and batching
# ---------------------------------------------------------------------------


@dataclass
class FeatureSettings:
    """How examples become model inputs (saved with the model)."""

    max_length: int = 128
    doc_stride: int = 128
    max_query_length: int = 64
    max_answer_length: int = 30
    n_best: int = 20


def prepared_tokenizer(tok: Tokenizer, max_length: int | None) -> Tokenizer:
    """A copy of ``tok`` without padding and with ``longest_first`` truncation (or none).

    ``tok`` itself when it is already so (copying a large vocabulary costs
    more than encoding one sentence, so predictors prepare theirs once).
    """
    if tok.padding is None and _truncation_is(tok, max_length):
        return tok
    copy = Tokenizer.from_str(tok.to_str())
    copy.no_padding()
    if max_length is None:
        copy.no_truncation()
    else:
        copy.enable_truncation(max_length, strategy="longest_first")
    return copy


def _truncation_is(tok: Tokenizer, max_length: int | None) -> bool:
    t = tok.truncation
    if max_length is None:
        return t is None
    return t is not None and (t["max_length"], t["strategy"], t["stride"], t["direction"]) == (
        max_length,
        "longest_first",
        0,
        "right",
    )


def check_bert_template(tok: Tokenizer, cls_id: int, sep_id: int) -> None:
    """Fail clearly when the tokenizer does not add ``[CLS] ... [SEP]`` itself."""
    ids = tok.encode("a").ids
    if not ids or ids[0] != cls_id or ids[-1] != sep_id:
        raise ValueError(
            "the tokenizer does not wrap inputs as [CLS] ... [SEP] (no BERT post-processor); "
            "use a WordPiece tokenizer saved by `electra tokenizer` or a vocab.txt"
        )
