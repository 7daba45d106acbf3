"""ONNX export of fine-tuned models (every family) and of bare encoders, with int8 and fp16.

``electra export MODEL_DIR --onnx -o OUT`` writes a directory that
:mod:`electra.inference.runtime` (``onnxruntime`` + ``tokenizers`` + ``numpy``, no
torch) loads and predicts with:

* ``model.onnx``: the fp32 graph, inputs ``input_ids``, ``attention_mask``,
  ``token_type_ids`` (int64, ``(batch, sequence)``), output ``logits``
  (classification and regression ``(batch, labels)``, tagging
  ``(batch, sequence, labels)``, QA ``(batch, sequence, 2)`` start/end) or,
  for an encoder without a task head, ``last_hidden_state``
  ``(batch, sequence, hidden)``. Batch and sequence axes are dynamic.
* ``model.int8.onnx`` (``--quantize int8``): ONNX Runtime dynamic
  quantisation, int8 weights for every MatMul (the linear layers) and the
  embedding Gathers, activations quantised per batch at run time; for CPUs.
* ``model.fp16.onnx`` (``--quantize fp16``): fp16 weights and arithmetic
  with fp32 inputs and outputs; for GPUs (``CUDAExecutionProvider``; it also
  runs, without a speed-up, on the CPU provider, which is how it is checked).
* the tokenizer files, with ``model_max_length`` in ``tokenizer_config.json``
  set to the length the model was fine-tuned with; ``config.json`` (the label
  map: ``id2label``); ``electra_task.json`` (task, labels, feature settings);
* ``electra_onnx.json``: format, opset, inputs and outputs with their axes,
  the files with size and sha256, the default file the runtime loads, and
  the largest difference from PyTorch measured at export on a padded batch.

Every export is checked before it is kept: the fp32 graph must match PyTorch
within 1e-4 on a padded batch of two lengths, or the export fails.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from electra.finetune.families import get_family
from electra.finetune.modeling import (
    TASK_FILE,
    copy_tokenizer,
    load_finetuned,
    read_task_info,
    record_max_length,
)
from electra.inference.runtime import FILES, INPUTS, MANIFEST
from electra.model.checkpoint import CheckpointError
from electra.model.hf import load_encoder, read_config
from electra.system.files import atomic_write_json

FORMAT = "electra-onnx/1"
DEFAULT_OPSET = 17
FP32_TOLERANCE = 1e-4

Quantize = Literal["none", "int8", "fp16"]


class _Encoder(nn.Module):
    """A bare encoder with the three-input signature of the task models."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.electra = encoder

    def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: D102
        return self.electra(input_ids, attention_mask, token_type_ids)


def load_for_export(model_dir: Path) -> tuple[nn.Module, dict[str, Any]]:
    """The model to export and what the manifest says about it (kind, family, max length).

    A directory with a task head (``electra_task.json``, or a Hugging Face
    ``ElectraFor{Sequence,Token}Classification`` / ``QuestionAnswering``) is
    exported with its head; any other ELECTRA directory as a bare encoder.
    """
    _, raw = read_config(model_dir)
    archs = raw.get("architectures") or []
    has_head = (model_dir / TASK_FILE).is_file() or any(
        a.startswith("ElectraFor") and a not in ("ElectraForPreTraining", "ElectraForMaskedLM")
        for a in archs
    )
    if has_head:
        ft = load_finetuned(model_dir)
        info = read_task_info(model_dir)
        meta = {
            "kind": "finetuned",
            "family": info.family,
            "task": info.task,
            "labels": info.labels,
            "max_length": info.settings.max_length,
            "output": "logits",
        }
        return ft.model.eval(), meta
    encoder, _ = load_encoder(model_dir)
    meta = {
        "kind": "encoder",
        "family": None,
        "task": None,
        "labels": [],
        "max_length": encoder.config.max_position_embeddings,
        "output": "last_hidden_state",
    }
    return _Encoder(encoder).eval(), meta


def _per_sequence(meta: dict[str, Any]) -> bool:
    """One output row per input (classification, regression), not one per token."""
    return meta["family"] is not None and get_family(meta["family"]).sequence_level


def _output_axes(meta: dict[str, Any]) -> dict[int, str]:
    if _per_sequence(meta):
        return {0: "batch"}
    return {0: "batch", 1: "sequence"}


def sample_batch(vocab_size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A padded batch of two lengths (9 and 5 tokens) to check an export with."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab_size, size=(2, 9), dtype=np.int64)
    mask = np.ones_like(ids)
    mask[1, 5:] = 0
    ids[1, 5:] = 0
    types = np.zeros_like(ids)
    types[0, 6:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def torch_outputs(model: nn.Module, batch: dict[str, np.ndarray]) -> np.ndarray:
    with torch.inference_mode():
        out = model(*(torch.from_numpy(batch[k]) for k in INPUTS))
    return out.float().numpy()


def ort_outputs(path: Path, batch: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, batch)[0]


def max_difference(ours: np.ndarray, ref: np.ndarray, mask: np.ndarray, meta: dict) -> float:
    """Largest absolute difference over real (non-padding) positions."""
    diff = np.abs(ours.astype(np.float64) - ref.astype(np.float64))
    if not _per_sequence(meta):
        diff = diff * mask[..., None]
    return float(diff.max())


def export_graph(model: nn.Module, path: Path, meta: dict[str, Any], opset: int) -> None:
    """``torch.onnx.export`` (the TorchScript exporter) with dynamic batch and sequence axes."""
    batch = sample_batch(model.electra.config.vocab_size)
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUTS}
    axes[meta["output"]] = _output_axes(meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and tracer notes
        torch.onnx.export(
            model,
            tuple(torch.from_numpy(batch[k]) for k in INPUTS),
            str(path),
            input_names=list(INPUTS),
            output_names=[meta["output"]],
            dynamic_axes=axes,
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )


def quantize_int8(src: Path, dst: Path) -> None:
    """Dynamic int8 quantisation of the MatMul weights (linear layers) and embedding Gathers."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    quiet = _DropPreprocessAdvice()
    root.addFilter(quiet)  # ORT logs advice about optional pre-processing on every call
    try:
        quantize_dynamic(
            str(src),
            str(dst),
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul", "Gather"],
            per_channel=False,
        )
    finally:
        root.removeFilter(quiet)


class _DropPreprocessAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


def convert_fp16(src: Path, dst: Path) -> None:
    """fp16 weights and arithmetic, fp32 inputs and outputs (for GPU execution providers)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    onnx.save(model, str(dst))


def file_entry(path: Path) -> dict[str, Any]:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"file": path.name, "bytes": path.stat().st_size, "sha256": digest}


def copy_side_files(model_dir: Path, out: Path, max_length: int) -> None:
    """Tokenizer files (with the fine-tuning max length), config.json and electra_task.json."""
    copy_tokenizer(model_dir, out)
    record_max_length(out, max_length)
    for name in ("config.json", TASK_FILE):
        if (model_dir / name).is_file():
            shutil.copyfile(model_dir / name, out / name)


def export_onnx(
    model_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    quantize: Quantize = "none",
    opset: int = DEFAULT_OPSET,
) -> dict[str, Any]:
    """Export ``model_dir`` (fine-tuned or bare encoder) to ONNX in ``out_dir``; the manifest.

    Fails (``ValueError``) when the fp32 graph differs from PyTorch by more
    than 1e-4 on a padded batch.
    """
    src, out = Path(model_dir), Path(out_dir)
    if not src.is_dir():
        raise FileNotFoundError(f"{src}: no such model directory")
    if src.resolve() == out.resolve():
        raise ValueError(f"{out}: the output directory must differ from the model directory")
    model, meta = load_for_export(src)
    fp32 = out / FILES["fp32"]
    export_graph(model, fp32, meta, opset)
    batch = sample_batch(model.electra.config.vocab_size)
    ref = torch_outputs(model, batch)
    diffs = {"fp32": max_difference(ort_outputs(fp32, batch), ref, batch["attention_mask"], meta)}
    if diffs["fp32"] > FP32_TOLERANCE:
        raise ValueError(
            f"{fp32}: ONNX output differs from PyTorch by {diffs['fp32']:.2e} "
            f"(> {FP32_TOLERANCE}); not keeping a wrong export"
        )
    files = {"fp32": file_entry(fp32)}
    if quantize == "int8":
        quantize_int8(fp32, out / FILES["int8"])
    elif quantize == "fp16":
        convert_fp16(fp32, out / FILES["fp16"])
    if quantize != "none":
        path = out / FILES[quantize]
        files[quantize] = file_entry(path)
        got = ort_outputs(path, batch)
        diffs[quantize] = max_difference(got, ref, batch["attention_mask"], meta)
    copy_side_files(src, out, meta["max_length"])
    manifest = _manifest(src, meta, opset, files, diffs, "fp32" if quantize == "none" else quantize)
    atomic_write_json(out / MANIFEST, manifest, ensure_ascii=False)
    return manifest


def _manifest(
    src: Path,
    meta: dict[str, Any],
    opset: int,
    files: dict[str, Any],
    diffs: dict[str, float],
    default: str,
) -> dict[str, Any]:
    import onnx

    axes = {name: ["batch", "sequence"] for name in INPUTS}
    out_axes = _output_axes(meta)
    return {
        "format": FORMAT,
        **meta,
        "source": str(src.resolve()),
        "opset": opset,
        "inputs": {name: {"dtype": "int64", "axes": axes[name]} for name in INPUTS},
        "outputs": {
            meta["output"]: {"dtype": "float32", "dynamic_axes": [out_axes[k] for k in out_axes]}
        },
        "files": files,
        "default": default,
        "max_abs_diff_vs_pytorch": diffs,
        "versions": {"torch": torch.__version__, "onnx": onnx.__version__},
    }


def check_model_dir(path: Path, is_model: bool) -> None:
    """A clear error for a directory that is not a model (e.g. a run directory)."""
    if not is_model:
        raise CheckpointError(
            f"{path}: no model config.json; --onnx exports a model directory (a fine-tuned model such "
            "as finetuned/nsmc/model, or an encoder such as RUN/hf/discriminator). For a "
            "pre-training run, run `electra export RUN` first and export RUN/hf/discriminator"
        )


__all__ = ["FILES", "INPUTS", "MANIFEST", "export_onnx", "load_for_export"]
