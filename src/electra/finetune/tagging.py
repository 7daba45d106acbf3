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
    prepared_tokenizer,
)
from electra.model import ElectraModel, init_weights

IGNORE = -100


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


# ---------------------------------------------------------------------------
# Alignment
# ---------------------------------------------------------------------------


def char_to_unit(example: TaggingExample) -> np.ndarray:
    """For every character of the text, the unit it belongs to (-1: none, e.g. a space)."""
    table = np.full(len(example.text), -1, dtype=np.int64)
    for u, (s, e) in enumerate(example.spans):
        table[s:e] = u
    return table


def token_units(
    example: TaggingExample, offsets: Sequence[tuple[int, int]], special: Sequence[int]
) -> list[list[int]]:
    """The units each token covers, in order ([] for special tokens)."""
    table = char_to_unit(example)
    out: list[list[int]] = []
    for (s, e), sp in zip(offsets, special, strict=True):
        if sp or e <= s:
            out.append([])
            continue
        units = table[s:e]
        units = units[units >= 0]
        # unique, in order of appearance
        seen: list[int] = []
        for u in units.tolist():
            if not seen or seen[-1] != u:
                seen.append(u)
        out.append(seen)
    return out


def align_labels(
    covered: Sequence[Sequence[int]], tags: Sequence[str], index: dict[str, int]
) -> list[int]:
    """Token labels: the tag of a token's first unit if that unit starts there, else -100."""
    labels, done = [], set()
    for units in covered:
        if units and units[0] not in done:
            labels.append(index[tags[units[0]]])
            done.add(units[0])
        else:
            labels.append(IGNORE)
        done.update(units)
    return labels


def _inside(tag: str) -> str:
    return "I-" + tag[2:] if tag.startswith("B-") else tag


def decode_units(
    example: TaggingExample, covered: Sequence[Sequence[int]], token_tags: Sequence[str]
) -> list[str]:
    """Unit tags from per-token predicted tags (see the module docstring)."""
    n = len(example.spans)
    out: list[str | None] = [None] * n
    for units, tag in zip(covered, token_tags, strict=True):
        for k, u in enumerate(units):
            if out[u] is None:
                out[u] = tag if k == 0 else _inside(tag)
    result = [t if t is not None else "O" for t in out]
    # A uncovered unit (a space between characters) inside a predicted entity continues it.
    for u in range(n):
        if out[u] is not None:
            continue
        prev = next((result[j] for j in range(u - 1, -1, -1) if out[j] is not None), "O")
        nxt = next((result[j] for j in range(u + 1, n) if out[j] is not None), "O")
        if prev != "O" and nxt.startswith("I-") and prev[2:] == nxt[2:]:
            result[u] = "I-" + nxt[2:]
    return result


def entities(example: TaggingExample, tags: Sequence[str]) -> list[dict[str, Any]]:
    """Predicted entities with their text and character span ``[start, end)``."""
    from seqeval.metrics.sequence_labeling import get_entities

    out = []
    for etype, first, last in get_entities(list(tags)):
        start, end = example.spans[first][0], example.spans[last][1]
        out.append({"text": example.text[start:end], "type": etype, "start": start, "end": end})
    return out


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
        tok = prepared_tokenizer(tokenizer, settings.max_length)
        index = {label: i for i, label in enumerate(labels)}
        encs = tok.encode_batch([e.text for e in examples])
        feats = []
        for i, (e, enc) in enumerate(zip(examples, encs, strict=True)):
            covered = token_units(e, enc.offsets, enc.special_tokens_mask)
            f = {
                "input_ids": enc.ids,
                "token_type_ids": enc.type_ids,
                "covered": covered,
                "example_index": i,
                "truncated": bool(enc.overflowing),
            }
            f["labels"] = (
                align_labels(covered, e.tags, index)
                if e.tags is not None
                else [IGNORE] * len(enc.ids)
            )
            feats.append(f)
        return feats

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
        preds: list[list[str]] = [[] for _ in examples]
        for f, out in zip(features, outputs, strict=True):
            e = examples[f["example_index"]]
            token_tags = [labels[int(k)] for k in out.argmax(-1)]
            preds[f["example_index"]] = decode_units(e, f["covered"], token_tags)
        return preds

    def score(self, examples, predictions, labels, **kw: Any) -> dict[str, float]:
        return seqeval_metrics([e.tags for e in examples], predictions)

    def record(self, example: TaggingExample, prediction: list[str], labels) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "text": example.text,
            "tokens": example.units,
            "tags": prediction,
            "entities": entities(example, prediction),
        }
        if example.tags is not None:
            rec["gold"] = example.tags
        return rec


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
