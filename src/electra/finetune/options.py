"""What ``electra finetune``, ``evaluate`` and ``download`` take.

Torch-free, so the command line builds their flags without loading PyTorch. The
recipe's flags (:class:`RecipeFlags`) are declared once here; each is named after
the :class:`~electra.finetune.recipe.Recipe` field it sets.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from electra.config import option
from electra.finetune.tasks import (
    TASKS,
    DataFlags,
)


def _flag(default: Any, doc: str) -> Any:
    """A :class:`RecipeFlags` field with its ``--help`` text (a list default is copied)."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


@dataclass
class RecipeFlags:
    """The recipe options a command line sets, each named after its :class:`Recipe` field.

    Declared once, here: ``electra finetune``'s
    :class:`~electra.finetune.options.FinetuneArgs` inherits these fields (so
    each is a flag with this doc) and :meth:`overrides` hands them all to
    :func:`make_recipe`. None keeps Table 7's value (or the task's);
    ``main_metric`` "" and ``bf16`` None are settled by the command, which knows
    the task and the device.
    """

    size: Literal["auto", "small", "base", "large"] = _flag(
        "auto", "Table 7 recipe to use; auto infers it from the hidden size."
    )
    learning_rate: float | None = _flag(None, "Peak learning rate (default: Table 7).")
    layer_decay: float | None = _flag(
        None, "Layer-wise learning-rate decay (default: Table 7; 1 disables)."
    )
    layerwise_decay_official_offset: bool = _flag(
        False, "Reproduce the official code's off-by-one (top layer lr*decay^2)."
    )
    warmup_fraction: float = _flag(0.1, "Fraction of steps of linear warmup.")
    weight_decay: float = _flag(0.0, "AdamW weight decay (not on biases/LayerNorm).")
    batch_size: int = _flag(32, "Training batch size (per optimizer step).")
    micro_batch_size: int = _flag(
        0, "Examples per forward pass; smaller than --batch-size accumulates gradients (0: same)."
    )
    eval_batch_size: int = _flag(64, "Evaluation batch size.")
    group_by_length: bool = _flag(
        False,
        "Batch training examples of similar length (random groups of 50 batches, each sorted "
        "by length): ~3x faster on short texts, but not shown harmless (README).",
    )
    epochs: int | None = _flag(None, "Epochs (default: 10 RTE/STS, 2 QA, 3 otherwise).")
    patience: int = _flag(
        0,
        "End a seed early after this many epochs in a row without a better dev score (0: "
        "train every epoch). The schedule stays planned over --epochs.",
    )
    max_length: int | None = _flag(None, "Max tokens per input (default: 128; QA 384).")
    doc_stride: int = _flag(128, "QA: tokens between the starts of context windows.")
    max_query_length: int = _flag(64, "QA: max question tokens.")
    max_answer_length: int = _flag(30, "QA: max answer tokens.")
    seeds: list[int] = _flag([1], "Fine-tuning seeds (one run each).")
    select_by: Literal["metric", "loss"] = _flag(
        "metric", "Select the best epoch by the dev metric or the dev loss."
    )
    main_metric: str = _flag("", "Dev metric to select on (default: the task's).")
    bf16: bool | None = _flag(
        None, "bfloat16 autocast (default: where the GPU or CPU has native bf16)."
    )
    grad_clip: float = _flag(1.0, "Gradient clipping max norm (0: off).")
    max_nonfinite_in_a_row: int = _flag(
        20,
        "Stop after this many optimizer steps in a row with a NaN or infinite loss or "
        "gradient (0: never). Each such step is skipped (no update; the schedule moves on) "
        "and counted in results.json (skipped_steps).",
    )

    def overrides(self) -> dict[str, Any]:
        """Every field but ``size`` (its own argument) as :func:`make_recipe`'s overrides."""
        return {
            f.name: copy.copy(getattr(self, f.name))
            for f in dataclasses.fields(RecipeFlags)
            if f.name != "size"
        }


@dataclass
class FinetuneTarget:
    """What ``electra finetune`` trains, on which task, and where it writes (first in --help)."""

    model: str = option(
        "Model directory to start from (our export or any Hugging Face ELECTRA), or a Hub id "
        "ORG/NAME[@REVISION] (safetensors only; a local directory of that name wins)."
    )
    task: str = option(f"Task: {', '.join(TASKS)}.", default="custom")
    output: str = option(
        "Output directory (results.json, model/).", default="", meta={"short": "-o"}
    )


@dataclass
class FinetuneArgs(RecipeFlags, DataFlags, FinetuneTarget):
    """Fine-tune a model on a task (several seeds), save the best, write results.json.

    Examples:
      electra finetune --task nsmc --model koelectra-base-v3-discriminator
      electra finetune --task rte --model out/export/discriminator --seeds 1 2 3 4 5
      electra finetune --task custom --train-file reviews.csv --text-column review \
          --label-column stars --model MODEL

    """

    tokenizer: str = option("Tokenizer directory or file (default: the model's).", default="")
    max_train_examples: int = option("Use at most N training examples (0: all).", default=0)
    max_eval_examples: int = option("Use at most N dev and test examples (0: all).", default=0)
    device: str = option("auto, cpu, cuda or cuda:N.", default="auto")
    keep_all_seeds: bool = option("Keep every seed's best model under OUT/seeds/.", default=False)
    floors: bool = option(
        "Score the floors on the same split: majority class (or training mean) and TF-IDF + "
        "logistic (ridge) regression; for sentence pairs also TF-IDF pair features "
        "(a, b, |a-b|, a*b).",
        default=True,
    )
    floors_cache: str = option(
        "Directory caching the floors per split (default: OUT/floors).", default=""
    )
    progress: bool = option("Show progress bars.", default=True)


@dataclass
class EvaluateArgs:
    """Score a fine-tuned model on its task's test split (or --split dev, or --test-file)."""

    model: str = option(
        "Fine-tuned model directory (from electra finetune, or a HF task model), or its Hub id "
        "ORG/NAME[@REVISION]."
    )
    task: str = option("Task (default: the one the model was fine-tuned on).", default="")
    split: Literal["test", "dev", "train"] = option(
        "Split of the task's data to score (rebuilt with the model's split seed).", default="test"
    )
    test_file: str = option("Score this file (the task's format) instead of a split.", default="")
    data_dir: str = option("Data directory (default: as when fine-tuned).", default="")
    text_column: str = option("Text column (custom tables).", default="")
    text_pair_column: str = option("Second-text column (custom tables).", default="")
    label_column: str = option("Label column (custom tables).", default="")
    max_eval_examples: int = option("Score at most N examples (0: all).", default=0)
    batch_size: int = option("Batch size.", default=64)
    device: str = option("auto, cpu, cuda or cuda:N.", default="auto")
    bf16: bool = option("bfloat16 autocast.", default=False)
    output: str = option(
        "Results JSON (default: MODEL/eval-SPLIT.json).", default="", meta={"short": "-o"}
    )
    progress: bool = option("Show progress bars.", default=True)
