"""Fine-tuned model directories: Hugging Face task models in, tokenizer settings out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from builders import KO_VOCAB

from electra.finetune.modeling import (
    TaskInfo,
    copy_tokenizer,
    load_finetuned,
    read_task_info,
    save_finetuned,
)
from electra.model.checkpoint import CheckpointError

transformers = pytest.importorskip("transformers")


def _hf_config(**kw: object) -> transformers.ElectraConfig:
    return transformers.ElectraConfig(
        vocab_size=32200,
        embedding_size=32,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=96,
        max_position_embeddings=64,
        **kw,
    )


def test_transformers_task_model_loads_without_electra_task_json(tmp_path: Path) -> None:
    """A classifier fine-tuned elsewhere (HF) is usable by evaluate/predict as it is."""
    torch.manual_seed(0)
    cfg = _hf_config(num_labels=3, id2label={0: "neg", 1: "neu", 2: "pos"})
    ref = transformers.ElectraForSequenceClassification(cfg).eval()
    ref.save_pretrained(tmp_path)
    shutil.copyfile(KO_VOCAB, tmp_path / "vocab.txt")
    info = read_task_info(tmp_path)
    assert (info.family, info.labels, info.task) == (
        "classification",
        ["neg", "neu", "pos"],
        "custom",
    )
    ft = load_finetuned(tmp_path)
    ids = torch.tensor([ft.tokenizer.encode("정말 좋아요").ids])
    with torch.no_grad():
        assert (ft.model(ids) - ref(ids).logits).abs().max() <= 1e-5
    # a regression head is recognised by its problem_type
    reg = transformers.ElectraForSequenceClassification(
        _hf_config(num_labels=1, problem_type="regression")
    )
    reg.save_pretrained(tmp_path / "reg")
    assert read_task_info(tmp_path / "reg").family == "regression"
    # a pre-training checkpoint is not a fine-tuned model
    transformers.ElectraForPreTraining(_hf_config()).save_pretrained(tmp_path / "pt")
    with pytest.raises(CheckpointError, match="not a fine-tuned model"):
        read_task_info(tmp_path / "pt")


def test_saved_directory_keeps_the_case_of_the_tokenizer(tmp_path: Path) -> None:
    """vocab.txt alone would make transformers lower-case; we write what we used."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(KO_VOCAB, src / "vocab.txt")
    transformers.ElectraForPreTraining(_hf_config()).save_pretrained(src)
    from electra.finetune.qa import ElectraForQuestionAnswering
    from electra.model.hf import load_encoder

    enc, _ = load_encoder(src)
    out = save_finetuned(
        ElectraForQuestionAnswering(enc),
        tmp_path / "out",
        TaskInfo(task="custom", family="qa", features={"max_length": 64}),
        src,
    )
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    assert cfg["do_lower_case"] is False
    card = (out / "README.md").read_text()  # the Hugging Face model card
    assert card.startswith("---\nlibrary_name: transformers")
    assert "# ELECTRA fine-tuned on custom (`ElectraForQuestionAnswering`)" in card
    tok = transformers.AutoTokenizer.from_pretrained(out)
    ours = load_finetuned(out).tokenizer
    text = "Seoul 서울 ABC"
    assert tok(text)["input_ids"] == ours.encode(text).ids
    with pytest.raises(CheckpointError, match="no tokenizer files"):
        copy_tokenizer(tmp_path / "pt-missing-dir", tmp_path / "x")
