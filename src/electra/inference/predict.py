"""``electra predict``: one JSON line per input, with PyTorch or with the ONNX runtime.

``--backend torch`` (default) loads a fine-tuned model directory with
PyTorch; ``--backend onnx`` loads an ``electra export --onnx`` directory with
:mod:`electra.inference.runtime`, and then nothing here imports torch, so the command
runs where only ``onnxruntime``, ``tokenizers`` and ``numpy`` are installed
(scoring against gold labels, when the input has them, needs the full
install). Both backends share the input reading (the readers of fine-tuning,
the model family's reader (:mod:`electra.finetune.families`); the format by
:mod:`electra.text.formats`, ``--format`` to override it), featurisation, decoding
and output records (:mod:`electra.finetune.features`).

Guarantees: the output has exactly one line per input example, in input
order. For a ``.txt`` input that is one line per non-final line of the file:
an empty line gets ``{"line": N, "error": "empty line"}`` in its place and a
warning naming the file and line. Texts longer than the fine-tuning max
length are truncated to it, as in fine-tuning; the count is printed and
saved as ``truncated`` in the results file. Bytes that are not UTF-8 fail
with the file and line.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from electra.finetune.common import DatasetError, where
from electra.finetune.families import get_family
from electra.finetune.readers import numbered_lines, read_data_text
from electra.inference.options import PredictArgs
from electra.inference.runtime import OnnxModel
from electra.system.files import atomic_write_json, atomic_write_text
from electra.system.provenance import model_source, versions


def _doc(text: str, **kw: Any) -> Any:
    return field(metadata={"doc": text, **kw.pop("meta", {})}, **kw)


@dataclass
class PredictInput:
    """Examples to predict on; for ``.txt`` also their line numbers and the skipped lines."""

    examples: list[Any]
    lines: list[int] | None = None
    skipped: list[tuple[int, str]] = field(default_factory=list)


def read_text_lines(path: Path, info: Any) -> PredictInput:
    """One example per non-empty line; empty lines are kept as skipped (line, reason)."""
    family = get_family(info.family)
    text = read_data_text(path)
    if text.endswith("\n"):
        text = text[:-1]  # the newline ending the last line does not start another
    out = PredictInput([], [], [])
    for n, line in numbered_lines(text):
        if not line.strip():
            out.skipped.append((n, "empty line"))
            continue
        out.examples.append(family.example_from_line(line, n, where(path, n), info))
        out.lines.append(n)  # type: ignore[union-attr]
    if not out.examples:
        raise DatasetError(f"{path}: no text on any line (no examples)")
    return out


def read_predict_input(info: Any, args: PredictArgs) -> PredictInput:
    """Examples to predict on, in the model family's input formats."""
    path = Path(args.input)
    family = get_family(info.family)
    if family.reads_lines(path, args.format or None):
        return read_text_lines(path, info)
    return PredictInput(family.read_predict_file(path, info, args))


def limit(data: PredictInput, n: int) -> PredictInput:
    """The first ``n`` examples (and the skipped lines before the last of them)."""
    if not n or n >= len(data.examples):
        return data
    lines = data.lines[:n] if data.lines is not None else None
    last = lines[-1] if lines else 0
    skipped = [s for s in data.skipped if s[0] < last] if lines is not None else []
    return PredictInput(data.examples[:n], lines, skipped)


def load_predictor(args: PredictArgs) -> Any:
    """The ONNX runtime model, or a PyTorch predictor (imported only then)."""
    if args.backend == "onnx":
        return OnnxModel.load(args.model, precision=args.precision, threads=args.threads)
    from electra.inference.torch_predictor import TorchPredictor

    return TorchPredictor(args.model, args.device, bf16=args.bf16, progress=args.progress)


def ordered_lines(data: PredictInput, records: list[dict[str, Any]]) -> list[str]:
    """Output lines in input order, an error record in place of each skipped line."""
    rows = [json.dumps(r, ensure_ascii=False) for r in records]
    if data.lines is None or not data.skipped:
        return rows
    by_line = dict(zip(data.lines, rows, strict=True))
    for n, reason in data.skipped:
        by_line[n] = json.dumps({"line": n, "error": reason, "text": ""}, ensure_ascii=False)
    return [by_line[n] for n in sorted(by_line)]


def check_labels_of(info: Any, examples: list[Any]) -> None:
    """Gold labels (or tags) in the input must be ones the model can predict."""
    get_family(info.family).check_labels(examples, info.labels, "test", "the model's labels")


def gold_scores(info: Any, examples: list[Any], preds: list[Any]) -> dict[str, float] | None:
    """Scores against gold answers when every example has one (needs the full install)."""
    family = get_family(info.family)
    if not all(family.has_gold(e) for e in examples):
        return None
    try:
        return family.score(examples, preds, info.labels, style=info.qa_style)
    except ImportError:
        print("note: scoring needs PyTorch and scikit-learn; predictions only", file=sys.stderr)
        return None


def warn_input(args: PredictArgs, data: PredictInput, truncated: int, max_length: int) -> None:
    for n, reason in data.skipped[:5]:
        print(f"warning: {args.input}, line {n}: {reason}; wrote an error record", file=sys.stderr)
    if len(data.skipped) > 5:
        print(f"warning: {len(data.skipped) - 5} more such lines", file=sys.stderr)
    if truncated:
        print(
            f"warning: {truncated} of {len(data.examples)} inputs are longer than the model's "
            f"max length ({max_length} tokens) and were truncated to it",
            file=sys.stderr,
        )


def predict(args: PredictArgs) -> dict[str, Any]:
    """Write one JSON line per input example; score it too when gold labels are given."""
    t0 = time.perf_counter()
    model = load_predictor(args)
    info = model.info
    if info is None:  # an encoder export: say so before reading anything
        model.require_head()
    data = limit(read_predict_input(info, args), args.max_examples)
    check_labels_of(info, data.examples)
    preds = model.predict_examples(data.examples, args.batch_size)
    records = [model.record(e, p) for e, p in zip(data.examples, preds, strict=True)]
    source = getattr(model, "source", None) or model_source(args.model)
    out = Path(args.output) if args.output else Path(f"{Path(args.input).stem}.predictions.jsonl")
    lines = ordered_lines(data, records)
    atomic_write_text(out, "\n".join(lines) + "\n")
    max_length = info.settings.max_length
    warn_input(args, data, model.last_truncated, max_length)
    result: dict[str, Any] = {
        "format": "electra-predict-results/1",
        "command": "predict",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "backend": args.backend,
        "precision": getattr(model, "precision", "bf16" if args.bf16 else "fp32"),
        "model": str(Path(source["path"]).resolve()),
        "model_source": source,
        "task": info.task,
        "family": info.family,
        "labels": info.labels,
        "input": str(Path(args.input).resolve()),
        "output": str(out.resolve()),
        "examples": len(data.examples),
        "lines": len(lines),
        "skipped": [{"line": n, "reason": r} for n, r in data.skipped],
        "max_length": max_length,
        "truncated": model.last_truncated,
        "fine_tuning": {"seed": info.seed, "best_epoch": info.best_epoch, "recipe": info.recipe},
    }
    scores = gold_scores(info, data.examples, preds)
    if scores is not None:
        result["scores"] = scores
    result["seconds"] = time.perf_counter() - t0
    result["versions"] = versions(("electra", "onnxruntime", "torch", "tokenizers", "numpy"))
    summary = out.with_suffix(".results.json")
    atomic_write_json(summary, result, ensure_ascii=False)
    print(f"{len(lines)} predictions -> {out}")
    for k, v in result.get("scores", {}).items():
        print(f"  {k:<14} {100 * v:8.2f}")
    print(f"results: {summary}")
    result["results"] = str(summary)
    return result


def predict_cli(args: PredictArgs) -> int:
    """Run ``electra predict`` (its ``--help`` is :class:`~electra.inference.options.PredictArgs`'s docstring)."""
    predict(args)
    return 0
