"""The encoder: shapes, masking of padding, the CPU fast paths, parameter naming."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from electra.model.config import preset
from electra.model.encoder import (
    ElectraDiscriminator,
    ElectraGenerator,
    _attend,
    _attention_with_dropout,
    depthwise_conv,
    dropout,
)


def test_fast_dropout_rate_scale_and_gradient() -> None:
    torch.manual_seed(0)
    x = torch.ones(200_000, requires_grad=True)
    y = dropout(x, 0.1, training=True)
    dropped = y == 0
    assert abs(dropped.float().mean().item() - 0.1) < 0.005
    assert torch.allclose(y[~dropped], torch.tensor(1 / 0.9))
    y.sum().backward()
    assert torch.equal(x.grad == 0, dropped)
    assert torch.equal(dropout(x, 0.1, training=False), x)


def test_fast_dropout_follows_the_global_rng() -> None:
    x = torch.ones(1000)
    torch.manual_seed(3)
    a = dropout(x, 0.1, True)
    torch.manual_seed(3)
    b = dropout(x, 0.1, True)
    assert torch.equal(a, b)


def test_eager_attention_matches_sdpa_without_drops() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 9, 8, generator=g) for _ in range(3))
    mask = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    mask[1, ..., 6:] = False
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got = _attention_with_dropout(q, k, v, mask, 1e-9)  # threshold rounds to "never drop"
    assert torch.allclose(got, want, atol=1e-6)


def test_bf16_attention_on_the_cpu_takes_the_plain_path_and_matches_sdpa(monkeypatch) -> None:
    """In bf16 on a CPU the plain matmuls are faster than SDPA's fused kernel (encoder.py),
    with or without dropout; they must agree with SDPA within bf16 rounding, masks included.
    fp32 without dropout stays on SDPA."""
    import electra.model.encoder as encoder

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 9, 16, generator=g) for _ in range(3))
    mask = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    mask[1, ..., 6:] = False
    calls = []
    real = encoder._attention_with_dropout
    monkeypatch.setattr(
        encoder, "_attention_with_dropout", lambda *a: calls.append(a[-1]) or real(*a)
    )
    want = _attend(q, k, v, 2, mask, 0.0)  # fp32: SDPA
    assert calls == []
    got = _attend(q.bfloat16(), k.bfloat16(), v.bfloat16(), 2, mask, 0.0)
    assert calls == [0.0] and got.dtype == torch.bfloat16
    assert torch.allclose(got.float(), want, atol=3e-2, rtol=2e-2)


def test_shapes_and_names_follow_hugging_face() -> None:
    cfg = preset("tiny")
    d = ElectraDiscriminator(cfg)
    names = set(dict(d.named_parameters()))
    assert "electra.embeddings_project.weight" in names  # embedding 32 < hidden 64
    assert "electra.encoder.layer.1.attention.self.query.weight" in names
    assert "discriminator_predictions.dense_prediction.weight" in names
    ids = torch.randint(5, cfg.vocab_size, (3, 10))
    assert d(ids).shape == (3, 10)
    g = ElectraGenerator(cfg)
    assert "generator_lm_head.bias" in dict(g.named_parameters())
    assert "generator_lm_head.weight" not in g.state_dict()  # tied, stored once
    assert g(ids).shape == (3, 10, cfg.vocab_size)
    assert g(ids, positions=torch.tensor([0, 7])).shape == (2, cfg.vocab_size)
    equal = preset("tiny", embedding_size=64)
    assert not hasattr(ElectraDiscriminator(equal).electra, "embeddings_project")


def test_padding_does_not_leak_into_real_tokens() -> None:
    torch.manual_seed(0)
    d = ElectraDiscriminator(preset("tiny")).eval()
    ids = torch.randint(5, 1000, (1, 12))
    mask = torch.ones_like(ids)
    mask[:, 8:] = 0
    other = ids.clone()
    other[:, 8:] = 9
    with torch.no_grad():
        a, b = d(ids, mask), d(other, mask)
    assert torch.allclose(a[:, :8], b[:, :8], atol=1e-6)


def test_too_long_sequence_is_a_clear_error() -> None:
    import pytest

    d = ElectraDiscriminator(preset("tiny"))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        d(torch.ones(1, 200, dtype=torch.long))


def test_local_conv_is_off_by_default_and_mixes_neighbours_when_on(tmp_path) -> None:
    import json

    import pytest

    from electra.config import ConfigError
    from electra.model.hf import export_discriminator, load_discriminator

    off = preset("tiny")
    assert off.local_conv_kernel == 0
    plain = ElectraDiscriminator(off)
    assert not any("local_conv" in n for n, _ in plain.named_parameters())
    export_discriminator(plain, tmp_path / "off")
    assert "local_conv_kernel" not in json.loads((tmp_path / "off/config.json").read_text())
    with pytest.raises(ConfigError, match="odd"):
        preset("tiny", local_conv_kernel=2)

    def encoder_input(m: ElectraDiscriminator, ids: torch.Tensor) -> torch.Tensor:
        seen = []
        hook = m.electra.encoder.register_forward_pre_hook(lambda _m, a: seen.append(a[0]))
        m(ids, torch.ones_like(ids))
        hook.remove()
        return seen[0]

    torch.manual_seed(0)
    model = ElectraDiscriminator(preset("tiny", local_conv_kernel=3)).eval()
    ids = torch.randint(5, 1000, (1, 12))
    moved = ids.clone()
    moved[0, 6] = (ids[0, 6] + 1) % 1000
    # Before the first layer a position sees its neighbours only through the convolution.
    a, b = encoder_input(model, ids), encoder_input(model, moved)
    assert not torch.allclose(a[0, 5], b[0, 5]) and not torch.allclose(a[0, 7], b[0, 7])
    assert torch.allclose(a[0, :5], b[0, :5]) and torch.allclose(a[0, 8:], b[0, 8:])
    a, b = encoder_input(plain.eval(), ids), encoder_input(plain, moved)
    assert torch.allclose(a[0, 5], b[0, 5])
    # The export round-trips in this toolkit (transformers would drop the convolution).
    export_discriminator(model, tmp_path / "on")
    assert json.loads((tmp_path / "on/config.json").read_text())["local_conv_kernel"] == 3
    again = load_discriminator(tmp_path / "on").eval()
    mask = torch.ones_like(ids)
    assert torch.allclose(again(ids, mask), model(ids, mask), atol=1e-6)


def test_convbert_mixed_attention_shapes_and_checks() -> None:
    import pytest

    from electra.config import ConfigError
    from electra.model.config import generator_config
    from electra.model.encoder import ElectraGenerator, MixedAttention

    small = preset("small", conv_kernel_size=9)
    assert (small.mixed_heads, small.head_dim) == (2, 64)  # 2 attention + 2 convolution heads
    assert small.hf_architecture("ElectraForPreTraining") == "ConvBertModel"
    assert preset("small").hf_architecture("ElectraForPreTraining") == "ElectraForPreTraining"
    gen = generator_config(small, 0.25)  # 64 wide, 1 head: 1 attention + 1 convolution head
    assert (gen.mixed_heads, gen.head_dim) == (1, 32)
    x = torch.randint(5, 1000, (2, 16))
    assert ElectraGenerator(gen)(x).shape == (2, 16, small.vocab_size)
    disc = ElectraDiscriminator(preset("tiny", conv_kernel_size=3))
    assert all(isinstance(layer.attention, MixedAttention) for layer in disc.electra.encoder.layer)
    for bad, match in (
        (dict(conv_kernel_size=4), "odd"),
        (dict(conv_kernel_size=3, head_ratio=0), "head_ratio"),
        (dict(conv_kernel_size=3, local_conv_kernel=3), "choose one"),
        (dict(conv_kernel_size=3, hidden_size=60, head_ratio=1), "twice"),
    ):
        with pytest.raises(ConfigError, match=match):
            preset("tiny", **bad)


def test_convbert_convolution_heads_see_only_their_span() -> None:
    """In the first layer, before any attention mixes the row, a convolution head's output
    at position i depends on tokens i-K//2 .. i+K//2 only (the attention heads see all)."""
    from electra.model.encoder import MixedSelfAttention

    torch.manual_seed(0)
    cfg = preset("tiny", conv_kernel_size=3)
    mixed = MixedSelfAttention(cfg).eval()
    x = torch.randn(1, 12, cfg.hidden_size)
    moved = x.clone()
    moved[0, 6] += 1.0
    half = cfg.hidden_size // 2  # attention heads first, then convolution heads
    a, b = mixed(x, None)[0, :, half:], mixed(moved, None)[0, :, half:]
    changed = [i for i in range(12) if not torch.allclose(a[i], b[i])]
    assert changed == [5, 6, 7]
    assert not torch.allclose(mixed(x, None)[0, 0, :half], mixed(moved, None)[0, 0, :half])


def _conv_and_grads(conv, x: torch.Tensor, taps: torch.Tensor, autocast: bool):
    """Output and the input's and taps' gradients of ``conv(x, taps)`` for one fixed upstream."""
    x, taps = x.detach().clone().requires_grad_(True), taps.detach().clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        y = conv(x, taps)
    upstream = torch.linspace(-1, 1, y.numel()).reshape(y.shape).to(y.dtype)
    y.backward(upstream)
    return y.detach(), x.grad, taps.grad


def test_depthwise_conv_matches_conv2d_and_its_gradients() -> None:
    """The CPU training path's own backward (input gradient by the reversed taps, the taps'
    gradient in fp32) gives conv2d's gradients: to fp32 rounding in fp32, and within bf16's
    rounding under bf16 autocast, where it returns each gradient in its input's dtype."""
    torch.manual_seed(0)
    x = torch.randn(3, 20, 8).transpose(1, 2).unsqueeze(2)  # (3, 8, 1, 20), channels-last
    taps = torch.randn(8, 1, 1, 9) * 0.2

    def plain(image: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.conv2d(image, t, padding=(0, 4), groups=8)

    for autocast, tol in ((False, 1e-5), (True, 0.02)):
        ours = _conv_and_grads(depthwise_conv, x, taps, autocast)
        ref = _conv_and_grads(plain, x, taps, autocast)
        assert ours[1].dtype == x.dtype and ours[2].dtype == taps.dtype
        for a, b in zip(ours, ref, strict=True):
            scale = b.float().abs().max()
            assert (a.float() - b.float()).abs().max() <= tol * scale
    with torch.no_grad():  # inference and export: plain conv2d, no autograd Function
        assert torch.equal(depthwise_conv(x, taps), plain(x, taps))
