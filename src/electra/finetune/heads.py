"""The PyTorch side the families share: dynamic padding and the encoder-plus-head model.

Each family's head (:mod:`~electra.finetune.classification`,
:mod:`~electra.finetune.tagging`, :mod:`~electra.finetune.qa`) is an
:class:`ElectraWithHead`: our encoder under ``electra.`` and the head under
the parameter names of the matching ``transformers`` class, so a saved model
loads there unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from electra.model.encoder import ElectraModel


def pad_stack(rows: Sequence[Sequence[int]], value: int) -> Tensor:
    """Right-pad integer rows to the longest and stack: (B, L)."""
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
    return out


def collate_inputs(features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Tensor]:
    """input_ids / token_type_ids / attention_mask of a batch, dynamically padded."""
    ids = pad_stack([f["input_ids"] for f in features], pad_id)
    types = pad_stack([f["token_type_ids"] for f in features], 0)
    mask = pad_stack([[1] * len(f["input_ids"]) for f in features], 0)
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


def sequence_outputs(logits: Tensor, batch: dict[str, Tensor]) -> list[np.ndarray]:
    """One float32 row per input (sequence-level heads)."""
    return list(logits.detach().float().cpu().numpy())


def token_outputs(logits: Tensor, batch: dict[str, Tensor]) -> list[np.ndarray]:
    """Per input, its (tokens, outputs) logits without the padding (token-level heads)."""
    lengths = batch["attention_mask"].sum(1).tolist()
    arr = logits.detach().float().cpu().numpy()
    return [arr[i, :n] for i, n in enumerate(lengths)]


class ElectraWithHead(nn.Module):
    """Our encoder (``electra``) with a task head on its hidden states.

    Subclasses create the head's layers after calling ``__init__`` and define
    :meth:`head`; ``forward`` returns the head's logits.
    """

    def __init__(self, encoder: ElectraModel, num_labels: int) -> None:
        super().__init__()
        self.config = encoder.config
        self.num_labels = num_labels
        self.electra = encoder

    def head(self, hidden: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        return self.head(self.electra(input_ids, attention_mask, token_type_ids))
