"""Presets match the paper's Table 6; configs reject unknown keys and bad types."""

from __future__ import annotations

import pytest

from electra.config import ConfigError, apply_overrides, from_dict
from electra.model.config import ElectraConfig, generator_config, preset
from electra.pretrain.config import PRESETS


@pytest.mark.parametrize(
    "name, layers, hidden, ffn, heads, emb, gen, lr, batch, seq",
    [
        ("small", 12, 256, 1024, 4, 128, 0.25, 5e-4, 128, 128),
        ("base", 12, 768, 3072, 12, 768, 1 / 3, 2e-4, 256, 512),
        ("large", 24, 1024, 4096, 16, 1024, 0.25, 2e-4, 2048, 512),
    ],
)
def test_paper_table_6(name, layers, hidden, ffn, heads, emb, gen, lr, batch, seq) -> None:
    r = PRESETS[name]
    m = r.model
    assert (m.num_hidden_layers, m.hidden_size, m.intermediate_size) == (layers, hidden, ffn)
    assert (m.num_attention_heads, m.embedding_size, m.vocab_size) == (heads, emb, 30522)
    assert (r.generator_size, r.learning_rate, r.batch_size, r.max_seq_length) == (
        gen,
        lr,
        batch,
        seq,
    )
    assert m.hidden_dropout_prob == 0.1
    assert PRESETS["large"].mask_prob == 0.25 and PRESETS["small"].mask_prob == 0.15


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_read_from_the_packaged_configs(name: str) -> None:
    from electra.pretrain.config import load_config

    cfg, r = load_config(name), PRESETS[name]
    assert cfg.model["preset"] == name
    assert (cfg.objective.generator_size, cfg.objective.mask_prob) == (
        r.generator_size,
        r.mask_prob,
    )
    assert (cfg.optim.learning_rate, cfg.optim.batch_size, cfg.optim.max_steps) == (
        r.learning_rate,
        r.batch_size,
        r.max_steps,
    )


def test_generator_is_a_pure_function_of_discriminator_and_size() -> None:
    d = preset("small")
    g = generator_config(d, 0.25)
    assert (g.hidden_size, g.intermediate_size, g.num_attention_heads) == (64, 256, 1)
    assert g.num_hidden_layers == d.num_hidden_layers and g.embedding_size == d.embedding_size
    b = generator_config(preset("base"), 1 / 3)
    assert (b.hidden_size, b.intermediate_size, b.num_attention_heads) == (256, 1024, 4)
    assert generator_config(d, 0.25) == g  # deterministic
    with pytest.raises(ConfigError):
        generator_config(d, 0.0)


def test_unknown_key_is_rejected_with_a_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"my.toml: unknown key 'hiden_size'.*'hidden_size'"):
        from_dict(ElectraConfig, {"hiden_size": 12}, source="my.toml")


def test_wrong_type_names_the_field() -> None:
    with pytest.raises(ConfigError, match="num_hidden_layers: expected an integer"):
        from_dict(ElectraConfig, {"num_hidden_layers": "twelve"}, source="x")
    with pytest.raises(ConfigError, match="divisible"):
        from_dict(ElectraConfig, {"hidden_size": 30, "num_attention_heads": 4})


def test_preset_overrides_and_unknown_preset() -> None:
    assert preset("small", vocab_size=32000).vocab_size == 32000
    with pytest.raises(ConfigError, match="unknown model preset 'huge'"):
        preset("huge")


def test_overrides_are_parsed_as_toml_values() -> None:
    out = apply_overrides({"optim": {"lr": 1.0}}, ["optim.lr=5e-4", "name=run1", "steps=10"])
    assert out == {"optim": {"lr": 5e-4}, "name": "run1", "steps": 10}
