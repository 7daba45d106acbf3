"""What ``electra predict`` takes (torch-free: the command line builds its flags from it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from electra.config import option
from electra.text.formats import format_help


@dataclass
class PredictArgs:
    """Predict with a fine-tuned model (PyTorch) or an ONNX export (--backend onnx).

    One JSON line per input: label and probabilities, a score, tags and
    entities, or an answer span.

    Examples:
      electra predict --model finetuned/nsmc/model --input reviews.txt
      electra predict --backend onnx --model onnx/nsmc --input reviews.txt

    """

    model: str = option(
        "Fine-tuned model directory or Hub id ORG/NAME[@REVISION] (or, with --backend onnx, "
        "an ONNX export directory)."
    )
    input: str = option(
        "Input: .txt (one text per line; 'a<TAB>b' for pairs), .csv/.tsv/.jsonl/.json tables, "
        ".conll (tagging), SQuAD .json or .jsonl (QA).",
        meta={"short": "-i"},
    )
    format: str = option(
        "Input format instead of the one its name gives: " + format_help("predict") + ".",
        default="",
    )
    output: str = option(
        "Output JSON Lines (default: INPUT_STEM.predictions.jsonl here).",
        default="",
        meta={"short": "-o"},
    )
    text_column: str = option("Text column of a table (default: text).", default="")
    text_pair_column: str = option("Second-text column of a table.", default="")
    label_column: str = option("Gold label column, if present (scored).", default="")
    max_examples: int = option("Predict at most N examples (0: all).", default=0)
    batch_size: int = option("Batch size.", default=64)
    backend: Literal["torch", "onnx"] = option(
        "torch: a model directory with PyTorch; onnx: an `electra export --onnx` directory "
        "with ONNX Runtime (no torch needed).",
        default="torch",
    )
    precision: Literal["auto", "fp32", "int8", "fp16"] = option(
        "ONNX graph to run (auto: the export's default, int8 when it was made).", default="auto"
    )
    threads: int = option("ONNX Runtime threads (0: all cores).", default=0)
    device: str = option("auto, cpu, cuda or cuda:N (torch backend).", default="auto")
    bf16: bool = option("bfloat16 autocast (torch backend).", default=False)
    progress: bool = option("Show progress bars.", default=True)
