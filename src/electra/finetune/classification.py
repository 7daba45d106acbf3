"""Sequence classification (single sentence and sentence pair) and regression.

The head is Hugging Face's ``ElectraClassificationHead`` with the same
parameter names (``classifier.dense``, ``classifier.out_proj``): take the
``[CLS]`` vector, dropout, dense, GELU, dropout, projection. Regression (STS)
is the same head with one output trained with mean squared error, as
``ElectraForSequenceClassification`` with ``problem_type="regression"``.

Metrics come from scikit-learn and SciPy: accuracy, F1 (binary: of the second
label, e.g. MRPC "equivalent"; several classes: macro), Matthews correlation
(CoLA), Pearson and Spearman correlation (STS).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from electra.finetune.families import CLASSIFICATION, REGRESSION
from electra.finetune.features import IGNORE
from electra.finetune.heads import ElectraWithHead, collate_inputs, sequence_outputs
from electra.model.encoder import ElectraModel, init_weights


class ClassificationHead(nn.Module):
    """[CLS] -> dropout -> dense -> GELU -> dropout -> out_proj (HF names)."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(hidden_size, num_labels)

    def forward(self, h: Tensor) -> Tensor:
        x = self.dropout(h[:, 0])
        x = F.gelu(self.dense(x))
        return self.out_proj(self.dropout(x))


class ElectraForSequenceClassification(ElectraWithHead):
    """Encoder + classification head; ``forward`` returns (B, num_labels) logits."""

    def __init__(
        self, encoder: ElectraModel, num_labels: int, dropout: float | None = None
    ) -> None:
        super().__init__(encoder, num_labels)
        cfg = encoder.config
        p = cfg.hidden_dropout_prob if dropout is None else dropout
        self.classifier = ClassificationHead(cfg.hidden_size, num_labels, p)
        init_weights(self.classifier, cfg.initializer_range)

    def head(self, hidden: Tensor) -> Tensor:
        return self.classifier(hidden)


# ---------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------


def classification_metrics(
    y_true: Sequence[int], y_pred: Sequence[int], num_labels: int
) -> dict[str, float]:
    """accuracy, f1 (binary, positive = label 1) or macro_f1, mcc, and acc_and_f1 (GLUE MRPC)."""
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    if len(y_true) == 0:
        raise ValueError("cannot score an empty set of predictions")
    out = {
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "mcc": float(matthews_corrcoef(y_true, y_pred)),
    }
    labels = list(range(num_labels))
    if num_labels == 2:
        out["f1"] = float(f1_score(y_true, y_pred, pos_label=1, labels=labels, zero_division=0))
        out["acc_and_f1"] = (out["accuracy"] + out["f1"]) / 2
    else:
        out["macro_f1"] = float(
            f1_score(y_true, y_pred, average="macro", labels=labels, zero_division=0)
        )
    return out


def regression_metrics(y_true: Sequence[float], y_pred: Sequence[float]) -> dict[str, float]:
    """pearson, spearman, their mean (GLUE STS-B), and mse.

    A constant prediction has no defined correlation; it scores 0 (not NaN) so
    model selection and averages stay well defined.
    """
    from scipy.stats import pearsonr, spearmanr

    t = np.asarray(y_true, dtype=np.float64)
    p = np.asarray(y_pred, dtype=np.float64)
    if len(t) == 0:
        raise ValueError("cannot score an empty set of predictions")
    if len(t) < 2 or np.ptp(p) == 0 or np.ptp(t) == 0:
        pear = spear = 0.0
    else:
        pear = float(pearsonr(t, p)[0])
        spear = float(spearmanr(t, p)[0])
    return {
        "pearson": pear,
        "spearman": spear,
        "corr": (pear + spear) / 2,
        "mse": float(np.mean((t - p) ** 2)),
    }


# ---------------------------------------------------------------------------
# The PyTorch side of the families (see electra.finetune.families)
# ---------------------------------------------------------------------------


class ClassificationTorch:
    """Head, batches, cross-entropy loss and scores of classification."""

    def build_model(self, encoder: ElectraModel, num_labels: int) -> nn.Module:
        return ElectraForSequenceClassification(encoder, num_labels)

    def collate(self, features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Tensor]:
        batch = collate_inputs(features, pad_id)
        batch["labels"] = torch.tensor([f["label"] for f in features], dtype=torch.long)
        return batch

    def loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return F.cross_entropy(logits.float(), batch["labels"], ignore_index=IGNORE)

    def split_outputs(self, logits: Tensor, batch: dict[str, Tensor]) -> list[np.ndarray]:
        return sequence_outputs(logits, batch)

    def score(self, examples, predictions, labels, **kw: Any) -> dict[str, float]:
        index = {label: i for i, label in enumerate(labels)}
        y_true = [index[e.label] for e in examples]
        y_pred = [int(np.argmax(p)) for p in predictions]
        return classification_metrics(y_true, y_pred, len(labels))


class RegressionTorch(ClassificationTorch):
    """One output trained with mean squared error; Pearson and Spearman scores."""

    def build_model(self, encoder: ElectraModel, num_labels: int) -> nn.Module:
        return ElectraForSequenceClassification(encoder, 1)

    def collate(self, features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Tensor]:
        batch = collate_inputs(features, pad_id)
        batch["labels"] = torch.tensor([f["label"] for f in features], dtype=torch.float32)
        return batch

    def loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        y = batch["labels"]
        keep = ~torch.isnan(y)
        return F.mse_loss(logits.float().squeeze(-1)[keep], y[keep])

    def score(self, examples, predictions, labels, **kw: Any) -> dict[str, float]:
        return regression_metrics([float(e.label) for e in examples], predictions)


CLASSIFICATION_TORCH = ClassificationTorch()
REGRESSION_TORCH = RegressionTorch()

__all__ = [
    "CLASSIFICATION",
    "REGRESSION",
    "ElectraForSequenceClassification",
    "classification_metrics",
    "regression_metrics",
]
