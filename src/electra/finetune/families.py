"""Task families and their one registry: everything that differs between
classification, regression, tagging and extractive QA.

A :class:`Family` owns its metrics (which can select a checkpoint, which are
printed, the default one), its labels (inferred from train, checked on
dev/test, written to ``config.json``), its input formats (custom task files,
``electra predict`` inputs, plain Python inputs of the ONNX runtime), its
defaults (max length, epochs), featurisation, decoding and output records,
and the PyTorch side: the model head, batches, loss and scores.

This module needs no PyTorch: the ONNX runtime (:mod:`electra.inference.runtime`) and
``electra predict --backend onnx`` use the registered families to featurise
and decode. The PyTorch side of the built-in families lives in
:mod:`~electra.finetune.classification`, :mod:`~electra.finetune.tagging` and
:mod:`~electra.finetune.qa`, named by :attr:`Family.torch_side` and imported
on first use; a family of your own may instead override the PyTorch methods
(:meth:`Family.build_model`, :meth:`~Family.collate`, :meth:`~Family.loss`,
:meth:`~Family.split_outputs`, :meth:`~Family.score`) directly.

Adding a family is one class and one call::

    register_family(MyFamily())
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenizers import Tokenizer

from electra.finetune import features as F
from electra.finetune.common import (
    DatasetError,
    FeatureSettings,
    QAExample,
    TaggingExample,
    TextExample,
)
from electra.finetune.readers import (
    data_format,
    read_conll,
    read_json_array,
    read_jsonl,
    read_squad,
    read_table,
    read_text_table,
    require_columns,
    tagging_from_rows,
)

if TYPE_CHECKING:  # torch stays out of imports so the ONNX runtime can use this module
    import numpy as np
    from torch import Tensor, nn

    from electra.finetune.features import TaskInfo
    from electra.model.encoder import ElectraModel

Reader = Callable[[Path], list[Any]]


def _label_sort_key(label: str) -> tuple[int, float, str]:
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


def _table_columns(columns: Any) -> tuple[str, str | None, str]:
    """Text, pair and label columns of a table, from options with ``*_column`` fields."""
    text = getattr(columns, "text_column", "") or "text"
    pair = getattr(columns, "text_pair_column", "") or None
    label = getattr(columns, "label_column", "") or "label"
    return text, pair, label


def predict_format(path: Path, columns: Any) -> str:
    """The format of an ``electra predict`` input file: ``--format``, else its name."""
    return data_format(path, getattr(columns, "format", "") or None, "predict")


class Family:
    """A task family: see the module docstring. Subclass, then :func:`register_family`."""

    name: str = ""
    architecture: str = ""  # the transformers class of the fine-tuned model
    problem_type: str | None = None  # config.json's problem_type
    main_metric: str = ""  # default dev metric to select checkpoints on
    reported_metrics: tuple[str, ...] = ()  # printed in the summary tables
    has_labels: bool = True  # a label (or tag) set, saved with the model
    sequence_level: bool = True  # one output row per input (not per token)
    default_max_length: int = 128
    default_epochs: int = 3  # Table 7; a task may ask for more (TaskSpec.epochs)
    # The floor beside the scores (baselines.py): "majority"/"mean" (with TF-IDF, and for
    # pairs TF-IDF pair features too), "memorised" (tagging's lookup floor), "window" (QA's
    # sliding window); None: none.
    floor_constant: str | None = None
    torch_side: str = ""  # "module:attribute" of the PyTorch side, imported on first use

    def __repr__(self) -> str:
        return f"<family {self.name}>"

    # -- the PyTorch side -----------------------------------------------------

    @cached_property
    def torch(self) -> Any:
        """The object implementing the PyTorch methods (imports torch)."""
        if not self.torch_side:
            raise NotImplementedError(f"family {self.name!r} has no PyTorch side")
        module, _, attr = self.torch_side.partition(":")
        return getattr(importlib.import_module(module), attr)

    def build_model(self, encoder: ElectraModel, num_labels: int) -> nn.Module:
        """The encoder with this family's head."""
        return self.torch.build_model(encoder, num_labels)

    def collate(self, features: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Tensor]:
        """A padded batch of features, with its targets."""
        return self.torch.collate(features, pad_id)

    def loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return self.torch.loss(logits, batch)

    def split_outputs(self, logits: Tensor, batch: dict[str, Tensor]) -> list[np.ndarray]:
        """Per-feature outputs (float32, on CPU, padding removed)."""
        return self.torch.split_outputs(logits, batch)

    def score(
        self, examples: Sequence[Any], predictions: Sequence[Any], labels: Sequence[str], **kw: Any
    ) -> dict[str, float]:
        """Scores of the predictions against the gold answers."""
        return self.torch.score(examples, predictions, labels, **kw)

    # -- metrics --------------------------------------------------------------

    def metric_names(self, num_labels: int) -> list[str]:
        """Metrics that can select a checkpoint (all: higher is better)."""
        return list(self.reported_metrics)

    def report_metrics(self, main: str) -> list[str]:
        """The metrics a summary table shows, ``main`` first."""
        return [main] + [m for m in self.reported_metrics if m != main]

    # -- labels ---------------------------------------------------------------

    def infer_labels(self, train: Sequence[Any]) -> list[str]:
        """The label set of a task without a fixed one, from its training examples."""
        return []

    def check_labels(
        self, examples: Sequence[Any], labels: Sequence[str], kind: str, origin: str
    ) -> None:
        """Fail when an example of split ``kind`` has a label the model cannot predict."""

    def label_counts(self, examples: Sequence[Any]) -> dict[str, int] | None:
        """Examples per label (``None`` where the family has no classes per example)."""
        return None

    def task_report(self, train: Sequence[Any], dev: Any, labels: Sequence[str]) -> dict[str, Any]:
        """Extra fields of the results file's ``task`` section (``dev``: featurised)."""
        return {}

    def split_strata(self) -> dict[str, Callable[[Any], Any]]:
        """``seeded_split`` keywords: stratify by class (``key``) or group (``group``)."""
        return {}

    def hf_config(self, labels: Sequence[str]) -> dict[str, Any]:
        """``config.json`` fields that make ``transformers`` build the right head."""
        extra: dict[str, Any] = {
            "num_labels": len(labels),
            "id2label": {str(i): label for i, label in enumerate(labels)},
            "label2id": {label: i for i, label in enumerate(labels)},
        }
        if self.problem_type:
            extra["problem_type"] = self.problem_type
        return extra

    # -- inputs ---------------------------------------------------------------

    def custom_reader(self, options: Any) -> Reader:
        """Reader of a custom task's files (``options``: the task's DataOptions)."""
        raise NotImplementedError

    def reads_lines(self, path: Path, format: str | None = None) -> bool:
        """Whether ``electra predict`` reads ``path`` as one input per line of text."""
        return data_format(path, format, "predict") == "lines"

    def example_from_line(self, line: str, n: int, source: str, info: TaskInfo) -> Any:
        """One ``electra predict`` input from a line of a text file."""
        raise NotImplementedError

    def read_predict_file(self, path: Path, info: TaskInfo, columns: Any) -> list[Any]:
        """``electra predict`` inputs of a structured file (``columns``: its options)."""
        raise NotImplementedError

    def example_from_input(self, x: Any, n: int, info: TaskInfo) -> Any:
        """One example from a plain Python input of :meth:`electra.inference.runtime.OnnxModel.predict`."""
        raise NotImplementedError

    def has_gold(self, example: Any) -> bool:
        """Whether the example carries a gold answer to score against."""
        raise NotImplementedError

    # -- features and decoding (torch-free) -----------------------------------

    def truncation_length(self, max_length: int) -> int | None:
        """The tokenizer's truncation length (``None``: the family windows inputs itself)."""
        return max_length

    def featurize(
        self,
        examples: Sequence[Any],
        tokenizer: Tokenizer,
        settings: FeatureSettings,
        labels: Sequence[str],
    ) -> list[dict[str, Any]]:
        raise NotImplementedError

    def predict(
        self,
        examples: Sequence[Any],
        features: Sequence[dict[str, Any]],
        outputs: Sequence[np.ndarray],
        labels: Sequence[str],
        settings: FeatureSettings,
    ) -> list[Any]:
        """One prediction per example from the per-feature outputs."""
        raise NotImplementedError

    def record(self, example: Any, prediction: Any, labels: Sequence[str]) -> dict[str, Any]:
        """The JSON Lines record ``electra predict`` writes for one example."""
        raise NotImplementedError


# ---------------------------------------------------------------------------
# The built-in families
# ---------------------------------------------------------------------------


class ClassificationFamily(Family):
    """Single-sentence and sentence-pair classification."""

    name = "classification"
    architecture = "ElectraForSequenceClassification"
    problem_type = "single_label_classification"
    main_metric = "accuracy"
    reported_metrics = ("accuracy", "f1", "macro_f1", "mcc")
    floor_constant = "majority"
    torch_side = "electra.finetune.classification:CLASSIFICATION_TORCH"
    regression = False  # the label is a class name (a score: RegressionFamily)

    def metric_names(self, num_labels: int) -> list[str]:
        extra = ["f1", "acc_and_f1"] if num_labels == 2 else ["macro_f1"]
        return ["accuracy", "mcc", *extra]

    def infer_labels(self, train: Sequence[TextExample]) -> list[str]:
        return sorted({e.label for e in train}, key=_label_sort_key)  # type: ignore[arg-type]

    def check_labels(
        self, examples: Sequence[TextExample], labels: Sequence[str], kind: str, origin: str
    ) -> None:
        known = set(labels)
        for e in examples:
            if e.label is not None and e.label not in known:
                raise DatasetError(
                    f"{e.source}, field 'label': {kind} label {e.label!r} does not occur in "
                    f"{origin} (labels: {', '.join(map(str, labels))})"
                )

    def label_counts(self, examples: Sequence[TextExample]) -> dict[str, int] | None:
        out: dict[str, int] = {}
        for e in examples:
            out[str(e.label)] = out.get(str(e.label), 0) + 1
        return dict(sorted(out.items()))

    def split_strata(self) -> dict[str, Callable[[Any], Any]]:
        return {"key": lambda e: e.label}

    def custom_reader(self, options: Any) -> Reader:
        text_col, pair_col, label_col = _table_columns(options)

        def read(p: Path) -> list[TextExample]:
            return read_text_table(
                p, text_col, pair_col, label_col, self.regression, options.format or None
            )

        return read

    def example_from_line(self, line: str, n: int, source: str, info: TaskInfo) -> TextExample:
        a, _, b = line.partition("\t")
        return TextExample(a, b if b else None, None, guid=str(n), source=source)

    def read_predict_file(self, path: Path, info: TaskInfo, columns: Any) -> list[TextExample]:
        fmt = predict_format(path, columns)
        if fmt == "conll":
            raise DatasetError(f"{path}: CoNLL input is for tagging models, not {self.name}")
        text_col = columns.text_column or info.data.get("text_column") or "text"
        pair_col = columns.text_pair_column or info.data.get("text_pair_column") or None
        label_col = columns.label_column or None
        return read_text_table(path, text_col, pair_col, label_col, self.regression, fmt)

    def example_from_input(self, x: Any, n: int, info: TaskInfo) -> TextExample:
        if isinstance(x, tuple | list):
            return TextExample(x[0], x[1], None, guid=str(n))
        return TextExample(x, None, None, guid=str(n))

    def has_gold(self, example: TextExample) -> bool:
        return example.label is not None

    def featurize(self, examples, tokenizer, settings, labels) -> list[dict[str, Any]]:
        feats = F.encode_texts(examples, tokenizer, settings.max_length)
        index = {label: i for i, label in enumerate(labels)}
        for f, e in zip(feats, examples, strict=True):
            f["label"] = index[e.label] if e.label is not None else F.IGNORE
        return feats

    def predict(self, examples, features, outputs, labels, settings) -> list[np.ndarray]:
        """Class probabilities per example."""
        return F.softmax_rows(outputs)

    def record(self, example: TextExample, prediction: np.ndarray, labels) -> dict[str, Any]:
        return F.classification_record(example, prediction, labels)


class RegressionFamily(ClassificationFamily):
    """Sentence-pair similarity scores (STS): one output, mean squared error."""

    name = "regression"
    problem_type = "regression"
    main_metric = "spearman"
    reported_metrics = ("pearson", "spearman")
    has_labels = False
    floor_constant = "mean"
    torch_side = "electra.finetune.classification:REGRESSION_TORCH"
    regression = True

    def metric_names(self, num_labels: int) -> list[str]:
        return ["pearson", "spearman", "corr"]

    def infer_labels(self, train: Sequence[Any]) -> list[str]:
        return []

    def check_labels(self, examples, labels, kind, origin) -> None:
        return None

    def label_counts(self, examples: Sequence[Any]) -> dict[str, int] | None:
        return None

    def split_strata(self) -> dict[str, Callable[[Any], Any]]:
        return {}

    def hf_config(self, labels: Sequence[str]) -> dict[str, Any]:
        return {
            "num_labels": 1,
            "id2label": {"0": "LABEL_0"},
            "label2id": {"LABEL_0": 0},
            "problem_type": "regression",
        }

    def featurize(self, examples, tokenizer, settings, labels) -> list[dict[str, Any]]:
        feats = F.encode_texts(examples, tokenizer, settings.max_length)
        for f, e in zip(feats, examples, strict=True):
            f["label"] = float(e.label) if e.label is not None else float("nan")
        return feats

    def predict(self, examples, features, outputs, labels, settings) -> list[float]:
        return [float(o[0]) for o in outputs]

    def record(self, example: TextExample, prediction: float, labels) -> dict[str, Any]:
        return F.regression_record(example, prediction)


class TaggingFamily(Family):
    """Token classification (NER), word- or character-level BIO tags."""

    name = "tagging"
    architecture = "ElectraForTokenClassification"
    main_metric = "f1"
    reported_metrics = ("f1", "precision", "recall")
    sequence_level = False
    floor_constant = "memorised"
    torch_side = "electra.finetune.tagging:TAGGING_TORCH"

    def metric_names(self, num_labels: int) -> list[str]:
        return ["f1", "precision", "recall", "accuracy"]

    def infer_labels(self, train: Sequence[TaggingExample]) -> list[str]:
        tags = {t for e in train for t in (e.tags or [])}
        types = sorted({t[2:] for t in tags if t != "O"})
        return ["O"] + [f"{p}-{t}" for t in types for p in ("B", "I")]

    def check_labels(
        self, examples: Sequence[TaggingExample], labels: Sequence[str], kind: str, origin: str
    ) -> None:
        known = set(labels)
        for e in examples:
            bad = next((t for t in (e.tags or []) if t not in known), None)
            if bad is not None:
                raise DatasetError(
                    f"{e.source}, field 'tag': {kind} tag {bad!r} does not occur in "
                    f"{origin} (tags: {', '.join(labels)})"
                )

    def task_report(self, train: Sequence[Any], dev: Any, labels: Sequence[str]) -> dict[str, Any]:
        """Word or character level, and the entity F1 ceiling on dev (see ``oracle_f1``)."""
        level = next((e.level for e in train if isinstance(e, TaggingExample)), "word")
        oracle = self.torch.oracle_f1(dev.examples, dev.features, labels)
        return {"tagging_level": level, "oracle_f1_dev": oracle}

    def custom_reader(self, options: Any) -> Reader:
        by_suffix = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json"}

        def read_tags(p: Path) -> list[TaggingExample]:
            fmt = options.format or by_suffix.get(p.suffix.lower(), "conll")
            if fmt not in ("jsonl", "json", "conll"):
                raise DatasetError(
                    f"{p}: --format {fmt} is not a tagging format: conll, jsonl, json"
                )
            if fmt != "conll":
                _, rows = read_jsonl(p) if fmt == "jsonl" else read_json_array(p)
                cols = list(rows[0][1]) if rows else []
                tok_col = options.text_column or "tokens"
                tag_col = options.label_column or "tags"
                require_columns(p, cols, {"--text-column": tok_col, "--label-column": tag_col})
                return tagging_from_rows(p, rows, tok_col, tag_col)
            return read_conll(p)

        return read_tags

    def example_from_line(self, line: str, n: int, source: str, info: TaskInfo) -> TaggingExample:
        return self.example_from_input(line, n, info, source=source)

    def read_predict_file(self, path: Path, info: TaskInfo, columns: Any) -> list[Any]:
        fmt = predict_format(path, columns)
        if fmt == "conll":
            return read_conll(path)
        _, rows = read_table(path, fmt)
        return tagging_from_rows(path, rows, columns.text_column or "tokens", columns.label_column)

    def example_from_input(
        self, x: str, n: int, info: TaskInfo, source: str = ""
    ) -> TaggingExample:
        if info.tagging_level == "char":
            return TaggingExample.from_chars(x, source=source)
        return TaggingExample.from_words(x.split(), source=source)

    def has_gold(self, example: TaggingExample) -> bool:
        return example.tags is not None

    def featurize(self, examples, tokenizer, settings, labels) -> list[dict[str, Any]]:
        return F.featurize_tagging(examples, tokenizer, settings, labels)

    def predict(self, examples, features, outputs, labels, settings) -> list[list[str]]:
        return F.predict_tags(examples, features, outputs, labels)

    def record(self, example: TaggingExample, prediction: list[str], labels) -> dict[str, Any]:
        return F.tagging_record(example, prediction)


class QAFamily(Family):
    """Extractive question answering (SQuAD v1.1 format)."""

    name = "qa"
    architecture = "ElectraForQuestionAnswering"
    main_metric = "f1"
    reported_metrics = ("exact_match", "f1")
    has_labels = False
    sequence_level = False
    default_max_length = 384
    default_epochs = 2
    floor_constant = "window"
    torch_side = "electra.finetune.qa:QA_TORCH"

    def split_strata(self) -> dict[str, Callable[[Any], Any]]:
        return {"group": lambda e: e.title or e.context}

    def hf_config(self, labels: Sequence[str]) -> dict[str, Any]:
        return {"num_labels": 2}

    def custom_reader(self, options: Any) -> Reader:
        return lambda p: read_squad(p, format=options.format or None)

    def reads_lines(self, path: Path, format: str | None = None) -> bool:
        return False

    def read_predict_file(self, path: Path, info: TaskInfo, columns: Any) -> list[QAExample]:
        return read_squad(
            path, require_answers=False, format=getattr(columns, "format", "") or None
        )

    def example_from_input(self, x: Any, n: int, info: TaskInfo) -> QAExample:
        q, c = (x["question"], x["context"]) if isinstance(x, dict) else x
        qid = str(x.get("id", n)) if isinstance(x, dict) else str(n)
        return QAExample(qid, q, c)

    def has_gold(self, example: QAExample) -> bool:
        return bool(example.answers)

    def truncation_length(self, max_length: int) -> int | None:
        return None  # contexts are cut into windows, never truncated

    def featurize(self, examples, tokenizer, settings, labels) -> list[dict[str, Any]]:
        return F.featurize_qa(examples, tokenizer, settings)

    def predict(self, examples, features, outputs, labels, settings) -> list[list[dict]]:
        return F.predict_spans(examples, features, outputs, settings)

    def record(self, example: QAExample, prediction: list[dict], labels) -> dict[str, Any]:
        return F.qa_record(example, prediction)


# ---------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------

FAMILIES: dict[str, Family] = {}


def register_family(family: Family) -> Family:
    """Add a family to the registry (also for users' own families in Python)."""
    if not family.name:
        raise ValueError(f"{type(family).__name__}: a family needs a name")
    FAMILIES[family.name] = family
    return family


def get_family(name: str | Family) -> Family:
    """The family called ``name`` (a family is returned as it is); clear error otherwise."""
    if isinstance(name, Family):
        return name
    if name not in FAMILIES:
        raise ValueError(f"unknown task family {name!r}; choose one of {', '.join(FAMILIES)}")
    return FAMILIES[name]


def family_names() -> list[str]:
    """Names of the registered families, in registration order."""
    return list(FAMILIES)


def family_of_hf_config(cfg: dict[str, Any]) -> Family | None:
    """The family of a Hugging Face task directory's ``config.json`` (None: no task head)."""
    for arch in cfg.get("architectures") or []:
        found = [f for f in FAMILIES.values() if f.architecture == arch]
        if found:
            exact = [f for f in found if f.problem_type == cfg.get("problem_type")]
            return (exact or found)[0]
    return None


CLASSIFICATION = register_family(ClassificationFamily())
REGRESSION = register_family(RegressionFamily())
TAGGING = register_family(TaggingFamily())
QA = register_family(QAFamily())

__all__ = [
    "CLASSIFICATION",
    "FAMILIES",
    "QA",
    "REGRESSION",
    "TAGGING",
    "ClassificationFamily",
    "Family",
    "QAFamily",
    "RegressionFamily",
    "TaggingFamily",
    "family_of_hf_config",
    "family_names",
    "get_family",
    "register_family",
]
