"""Examples to model inputs and model outputs to predictions, for every family, without torch.

This is the part of each task family that needs only ``tokenizers`` and
``numpy``: tokenisation and truncation, word/character alignment for
tagging, context windows for QA, and decoding of logits into labels and
probabilities, unit tags and entities, or answer spans, plus the JSON record
``electra predict`` writes. The PyTorch families in
:mod:`~electra.finetune.classification`, :mod:`~electra.finetune.tagging` and
:mod:`~electra.finetune.qa` and the ONNX runtime (:mod:`electra.inference.runtime`) both
call it, so the two backends cannot featurise or decode differently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from electra.finetune.common import (
    FeatureSettings,
    QAExample,
    TaggingExample,
    TextExample,
    prepared_tokenizer,
)
from electra.text.tokenizer import special_id_map

IGNORE = -100
FORMAT = 1  # version of electra_task.json


@dataclass
class TaskInfo:
    """Contents of ``electra_task.json``."""

    task: str
    family: str
    labels: list[str] = field(default_factory=list)
    main_metric: str = ""
    qa_style: str = "squad"
    tagging_level: str = "word"
    features: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    recipe: dict[str, Any] = field(default_factory=dict)
    source_model: str = ""
    seed: int | None = None
    best_epoch: int | None = None
    dev_scores: dict[str, Any] = field(default_factory=dict)
    created: str = ""
    format: int = FORMAT

    @property
    def settings(self) -> FeatureSettings:
        known = {f.name for f in dataclasses.fields(FeatureSettings)}
        return FeatureSettings(**{k: v for k, v in self.features.items() if k in known})


# ---------------------------------------------------------------------------
# Classification and regression
# ---------------------------------------------------------------------------


def encode_texts(
    examples: Sequence[TextExample], tokenizer: Tokenizer, max_length: int
) -> list[dict[str, Any]]:
    """``[CLS] a [SEP] (b [SEP])`` ids, truncated longest-first to ``max_length``."""
    tok = prepared_tokenizer(tokenizer, max_length)
    singles = [i for i, e in enumerate(examples) if e.text_pair is None]
    pairs = [i for i, e in enumerate(examples) if e.text_pair is not None]
    encs: dict[int, Any] = {}
    if singles:
        for i, enc in zip(
            singles, tok.encode_batch([examples[i].text for i in singles]), strict=True
        ):
            encs[i] = enc
    if pairs:
        batch = [(examples[i].text, examples[i].text_pair) for i in pairs]
        for i, enc in zip(pairs, tok.encode_batch(batch), strict=True):
            encs[i] = enc
    return [
        {
            "input_ids": encs[i].ids,
            "token_type_ids": encs[i].type_ids,
            "example_index": i,
            "truncated": bool(encs[i].overflowing),
        }
        for i in range(len(examples))
    ]


def softmax_rows(outputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Class probabilities of each example's logits."""
    out = []
    for logits in outputs:
        z = logits - logits.max()
        p = np.exp(z)
        out.append(p / p.sum())
    return out


def classification_record(
    example: TextExample, prediction: np.ndarray, labels: Sequence[str]
) -> dict[str, Any]:
    """``{"text", "label", "probabilities"}`` (and ``text_pair``, ``gold`` when present)."""
    rec: dict[str, Any] = {"text": example.text}
    if example.text_pair is not None:
        rec["text_pair"] = example.text_pair
    rec["label"] = labels[int(np.argmax(prediction))]
    rec["probabilities"] = {
        lab: round(float(p), 6) for lab, p in zip(labels, prediction, strict=True)
    }
    if example.label is not None:
        rec["gold"] = example.label
    return rec


def regression_record(example: TextExample, prediction: float) -> dict[str, Any]:
    """``{"text", "score"}`` (and ``text_pair``, ``gold`` when present)."""
    rec: dict[str, Any] = {"text": example.text}
    if example.text_pair is not None:
        rec["text_pair"] = example.text_pair
    rec["score"] = round(float(prediction), 6)
    if example.label is not None:
        rec["gold"] = example.label
    return rec


# ---------------------------------------------------------------------------
# Tagging (see electra.finetune.tagging for the alignment rules)
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


def featurize_tagging(
    examples: Sequence[TaggingExample],
    tokenizer: Tokenizer,
    settings: FeatureSettings,
    labels: Sequence[str],
) -> list[dict[str, Any]]:
    """One feature per example: ids, the units each token covers, aligned labels."""
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
            align_labels(covered, e.tags, index) if e.tags is not None else [IGNORE] * len(enc.ids)
        )
        feats.append(f)
    return feats


def _inside(tag: str) -> str:
    return "I-" + tag[2:] if tag.startswith("B-") else tag


def decode_units(
    example: TaggingExample, covered: Sequence[Sequence[int]], token_tags: Sequence[str]
) -> list[str]:
    """Unit tags from per-token predicted tags (see :mod:`electra.finetune.tagging`)."""
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


def predict_tags(
    examples: Sequence[TaggingExample],
    features: Sequence[dict[str, Any]],
    outputs: Sequence[np.ndarray],
    labels: Sequence[str],
) -> list[list[str]]:
    """Unit tags of every example from its feature's (L, num_labels) logits."""
    preds: list[list[str]] = [[] for _ in examples]
    for f, out in zip(features, outputs, strict=True):
        e = examples[f["example_index"]]
        token_tags = [labels[int(k)] for k in out.argmax(-1)]
        preds[f["example_index"]] = decode_units(e, f["covered"], token_tags)
    return preds


def _split_tag(tag: str) -> tuple[str, str]:
    return tag[0], tag[1:].split("-", maxsplit=1)[-1] or "_"


def _ends(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag not in ("O", ".") and prev_type != type_


def _starts(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag not in ("O", ".") and prev_type != type_


def chunks(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """``(type, first, last)`` of every entity in a BIO(ES) sequence, as ``seqeval`` reads it."""
    out = []
    prev_tag, prev_type, begin = "O", "", 0
    for i, chunk in enumerate([*tags, "O"]):
        tag, type_ = _split_tag(chunk)
        if _ends(prev_tag, tag, prev_type, type_):
            out.append((prev_type, begin, i - 1))
        if _starts(prev_tag, tag, prev_type, type_):
            begin = i
        prev_tag, prev_type = tag, type_
    return out


def entities(example: TaggingExample, tags: Sequence[str]) -> list[dict[str, Any]]:
    """Predicted entities with their text and character span ``[start, end)``."""
    out = []
    for etype, first, last in chunks(tags):
        start, end = example.spans[first][0], example.spans[last][1]
        out.append({"text": example.text[start:end], "type": etype, "start": start, "end": end})
    return out


def tagging_record(example: TaggingExample, prediction: list[str]) -> dict[str, Any]:
    """``{"text", "tokens", "tags", "entities"}`` (and ``gold`` when present)."""
    rec: dict[str, Any] = {
        "text": example.text,
        "tokens": example.units,
        "tags": prediction,
        "entities": entities(example, prediction),
    }
    if example.tags is not None:
        rec["gold"] = example.tags
    return rec


# ---------------------------------------------------------------------------
# Extractive QA (see electra.finetune.qa for the windowing and decoding rules)
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
    """``[CLS] question [SEP] window [SEP]`` features, several per long context."""
    ids = special_id_map(tokenizer)
    cls_id, sep_id = ids["cls"], ids["sep"]
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
            head = [cls_id, *q_ids, sep_id]
            input_ids = head + c.ids[s : s + n] + [sep_id]
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


def predict_spans(
    examples: Sequence[QAExample],
    features: Sequence[dict[str, Any]],
    outputs: Sequence[np.ndarray],
    settings: FeatureSettings,
) -> list[list[dict[str, Any]]]:
    """The n-best spans of every question, from the (L, 2) logits of all its windows."""
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


def qa_record(example: QAExample, prediction: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"id", "question", "answer", "score", "start", "end", "nbest"}`` (and ``gold``)."""
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
