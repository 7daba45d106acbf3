"""Every exported directory records the fine-tuning max length, so ``transformers`` agrees.

Left at the tokenizer's 512, a ``transformers`` pipeline with truncation
would feed a long text whole to a model fine-tuned (and predicted by
``electra predict``) on its first ``max_length`` tokens only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from builders import read_jsonl

from electra.cli import main
from electra.finetune.modeling import TaskInfo, get_family, save_finetuned
from electra.model.config import preset
from electra.model.encoder import ElectraModel

transformers = pytest.importorskip("transformers")

MAX_LENGTH = 16
LONG = "the film was long and slow and the story went nowhere but the actors tried hard " * 3


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, en_tokenizer_dir: Path) -> Path:  # noqa: F811
    torch.manual_seed(3)
    vocab = [t for t in (en_tokenizer_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")]
    cfg = preset("tiny", vocab_size=len([t for t in vocab if t]), max_position_embeddings=64)
    model = get_family("classification").build_model(ElectraModel(cfg), 2)
    # a sharper head, so that truncating or not changes the probabilities visibly
    with torch.no_grad():
        model.classifier.out_proj.weight.mul_(50)
    info = TaskInfo(
        task="custom",
        family="classification",
        labels=["negative", "positive"],
        features={"max_length": MAX_LENGTH},
    )
    return save_finetuned(model, tmp_path_factory.mktemp("hf") / "model", info, en_tokenizer_dir)


def model_max_length(d: Path) -> int:
    return json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))["model_max_length"]


def pipeline_probabilities(d: Path, text: str) -> dict[str, float]:
    pipe = transformers.pipeline("text-classification", model=str(d), device="cpu")
    scores = pipe(text, truncation=True, top_k=None)
    return {s["label"]: s["score"] for s in scores}


def test_hf_export_records_the_fine_tuning_max_length(model_dir: Path) -> None:
    task = json.loads((model_dir / "electra_task.json").read_text(encoding="utf-8"))
    assert model_max_length(model_dir) == task["features"]["max_length"] == MAX_LENGTH


def test_transformers_pipeline_agrees_with_predict_on_a_long_text(
    model_dir: Path, tmp_path: Path
) -> None:
    inp = tmp_path / "in.txt"
    inp.write_text(LONG + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert main(["predict", "--model", str(model_dir), "-i", str(inp), "-o", str(out)]) == 0
    ours = read_jsonl(out)[0]["probabilities"]
    theirs = pipeline_probabilities(model_dir, LONG)
    for label, p in ours.items():
        assert theirs[label] == pytest.approx(p, abs=1e-4)
    # the old export (512) fails the same 1e-4 check: the check above is not vacuous
    stale = tmp_path / "stale"
    assert main(["export", str(model_dir), "-o", str(stale)]) == 0
    config = json.loads((stale / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["model_max_length"] = 512
    (stale / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    untruncated = pipeline_probabilities(stale, LONG)
    assert max(abs(untruncated[k] - ours[k]) for k in ours) > 1e-4
    # and `electra export MODEL -o OUT` repairs such a directory
    fixed = tmp_path / "fixed"
    assert main(["export", str(stale), "-o", str(fixed)]) == 0
    assert model_max_length(fixed) == MAX_LENGTH
