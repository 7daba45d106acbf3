"""The ELECTRA encoder, whole, in plain PyTorch.

One :class:`ElectraModel` class serves as generator and discriminator body;
:class:`ElectraDiscriminator` and :class:`ElectraGenerator` add the two
pre-training heads. Parameter names are those of Hugging Face's
``modeling_electra.py`` (``electra.embeddings.word_embeddings.weight``,
``electra.encoder.layer.0.attention.self.query.weight``, ...) so a checkpoint
converts key for key, with no renaming table to get wrong.

Shapes in comments: B batch, L sequence length, H hidden size, E embedding
size, V vocabulary size, N number of masked positions in the batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from electra.model.config import ElectraConfig


class _CpuDropout(torch.autograd.Function):
    """Dropout whose mask costs a quarter of a random int64 per element.

    ``torch.bernoulli_`` draws one 32-bit number per element and was a fifth
    of a CPU training step; here one 64-bit draw yields four 16-bit uniforms,
    compared with a threshold (drop probability exact to 1/65536). Only the
    bool mask is kept for backward. The draws come from the global torch RNG,
    so checkpointing its state keeps runs reproducible.

    The mask is applied as a multiply by its 0/1 values read as bytes: on CPU,
    ``masked_fill`` and any conversion of a ``bool`` tensor run a slow scalar loop
    (0.69 ms for 1M bf16 elements on a Zen 5 core), while a ``uint8`` view converts
    and multiplies vectorised (0.14 ms); the output is the same, bit for bit.
    """

    @staticmethod
    def forward(ctx, x: Tensor, p: float) -> Tensor:  # type: ignore[override]
        keep = _keep_mask(x, p)
        ctx.save_for_backward(keep)
        ctx.scale = 1.0 / (1.0 - p)
        return _times_mask(x, keep).mul_(ctx.scale)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        (keep,) = ctx.saved_tensors
        return _times_mask(grad, keep).mul_(ctx.scale), None


def _times_mask(x: Tensor, keep: Tensor) -> Tensor:
    """``x`` where ``keep`` (bool) is True, else 0, in ``x``'s dtype: a vectorised multiply."""
    return x * keep.view(torch.uint8).to(x.dtype)


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout`` with a faster mask on CPU (same distribution, exact to 1/65536)."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, True)  # fused and fast on accelerators
    return _CpuDropout.apply(x, p)


class Dropout(nn.Dropout):
    """``nn.Dropout`` (same name and repr) using :func:`dropout`."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)


def disable_dropout(module: nn.Module) -> int:
    """Set every dropout under ``module`` to 0 (the :class:`Dropout` layers and the
    attention blocks' ``dropout_p``); returns how many were on. Training only: the model's
    config keeps its rates, so what is exported fine-tunes with them."""
    on = 0
    for m in module.modules():
        if isinstance(m, nn.Dropout) and m.p > 0:
            m.p, on = 0.0, on + 1
        if getattr(m, "dropout_p", 0.0) > 0:
            m.dropout_p, on = 0.0, on + 1
    return on


def activation(name: str) -> nn.Module:
    """The feed-forward activation named in a config (HF names)."""
    if name == "gelu":
        return nn.GELU()  # exact erf GELU, as BERT/ELECTRA
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return nn.GELU(approximate="tanh")
    if name == "relu":
        return nn.ReLU()
    raise ValueError(f"unsupported activation {name!r}")


class ElectraEmbeddings(nn.Module):
    """Word + position + token-type embeddings, LayerNorm, dropout (width E).

    In ELECTRA pre-training this whole module is shared by the generator and
    the discriminator (the official code shares the ``embeddings`` scope), so
    both see the same ``Parameter`` objects; under gradient-disentangled sharing
    the discriminator reads its tables through :class:`DisentangledEmbeddings`.
    """

    def __init__(self, config: ElectraConfig) -> None:
        super().__init__()
        E = config.embedding_size
        self.word_embeddings = nn.Embedding(config.vocab_size, E, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, E)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, E)
        self.LayerNorm = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    @property
    def padding_idx(self) -> int | None:
        return self.word_embeddings.padding_idx

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        return _embed(
            self,
            input_ids,
            token_type_ids,
            self.word_embeddings.weight,
            self.position_embeddings.weight,
            self.token_type_embeddings.weight,
        )


def _embed(
    module: ElectraEmbeddings | DisentangledEmbeddings,
    input_ids: Tensor,
    token_type_ids: Tensor | None,
    word: Tensor,
    position: Tensor,
    token_type: Tensor,
) -> Tensor:
    """Sum of the three (V|P|T, E) tables' rows, then ``module``'s LayerNorm and dropout."""
    L = input_ids.shape[1]
    if L > position.shape[0]:
        raise ValueError(f"sequence length {L} exceeds max_position_embeddings {position.shape[0]}")
    x = F.embedding(input_ids, word, module.padding_idx)  # (B, L, E)
    x = x + position[:L]  # broadcast over B
    types = token_type[0] if token_type_ids is None else F.embedding(token_type_ids, token_type)
    x = x + types
    return module.dropout(module.LayerNorm(x))


EMBEDDING_TABLES = ("word_embeddings", "position_embeddings", "token_type_embeddings")
"""The tables of :class:`ElectraEmbeddings` that embedding sharing shares."""


class DisentangledEmbeddings(nn.Module):
    """The discriminator's embeddings under gradient-disentangled embedding sharing.

    GDES (DeBERTa-v3, He et al., 2021): the generator owns the word, position
    and token-type tables and is the only model whose loss updates them; the
    discriminator looks them up as ``stop_gradient(shared) + delta``, with
    ``delta`` a zero-initialised table of its own, so its loss moves only the
    delta. The two losses then stop pulling one table in opposite directions
    (the generator wants similar tokens close, the discriminator apart).

    The LayerNorm is the discriminator's own, as in DeBERTa-v3 (only the
    tables are shared there). :meth:`tables` is the one place the merge is
    computed: :meth:`forward` uses it, and so does :func:`plain_state_dict`,
    which exports the discriminator as a plain ELECTRA whose tables are the
    merged ``shared + delta`` (the same fp32 sums, so the same outputs).
    """

    def __init__(self, shared: ElectraEmbeddings, config: ElectraConfig) -> None:
        super().__init__()
        self.shared = [shared]  # a list hides the owner's parameters from this module's
        self.padding_idx = shared.word_embeddings.padding_idx
        for name in EMBEDDING_TABLES:
            table = getattr(shared, name).weight
            delta = torch.zeros(table.shape, dtype=torch.float32, device=table.device)
            setattr(self, f"{name}_delta", nn.Parameter(delta))
        self.LayerNorm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
        self.LayerNorm.to(shared.LayerNorm.weight.device)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def table(self, name: str) -> Tensor:
        """The shared table ``name``, without its gradient, plus this model's delta."""
        return getattr(self.shared[0], name).weight.detach() + getattr(self, f"{name}_delta")

    def tables(self) -> dict[str, Tensor]:
        """:meth:`table` of each of :data:`EMBEDDING_TABLES`."""
        return {name: self.table(name) for name in EMBEDDING_TABLES}

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        t = self.tables()
        return _embed(self, input_ids, token_type_ids, *(t[n] for n in EMBEDDING_TABLES))

    def plain_state(self) -> dict[str, Tensor]:
        """This module's state as an :class:`ElectraEmbeddings` (HF names), tables merged."""
        with torch.no_grad():
            state = {f"{n}.weight": t for n, t in self.tables().items()}
        state.update({f"LayerNorm.{k}": v for k, v in self.LayerNorm.state_dict().items()})
        return state


def plain_state_dict(module: nn.Module) -> dict[str, Tensor]:
    """``module.state_dict()`` with every :class:`DisentangledEmbeddings` inside replaced
    by the plain ``ElectraEmbeddings`` entries it computes (tables merged): what a Hugging
    Face ``ElectraForPreTraining`` loads. The same as ``state_dict()`` when there is none."""
    merged = {
        f"{name}.": m for name, m in module.named_modules() if isinstance(m, DisentangledEmbeddings)
    }
    out: dict[str, Tensor] = {}
    done: set[str] = set()
    for key, value in module.state_dict().items():
        prefix = next((p for p in merged if key.startswith(p)), None)
        if prefix is None:
            out[key] = value
        elif prefix not in done:  # the module's first key: all of its plain entries, in place
            done.add(prefix)
            out.update({prefix + k: v for k, v in merged[prefix].plain_state().items()})
    return out


class SelfAttention(nn.Module):
    """Q, K, V projections (HF names ``query``/``key``/``value``), H -> A (A = H for ELECTRA)."""

    def __init__(self, config: ElectraConfig, width: int | None = None) -> None:
        super().__init__()
        H, A = config.hidden_size, width or config.hidden_size
        self.query = nn.Linear(H, A)
        self.key = nn.Linear(H, A)
        self.value = nn.Linear(H, A)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(B, L, H) -> q, k, v, each (B, L, A).

        One matmul for the three (three small ones waste a CPU's vector units);
        the parameters stay separate so checkpoints keep HF's names.
        """
        w = torch.cat([self.query.weight, self.key.weight, self.value.weight])
        b = torch.cat([self.query.bias, self.key.bias, self.value.bias])
        return F.linear(x, w, b).split(self.query.out_features, dim=-1)


def _attend(q: Tensor, k: Tensor, v: Tensor, nh: int, mask: Tensor | None, p: float) -> Tensor:
    """Multi-head scaled dot-product attention: q, k, v (B, L, A) -> (B, L, A).

    mask: (B, 1, 1, L) bool, True where the key is a real token; p: dropout
    on the attention probabilities (0 when not training).
    """
    B, L, A = q.shape

    def heads(t: Tensor) -> Tensor:  # (B, L, A) -> (B, nh, L, A/nh)
        return t.view(B, L, nh, A // nh).transpose(1, 2)

    q, k, v = heads(q), heads(k), heads(v)
    if q.device.type == "cpu" and (p > 0.0 or q.dtype == torch.bfloat16):
        # On CPU, SDPA with dropout falls back to its plain math kernel and a
        # slow Bernoulli mask; the same computation with our mask is faster. In bf16
        # SDPA's fused CPU kernel is slower than the plain matmuls even without dropout
        # (EPYC Zen 5, torch 2.13, 32 x 2 heads x 128 x 64: 22.7 against 8.4 ms forward +
        # backward, 4.2 against 1.8 ms forward; level in fp32, where SDPA stays).
        ctx = _attention_with_dropout(q, k, v, mask, p)
    else:
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
    return ctx.transpose(1, 2).reshape(B, L, A)  # (B, nh, L, d) -> (B, L, A)


class ResidualOutput(nn.Module):
    """Projection back to the hidden width, dropout, residual, post-LN: the end of the
    attention block (from ``hidden_size``) and of the feed-forward block (from
    ``intermediate_size``), under Hugging Face's names (``dense``, ``LayerNorm``)."""

    def __init__(self, config: ElectraConfig, in_features: int) -> None:
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class Attention(nn.Module):
    """ELECTRA's self-attention block: multi-head attention, then :class:`ResidualOutput`."""

    def __init__(self, config: ElectraConfig) -> None:
        super().__init__()
        self.self = SelfAttention(config)
        self.output = ResidualOutput(config, config.hidden_size)
        self.num_heads = config.num_attention_heads
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        p = self.dropout_p if self.training else 0.0
        return self.output(_attend(*self.self.project(x), self.num_heads, mask, p), x)


class _DepthwiseConv(torch.autograd.Function):
    """Depthwise convolution of a (B, C, 1, L) channels-last image with (C, 1, 1, K) taps,
    whose backward computes the taps' gradient in fp32.

    oneDNN's bf16 kernel for a depthwise convolution's weight gradient was 20x its forward
    (5.6 against 0.27 ms at 32 x 256 x 128, 9 taps, EPYC Zen 4) and its fp32 one 3x faster
    than that; the input gradient is the same convolution with the taps reversed (odd K,
    same padding). The forward is ``F.conv2d`` as autocast runs it.
    """

    @staticmethod
    def forward(ctx, image: Tensor, taps: Tensor) -> Tensor:  # type: ignore[override]
        pad = taps.shape[-1] // 2
        out = F.conv2d(image, taps, padding=(0, pad), groups=image.shape[1])
        ctx.save_for_backward(image, taps)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        image, taps = ctx.saved_tensors
        C, pad = image.shape[1], taps.shape[-1] // 2
        reversed_taps = taps.flip(-1).to(grad.dtype)
        grad_image = F.conv2d(grad, reversed_taps, padding=(0, pad), groups=C)
        grad_taps = torch.ops.aten.convolution_backward(
            grad.float(),
            image.float(),
            taps.float(),
            None,
            [1, 1],
            [0, pad],
            [1, 1],
            False,
            [0, 0],
            C,
            [False, True, False],
        )[1]
        return grad_image, grad_taps.to(taps.dtype)


def depthwise_conv(image: Tensor, taps: Tensor) -> Tensor:
    """(B, C, 1, L) image, (C, 1, 1, K) taps (K odd) -> (B, C, 1, L), zero padding at both
    ends. Training on a CPU takes :class:`_DepthwiseConv`; everything else (accelerators,
    inference, export) plain ``F.conv2d``."""
    if image.device.type == "cpu" and torch.is_grad_enabled() and taps.requires_grad:
        return _DepthwiseConv.apply(image, taps)
    return F.conv2d(image, taps, padding=(0, taps.shape[-1] // 2), groups=image.shape[1])


class SeparableConv1D(nn.Module):
    """Depthwise then pointwise convolution over the sequence, one bias (HF ConvBERT's names).

    (B, L, H) -> (B, L, A). The bias keeps HF's (A, 1) shape so checkpoints convert as they are.
    """

    def __init__(self, config: ElectraConfig, width: int) -> None:
        super().__init__()
        H, K = config.hidden_size, config.conv_kernel_size
        self.depthwise = nn.Conv1d(H, H, K, groups=H, padding=K // 2, bias=False)
        self.pointwise = nn.Conv1d(H, width, 1, bias=False)
        self.bias = nn.Parameter(torch.zeros(width, 1))
        for conv in (self.depthwise, self.pointwise):
            nn.init.normal_(conv.weight, std=config.initializer_range)

    def forward(self, x: Tensor) -> Tensor:
        # (B, L, H) read as a (B, H, 1, L) image whose channels are innermost (channels-last,
        # no copy): oneDNN's depthwise kernel for that layout, then the pointwise convolution
        # as the matmul it is, on (B, L, H) rows. Same arithmetic as Conv1d on (B, H, L);
        # forward + backward 1.7x faster in bf16 and 2.5x in fp32 on CPU (EPYC Zen 4, 32 x 128
        # x 256), where Conv1d reorders its input and runs the 1x1 convolution as a convolution.
        image = x.transpose(1, 2).unsqueeze(2)  # (B, H, 1, L), channels-last strides
        mixed = depthwise_conv(image, self.depthwise.weight.unsqueeze(2))  # (B, H, 1, L)
        rows = mixed.squeeze(2).transpose(1, 2)  # (B, L, H)
        return F.linear(rows, self.pointwise.weight.squeeze(-1), self.bias.squeeze(-1))


class MixedSelfAttention(SelfAttention):
    """ConvBERT's mixed attention (Jiang et al., 2020): beside ``n`` self-attention heads,
    ``n`` span-based dynamic convolution heads of the same width.

    Each convolution head mixes the K tokens around a position with weights computed
    from that position's span (a separable convolution of the keys, times the query), so
    every layer sees its neighbours from the first step: the locality that plain
    ELECTRA has to discover through absolute positions, slowly at small budgets.
    Names, parameters and arithmetic are transformers' ``ConvBertSelfAttention`` on an
    unpadded row. On a padded row ours zeroes what the two sequence convolutions read at
    padded positions (the key convolution's input, the span convolution's values), so a
    token's output is what it would be alone: there the convolutions' own zero padding
    sits past the end. transformers does not mask (the last K//2 real tokens of a shorter
    row read the pad positions' hidden states, and later layers' attention spreads that to
    the whole row), so the two agree on padded batches only row by row (the model cards
    say so; tests/model/test_padding_invariance.py checks both).
    """

    def __init__(self, config: ElectraConfig) -> None:
        A = config.mixed_heads * config.head_dim  # hidden_size / 2
        super().__init__(config, A)  # query, key, value: H -> A
        self.num_heads, self.kernel = config.mixed_heads, config.conv_kernel_size
        self.key_conv_attn_layer = SeparableConv1D(config, A)
        self.conv_kernel_layer = nn.Linear(A, self.num_heads * self.kernel)
        self.conv_out_layer = nn.Linear(config.hidden_size, A)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """x (B, L, H), mask (B, 1, 1, L) bool or None -> (B, L, H)."""
        B, L, _ = x.shape
        n, K = self.num_heads, self.kernel
        keep = None if mask is None else mask[:, 0, 0, :, None]  # (B, L, 1), True: real token
        q, k, v = self.project(x)  # each (B, L, A)
        p = self.dropout_p if self.training else 0.0
        attended = _attend(q, k, v, n, mask, p)  # (B, L, A)
        # One softmaxed K-tap kernel per position and head, from its span and its query.
        # The depthwise convolution has no bias, so zeroed pads read as its zero padding.
        span = self.key_conv_attn_layer(_zero_padding(x, keep))  # (B, L, A)
        dyn = self.conv_kernel_layer(span * q)  # (B, L, n*K)
        dyn = dyn.view(B, L, n, K, 1).softmax(dim=3)
        # The K taps as K shifted views of the zero-padded values: transformers' unfold and
        # matmul copy a (B, L, A, K) tensor, 1.5x (bf16) to 6x (fp32) slower on CPU. Pads are
        # zeroed after the projection (its bias would otherwise be what they hold).
        values = _zero_padding(self.conv_out_layer(x), keep)  # (B, L, A)
        values = F.pad(values, (0, 0, K // 2, K // 2))  # (B, L+K-1, A)
        values = values.view(B, L + K - 1, n, -1)  # (B, L+K-1, n, A/n)
        conv = values[:, :L] * dyn[..., 0, :]
        for j in range(1, K):  # one fused multiply-add per tap, in place
            conv = conv.addcmul_(values[:, j : j + L], dyn[..., j, :])  # (B, L, n, A/n)
        # Attention heads first, then convolution heads: (B, L, 2n, A/n) -> (B, L, H).
        return torch.cat([attended.view(B, L, n, -1), conv], dim=2).flatten(2)


def _zero_padding(t: Tensor, keep: Tensor | None) -> Tensor:
    """(B, L, C) ``t`` with its padded positions zeroed (``keep``: (B, L, 1) bool, or None).

    What a sequence convolution reads at a pad must be what it reads past the end of an
    unpadded row, zero, or a token's output would depend on what else is in its batch.
    A multiply in ``t``'s dtype: no host sync, no promotion of bf16 activations, and one
    ``Mul`` in an ONNX graph.
    """
    return t if keep is None else t * keep.to(t.dtype)


class MixedAttention(nn.Module):
    """ConvBERT's attention block: :class:`MixedSelfAttention`, then :class:`ResidualOutput`."""

    def __init__(self, config: ElectraConfig) -> None:
        super().__init__()
        self.self = MixedSelfAttention(config)
        self.output = ResidualOutput(config, config.hidden_size)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self.output(self.self(x, mask), x)


def _keep_mask(x: Tensor, p: float) -> Tensor:
    """Bool mask, False with probability p (to 1/65536), from a quarter int64 per element."""
    n = x.numel()
    bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device)
    bits.random_(-(2**63), 2**63 - 1)
    return (bits.view(torch.int16)[:n] >= -32768 + round(p * 65536)).view(x.shape)


def _attention_with_dropout(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, p: float):
    """softmax(q k^T / sqrt(d) + mask) with dropout, times v: (B, nh, L, d) -> same.

    (A hand-written autograd Function that touches the (L, L) tensors fewer
    times measured slower than this on CPU, so autograd does the backward.)
    """
    scores = q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5)  # (B, nh, L, L)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    probs = dropout(scores.softmax(dim=-1), p, True)
    return probs @ v


class Intermediate(nn.Module):
    def __init__(self, config: ElectraConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = activation(config.hidden_act)

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.dense(x))


class Layer(nn.Module):
    """One post-LN transformer layer: attention then GELU feed-forward."""

    def __init__(self, config: ElectraConfig) -> None:
        super().__init__()
        self.attention = MixedAttention(config) if config.conv_kernel_size else Attention(config)
        self.intermediate = Intermediate(config)
        self.output = ResidualOutput(config, config.intermediate_size)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)


class Encoder(nn.Module):
    def __init__(self, config: ElectraConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        for layer in self.layer:
            x = layer(x, mask)
        return x


def attention_bias(attention_mask: Tensor | None) -> Tensor | None:
    """(B, L) 1/0 padding mask -> (B, 1, 1, L) bool mask for SDPA, or None.

    ``None`` (no padding anywhere) lets SDPA take its fastest kernel.
    """
    if attention_mask is None:
        return None
    return attention_mask.bool()[:, None, None, :]


class ElectraModel(nn.Module):
    """The encoder body: embeddings (+ projection when E != H) and the layers."""

    def __init__(self, config: ElectraConfig, embeddings: ElectraEmbeddings | None = None) -> None:
        super().__init__()
        self.config = config
        if embeddings is not None and embeddings.word_embeddings.embedding_dim != (
            config.embedding_size
        ):
            raise ValueError("shared embeddings must have width config.embedding_size")
        self.embeddings = embeddings if embeddings is not None else ElectraEmbeddings(config)
        if config.embedding_size != config.hidden_size:
            self.embeddings_project = nn.Linear(config.embedding_size, config.hidden_size)
        if config.local_conv_kernel:
            # Off by default. A residual depthwise convolution: every position sees its
            # neighbours from the first step (PyTorch's default init, not BERT's).
            self.local_conv = nn.Conv1d(
                config.hidden_size,
                config.hidden_size,
                config.local_conv_kernel,
                padding=config.local_conv_kernel // 2,
                groups=config.hidden_size,
            )
        self.encoder = Encoder(config)
        # Shared embeddings belong to (and were initialised by) another model.
        for child in self.children():
            if child is not embeddings and not isinstance(child, nn.Conv1d):
                init_weights(child, config.initializer_range)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        """(B, L) ids -> (B, L, H) last hidden states."""
        x = self.embeddings(input_ids, token_type_ids)  # (B, L, E)
        if hasattr(self, "embeddings_project"):
            x = self.embeddings_project(x)  # (B, L, H)
        if hasattr(self, "local_conv"):
            y = x if attention_mask is None else x * attention_mask.unsqueeze(-1).to(x.dtype)
            x = x + self.local_conv(y.transpose(1, 2)).transpose(1, 2)
        return self.encoder(x, attention_bias(attention_mask))


def init_weights(module: nn.Module, std: float) -> None:
    """BERT initialisation: N(0, std) weights, zero biases, unit LayerNorm."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class DiscriminatorHead(nn.Module):
    """dense (H->H), activation, dense (H->1): one replaced/original logit per token."""

    def __init__(self, config: ElectraConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = activation(config.hidden_act)
        self.dense_prediction = nn.Linear(config.hidden_size, 1)

    def forward(self, h: Tensor) -> Tensor:
        return self.dense_prediction(self.act(self.dense(h))).squeeze(-1)


class ElectraDiscriminator(nn.Module):
    """Encoder + replaced-token-detection head (HF ``ElectraForPreTraining``)."""

    def __init__(self, config: ElectraConfig, embeddings: ElectraEmbeddings | None = None) -> None:
        super().__init__()
        self.config = config
        self.electra = ElectraModel(config, embeddings)
        self.discriminator_predictions = DiscriminatorHead(config)
        init_weights(self.discriminator_predictions, config.initializer_range)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        """(B, L) ids -> (B, L) logits of "this token was replaced"."""
        h = self.electra(input_ids, attention_mask, token_type_ids)
        return self.discriminator_predictions(h)


class GeneratorPredictions(nn.Module):
    """dense (H->E), GELU, LayerNorm: back to embedding width for the tied output."""

    def __init__(self, config: ElectraConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.embedding_size)
        self.act = nn.GELU()  # HF hard-codes gelu here
        self.LayerNorm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)

    def forward(self, h: Tensor) -> Tensor:
        return self.LayerNorm(self.act(self.dense(h)))


class TiedLMHead(nn.Module):
    """Output layer tied to the word embeddings: only its bias is a new parameter.

    Keeping the tied weight out of this module's parameters means the state
    dict has one copy of the table (safetensors refuses aliased tensors), and
    the HF key ``generator_lm_head.bias`` still matches.
    """

    def __init__(self, word_embeddings: nn.Embedding | DisentangledEmbeddings) -> None:
        super().__init__()
        self.word_embeddings = [word_embeddings]  # a list hides it from named_parameters
        self.bias = nn.Parameter(torch.zeros(self.weight.shape[0]))

    @property
    def weight(self) -> Tensor:
        """The word table (under GDES, the discriminator's merged one)."""
        source = self.word_embeddings[0]
        if isinstance(source, DisentangledEmbeddings):
            return source.table("word_embeddings")
        return source.weight

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)  # (..., E) -> (..., V)


class ElectraGenerator(nn.Module):
    """Encoder + MLM head tied to the input embeddings (HF ``ElectraForMaskedLM``).

    The head is applied only where asked (:meth:`forward` takes the masked
    positions): a full-vocabulary projection of every token would cost more
    than the rest of a small generator's step.
    """

    def __init__(self, config: ElectraConfig, embeddings: ElectraEmbeddings | None = None) -> None:
        super().__init__()
        self.config = config
        self.electra = ElectraModel(config, embeddings)
        self.generator_predictions = GeneratorPredictions(config)
        self.generator_lm_head = TiedLMHead(self.electra.embeddings.word_embeddings)
        init_weights(self.generator_predictions, config.initializer_range)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """Vocabulary logits.

        With ``positions`` (a (N,) tensor of flat indices into B*L, or a (B, L)
        bool mask) returns (N, V) logits at those positions only; without it,
        (B, L, V) for every token (inference, parity checks).
        """
        h = self.electra(input_ids, attention_mask, token_type_ids)  # (B, L, H)
        if positions is not None:
            flat = h.reshape(-1, h.shape[-1])
            if positions.dtype == torch.bool:
                positions = positions.reshape(-1).nonzero().squeeze(-1)
            h = flat.index_select(0, positions)  # (N, H)
        return self.generator_lm_head(self.generator_predictions(h))


def num_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    """Unique parameters (shared tables counted once)."""
    seen: set[int] = set()
    total = 0
    for p in module.parameters():
        if id(p) in seen or (trainable_only and not p.requires_grad):
            continue
        seen.add(id(p))
        total += p.numel()
    return total
