"""The optimizer and schedule shared by pre-training and fine-tuning.

AdamW with decoupled weight decay (the paper's "Adam with weight decay"), in
PyTorch's fused implementation wherever this build has it: on CPU the fused
kernel made a whole ELECTRA-Small training step 15% faster than the default
multi-tensor one. The schedule is linear warmup then linear decay to zero.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


def adamw(
    params: Iterable[Any],
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
    weight_decay: float = 0.0,
) -> torch.optim.AdamW:
    """AdamW, fused when the parameters' device supports it (same maths either way)."""
    params = list(params)
    try:
        return torch.optim.AdamW(
            params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=True
        )
    except (RuntimeError, TypeError):  # older torch or an unsupported device/dtype
        return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


def linear_warmup_decay(step: int, warmup: int, total: int) -> float:
    """Learning-rate factor at ``step`` (0-based): warmup to 1 over ``warmup`` steps,
    then linear decay reaching 0 at ``total``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if total <= warmup:
        return 1.0
    return max(0.0, (total - step) / (total - warmup))
