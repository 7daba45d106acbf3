"""What ``electra export`` takes (torch-free: the command line builds its flags from it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class ExportArgs:
    """Export a run as Hugging Face directories, or a model directory as ONNX (--onnx).

    Examples:
      electra export runs/small                    # RUN/hf/discriminator, RUN/hf/generator
      electra export finetuned/nsmc/model --onnx -o onnx/nsmc --quantize int8
      electra export runs/small/hf/discriminator --onnx -o onnx/encoder

    """

    source: str = field(
        metadata={
            "doc": "A pre-training run (or its checkpoints/ or a step-N), or a model directory "
            "(a fine-tuned model, or an encoder such as RUN/hf/discriminator), or a model's "
            "Hub id ORG/NAME[@REVISION].",
            "positional": True,
        }
    )
    output: str | None = field(
        default=None,
        metadata={"doc": "Where to write (default: RUN/hf; required for a model).", "short": "-o"},
    )
    onnx: bool = field(default=False, metadata={"doc": "Export a model directory to ONNX."})
    quantize: Literal["none", "int8", "fp16"] = field(
        default="none",
        metadata={"doc": "With --onnx, also write an int8 (CPU) or fp16 (GPU) model."},
    )
    opset: int = field(default=17, metadata={"doc": "ONNX opset version."})
