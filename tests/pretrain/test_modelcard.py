"""Model cards of exported pre-training runs."""

from __future__ import annotations

from electra.model.config import preset
from electra.pretrain.modelcard import model_card


def _facts(**model_kw) -> dict:
    return {
        "model": preset("tiny", **model_kw),
        "generator": None,
        "objective": "rtd",
        "embedding_sharing": "tied",
        "step": 10,
        "tokens": 10 * 4 * 32,
        "train_flops": 1e9,
        "learning_rate": 5e-4,
        "warmup_steps": 1,
        "max_steps": 10,
        "batch_size": 4,
        "block_length": 32,
        "blocks": "blocks",
        "manifest": {},
        "origin": None,
        "summary": {},
    }


def test_card_says_how_to_load_a_plain_export_and_warns_for_the_local_convolution() -> None:
    plain = model_card("discriminator", _facts())
    assert "ElectraForPreTraining.from_pretrained" in plain
    assert "local convolution" not in plain
    conv = model_card("discriminator", _facts(local_conv_kernel=3))
    assert "from_pretrained" not in conv
    assert "local_conv_kernel = 3" in conv and "electra finetune --model" in conv


def test_convbert_card_says_how_transformers_differs_on_padded_batches() -> None:
    """The sentence is checked against transformers in tests/model/test_padding_invariance.py."""
    from electra.pretrain.modelcard import finetuned_card, padding_note

    card = model_card("discriminator", _facts(conv_kernel_size=9))
    assert padding_note(9) in card and "last 4 tokens" in card
    assert "Padded batches" not in model_card("discriminator", _facts())
    info = {"task": "nsmc", "family": "classification", "labels": ["0", "1"]}
    assert padding_note(9) in finetuned_card("ConvBertForSequenceClassification", info, 9)
    assert "Padded batches" not in finetuned_card("ElectraForSequenceClassification", info)
