"""Extractive question answering in SQuAD v1.1 format (KorQuAD 1.0, XQuAD, SQuAD).

Featurisation follows the original BERT/ELECTRA code: the question is cut to
``max_query_length`` tokens; the context is tokenised once and covered by
windows of at most ``max_length - len(question) - 3`` tokens whose starts are
``doc_stride`` tokens apart (the original meaning of ``doc_stride``: the step
between windows, not their overlap). Each input is
``[CLS] question [SEP] window [SEP]``. A training window that does not contain
the whole answer points at ``[CLS]`` (position 0).

Decoding takes, in every window, the ``n_best`` highest start and end logits,
keeps spans inside the context, with ``end >= start``, at most
``max_answer_length`` tokens long and starting where the window gives the
token its maximal context (BERT's ``_check_is_max_context``), scores them by
``start + end`` logit across all windows of the question, and returns the best
span's characters from the original context (so the answer keeps its case,
accents and inner spaces). ``score`` is its softmax probability among the
n-best.

Scoring uses the official normalisation: SQuAD v1.1 (lower case, strip
punctuation and the articles a/an/the, collapse white space; F1 over word
tokens) or KorQuAD 1.0 (also strips quotes, brackets ``《》<>〈〉()‘’``; F1 over
*characters*, ignoring spaces), the maximum over the gold answers, averaged.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from electra.finetune.families import QA
from electra.finetune.features import (
    answer_token_span,
    best_spans,
    featurize_qa,
    max_context,
    window_starts,
)
from electra.finetune.heads import ElectraWithHead, collate_inputs, token_outputs
from electra.model.encoder import ElectraModel, init_weights

# ---------------------------------------------------------------------------
# Official normalisation and scores
# ---------------------------------------------------------------------------

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_KORQUAD_SYMBOLS = re.compile("['\"《》<>〈〉()‘’]")


def normalize_squad(s: str) -> str:
    """SQuAD v1.1 ``normalize_answer``: lower, drop punctuation, articles, extra spaces."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def normalize_korquad(s: str) -> str:
    """KorQuAD 1.0 ``normalize_answer``: symbols to spaces, lower, drop punctuation, spaces."""
    s = _KORQUAD_SYMBOLS.sub(" ", s)
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    return " ".join(s.split())


def _f1(pred: Sequence[str], gold: Sequence[str]) -> float:
    common = Counter(pred) & Counter(gold)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, gold: str, style: str = "squad") -> float:
    norm = normalize_korquad if style == "korquad" else normalize_squad
    return float(norm(prediction) == norm(gold))


def f1_score(prediction: str, gold: str, style: str = "squad") -> float:
    """Token F1 (SQuAD) or character F1 without spaces (KorQuAD)."""
    if style == "korquad":
        return _f1(
            list(normalize_korquad(prediction).replace(" ", "")),
            list(normalize_korquad(gold).replace(" ", "")),
        )
    return _f1(normalize_squad(prediction).split(), normalize_squad(gold).split())


def squad_scores(
    predictions: dict[str, str], golds: dict[str, Sequence[str]], style: str = "squad"
) -> dict[str, float]:
    """``exact_match`` and ``f1`` (fractions) over the questions in ``golds``.

    A question without a prediction scores 0, as in the official scripts.
    """
    if style not in ("squad", "korquad"):
        raise ValueError(f"unknown QA scoring style {style!r}; use 'squad' or 'korquad'")
    if not golds:
        raise ValueError("cannot score an empty set of questions")
    em = f1 = 0.0
    for qid, answers in golds.items():
        pred = predictions.get(qid)
        if pred is None or not answers:
            continue
        em += max(exact_match(pred, a, style) for a in answers)
        f1 += max(f1_score(pred, a, style) for a in answers)
    return {"exact_match": em / len(golds), "f1": f1 / len(golds)}


# ---------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------


class ElectraForQuestionAnswering(ElectraWithHead):
    """Encoder + ``qa_outputs`` (H -> 2); returns (B, L, 2) start/end logits."""

    def __init__(self, encoder: ElectraModel) -> None:
        super().__init__(encoder, 2)
        self.qa_outputs = nn.Linear(encoder.config.hidden_size, 2)
        init_weights(self.qa_outputs, encoder.config.initializer_range)

    def head(self, hidden: Tensor) -> Tensor:
        return self.qa_outputs(hidden)


class QATorch:
    """Head, batches, start/end cross-entropy and SQuAD/KorQuAD scores of QA."""

    def build_model(self, encoder: ElectraModel, num_labels: int) -> nn.Module:
        return ElectraForQuestionAnswering(encoder)

    def collate(self, features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Tensor]:
        batch = collate_inputs(features, pad_id)
        batch["start_positions"] = torch.tensor([f["start_position"] for f in features])
        batch["end_positions"] = torch.tensor([f["end_position"] for f in features])
        return batch

    def loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        logits = logits.float()
        # padding positions can never be answers
        pad = batch["attention_mask"] == 0
        logits = logits.masked_fill(pad[..., None], -1e4)
        start = F.cross_entropy(logits[..., 0], batch["start_positions"])
        end = F.cross_entropy(logits[..., 1], batch["end_positions"])
        return (start + end) / 2

    def split_outputs(self, logits: Tensor, batch: dict[str, Tensor]) -> list[np.ndarray]:
        return token_outputs(logits, batch)

    def score(self, examples, predictions, labels, style: str = "squad", **kw: Any) -> dict:
        preds = {e.id: p[0]["text"] for e, p in zip(examples, predictions, strict=True)}
        golds = {e.id: [a.text for a in e.answers] for e in examples}
        return squad_scores(preds, golds, style)


QA_TORCH = QATorch()

__all__ = [
    "QA",
    "ElectraForQuestionAnswering",
    "answer_token_span",
    "best_spans",
    "featurize_qa",
    "max_context",
    "squad_scores",
    "window_starts",
]
