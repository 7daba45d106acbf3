"""A new family and a new task are one class and one registration call each.

The toy family here is written from scratch against :class:`Family` (its own
head, batches, loss, decoding and score, nothing borrowed from the built-in
families' classes), registered once; the toy task is one ``register`` call
with an in-memory loader. Both then work through ``electra finetune`` (the
Python API and the command line), the saved model loads, and ``electra
evaluate`` rebuilds the task's split.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from builders import tiny_model, write_tokenizer_dir
from torch import Tensor, nn

from electra.cli import main as electra_main
from electra.finetune import features
from electra.finetune.common import Splits, TextExample
from electra.finetune.families import FAMILIES, Family, family_names, register_family
from electra.finetune.heads import ElectraWithHead, collate_inputs, sequence_outputs
from electra.finetune.modeling import load_finetuned
from electra.finetune.run import EvaluateArgs, FinetuneArgs, evaluate, finetune
from electra.finetune.tasks import TASKS, TaskSpec, get_task, register
from electra.model.encoder import ElectraModel

WORDS = ["red", "green", "blue", "cat", "dog", "fish"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]


class LastTokenHead(ElectraWithHead):
    """Logits from the hidden state of the last input position."""

    def __init__(self, encoder: ElectraModel, num_labels: int) -> None:
        super().__init__(encoder, num_labels)
        self.out = nn.Linear(encoder.config.hidden_size, num_labels)

    def head(self, hidden: Tensor) -> Tensor:
        return self.out(hidden[:, -1])


class ColourFamily(Family):
    """Toy family: is the text's first word a colour? (Its own head and everything.)"""

    name = "toy-colour"
    architecture = "ElectraForSequenceClassification"  # transformers loads it
    main_metric = "accuracy"
    reported_metrics = ("accuracy",)

    def build_model(self, encoder: ElectraModel, num_labels: int) -> nn.Module:
        return LastTokenHead(encoder, num_labels)

    def collate(self, feats: Sequence[dict[str, Any]], pad_id: int) -> dict[str, Tensor]:
        batch = collate_inputs(feats, pad_id)
        batch["labels"] = torch.tensor([f["label"] for f in feats])
        return batch

    def loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return F.cross_entropy(logits.float(), batch["labels"])

    def split_outputs(self, logits: Tensor, batch: dict[str, Tensor]) -> list[np.ndarray]:
        return sequence_outputs(logits, batch)

    def infer_labels(self, train: Sequence[TextExample]) -> list[str]:
        return sorted({str(e.label) for e in train})

    def featurize(self, examples, tokenizer, settings, labels) -> list[dict[str, Any]]:
        feats = features.encode_texts(examples, tokenizer, settings.max_length)
        for f, e in zip(feats, examples, strict=True):
            f["label"] = labels.index(e.label) if e.label is not None else 0
        return feats

    def predict(self, examples, feats, outputs, labels, settings) -> list[str]:
        return [labels[int(np.argmax(o))] for o in outputs]

    def score(self, examples, predictions, labels, **kw: Any) -> dict[str, float]:
        right = sum(e.label == p for e, p in zip(examples, predictions, strict=True))
        return {"accuracy": right / len(examples)}

    def record(self, example: TextExample, prediction: str, labels) -> dict[str, Any]:
        return {"text": example.text, "label": prediction}


def _examples(n: int, seed: int) -> list[TextExample]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = rng.choices(WORDS, k=4)
        label = "colour" if words[0] in WORDS[:3] else "other"
        out.append(TextExample(" ".join(words), None, label, guid=str(i), source=f"toy {i}"))
    return out


def _load_toy(spec: TaskSpec, opts: Any) -> Splits:
    return Splits(_examples(48, 1), _examples(16, 2), _examples(16, 3), {"train": "in memory"})


@pytest.fixture()
def toy_task() -> Iterator[TaskSpec]:
    family = register_family(ColourFamily())  # one call adds the family ...
    spec = register(
        TaskSpec("toy-colours", family, "", "toy: colour or not", _load_toy)
    )  # ... one the task
    try:
        yield spec
    finally:
        TASKS.pop(spec.name, None)
        FAMILIES.pop(family.name, None)


@pytest.fixture(scope="module")
def toy_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("toy")
    tok = write_tokenizer_dir(root / "tok", VOCAB, lowercase=True)
    return tiny_model(root / "model", tok, len(VOCAB))


def test_registered_task_is_listed(toy_task: TaskSpec) -> None:
    assert get_task("Toy-Colours") is toy_task and "toy-colours" in TASKS
    assert "toy-colour" in family_names()
    assert toy_task.family.name == "toy-colour" and toy_task.main_metric == "accuracy"
    with pytest.raises(ValueError, match="toy-colours"):  # the known-task list names it
        get_task("no-such-task")


@pytest.mark.usefixtures("one_thread")
def test_registered_family_and_task_fine_tune(
    toy_task: TaskSpec, toy_model: Path, tmp_path: Path
) -> None:
    args = FinetuneArgs(
        model=str(toy_model),
        task="toy-colours",
        output=str(tmp_path / "out"),
        epochs=1,
        batch_size=8,
        max_length=16,
        device="cpu",
        bf16=False,
        floors=False,
        progress=False,
    )
    results = finetune(args)
    assert results["complete"] and results["task"]["family"] == "toy-colour"
    assert results["seeds"][0]["steps"] == 6  # 48 examples, batches of 8, one epoch
    saved = json.loads((tmp_path / "out" / "model" / "electra_task.json").read_text())
    assert (saved["task"], saved["family"], saved["labels"]) == (
        "toy-colours",
        "toy-colour",
        ["colour", "other"],
    )
    ft = load_finetuned(tmp_path / "out" / "model")
    assert isinstance(ft.model, LastTokenHead) and ft.family is toy_task.family
    scored = evaluate(
        EvaluateArgs(model=str(tmp_path / "out" / "model"), device="cpu", progress=False)
    )
    assert scored["family"] == "toy-colour" and scored["examples"] == 16
    assert scored["scores"]["accuracy"] == pytest.approx(results["seeds"][0]["test"]["accuracy"])


@pytest.mark.usefixtures("one_thread")
def test_registered_task_runs_from_the_command_line(
    toy_task: TaskSpec, toy_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cli"
    argv = ["finetune", "--model", str(toy_model), "--task", "toy-colours", "-o", str(out)]
    argv += ["--epochs", "1", "--max-length", "16", "--device", "cpu", "--no-floors"]
    assert electra_main([*argv, "--no-progress", "--no-bf16"]) == 0
    assert json.loads((out / "results.json").read_text())["task"]["name"] == "toy-colours"
