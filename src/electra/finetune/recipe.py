"""The fine-tuning recipe of the paper (Table 7), layer-wise learning-rate decay, schedule.

Table 7 of the ELECTRA paper, as defaults per model size:

=========  ======  =====================  ======  =====  ======================
size       lr      layer-wise decay       warmup  batch  epochs
=========  ======  =====================  ======  =====  ======================
small      3e-4    0.8                    10%     32     10 RTE/STS, 2 SQuAD, 3
base       1e-4    0.8                    10%     32     (same)
large      5e-5    0.9                    10%     32     (same)
=========  ======  =====================  ======  =====  ======================

AdamW (betas 0.9/0.999, eps 1e-6 as in the official code; PyTorch's AdamW
applies bias correction, the official TensorFlow optimizer does not, which
only matters during the first few hundred steps), weight decay 0 (biases and
LayerNorm weights are never decayed when it is set), linear warmup over the
first 10% of the steps then linear decay to 0, gradient clipping at norm 1.0.

Layer-wise learning-rate decay (paper section and Table 7): with ``L``
transformer layers and base rate ``lr``, the task head trains at ``lr``, the
top layer ``L-1`` at ``lr * decay``, layer ``i`` at ``lr * decay**(L - i)``,
and the embeddings (with their projection) at ``lr * decay**(L + 1)``. The
official code gives every depth one more power of ``decay`` (the top layer
``lr * decay**2``, the embeddings ``lr * decay**(L + 2)``) while the head stays
at ``lr``; ``official_offset=True`` reproduces that.
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from electra.config import ConfigError
from electra.finetune.families import Family, get_family
from electra.finetune.tasks import TASKS
from electra.model.optim import adamw, linear_warmup_decay, no_weight_decay

Size = Literal["small", "base", "large"]


@dataclass(frozen=True)
class SizeDefaults:
    """One column of the paper's Table 7."""

    learning_rate: float
    layer_decay: float


TABLE7: dict[str, SizeDefaults] = {
    "small": SizeDefaults(learning_rate=3e-4, layer_decay=0.8),
    "base": SizeDefaults(learning_rate=1e-4, layer_decay=0.8),
    "large": SizeDefaults(learning_rate=5e-5, layer_decay=0.9),
}


def default_epochs(task: str, family: str | Family) -> int:
    """Table 7 epochs: 10 for RTE and STS, 2 for SQuAD-style QA, 3 otherwise.

    A registered task says its own (:attr:`TaskSpec.epochs
    <electra.finetune.tasks.TaskSpec.epochs>`); any other name takes its family's.
    """
    spec = TASKS.get(task)
    if spec is not None and spec.family is get_family(family):
        return spec.default_epochs
    return get_family(family).default_epochs


def infer_size(hidden_size: int) -> Size:
    """Model size from the hidden width: 256 small, 768 base, 1024 large.

    Other widths (a tiny test model, a custom shape) take the nearest of the
    three on a log scale, so e.g. a 64-wide model uses the small recipe.
    """
    widths = {"small": 256, "base": 768, "large": 1024}
    if hidden_size <= 0:
        raise ConfigError(f"hidden_size must be positive, got {hidden_size}")
    return min(widths, key=lambda k: abs(math.log(hidden_size / widths[k])))  # type: ignore[return-value]


@dataclass
class Recipe:
    """Every hyper-parameter of one fine-tuning run (recorded in the results)."""

    size: str = "small"
    learning_rate: float = 3e-4
    layer_decay: float = 0.8
    layerwise_decay_official_offset: bool = False
    warmup_fraction: float = 0.1
    weight_decay: float = 0.0
    batch_size: int = 32
    micro_batch_size: int = 0  # 0: the whole batch in one pass; else gradient accumulation
    eval_batch_size: int = 64
    group_by_length: bool = False  # training batches of similar lengths (less padding)
    epochs: int = 3
    patience: int = 0  # epochs in a row without a better dev score that end a seed (0: never)
    max_length: int = 128
    doc_stride: int = 128
    max_query_length: int = 64
    max_answer_length: int = 30
    n_best: int = 20
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-6
    grad_clip: float = 1.0
    select_by: str = "metric"
    main_metric: str = ""
    seeds: list[int] = field(default_factory=lambda: [1])
    bf16: bool = False
    max_nonfinite_in_a_row: int = 20  # skipped steps (NaN/inf loss or gradient) that stop a seed

    def __post_init__(self) -> None:
        checks = [
            (self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}"),
            (0 < self.layer_decay <= 1, f"layer_decay must be in (0, 1], got {self.layer_decay}"),
            (
                0 <= self.warmup_fraction < 1,
                f"warmup_fraction must be in [0, 1), got {self.warmup_fraction}",
            ),
            (self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}"),
            (self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}"),
            (
                0 <= self.micro_batch_size <= self.batch_size,
                f"micro_batch_size must be in [0, batch_size], got {self.micro_batch_size}",
            ),
            (self.eval_batch_size > 0, f"eval_batch_size must be > 0, got {self.eval_batch_size}"),
            (self.epochs > 0, f"epochs must be > 0, got {self.epochs}"),
            (self.patience >= 0, f"patience must be >= 0 (0: never stop), got {self.patience}"),
            (self.max_length >= 8, f"max_length must be >= 8, got {self.max_length}"),
            (self.doc_stride > 0, f"doc_stride must be > 0, got {self.doc_stride}"),
            (self.grad_clip >= 0, f"grad_clip must be >= 0 (0 disables), got {self.grad_clip}"),
            (
                self.select_by in ("metric", "loss"),
                f"select_by must be 'metric' or 'loss', got {self.select_by!r}",
            ),
            (
                self.max_nonfinite_in_a_row >= 0,
                f"max_nonfinite_in_a_row must be >= 0 (0: never stop), "
                f"got {self.max_nonfinite_in_a_row}",
            ),
            (bool(self.seeds), "at least one seed is needed"),
            (
                len(set(self.seeds)) == len(self.seeds),
                f"seeds must be distinct, got {self.seeds}",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["adam_betas"] = list(self.adam_betas)
        return out


def make_recipe(
    *,
    task: str,
    family: str | Family,
    hidden_size: int,
    size: str = "auto",
    overrides: dict[str, Any] | None = None,
) -> Recipe:
    """Table 7 defaults for the model's size and the task, then ``overrides`` (None = default)."""
    resolved = infer_size(hidden_size) if size in ("", "auto") else size
    if resolved not in TABLE7:
        raise ConfigError(f"size must be one of auto, small, base, large; got {size!r}")
    t7 = TABLE7[resolved]
    base: dict[str, Any] = {
        "size": resolved,
        "learning_rate": t7.learning_rate,
        "layer_decay": t7.layer_decay,
        "epochs": default_epochs(task, family),
        "max_length": get_family(family).default_max_length,
    }
    for key, value in (overrides or {}).items():
        if value is not None:
            base[key] = value
    known = {f.name for f in dataclasses.fields(Recipe)}
    unknown = set(base) - known
    if unknown:
        raise ConfigError(f"unknown recipe field(s): {', '.join(sorted(unknown))}")
    return Recipe(**base)


# ---------------------------------------------------------------------------
# Layer-wise learning-rate decay
# ---------------------------------------------------------------------------

_LAYER = re.compile(r"^electra\.encoder\.layer\.(\d+)\.")
# Depth 0: the embeddings and what acts on them before the first layer (the projection, and
# the local convolution of model.local_conv_kernel).
_EMBEDDING_PARTS = ("electra.embeddings.", "electra.embeddings_project.", "electra.local_conv.")


def parameter_depth(name: str, num_layers: int) -> int:
    """Depth of a parameter: 0 embeddings, ``i + 1`` encoder layer ``i``, ``L + 1`` the head."""
    if name.startswith(_EMBEDDING_PARTS):
        return 0
    m = _LAYER.match(name)
    if m:
        layer = int(m.group(1))
        if layer >= num_layers:
            raise ValueError(
                f"parameter {name!r} is in layer {layer} of a {num_layers}-layer model"
            )
        return layer + 1
    if name.startswith("electra."):
        raise ValueError(f"cannot place parameter {name!r} in a layer for layer-wise decay")
    return num_layers + 1


def layer_scale(depth: int, num_layers: int, decay: float, official_offset: bool = False) -> float:
    """Multiplier of the base learning rate at ``depth`` (see :func:`parameter_depth`)."""
    if depth == num_layers + 1:
        return 1.0  # the task head
    power = num_layers + 1 - depth + (1 if official_offset else 0)
    return decay**power


def layerwise_groups(
    model: nn.Module,
    learning_rate: float,
    layer_decay: float,
    num_layers: int,
    weight_decay: float = 0.0,
    official_offset: bool = False,
) -> list[dict[str, Any]]:
    """AdamW parameter groups, one per depth (and weight-decay class).

    Each group carries ``lr``, ``weight_decay``, ``depth`` and a readable
    ``name`` (``embeddings``, ``layer.3``, ``head``) so the learning rate of
    every parameter can be checked. Biases and LayerNorm weights never take
    weight decay.
    """
    groups: dict[tuple[int, bool], dict[str, Any]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        depth = parameter_depth(name, num_layers)
        decayed = weight_decay > 0 and not no_weight_decay(name, param)
        key = (depth, decayed)
        if key not in groups:
            label = (
                "embeddings"
                if depth == 0
                else ("head" if depth == num_layers + 1 else f"layer.{depth - 1}")
            )
            groups[key] = {
                "params": [],
                "param_names": [],
                "lr": learning_rate * layer_scale(depth, num_layers, layer_decay, official_offset),
                "weight_decay": weight_decay if decayed else 0.0,
                "depth": depth,
                "name": label + ("" if decayed or weight_decay == 0 else ".no_decay"),
            }
        groups[key]["params"].append(param)
        groups[key]["param_names"].append(name)
    return [groups[k] for k in sorted(groups)]


def parameter_groups(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """Deprecated name of :func:`layerwise_groups` (it goes in 0.3): pre-training's
    weight-decay groups had the same name."""
    warnings.warn(
        "electra.finetune.recipe.parameter_groups is now layerwise_groups; the old name goes "
        "in 0.3",
        DeprecationWarning,
        stacklevel=2,
    )
    return layerwise_groups(*args, **kwargs)


def build_optimizer(model: nn.Module, recipe: Recipe, num_layers: int) -> torch.optim.AdamW:
    """AdamW over the layer-wise groups of ``model``."""
    groups = layerwise_groups(
        model,
        recipe.learning_rate,
        recipe.layer_decay,
        num_layers,
        recipe.weight_decay,
        recipe.layerwise_decay_official_offset,
    )
    return adamw(
        groups,
        lr=recipe.learning_rate,
        betas=tuple(recipe.adam_betas),
        eps=recipe.adam_eps,
        weight_decay=recipe.weight_decay,
    )


def linear_schedule(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup from 0 over ``warmup_steps``, then linear decay to 0 at ``total_steps``.

    The multiplier applies to every group, so the layer-wise ratios hold at
    every step.
    """
    total = max(1, total_steps)
    warm = max(0, min(warmup_steps, total))

    def factor(step: int) -> float:
        return linear_warmup_decay(step, warm, total)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def __getattr__(name: str) -> Any:
    """Names that moved out of this module (0.2) are still found here until 0.3."""
    from electra._moved import moved_attribute

    return moved_attribute("electra.finetune.recipe", name)
