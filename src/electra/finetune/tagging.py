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
from tokenizers import Tokenizer
from torch import Tensor, nn

from electra.finetune.common import (
    Family,
    FeatureSettings,
    TaggingExample,
    collate_inputs,
    pad_stack,
)
from electra.finetune.features import (
    IGNORE,
    align_labels,
    decode_units,
    entities,
    featurize_tagging,
    predict_tags,
    tagging_record,
    token_units,
)
from electra.model import ElectraModel, init_weights


class ElectraForTokenClassification(nn.Module):
    """Encoder + dropout + linear ``classifier`` per token; returns (B, L, num_labels)."""

    def __init__(
        self, encoder: ElectraModel, num_labels: int, dropout: float | None = None
    ) -> None:
        super().__init__()
        cfg = encoder.config
        self.config = cfg
        self.num_labels = num_labels
        self.electra = encoder
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob if dropout is None else dropout)
        self.classifier = nn.Linear(cfg.hidden_size, num_labels)
        init_weights(self.classifier, cfg.initializer_range)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        h = self.electra(input_ids, attention_mask, token_type_ids)
        return self.classifier(self.dropout(h))


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
# The family
# ---------------------------------------------------------------------------


class TaggingFamily(Family):
    name = "tagging"
    architecture = "ElectraForTokenClassification"
    problem_type = None

    def build_model(self, encoder: ElectraModel, num_labels: int) -> nn.Module:
        return ElectraForTokenClassification(encoder, num_labels)

    def featurize(
        self,
        examples: Sequence[TaggingExample],
        tokenizer: Tokenizer,
        settings: FeatureSettings,
        labels: Sequence[str],
    ) -> list[dict[str, Any]]:
        return featurize_tagging(examples, tokenizer, settings, labels)

    def collate(self, features, pad_id) -> dict[str, Tensor]:
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
        lengths = batch["attention_mask"].sum(1).tolist()
        arr = logits.detach().float().cpu().numpy()
        return [arr[i, :n] for i, n in enumerate(lengths)]

    def predict(self, examples, features, outputs, labels, settings) -> list[list[str]]:
        return predict_tags(examples, features, outputs, labels)

    def score(self, examples, predictions, labels, **kw: Any) -> dict[str, float]:
        return seqeval_metrics([e.tags for e in examples], predictions)

    def record(self, example: TaggingExample, prediction: list[str], labels) -> dict[str, Any]:
        return tagging_record(example, prediction)


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


TAGGING = TaggingFamily()

__all__ = [
    "TAGGING",
    "ElectraForTokenClassification",
    "TaggingFamily",
    "align_labels",
    "decode_units",
    "entities",
    "oracle_f1",
    "seqeval_metrics",
    "token_units",
]
