"""Token classification (NER) with word-to-subword and character-to-subword alignment.

Labels come per *unit*: per word (WNUT-17, CoNLL files) or per character
(KLUE-NER). The text is tokenised once, as a whole, and the tokenizer's
character offsets say which units each subword covers:

* training: the first subword of a unit carries the unit's tag; later
  subwords of the same unit are ignored (label -100). For characters, a
  subword starts at exactly one character, whose tag it carries.
* decoding: every unit takes the tag predicted for the first subword that
  covers it; further units covered by the same subword (the rest of a
  multi-character subword) continue its entity (``B-X`` becomes ``I-X``).
  Units no subword covers (spaces between characters, words lost to
  truncation) are ``O``, except a space inside a predicted entity
  (``I-X`` on the next unit), which continues it, as KLUE's gold tags do.

When an entity boundary falls inside a subword (KLUE-NER: ``경찰은`` is one
token but only ``경찰`` is an organisation) no prediction can be exactly
right; :func:`oracle_f1` measures that ceiling (decoding the gold labels) and
the results file reports it.

Entity-level scores use ``seqeval`` (CoNLL-style span matching).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch.nn.functional as F
from torch import Tensor, nn

from electra.finetune.common import TaggingExample
from electra.finetune.families import TAGGING
from electra.finetune.features import (
    IGNORE,
    align_labels,
    decode_units,
    entities,
    token_units,
)
from electra.finetune.heads import ElectraWithHead, collate_inputs, pad_stack, token_outputs
from electra.model.encoder import ElectraModel, init_weights


class ElectraForTokenClassification(ElectraWithHead):
    """Encoder + dropout + linear ``classifier`` per token; returns (B, L, num_labels)."""

    def __init__(
        self, encoder: ElectraModel, num_labels: int, dropout: float | None = None
    ) -> None:
        super().__init__(encoder, num_labels)
        cfg = encoder.config
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob if dropout is None else dropout)
        self.classifier = nn.Linear(cfg.hidden_size, num_labels)
        init_weights(self.classifier, cfg.initializer_range)

    def head(self, hidden: Tensor) -> Tensor:
        return self.classifier(self.dropout(hidden))


def seqeval_metrics(
    gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]
) -> dict[str, float]:
    """Entity-level precision/recall/F1 (seqeval, CoNLL matching) and unit accuracy."""
    from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score

    g, p = [list(s) for s in gold], [list(s) for s in pred]
    if not g:
        raise ValueError("cannot score an empty set of predictions")
    return {
        "f1": float(f1_score(g, p, zero_division=0)),
        "precision": float(precision_score(g, p, zero_division=0)),
        "recall": float(recall_score(g, p, zero_division=0)),
        "accuracy": float(accuracy_score(g, p)),
    }


# ---------------------------------------------------------------------------
# The PyTorch side of the family (see electra.finetune.families)
# ---------------------------------------------------------------------------


class TaggingTorch:
    """Head, batches, per-token cross-entropy and entity scores of tagging."""

    def build_model(self, encoder: ElectraModel, num_labels: int) -> nn.Module:
        return ElectraForTokenClassification(encoder, num_labels)

    def collate(self, features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Tensor]:
        batch = collate_inputs(features, pad_id)
        batch["labels"] = pad_stack([f["labels"] for f in features], IGNORE)
        return batch

    def loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return F.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]),
            batch["labels"].reshape(-1),
            ignore_index=IGNORE,
        )

    def split_outputs(self, logits: Tensor, batch: dict[str, Tensor]) -> list[np.ndarray]:
        return token_outputs(logits, batch)

    def score(self, examples, predictions, labels, **kw: Any) -> dict[str, float]:
        return seqeval_metrics([e.tags for e in examples], predictions)

    def oracle_f1(self, examples, features, labels) -> float:
        return oracle_f1(examples, features, labels)


def oracle_f1(
    examples: Sequence[TaggingExample], features: Sequence[dict[str, Any]], labels: Sequence[str]
) -> float:
    """Entity F1 of decoding the *gold* token labels: the best any model can score.

    1.0 for word-level data (unless truncated); below 1.0 where entity
    boundaries fall inside subwords (character-level KLUE-NER).
    """
    preds = []
    for f in features:
        e = examples[f["example_index"]]
        token_tags = [labels[k] if k != IGNORE else "O" for k in f["labels"]]
        preds.append(decode_units(e, f["covered"], token_tags))
    return seqeval_metrics([e.tags for e in examples], preds)["f1"]


TAGGING_TORCH = TaggingTorch()

__all__ = [
    "TAGGING",
    "ElectraForTokenClassification",
    "align_labels",
    "decode_units",
    "entities",
    "oracle_f1",
    "seqeval_metrics",
    "token_units",
]
