"""Model configuration, the paper's presets, and strict dataclass loading.

Field names follow Hugging Face's ``ElectraConfig`` so that a ``config.json``
converts field by field. Every loader in the project goes through
:func:`from_dict`, which rejects unknown keys and wrong types with a message
naming the source and the field: a typo in a config file must never be
silently ignored for a run that lasts days.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import tomllib
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names where and which."""


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


@dataclass(frozen=True)
class PaperRecipe:
    """One column of the paper's Table 6: the model plus its pre-training recipe."""

    model: ElectraConfig
    generator_size: float
    mask_prob: float
    learning_rate: float
    batch_size: int
    max_steps: int
    max_seq_length: int


def builtin_configs() -> list[str]:
    """Names of the packaged configs (``electra pretrain --config NAME``)."""
    folder = resources.files("electra") / "configs"
    return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))


def builtin_config_path(name: str) -> Path:
    """The file of packaged config ``name`` (it may not exist)."""
    return Path(str(resources.files("electra") / "configs" / f"{name}.toml"))


def _recipe(name: str) -> PaperRecipe:
    """The Table 6 column ``name``: its model shape and what ``configs/NAME.toml`` trains."""
    path = builtin_config_path(name)
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    objective, optim = raw["objective"], raw["optim"]
    if raw.get("model", {}).get("preset") != name:
        raise ConfigError(f"{path}: model.preset must be {name!r}")
    return PaperRecipe(
        model=MODELS[name],
        generator_size=objective["generator_size"],
        mask_prob=objective["mask_prob"],
        learning_rate=optim["learning_rate"],
        batch_size=optim["batch_size"],
        max_steps=optim["max_steps"],
        max_seq_length=SEQ_LENGTHS[name],
    )


PRESETS: dict[str, PaperRecipe] = {name: _recipe(name) for name in MODELS}


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


# ---------------------------------------------------------------------------
# Strict loading of dataclasses from dicts (TOML, JSON, --set overrides)
# ---------------------------------------------------------------------------


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check (and gently coerce int->float) ``value`` against annotation ``tp``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{where}: invalid value {value!r}")
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{where}: {value!r} is not one of {list(typing.get_args(tp))}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        items = [_coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table for {tp.__name__}, got {value!r}")
        return from_dict(tp, value, source=where)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")
    return value


def from_dict(cls: type[T], data: dict[str, Any], source: str = "config") -> T:
    """Build dataclass ``cls`` from ``data``, rejecting unknown keys and bad types.

    ``source`` names where the data came from (a file, a preset) so the error
    says e.g. ``pretrain.toml: unknown key 'learnig_rate' (did you mean
    'learning_rate'?)``.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a table of keys, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        if key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"{source}: unknown key {key!r}{hint}; valid keys: {', '.join(sorted(known))}"
            )
        kwargs[key] = _coerce(value, hints[key], f"{source}: {key}")
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except TypeError as exc:  # a required field is missing
        raise ConfigError(f"{source}: {exc}") from None


def to_dict(obj: Any) -> dict[str, Any]:
    """A dataclass as a plain dict (JSON/TOML friendly)."""
    return dataclasses.asdict(obj)


def _toml_value(raw: str) -> Any:
    """``raw`` read as a TOML value (``3e-4``, ``10``, ``true``, ``"x"``), else the bare text."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw  # a bare string such as a path


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse ``a.b=value`` from ``--set``; the value is read as TOML when it can be."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"--set {text!r}: empty key")
    return key.split("."), _toml_value(raw)


def parse_value(text: str, tp: Any, where: str) -> Any:
    """A command-line value for a field annotated ``tp``, checked as :func:`from_dict` checks.

    The text is read as TOML as ``--set`` reads it, except for a plain ``str`` field, which
    takes it verbatim (a path named ``2024`` or ``true`` stays a string).
    """
    return _coerce(text if tp is str else _toml_value(text), tp, where)


Override = str | tuple[str, Any]
"""One override: ``--set`` text ``"a.b=value"`` or an already typed ``("a.b", value)``."""


def apply_overrides(data: dict[str, Any], overrides: Sequence[Override]) -> dict[str, Any]:
    """Apply overrides, in order, to a nested dict (returns a new dict).

    Each is ``--set`` text ``a.b=value`` or a typed pair ``("a.b", value)`` (the dotted
    flags such as ``--optim.learning_rate``).
    """
    out = copy.deepcopy(data)
    for item in overrides:
        if isinstance(item, str):
            path, value = parse_override(item)
            label = f"--set {item!r}"
        else:
            key, value = item
            path, label = key.split("."), f"--{key}"
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{label}: {part!r} is not a table")
        node[path[-1]] = value
    return out
