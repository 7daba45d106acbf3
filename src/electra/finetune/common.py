"""Pieces shared by the task families: examples, errors, the family interface, batching.

A *family* (classification, regression, tagging, QA) knows how to build its
head on our encoder, turn examples into features, batch them, compute the
loss, and turn model outputs into predictions and scores. The training loop in
:mod:`electra.finetune.run` is written once against :class:`Family`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tokenizers import Tokenizer

if TYPE_CHECKING:  # torch stays out of imports so the ONNX runtime can use this module
    import numpy as np
    from torch import Tensor, nn

    from electra.model import ElectraModel


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
# Feature settings and the family interface
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


def pad_stack(rows: Sequence[Sequence[int]], value: int) -> Tensor:
    """Right-pad integer rows to the longest and stack: (B, L)."""
    import torch

    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
    return out


def collate_inputs(features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Tensor]:
    """input_ids / token_type_ids / attention_mask of a batch, dynamically padded."""
    ids = pad_stack([f["input_ids"] for f in features], pad_id)
    types = pad_stack([f["token_type_ids"] for f in features], 0)
    mask = pad_stack([[1] * len(f["input_ids"]) for f in features], 0)
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


class Family:
    """Interface of a task family; see the concrete ones in this package."""

    name: str = ""
    architecture: str = ""
    problem_type: str | None = None

    def build_model(self, encoder: ElectraModel, num_labels: int) -> nn.Module:
        raise NotImplementedError

    def featurize(
        self,
        examples: Sequence[Any],
        tokenizer: Tokenizer,
        settings: FeatureSettings,
        labels: Sequence[str],
    ) -> list[dict[str, Any]]:
        raise NotImplementedError

    def collate(self, features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Tensor]:
        raise NotImplementedError

    def loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        raise NotImplementedError

    def split_outputs(self, logits: Tensor, batch: dict[str, Tensor]) -> list[np.ndarray]:
        """Per-feature outputs (float32, on CPU, padding removed)."""
        raise NotImplementedError

    def predict(
        self,
        examples: Sequence[Any],
        features: Sequence[dict[str, Any]],
        outputs: Sequence[np.ndarray],
        labels: Sequence[str],
        settings: FeatureSettings,
    ) -> list[Any]:
        """One prediction per example."""
        raise NotImplementedError

    def score(
        self, examples: Sequence[Any], predictions: Sequence[Any], labels: Sequence[str], **kw: Any
    ) -> dict[str, float]:
        raise NotImplementedError

    def record(self, example: Any, prediction: Any, labels: Sequence[str]) -> dict[str, Any]:
        """The JSON Lines record ``electra predict`` writes for one example."""
        raise NotImplementedError
