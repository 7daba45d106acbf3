"""The encoder's configuration and the paper's model shapes.

Field names follow Hugging Face's ``ElectraConfig`` so that a ``config.json``
converts field by field (:func:`electra.config.from_dict` checks every key).
:data:`MODELS` holds Table 6's shapes (and ``tiny`` for tests);
:func:`generator_config` scales a discriminator to its generator as the
official code does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from electra.config import ConfigError, from_dict


@dataclass
class ElectraConfig:
    """Shape of one ELECTRA encoder (generator or discriminator)."""

    vocab_size: int = field(default=30522, metadata={"doc": "WordPiece vocabulary size."})
    embedding_size: int = field(
        default=128,
        metadata={"doc": "Token embedding width; projected to hidden_size when smaller."},
    )
    hidden_size: int = field(default=256, metadata={"doc": "Transformer width."})
    num_hidden_layers: int = field(default=12, metadata={"doc": "Transformer depth."})
    num_attention_heads: int = field(default=4, metadata={"doc": "Attention heads per layer."})
    intermediate_size: int = field(default=1024, metadata={"doc": "Feed-forward inner width."})
    hidden_act: str = field(default="gelu", metadata={"doc": "Feed-forward activation (gelu)."})
    hidden_dropout_prob: float = field(default=0.1, metadata={"doc": "Dropout on hidden states."})
    attention_probs_dropout_prob: float = field(
        default=0.1, metadata={"doc": "Dropout on attention probabilities."}
    )
    max_position_embeddings: int = field(default=512, metadata={"doc": "Longest sequence."})
    type_vocab_size: int = field(default=2, metadata={"doc": "Number of segment (token type) ids."})
    layer_norm_eps: float = field(default=1e-12, metadata={"doc": "LayerNorm epsilon."})
    initializer_range: float = field(default=0.02, metadata={"doc": "Std of the normal init."})
    pad_token_id: int = field(default=0, metadata={"doc": "Id of [PAD]."})
    local_conv_kernel: int = field(
        default=0,
        metadata={
            "doc": "Locality bias (0: off, the paper's model): a residual depthwise "
            "convolution of this odd width over the embeddings, before the first layer. "
            "At the cpu recipe's budget 3 gets the discriminator off the base rate "
            "(in-row-swap AUC 0.82 against 0.51) and fine-tunes KLUE-NER to 47 F1 against "
            "33 (benchmarks/results/recipe_search.md). Not part of Hugging Face's ELECTRA: "
            "an export with it on loads only in this toolkit (transformers would drop the "
            "convolution). conv_kernel_size (ConvBERT, the cpu recipe's) does better and loads "
            "in transformers."
        },
    )

    conv_kernel_size: int = field(
        default=0,
        metadata={
            "doc": "ConvBERT's mixed attention (0: off, ELECTRA's attention): in every layer "
            "half of the attention width becomes span-based dynamic convolutions of this odd "
            "width (ConvBERT uses 9). Exports as transformers' ConvBERT (ConvBertModel)."
        },
    )
    head_ratio: int = field(
        default=2,
        metadata={
            "doc": "With conv_kernel_size: num_attention_heads / head_ratio self-attention "
            "heads (at least 1), as many convolution heads beside them (ConvBERT's name)."
        },
    )

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size ({self.hidden_size}) must be divisible by "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.hidden_act not in ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu"):
            raise ConfigError(f"hidden_act: unsupported activation {self.hidden_act!r}")
        if self.local_conv_kernel < 0 or (
            self.local_conv_kernel and self.local_conv_kernel % 2 == 0
        ):
            raise ConfigError(
                f"local_conv_kernel must be 0 (off) or odd, got {self.local_conv_kernel}"
            )
        self._check_convbert()
        for name in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")

    def _check_convbert(self) -> None:
        if self.conv_kernel_size < 0 or (self.conv_kernel_size and self.conv_kernel_size % 2 == 0):
            raise ConfigError(
                f"conv_kernel_size must be 0 (off) or odd, got {self.conv_kernel_size}"
            )
        if self.head_ratio < 1:
            raise ConfigError(f"head_ratio must be at least 1, got {self.head_ratio}")
        if not self.conv_kernel_size:
            return
        if self.local_conv_kernel:
            raise ConfigError(
                "local_conv_kernel and conv_kernel_size are two locality biases: choose one "
                "(conv_kernel_size is the one transformers loads, as ConvBERT)"
            )
        if self.hidden_size % (2 * self.mixed_heads):
            raise ConfigError(
                f"hidden_size ({self.hidden_size}) must be divisible by twice the "
                f"self-attention heads of ConvBERT's mixed attention ({self.mixed_heads})"
            )

    @property
    def head_dim(self) -> int:
        """Width of one attention head (of one of the two kinds under ConvBERT's mixing)."""
        if self.conv_kernel_size:
            return self.hidden_size // self.mixed_heads // 2
        return self.hidden_size // self.num_attention_heads

    def hf_architecture(self, ours: str) -> str:
        """The transformers class name an export of this shape carries for our ``ours``
        (an ``Electra*`` name): ConvBERT's under mixed attention, else ``ours``."""
        return CONVBERT_ARCHITECTURES.get(ours, ours) if self.conv_kernel_size else ours

    @property
    def mixed_heads(self) -> int:
        """Self-attention heads (and as many convolution heads) of ConvBERT's mixed attention."""
        return max(1, self.num_attention_heads // self.head_ratio)


# A model with ConvBERT's mixed attention (``conv_kernel_size``) is, inside the toolkit, an
# ELECTRA (``electra.`` keys, ``Electra*`` architectures); on disk it is transformers'
# ConvBERT: ``convbert.`` keys, these architectures. transformers has no ConvBERT
# discriminator class: a discriminator is written as a ``ConvBertModel`` whose RTD head's
# keys (``discriminator_predictions.*``) ride along, as they do when an ELECTRA
# discriminator is loaded for a task.
CONVBERT_ARCHITECTURES = {
    "ElectraForPreTraining": "ConvBertModel",
    "ElectraModel": "ConvBertModel",
    "ElectraForMaskedLM": "ConvBertForMaskedLM",
    "ElectraForSequenceClassification": "ConvBertForSequenceClassification",
    "ElectraForTokenClassification": "ConvBertForTokenClassification",
    "ElectraForQuestionAnswering": "ConvBertForQuestionAnswering",
    "ElectraForMultipleChoice": "ConvBertForMultipleChoice",
}


# The model shapes of the paper's Table 6 (and ``tiny``, for tests and smoke
# runs); a config names one as ``model.preset``. The rest of each column (the
# recipe) lives in the packaged config of the same name, ``configs/NAME.toml``,
# which is what trains: PRESETS below is read from those files.
MODELS: dict[str, ElectraConfig] = {
    "small": ElectraConfig(
        embedding_size=128,
        hidden_size=256,
        num_hidden_layers=12,
        num_attention_heads=4,
        intermediate_size=1024,
    ),
    "base": ElectraConfig(
        embedding_size=768,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
    ),
    "large": ElectraConfig(
        embedding_size=1024,
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        intermediate_size=4096,
    ),
    "tiny": ElectraConfig(
        vocab_size=1000,
        embedding_size=32,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=128,
    ),
}


# Table 6's sequence length (the blocks' length decides it in a run; FLOPs need it).
SEQ_LENGTHS = {"small": 128, "base": 512, "large": 512, "tiny": 64}


def preset(name: str, **overrides: Any) -> ElectraConfig:
    """The discriminator config of a named preset, with field overrides applied."""
    if name not in MODELS:
        raise ConfigError(f"unknown model preset {name!r}; choose one of {sorted(MODELS)}")
    base = dataclasses.asdict(MODELS[name])
    return from_dict(ElectraConfig, {**base, **overrides}, source=f"preset {name!r}")


def generator_config(discriminator: ElectraConfig, size: float) -> ElectraConfig:
    """The generator that goes with ``discriminator`` at ``size`` (e.g. 1/4).

    As in the official code, hidden width, FFN width and head count are scaled
    and depth is kept; the embedding size is unchanged because generator and
    discriminator share their embedding tables.
    """
    if not 0.0 < size <= 1.0:
        raise ConfigError(f"generator_size must be in (0, 1], got {size}")
    heads = max(1, int(round(discriminator.num_attention_heads * size)))
    hidden = max(heads, int(round(discriminator.hidden_size * size)))
    hidden -= hidden % heads
    return dataclasses.replace(
        discriminator,
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=max(1, int(round(discriminator.intermediate_size * size))),
    )
