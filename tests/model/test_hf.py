"""Parity with ``transformers`` both ways, and clear errors on bad directories."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from electra.model.config import ElectraConfig
from electra.model.hf import (
    CheckpointError,
    export_discriminator,
    export_generator,
    load_discriminator,
    load_encoder,
    load_generator,
)

transformers = pytest.importorskip("transformers")

SHAPES = {
    "equal_embedding": dict(embedding_size=64, hidden_size=64),
    "projected_embedding": dict(embedding_size=32, hidden_size=64),
}


# The tiny body every test here builds (widths come from SHAPES or the test).
BODY = dict(
    vocab_size=120,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=96,
    max_position_embeddings=40,
)


def hf_config(**kw) -> transformers.ElectraConfig:
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.ElectraConfig(**{**BODY, **no_dropout, **kw})


def padded_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 120, (3, 17), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 11:] = 0
    mask[2, 5:] = 0
    ids[mask == 0] = 0
    types = torch.zeros_like(ids)
    types[:, 8:] = 1
    return ids, mask, types


def _close(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


@pytest.mark.parametrize("shape", list(SHAPES))
def test_discriminator_from_transformers(tmp_path: Path, shape: str) -> None:
    torch.manual_seed(1)
    ref = transformers.ElectraForPreTraining(hf_config(**SHAPES[shape])).eval()
    ref.save_pretrained(tmp_path)
    ours = load_discriminator(tmp_path).eval()
    ids, mask, types = padded_batch()
    with torch.no_grad():
        out = ref(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
        h = ours.electra(ids, mask, types)
        logits = ours(ids, mask, types)
    assert _close(h, out.hidden_states[-1]) <= 1e-5
    assert _close(logits, out.logits) <= 1e-5


@pytest.mark.parametrize("shape", list(SHAPES))
def test_generator_from_transformers(tmp_path: Path, shape: str) -> None:
    torch.manual_seed(2)
    ref = transformers.ElectraForMaskedLM(hf_config(**SHAPES[shape])).eval()
    ref.save_pretrained(tmp_path)
    ours = load_generator(tmp_path).eval()
    ids, mask, types = padded_batch()
    with torch.no_grad():
        out = ref(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
        h = ours.electra(ids, mask, types)
        logits = ours(ids, mask, types)
        flat = torch.tensor([0, 5, 20, 40])
        at = ours(ids, mask, types, positions=flat)
    assert _close(h, out.hidden_states[-1]) <= 1e-5
    assert _close(logits, out.logits) <= 1e-5
    # The masked-positions-only head gives the same rows as the full head.
    assert _close(at, out.logits.reshape(-1, 120)[flat]) <= 1e-5


@pytest.mark.parametrize("shape", list(SHAPES))
def test_export_loads_in_transformers(tmp_path: Path, shape: str) -> None:
    from electra.model.encoder import ElectraDiscriminator, ElectraGenerator

    cfg = ElectraConfig(**BODY, **SHAPES[shape])
    torch.manual_seed(3)
    disc = ElectraDiscriminator(cfg).eval()
    gen = ElectraGenerator(cfg).eval()
    with torch.no_grad():  # non-trivial LayerNorms and biases
        for p in list(disc.parameters()) + list(gen.parameters()):
            p.add_(torch.randn_like(p) * 0.01)
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(115)])
        + "\n"
    )
    export_discriminator(disc, tmp_path / "d", tokenizer_dir=tok)
    export_generator(gen, tmp_path / "g", tokenizer_dir=tok)
    ref_d = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "d").eval()
    ref_g = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / "g").eval()
    ids, mask, types = padded_batch()
    with torch.no_grad():
        assert _close(ref_d(ids, mask, types).logits, disc(ids, mask, types)) <= 1e-5
        assert _close(ref_g(ids, mask, types).logits, gen(ids, mask, types)) <= 1e-5
    assert (tmp_path / "d" / "vocab.txt").is_file()
    # Round trip through our loader too.
    again = load_discriminator(tmp_path / "d").eval()
    with torch.no_grad():
        assert torch.equal(again(ids, mask, types), disc(ids, mask, types))


def _saved(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    transformers.ElectraForPreTraining(
        hf_config(embedding_size=32, hidden_size=64)
    ).save_pretrained(tmp_path)
    return tmp_path


def test_missing_weights_file_is_named(tmp_path: Path) -> None:
    d = _saved(tmp_path)
    (d / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no weights file"):
        load_discriminator(d)


def test_missing_config_is_named(tmp_path: Path) -> None:
    d = _saved(tmp_path)
    (d / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json"):
        load_discriminator(d)


def test_missing_parameter_is_named(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    d = _saved(tmp_path)
    state = load_file(d / "model.safetensors")
    del state["electra.encoder.layer.1.output.dense.weight"]
    save_file(state, d / "model.safetensors")
    with pytest.raises(
        CheckpointError, match=r"model\.safetensors.*layer\.1\.output\.dense\.weight"
    ):
        load_discriminator(d)


def test_shape_mismatch_names_file_and_parameter(tmp_path: Path) -> None:
    d = _saved(tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = 100
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError) as err:
        load_discriminator(d)
    msg = str(err.value)
    assert "model.safetensors" in msg and "intermediate.dense.weight" in msg and "(96, 64)" in msg


def test_unknown_architecture_is_named(tmp_path: Path) -> None:
    d = _saved(tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["architectures"] = ["ElectraForSomethingNew"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"config\.json.*ElectraForSomethingNew"):
        load_discriminator(d)


def test_bin_loads_with_weights_only_and_rejects_code(tmp_path: Path) -> None:
    d = _saved(tmp_path)
    from safetensors.torch import load_file

    state = load_file(d / "model.safetensors")
    (d / "model.safetensors").unlink()
    torch.save(state, d / "pytorch_model.bin")
    model = load_discriminator(d)
    assert torch.equal(
        model.electra.embeddings.word_embeddings.weight,
        state["electra.embeddings.word_embeddings.weight"],
    )

    class Evil:
        def __reduce__(self):
            return (shutil.rmtree, (str(tmp_path / "victim"),))

    (tmp_path / "victim").mkdir()
    torch.save({"x": Evil()}, d / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pytorch_model.bin"):
        load_discriminator(d)
    assert (tmp_path / "victim").is_dir()


def test_encoder_loads_from_any_head(tmp_path: Path) -> None:
    torch.manual_seed(4)
    ref = transformers.ElectraForSequenceClassification(hf_config(num_labels=3)).eval()
    ref.save_pretrained(tmp_path)
    enc, raw = load_encoder(tmp_path)
    ids, mask, types = padded_batch()
    with torch.no_grad():
        want = ref.electra(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        assert _close(enc(ids, mask, types), want) <= 1e-5
    assert raw["architectures"] == ["ElectraForSequenceClassification"]


# ConvBERT's mixed attention (model.conv_kernel_size): exported as transformers' ConvBERT.


CONVBERT_SHAPE = dict(BODY, **SHAPES["projected_embedding"])


def _convbert_config(**kw) -> ElectraConfig:
    return ElectraConfig(**{**CONVBERT_SHAPE, "conv_kernel_size": 5, **kw})


def _close_to_rows_alone(ours: torch.Tensor, hf, ids, mask, types) -> float:
    """Largest difference between ``ours`` on the padded batch, at real positions, and
    ``hf(ids, types)`` on each row alone, unpadded: transformers' ConvBERT does not mask
    its convolutions, so padded it differs near the end of the shorter rows (and, through
    attention, everywhere in them); ours does mask (tests/model/test_padding_invariance.py)."""
    worst = 0.0
    for i, n in enumerate(mask.sum(1).tolist()):
        worst = max(worst, _close(ours[i, :n], hf(ids[i : i + 1, :n], types[i : i + 1, :n])[0]))
    return worst


@pytest.mark.parametrize("head_ratio", [1, 2, 8])
def test_convbert_export_loads_in_transformers_with_the_same_outputs(
    tmp_path: Path, head_ratio: int
) -> None:
    """Ours on a padded batch equals transformers on each row alone (unpadded)."""
    from electra.model.encoder import ElectraDiscriminator, ElectraGenerator

    cfg = _convbert_config(head_ratio=head_ratio)
    torch.manual_seed(5)
    disc, gen = ElectraDiscriminator(cfg).eval(), ElectraGenerator(cfg).eval()
    with torch.no_grad():  # non-trivial LayerNorms and biases (the span convolution's too)
        for p in list(disc.parameters()) + list(gen.parameters()):
            p.add_(torch.randn_like(p) * 0.05)
    export_discriminator(disc, tmp_path / "d")
    export_generator(gen, tmp_path / "g")
    config = json.loads((tmp_path / "d" / "config.json").read_text())
    assert config["model_type"] == "convbert" and config["architectures"] == ["ConvBertModel"]
    assert (config["conv_kernel_size"], config["head_ratio"]) == (5, head_ratio)
    ref_d = transformers.AutoModel.from_pretrained(tmp_path / "d").eval()
    ref_g = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "g").eval()
    assert type(ref_d).__name__ == "ConvBertModel"
    assert type(ref_g).__name__ == "ConvBertForMaskedLM"
    batch = ids, mask, types = padded_batch()
    with torch.no_grad():
        hidden = disc.electra(ids, mask, types)
        assert _close_to_rows_alone(hidden, lambda i, t: ref_d(i, None, t)[0], *batch) <= 1e-5
        logits = gen(ids, mask, types)
        assert _close_to_rows_alone(logits, lambda i, t: ref_g(i, None, t).logits, *batch) <= 1e-5
    # Back through our loaders: the discriminator's head rode along under its own keys.
    again = load_discriminator(tmp_path / "d").eval()
    with torch.no_grad():
        assert torch.equal(again(ids, mask, types), disc(ids, mask, types))
    assert again.config == cfg and load_generator(tmp_path / "g").config == cfg


def test_convbert_from_transformers_with_a_task_head(tmp_path: Path) -> None:
    torch.manual_seed(6)
    # ConvBERT's defaults: conv_kernel_size 9, head_ratio 2.
    hf = transformers.ConvBertConfig(**CONVBERT_SHAPE, num_labels=3)
    ref = transformers.ConvBertForSequenceClassification(hf).eval()
    ref.save_pretrained(tmp_path)
    enc, raw = load_encoder(tmp_path)
    enc.eval()
    assert (enc.config.conv_kernel_size, enc.config.head_ratio) == (9, 2)
    assert raw["architectures"] == ["ElectraForSequenceClassification"]
    ids, mask, types = padded_batch()
    with torch.no_grad():
        hidden = enc(ids, mask, types)
        want = lambda i, t: ref.convbert(i, token_type_ids=t).last_hidden_state  # noqa: E731
        assert _close_to_rows_alone(hidden, want, ids, mask, types) <= 1e-5


def test_convbert_with_grouped_feed_forward_is_refused_by_name(tmp_path: Path) -> None:
    hf = transformers.ConvBertConfig(
        vocab_size=120, hidden_size=64, num_attention_heads=4, intermediate_size=96, num_groups=2
    )
    hf.save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match=r"config.json: num_groups = 2"):
        load_encoder(tmp_path)


def test_word_table_key_under_each_prefix() -> None:
    from electra.model.hf import word_table_key

    table = torch.zeros(3, 2)
    for key in (
        "electra.embeddings.word_embeddings.weight",
        "convbert.embeddings.word_embeddings.weight",
        "embeddings.word_embeddings.weight",
    ):
        assert word_table_key({key: table, "other": table}, "d") == key
    with pytest.raises(CheckpointError, match="d: missing parameter"):
        word_table_key({"other": table}, "d")
