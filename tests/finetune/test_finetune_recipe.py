"""The fine-tuning recipe: Table 7 defaults, layer-wise learning rates, schedule."""

from __future__ import annotations

import math

import pytest
import torch

from electra.config import ConfigError
from electra.finetune.classification import ElectraForSequenceClassification
from electra.finetune.qa import ElectraForQuestionAnswering
from electra.finetune.recipe import (
    TABLE7,
    build_optimizer,
    default_epochs,
    infer_size,
    layerwise_groups,
    linear_schedule,
    make_recipe,
    parameter_depth,
)
from electra.model.config import ElectraConfig
from electra.model.encoder import ElectraModel


def _model(layers: int, embedding: int = 16, head: str = "cls", **config) -> torch.nn.Module:
    cfg = ElectraConfig(
        vocab_size=50,
        embedding_size=embedding,
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=16,
        **config,
    )
    enc = ElectraModel(cfg)
    if head == "qa":
        return ElectraForQuestionAnswering(enc)
    return ElectraForSequenceClassification(enc, 3)


def test_table7_defaults_per_size() -> None:
    assert TABLE7["small"].learning_rate == 3e-4 and TABLE7["small"].layer_decay == 0.8
    assert TABLE7["base"].learning_rate == 1e-4 and TABLE7["base"].layer_decay == 0.8
    assert TABLE7["large"].learning_rate == 5e-5 and TABLE7["large"].layer_decay == 0.9
    assert [infer_size(h) for h in (256, 768, 1024, 64, 384)] == [
        "small",
        "base",
        "large",
        "small",
        "small",
    ]
    r = make_recipe(task="rte", family="classification", hidden_size=768)
    assert (r.size, r.learning_rate, r.layer_decay, r.epochs) == ("base", 1e-4, 0.8, 10)
    assert (r.warmup_fraction, r.weight_decay, r.batch_size, r.max_length) == (0.1, 0.0, 32, 128)
    r = make_recipe(task="korquad", family="qa", hidden_size=1024)
    assert (r.size, r.learning_rate, r.layer_decay, r.epochs, r.max_length) == (
        "large",
        5e-5,
        0.9,
        2,
        384,
    )
    assert default_epochs("stsb", "regression") == 10
    assert default_epochs("klue-sts", "regression") == 10
    assert default_epochs("sst2", "classification") == 3
    assert default_epochs("wnut17", "tagging") == 3
    # explicit size and flags win; None means "default"
    r = make_recipe(
        task="sst2",
        family="classification",
        hidden_size=768,
        size="small",
        overrides={"learning_rate": None, "epochs": 5, "seeds": [1, 2, 3]},
    )
    assert (r.learning_rate, r.epochs, r.seeds) == (3e-4, 5, [1, 2, 3])


def test_recipe_rejects_bad_values() -> None:
    with pytest.raises(ConfigError, match="layer_decay"):
        make_recipe(
            task="x", family="classification", hidden_size=256, overrides={"layer_decay": 0}
        )
    with pytest.raises(ConfigError, match="select_by"):
        make_recipe(
            task="x", family="classification", hidden_size=256, overrides={"select_by": "best"}
        )
    with pytest.raises(ConfigError, match="size"):
        make_recipe(task="x", family="classification", hidden_size=256, size="huge")
    with pytest.raises(ConfigError, match="distinct"):
        make_recipe(task="x", family="classification", hidden_size=256, overrides={"seeds": [1, 1]})


@pytest.mark.parametrize("official", [False, True])
def test_layerwise_learning_rate_of_every_group(official: bool) -> None:
    lr, decay, L = 1e-3, 0.8, 12
    model = _model(L)
    groups = layerwise_groups(model, lr, decay, L, official_offset=official)
    by_name = {g["name"]: g for g in groups}
    off = 1 if official else 0
    assert by_name["head"]["lr"] == pytest.approx(lr)
    for i in range(L):  # top layer L-1 -> lr * decay (paper) or decay^2 (official code)
        assert by_name[f"layer.{i}"]["lr"] == pytest.approx(lr * decay ** (L - i + off), rel=1e-12)
    assert by_name["embeddings"]["lr"] == pytest.approx(lr * decay ** (L + 1 + off), rel=1e-12)
    assert len(groups) == L + 2
    # every parameter is in exactly one group, and in the right one
    names = [n for g in groups for n in g["param_names"]]
    assert sorted(names) == sorted(n for n, _ in model.named_parameters())
    where = {n: g["name"] for g in groups for n in g["param_names"]}
    assert where["electra.embeddings.word_embeddings.weight"] == "embeddings"
    assert where["electra.embeddings_project.weight"] == "embeddings"
    assert where["electra.encoder.layer.0.attention.self.query.weight"] == "layer.0"
    assert where["electra.encoder.layer.11.output.LayerNorm.bias"] == "layer.11"
    assert where["classifier.out_proj.weight"] == "head"
    assert where["classifier.dense.bias"] == "head"
    # the optimizer carries exactly these rates
    from electra.finetune.recipe import Recipe

    opt = build_optimizer(
        model,
        Recipe(learning_rate=lr, layer_decay=decay, layerwise_decay_official_offset=official),
        L,
    )
    assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in groups]
    assert opt.param_groups[0]["eps"] == 1e-6


def test_small_model_rates_written_out() -> None:
    """Two layers, hand-computed: head 1e-3, layer 1 8e-4, layer 0 6.4e-4, embeddings 5.12e-4."""
    groups = layerwise_groups(_model(2, head="qa"), 1e-3, 0.8, 2)
    assert {g["name"]: round(g["lr"], 12) for g in groups} == {
        "embeddings": 5.12e-4,
        "layer.0": 6.4e-4,
        "layer.1": 8e-4,
        "head": 1e-3,
    }
    official = layerwise_groups(_model(2, head="qa"), 1e-3, 0.8, 2, official_offset=True)
    assert {g["name"]: round(g["lr"], 12) for g in official} == {
        "embeddings": 4.096e-4,
        "layer.0": 5.12e-4,
        "layer.1": 6.4e-4,
        "head": 1e-3,
    }


def test_weight_decay_spares_biases_and_layernorm() -> None:
    groups = layerwise_groups(_model(2), 1e-3, 0.8, 2, weight_decay=0.01)
    for g in groups:
        for n in g["param_names"]:
            no_decay = n.endswith(".bias") or "LayerNorm" in n
            assert g["weight_decay"] == (0.0 if no_decay else 0.01), n
    assert parameter_depth("electra.encoder.layer.1.output.dense.weight", 2) == 2
    with pytest.raises(ValueError, match="layer 5"):
        parameter_depth("electra.encoder.layer.5.output.dense.weight", 2)


def test_a_model_with_the_local_convolution_gets_parameter_groups() -> None:
    """model.local_conv_kernel's convolution sits at the embeddings' depth (it once made
    every fine-tuning of such a model fail)."""
    groups = layerwise_groups(_model(2, local_conv_kernel=3), 1e-3, 0.5, 2)
    lr = {n: g["lr"] for g in groups for n in g["param_names"]}
    assert lr["electra.local_conv.weight"] == lr["electra.embeddings.word_embeddings.weight"]
    assert parameter_depth("electra.local_conv.bias", 2) == 0


def test_warmup_then_linear_decay_keeps_layer_ratios() -> None:
    model = _model(2)
    groups = layerwise_groups(model, 1e-3, 0.5, 2)
    opt = torch.optim.AdamW(groups, lr=1e-3)
    sched = linear_schedule(opt, warmup_steps=2, total_steps=10)
    seen = []
    for _ in range(10):
        seen.append([g["lr"] for g in opt.param_groups])
        opt.step()
        sched.step()
    head = [s[-1] for s in seen]
    assert head[0] == pytest.approx(0.5e-3) and head[1] == pytest.approx(1e-3)
    assert head[2] == pytest.approx(1e-3)
    assert head[9] == pytest.approx(1e-3 / 8)  # linear to 0 at step 10
    assert all(a > b for a, b in zip(head[2:], head[3:], strict=False))
    for s in seen:  # embeddings stay at decay^3 of the head at every step
        assert s[0] / s[-1] == pytest.approx(0.5**3)
    assert math.isclose(sum(1 for _ in groups), 4)
