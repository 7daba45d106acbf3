"""Prediction with an exported ONNX directory: ``onnxruntime``, ``tokenizers`` and ``numpy`` only.

No PyTorch, not even indirectly (a test imports and predicts with ``torch``
blocked), so a fine-tuned model ships to a machine or container with a few
tens of megabytes of dependencies::

    from electra.inference.runtime import OnnxModel

    model = OnnxModel.load("onnx/nsmc")            # int8 when exported, else fp32
    model.predict(["정말 재밌어요", "시간 아까움"])
    # [{"text": ..., "label": "positive", "probabilities": {...}}, ...]

Inputs by family: classification and regression take texts or
``(text, text_pair)`` tuples; tagging takes texts (split into words on
white space, or into characters for character-level models such as
KLUE-NER); QA takes ``{"question", "context"}`` dicts or
``(question, context)`` tuples. The records are exactly those
``electra predict`` writes, and the features and decoding are the same code
as the PyTorch path (:mod:`electra.finetune.features`), so the two backends
differ only by the graph's arithmetic (within 1e-4 in fp32).

Batches are formed from inputs sorted by length (less padding) and put back
in input order. Texts longer than the fine-tuning max length are truncated
to it, as in fine-tuning, and counted (:attr:`OnnxModel.last_truncated`).
An encoder exported without a task head has no predictions; :meth:`encode`
returns its hidden states.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from electra.finetune.common import prepared_tokenizer
from electra.finetune.families import Family, get_family
from electra.finetune.features import TaskInfo
from electra.text.tokenizer import load_tokenizer, special_id_map

MANIFEST = "electra_onnx.json"
TASK_FILE = "electra_task.json"
FILES = {"fp32": "model.onnx", "int8": "model.int8.onnx", "fp16": "model.fp16.onnx"}
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class ExportedModelError(ValueError):
    """An exported directory is unusable; the message names the file and what to do."""


def read_manifest(path: Path) -> dict[str, Any]:
    """``electra_onnx.json`` of an exported directory, with a clear error when it is not one."""
    file = path / MANIFEST
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such model directory")
    if not file.is_file():
        hint = (
            f"it is a PyTorch model: export it with `electra export {path} --onnx -o OUT`"
            if (path / "config.json").is_file()
            else "export a model with `electra export MODEL --onnx -o OUT`"
        )
        raise ExportedModelError(f"{file}: missing, so {path} is not an ONNX export ({hint})")
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ExportedModelError(f"{file}: not valid JSON ({exc})") from None


def read_model_info(path: Path, manifest: dict[str, Any]) -> TaskInfo | None:
    """The task description, or ``None`` for an encoder without a task head."""
    if manifest.get("kind") == "encoder":
        return None
    file = path / TASK_FILE
    if not file.is_file():
        raise ExportedModelError(
            f"{file}: missing (the export is incomplete; export the model again)"
        )
    raw = json.loads(file.read_text(encoding="utf-8"))
    known = {f.name for f in dataclasses.fields(TaskInfo)}
    return TaskInfo(**{k: v for k, v in raw.items() if k in known})


def choose_file(path: Path, manifest: dict[str, Any], precision: str) -> Path:
    """The graph to load: ``auto`` is the export's default (int8 or fp16 when made)."""
    chosen = manifest.get("default", "fp32") if precision == "auto" else precision
    if chosen not in FILES:
        raise ValueError(f"unknown precision {precision!r}; choose auto, fp32, int8 or fp16")
    file = path / FILES[chosen]
    if not file.is_file():
        made = ", ".join(sorted(manifest.get("files", {}))) or "none"
        raise ExportedModelError(
            f"{file}: missing; this export has {made} (export with --quantize {chosen})"
        )
    return file


def make_session(file: Path, threads: int = 0, providers: Sequence[str] | None = None) -> Any:
    """An ``onnxruntime`` session; ``threads`` 0 lets ONNX Runtime use every core."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    available = ort.get_available_providers()
    wanted = list(providers) if providers else ["CPUExecutionProvider"]
    chosen = [p for p in wanted if p in available] or ["CPUExecutionProvider"]
    return ort.InferenceSession(str(file), options, providers=chosen)


def pad_batch(rows: Sequence[dict[str, Any]], pad_id: int) -> dict[str, np.ndarray]:
    """Right-padded int64 ``input_ids``, ``attention_mask``, ``token_type_ids``."""
    width = max(len(r["input_ids"]) for r in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    types = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        ids[i, :n] = r["input_ids"]
        mask[i, :n] = 1
        types[i, :n] = r["token_type_ids"]
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


class OnnxModel:
    """An exported directory loaded for prediction (see the module docstring)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        precision: str = "auto",
        threads: int = 0,
        providers: Sequence[str] | None = None,
    ) -> None:
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        self.info = read_model_info(self.path, self.manifest)
        self.file = choose_file(self.path, self.manifest, precision)
        self.precision = next(k for k, v in FILES.items() if v == self.file.name)
        if providers is None and self.precision == "fp16":
            providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]  # CUDA when present
        self.session = make_session(self.file, threads, providers)
        # prepared once: truncation as in fine-tuning (QA windows its contexts itself)
        length = (
            self.task_family.truncation_length(self.max_length) if self.info else self.max_length
        )
        self.tokenizer = prepared_tokenizer(load_tokenizer(self.path), length)
        self.pad_id = special_id_map(self.tokenizer)["pad"]
        self.last_truncated = 0

    @classmethod
    def load(cls, path: str | os.PathLike[str], **kw: Any) -> OnnxModel:
        """Load an exported directory (``precision``, ``threads``, ``providers``)."""
        return cls(path, **kw)

    @property
    def family(self) -> str:
        return self.info.family if self.info else "encoder"

    @property
    def task_family(self) -> Family:
        """The registered family of the task head (see :meth:`require_head`)."""
        return get_family(self.require_head().family)

    @property
    def max_length(self) -> int:
        return int(self.manifest["max_length"])

    def require_head(self) -> TaskInfo:
        """The task description; a clear error for an encoder exported without a task head."""
        if self.info is None:
            raise ExportedModelError(
                f"{self.path}: an encoder exported without a task head has no predictions; "
                "fine-tune it (`electra finetune`) and export that, or use encode()"
            )
        return self.info

    # -- the graph ----------------------------------------------------------

    def run(self, feats: Sequence[dict[str, Any]], batch_size: int = 32) -> list[np.ndarray]:
        """Per-feature outputs in input order, padding removed (as the PyTorch path)."""
        order = sorted(range(len(feats)), key=lambda i: len(feats[i]["input_ids"]))
        outputs: list[np.ndarray | None] = [None] * len(feats)
        per_sequence = self.info is not None and self.task_family.sequence_level
        for start in range(0, len(order), max(1, batch_size)):
            idx = order[start : start + batch_size]
            batch = pad_batch([feats[i] for i in idx], self.pad_id)
            out = self.session.run(None, batch)[0].astype(np.float32, copy=False)
            for row, i in enumerate(idx):
                n = len(feats[i]["input_ids"])
                outputs[i] = out[row] if per_sequence else out[row, :n]
        return outputs  # type: ignore[return-value]

    def featurize(self, examples: Sequence[Any]) -> list[dict[str, Any]]:
        """Model inputs of ``examples`` with the fine-tuning settings (the PyTorch code)."""
        info = self.require_head()
        return self.task_family.featurize(examples, self.tokenizer, info.settings, info.labels)

    def predict_examples(self, examples: Sequence[Any], batch_size: int = 32) -> list[Any]:
        """Predictions of the model family for our example objects (``electra predict``'s)."""
        info = self.require_head()
        feats = self.featurize(examples)
        self.last_truncated = sum(1 for f in feats if f.get("truncated"))
        outputs = self.run(feats, batch_size)
        return self.task_family.predict(examples, feats, outputs, info.labels, info.settings)

    def record(self, example: Any, prediction: Any) -> dict[str, Any]:
        """The JSON record ``electra predict`` writes for one example."""
        return self.task_family.record(example, prediction, self.require_head().labels)

    # -- convenience API ----------------------------------------------------

    def to_examples(self, inputs: Sequence[Any]) -> list[Any]:
        """Our example objects from plain Python inputs (see the module docstring)."""
        info = self.require_head()
        return [self.task_family.example_from_input(x, n, info) for n, x in enumerate(inputs)]

    def predict(self, inputs: Any, batch_size: int = 32) -> list[dict[str, Any]]:
        """Records for a list of inputs (or one input: a list of one record)."""
        if isinstance(inputs, str | dict | tuple):
            inputs = [inputs]
        examples = self.to_examples(inputs)
        preds = self.predict_examples(examples, batch_size)
        return [self.record(e, p) for e, p in zip(examples, preds, strict=True)]

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> list[np.ndarray]:
        """Hidden states ``(tokens, hidden)`` per text, from an encoder export."""
        if self.info is not None:
            raise ExportedModelError(f"{self.path}: a task model; encode() needs an encoder export")
        tok = prepared_tokenizer(self.tokenizer, self.max_length)
        encs = tok.encode_batch(list(texts))
        self.last_truncated = sum(1 for e in encs if e.overflowing)
        feats = [{"input_ids": e.ids, "token_type_ids": e.type_ids} for e in encs]
        return self.run(feats, batch_size)


__all__ = ["OnnxModel", "ExportedModelError", "read_manifest"]
