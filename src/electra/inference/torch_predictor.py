"""Predictions with PyTorch from a fine-tuned model directory (``electra predict``'s
default backend; the ONNX one is :mod:`electra.inference.runtime`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from electra.finetune.common import prepared_tokenizer
from electra.finetune.modeling import load_finetuned
from electra.finetune.training import (
    prepare,
    run_model,
    truncated,
)
from electra.model.hub import resolve_model_path
from electra.system.precision import resolve_device
from electra.text.tokenizer import special_ids


class TorchPredictor:
    """``electra predict --backend torch``: a fine-tuned directory run with PyTorch."""

    precision = "fp32"

    def __init__(self, model_dir: str, device: str, bf16: bool, progress: bool) -> None:
        self.device = resolve_device(device, option="--device")
        resolved = resolve_model_path(model_dir)  # a local directory, or a Hub snapshot
        self.source = resolved.source()  # recorded in *.results.json
        self.ft = load_finetuned(resolved.path, self.device)
        self.info = self.ft.info
        max_length = self.ft.family.truncation_length(self.info.settings.max_length)
        self.ft.tokenizer = prepared_tokenizer(self.ft.tokenizer, max_length)  # once, not per call
        self.pad = special_ids(self.ft.tokenizer).pad
        self.bf16, self.progress = bf16, progress
        self.precision = "bf16" if bf16 else "fp32"
        self.last_truncated = 0

    def predict_examples(self, examples: Sequence[Any], batch_size: int) -> list[Any]:
        family, info = self.ft.family, self.info
        prepared = prepare(family, list(examples), self.ft.tokenizer, info.settings, info.labels)
        self.last_truncated = truncated(prepared.features)
        outputs, _ = run_model(
            self.ft.model,
            family,
            prepared.features,
            batch_size,
            self.device,
            self.pad,
            with_loss=False,
            bf16=self.bf16,
            desc="predict",
            progress=self.progress,
        )
        return family.predict(examples, prepared.features, outputs, info.labels, info.settings)

    def record(self, example: Any, prediction: Any) -> dict[str, Any]:
        return self.ft.family.record(example, prediction, self.info.labels)
