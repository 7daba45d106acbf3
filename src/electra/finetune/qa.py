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
from tokenizers import Tokenizer
from torch import Tensor, nn

from electra.finetune.common import (
    Family,
    FeatureSettings,
    QAExample,
    collate_inputs,
    prepared_tokenizer,
)
from electra.model import ElectraModel, init_weights

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


class ElectraForQuestionAnswering(nn.Module):
    """Encoder + ``qa_outputs`` (H -> 2); returns (B, L, 2) start/end logits."""

    def __init__(self, encoder: ElectraModel) -> None:
        super().__init__()
        cfg = encoder.config
        self.config = cfg
        self.num_labels = 2
        self.electra = encoder
        self.qa_outputs = nn.Linear(cfg.hidden_size, 2)
        init_weights(self.qa_outputs, cfg.initializer_range)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        return self.qa_outputs(self.electra(input_ids, attention_mask, token_type_ids))


# ---------------------------------------------------------------------------
# Features
# ---------------------------------------------------------------------------


def answer_token_span(
    offsets: Sequence[tuple[int, int]], start_char: int, end_char: int
) -> tuple[int, int] | None:
    """First and last context token overlapping characters ``[start_char, end_char)``."""
    first = next((t for t, (_, e) in enumerate(offsets) if e > start_char), None)
    last = next((t for t in range(len(offsets) - 1, -1, -1) if offsets[t][0] < end_char), None)
    if first is None or last is None or last < first:
        return None
    return first, last


def window_starts(n_tokens: int, window: int, stride: int) -> list[int]:
    """Start of every window of ``window`` tokens, ``stride`` apart, covering ``n_tokens``."""
    starts, start = [], 0
    while True:
        starts.append(start)
        if start + window >= n_tokens:
            return starts
        start += min(stride, window)


def max_context(starts: Sequence[int], lengths: Sequence[int], w: int, pos: int) -> bool:
    """Does window ``w`` give context token ``pos`` its maximal context? (BERT's rule)."""
    best, best_score = None, None
    for i, (s, n) in enumerate(zip(starts, lengths, strict=True)):
        end = s + n - 1
        if pos < s or pos > end:
            continue
        score = min(pos - s, end - pos) + 0.01 * n
        if best_score is None or score > best_score:
            best, best_score = i, score
    return best == w


def featurize_qa(
    examples: Sequence[QAExample], tokenizer: Tokenizer, settings: FeatureSettings
) -> list[dict[str, Any]]:
    from electra.tokenizer import special_ids

    ids = special_ids(tokenizer)
    tok = prepared_tokenizer(tokenizer, None)
    questions = tok.encode_batch([e.question for e in examples], add_special_tokens=False)
    contexts = tok.encode_batch([e.context for e in examples], add_special_tokens=False)
    feats: list[dict[str, Any]] = []
    for i, (e, q, c) in enumerate(zip(examples, questions, contexts, strict=True)):
        q_ids = q.ids[: settings.max_query_length]
        window = settings.max_length - len(q_ids) - 3
        if window < 1:
            raise ValueError(
                f"max_length {settings.max_length} leaves no room for the context after a "
                f"{len(q_ids)}-token question; raise --max-length or lower --max-query-length"
            )
        n_ctx = len(c.ids)
        starts = window_starts(n_ctx, window, settings.doc_stride)
        lengths = [min(window, n_ctx - s) for s in starts]
        span = None
        if e.answers:
            a = e.answers[0]
            span = answer_token_span(c.offsets, a.start, a.start + len(a.text))
        for w, (s, n) in enumerate(zip(starts, lengths, strict=True)):
            head = [ids.cls, *q_ids, ids.sep]
            input_ids = head + c.ids[s : s + n] + [ids.sep]
            types = [0] * len(head) + [1] * (n + 1)
            offsets = [(-1, -1)] * len(head) + list(c.offsets[s : s + n]) + [(-1, -1)]
            is_max = [False] * len(head)
            is_max += [max_context(starts, lengths, w, s + k) for k in range(n)] + [False]
            start_pos = end_pos = 0
            if span is not None and span[0] >= s and span[1] < s + n:
                start_pos = span[0] - s + len(head)
                end_pos = span[1] - s + len(head)
            feats.append(
                {
                    "input_ids": input_ids,
                    "token_type_ids": types,
                    "offsets": offsets,
                    "max_context": is_max,
                    "example_index": i,
                    "start_position": start_pos,
                    "end_position": end_pos,
                }
            )
    return feats


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------


def best_spans(
    example: QAExample,
    features: Sequence[dict[str, Any]],
    outputs: Sequence[np.ndarray],
    n_best: int,
    max_answer_length: int,
) -> list[dict[str, Any]]:
    """The n-best answer spans of one question over all its windows, best first."""
    cands = []
    for f, out in zip(features, outputs, strict=True):
        start_logits, end_logits = out[:, 0], out[:, 1]
        offs = f["offsets"]
        top_s = np.argsort(-start_logits)[:n_best]
        top_e = np.argsort(-end_logits)[:n_best]
        for s in top_s.tolist():
            if offs[s][0] < 0 or not f["max_context"][s]:
                continue
            for e in top_e.tolist():
                if offs[e][0] < 0 or e < s or e - s + 1 > max_answer_length:
                    continue
                cands.append((float(start_logits[s] + end_logits[e]), offs[s][0], offs[e][1]))
    cands.sort(key=lambda c: -c[0])
    seen, unique = set(), []
    for score, a, b in cands:
        if (a, b) not in seen:
            seen.add((a, b))
            unique.append((score, a, b))
        if len(unique) == n_best:
            break
    if not unique:
        return [{"text": "", "start": 0, "end": 0, "logit": float("-inf"), "probability": 0.0}]
    logits = np.array([u[0] for u in unique])
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    return [
        {
            "text": example.context[a:b],
            "start": a,
            "end": b,
            "logit": score,
            "probability": float(p),
        }
        for (score, a, b), p in zip(unique, probs, strict=True)
    ]


class QAFamily(Family):
    name = "qa"
    architecture = "ElectraForQuestionAnswering"
    problem_type = None

    def build_model(self, encoder: ElectraModel, num_labels: int) -> nn.Module:
        return ElectraForQuestionAnswering(encoder)

    def featurize(self, examples, tokenizer, settings, labels) -> list[dict[str, Any]]:
        return featurize_qa(examples, tokenizer, settings)

    def collate(self, features, pad_id) -> dict[str, Tensor]:
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
        lengths = batch["attention_mask"].sum(1).tolist()
        arr = logits.detach().float().cpu().numpy()
        return [arr[i, :n] for i, n in enumerate(lengths)]

    def predict(self, examples, features, outputs, labels, settings) -> list[list[dict]]:
        by_example: list[list[int]] = [[] for _ in examples]
        for k, f in enumerate(features):
            by_example[f["example_index"]].append(k)
        return [
            best_spans(
                e,
                [features[k] for k in ks],
                [outputs[k] for k in ks],
                settings.n_best,
                settings.max_answer_length,
            )
            for e, ks in zip(examples, by_example, strict=True)
        ]

    def score(self, examples, predictions, labels, style: str = "squad", **kw) -> dict:
        preds = {e.id: p[0]["text"] for e, p in zip(examples, predictions, strict=True)}
        golds = {e.id: [a.text for a in e.answers] for e in examples}
        return squad_scores(preds, golds, style)

    def record(self, example: QAExample, prediction: list[dict], labels) -> dict[str, Any]:
        best = prediction[0]
        rec: dict[str, Any] = {
            "id": example.id,
            "question": example.question,
            "answer": best["text"],
            "score": round(best["probability"], 6),
            "start": best["start"],
            "end": best["end"],
            "nbest": [
                {"text": p["text"], "score": round(p["probability"], 6), "start": p["start"]}
                for p in prediction[:5]
            ],
        }
        if example.answers:
            rec["gold"] = [a.text for a in example.answers]
        return rec


QA = QAFamily()
