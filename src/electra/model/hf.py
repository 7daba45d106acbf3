"""Interop with Hugging Face ELECTRA directories, both ways, without ``transformers``.

A Hugging Face directory holds ``config.json``, ``model.safetensors`` (or
``pytorch_model.bin``, or a sharded index of either) and the tokenizer files
(``vocab.txt``, ``tokenizer.json``, ``tokenizer_config.json``). Our parameter
names are Hugging Face's, so loading is a key-for-key copy with strict
checks, and export is writing the same keys back with a ``config.json`` that
``transformers`` understands. ``.bin`` files are read with
``torch.load(weights_only=True)``: loading never executes pickled code.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from electra.config import ConfigError, from_dict
from electra.model.checkpoint import CheckpointError
from electra.model.config import CONVBERT_ARCHITECTURES, ElectraConfig
from electra.model.encoder import (
    ElectraDiscriminator,
    ElectraGenerator,
    ElectraModel,
    plain_state_dict,
)
from electra.system.files import atomic_path, atomic_write_json, sha256_file

TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# Architectures we can read weights from (the encoder is under ``electra.``).
KNOWN_ARCHITECTURES = {
    "ElectraForPreTraining",
    "ElectraForMaskedLM",
    "ElectraModel",
    "ElectraForSequenceClassification",
    "ElectraForTokenClassification",
    "ElectraForQuestionAnswering",
    "ElectraForMultipleChoice",
    "ElectraForCausalLM",
}
_FROM_CONVBERT = {
    convbert: electra
    for electra, convbert in CONVBERT_ARCHITECTURES.items()
    if electra != "ElectraForPreTraining"
}
# transformers' ConvBertConfig defaults, for a config.json that leaves them out.
_CONVBERT_DEFAULTS = {"conv_kernel_size": 9, "head_ratio": 2}
# Keys a checkpoint may carry that hold no parameters of ours.
_IGNORED_SUFFIXES = ("position_ids", "generator_lm_head.weight")
_OUR_FIELDS = {f for f in ElectraConfig.__dataclass_fields__}


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


def read_config(model_dir: str | os.PathLike[str]) -> tuple[ElectraConfig, dict[str, Any]]:
    """Our config from ``config.json`` plus the raw dict (for task fields such as labels)."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{path}: missing config.json (is {model_dir} a model directory?)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
    model_type = raw.get("model_type", "electra")
    if model_type not in ("electra", "convbert"):
        raise CheckpointError(f"{path}: model_type {model_type!r} is not 'electra' or 'convbert'")
    if model_type == "convbert":
        raw = _from_convbert(raw, path)
    archs = raw.get("architectures") or []
    unknown = [a for a in archs if a not in KNOWN_ARCHITECTURES]
    if unknown:
        raise CheckpointError(
            f"{path}: unknown architecture {unknown[0]!r}; "
            f"supported: {', '.join(sorted(KNOWN_ARCHITECTURES))}"
        )
    pos = raw.get("position_embedding_type", "absolute")
    if pos != "absolute":
        raise CheckpointError(f"{path}: position_embedding_type {pos!r} is not supported")
    ours = {k: v for k, v in raw.items() if k in _OUR_FIELDS}
    if "embedding_size" not in ours and "hidden_size" in ours:
        ours["embedding_size"] = ours["hidden_size"]
    try:
        return from_dict(ElectraConfig, ours, source=str(path)), raw
    except ConfigError as exc:
        raise CheckpointError(str(exc)) from None


def _from_convbert(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """A ConvBERT ``config.json`` as the toolkit reads it: ELECTRA names, mixed attention on."""
    if raw.get("num_groups", 1) != 1:
        raise CheckpointError(
            f"{path}: num_groups = {raw['num_groups']}: ConvBERT's grouped feed-forward "
            "layers are not supported (only num_groups = 1)"
        )
    archs = raw.get("architectures") or []
    out = {**_CONVBERT_DEFAULTS, **raw}
    out["architectures"] = [_FROM_CONVBERT.get(a, a) for a in archs]
    if not out["conv_kernel_size"]:
        raise CheckpointError(f"{path}: a ConvBERT config needs conv_kernel_size > 0")
    return out


def _load_weight_file(path: Path) -> dict[str, Tensor]:
    try:
        if path.suffix == ".safetensors":
            return load_file(str(path))
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # corrupt, truncated, or a pickle with code in it
        raise CheckpointError(
            f"{path}: cannot read weights ({type(exc).__name__}: {exc})"
        ) from None


def read_state_dict(model_dir: str | os.PathLike[str]) -> dict[str, Tensor]:
    """All tensors of a model directory (single file or sharded index)."""
    d = Path(model_dir)
    for name in WEIGHT_FILES:
        path = d / name
        if not path.is_file():
            continue
        if name.endswith(".index.json"):
            index = json.loads(path.read_text(encoding="utf-8"))
            state: dict[str, Tensor] = {}
            for shard in sorted(set(index.get("weight_map", {}).values())):
                if not (d / shard).is_file():
                    raise CheckpointError(f"{d / shard}: shard listed in {path} is missing")
                state.update(_load_weight_file(d / shard))
            return state
        return _load_weight_file(path)
    raise CheckpointError(f"{d}: no weights file (looked for {', '.join(WEIGHT_FILES)})")


def weights_sha256(model_dir: str | Path) -> tuple[str, str]:
    """(weights file name, SHA-256) of a model directory, as ``sha256sum`` prints it.

    A sharded checkpoint is hashed as the SHA-256 of its shards' hashes in order. What
    says a directory still holds the weights a run started from (continued pre-training,
    a resumed fine-tuning): a model exported again to the same path gets another digest.
    """
    d = Path(model_dir)
    for name in WEIGHT_FILES:
        path = d / name
        if not path.is_file():
            continue
        if not name.endswith(".index.json"):
            return name, sha256_file(path)
        index = json.loads(path.read_text(encoding="utf-8"))
        shards = sorted(set(index.get("weight_map", {}).values()))
        digest = hashlib.sha256("".join(sha256_file(d / s) for s in shards).encode())
        return name, digest.hexdigest()
    raise CheckpointError(f"{d}: no weights file (looked for {', '.join(WEIGHT_FILES)})")


def weight_names(model_dir: str | os.PathLike[str]) -> set[str]:
    """The tensor names of a model directory, without reading the tensors where the
    format allows (safetensors headers, sharded indexes)."""
    d = Path(model_dir)
    for name in WEIGHT_FILES:
        path = d / name
        if name.endswith(".index.json") and path.is_file():
            return set(json.loads(path.read_text(encoding="utf-8")).get("weight_map", {}))
        if name.endswith(".safetensors") and path.is_file():
            try:
                with safe_open(str(path), framework="pt") as f:
                    return set(f.keys())
            except Exception as exc:  # a corrupt or truncated header
                raise CheckpointError(f"{path}: cannot read weights ({exc})") from None
    return set(read_state_dict(d))


def normalise_keys(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Keys under ``electra.``: ConvBERT's ``convbert.`` renamed, bare ``ElectraModel``
    checkpoints prefixed."""
    if any(k.startswith("convbert.") for k in state):
        state = {
            "electra." + k.removeprefix("convbert.") if k.startswith("convbert.") else k: v
            for k, v in state.items()
        }
    if any(k.startswith("electra.") for k in state):
        return state
    return {
        (
            f"electra.{k}"
            if k.split(".")[0] in ("embeddings", "embeddings_project", "encoder")
            else k
        ): v
        for k, v in state.items()
    }


WORD_TABLE = "electra.embeddings.word_embeddings.weight"


def word_table_key(state: dict[str, Tensor], source: str) -> str:
    """The key of the word-embedding table in a directory's raw tensors: under
    ``electra.`` (ELECTRA), ``convbert.`` (ConvBERT) or bare (a base-model checkpoint)."""
    bare = WORD_TABLE.removeprefix("electra.")
    for key in (WORD_TABLE, "convbert." + bare, bare):
        if key in state:
            return key
    raise CheckpointError(f"{source}: missing parameter {WORD_TABLE!r}")


def load_into(
    module: nn.Module,
    state: dict[str, Tensor],
    source: str,
    prefix: str = "",
    allow_missing: Iterable[str] = (),
    skip: Iterable[str] = (),
) -> list[str]:
    """Copy ``state[prefix + name]`` into every parameter/buffer of ``module``.

    Fails naming ``source`` and the parameter on a missing key or a shape
    mismatch. Keys in ``allow_missing`` (prefixes) may be absent (e.g. a new
    task head); names under ``skip`` (prefixes) are not loaded at all (e.g.
    tables shared with another model). Returns the names left at their
    initial values.
    """
    own = module.state_dict()
    skipped = []
    allow = tuple(allow_missing)
    skip = tuple(skip)
    with torch.no_grad():
        for name, target in own.items():
            if skip and name.startswith(skip):
                skipped.append(name)
                continue
            key = prefix + name
            if key not in state:
                if allow and name.startswith(allow):
                    skipped.append(name)
                    continue
                raise CheckpointError(f"{source}: missing parameter {key!r}")
            value = state[key]
            if tuple(value.shape) != tuple(target.shape):
                raise CheckpointError(
                    f"{source}: parameter {key!r} has shape {tuple(value.shape)}, "
                    f"the model expects {tuple(target.shape)}"
                )
            target.copy_(value.to(target.dtype))
    return skipped


def weights_source(model_dir: str | os.PathLike[str]) -> str:
    """The weights file of a model directory, for messages (the directory if none)."""
    model_dir = Path(model_dir)
    for name in WEIGHT_FILES:
        if (model_dir / name).is_file():
            return str(model_dir / name)
    return str(model_dir)


def read_weights(model_dir: str | os.PathLike[str]) -> tuple[dict[str, Tensor], str]:
    """The tensors of a model directory (keys under ``electra.``) and the file they came from."""
    d = Path(model_dir)
    return normalise_keys(read_state_dict(d)), weights_source(d)


# Old private names, kept for callers not yet switched to the public ones.


def _load(cls: Any, model_dir: str | os.PathLike[str], prefix: str = "") -> tuple[Any, ...]:
    """(model of class ``cls`` with the directory's weights, raw config, state, source)."""
    config, raw = read_config(model_dir)
    state, src = read_weights(model_dir)
    model = cls(config)
    load_into(model, state, src, prefix=prefix)
    return model, raw, state, src


def load_discriminator(model_dir: str | os.PathLike[str]) -> ElectraDiscriminator:
    """An ``ElectraForPreTraining`` directory as our discriminator."""
    return _load(ElectraDiscriminator, model_dir)[0]


def load_generator(model_dir: str | os.PathLike[str]) -> ElectraGenerator:
    """An ``ElectraForMaskedLM`` directory as our generator (output tied to embeddings)."""
    model, _, state, src = _load(ElectraGenerator, model_dir)
    tied = state.get("generator_lm_head.weight")
    emb = model.electra.embeddings.word_embeddings.weight
    if tied is not None and (tied.shape != emb.shape or not torch.equal(tied.to(emb.dtype), emb)):
        raise CheckpointError(
            f"{src}: 'generator_lm_head.weight' differs from the word embeddings; "
            "untied generator output layers are not supported"
        )
    return model


def load_encoder(model_dir: str | os.PathLike[str]) -> tuple[ElectraModel, dict[str, Any]]:
    """The encoder body of any ELECTRA directory (any head), plus its raw config.

    This is what fine-tuning starts from: a KoELECTRA discriminator, one of
    our exports, or an already fine-tuned model.
    """
    model, raw, _, _ = _load(ElectraModel, model_dir, prefix="electra.")
    return model, raw


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def hf_config_dict(config: ElectraConfig, architecture: str, **extra: Any) -> dict[str, Any]:
    """A ``config.json`` body ``transformers.ElectraConfig`` reads."""
    out: dict[str, Any] = {"architectures": [architecture], "model_type": "electra"}
    out.update({k: getattr(config, k) for k in ElectraConfig.__dataclass_fields__})
    if not config.local_conv_kernel:
        del out["local_conv_kernel"]  # off: a plain transformers ELECTRA config
    if config.conv_kernel_size:  # transformers' ConvBERT
        out["architectures"] = [config.hf_architecture(architecture)]
        out["model_type"] = "convbert"
        out["num_groups"] = 1
    else:
        del out["conv_kernel_size"], out["head_ratio"]
    out["position_embedding_type"] = "absolute"
    out["summary_type"] = "first"
    out["summary_use_proj"] = True
    out["summary_activation"] = "gelu"
    out["summary_last_dropout"] = 0.1
    out["torch_dtype"] = "float32"
    out.update(extra)
    return out


def unique_state_dict(module: nn.Module, prefix: str = "") -> dict[str, Tensor]:
    """State dict with each storage once, contiguous, on CPU, fp32 kept as is.

    A discriminator trained with gradient-disentangled embedding sharing gives
    its merged tables (shared + delta) under the plain ELECTRA names
    (:func:`~electra.model.encoder.plain_state_dict`), so the export has no extra keys.
    """
    seen: set[int] = set()
    out = {}
    for name, tensor in plain_state_dict(module).items():
        key = id(tensor) if not tensor.numel() else tensor.data_ptr()
        if key in seen:
            continue
        seen.add(key)
        out[prefix + name] = tensor.detach().cpu().contiguous()
    return out


def atomic_save_safetensors(
    tensors: dict[str, Tensor], path: Path, metadata: dict[str, str] | None = None
) -> None:
    """``safetensors`` file written atomically (temporary name, fsync, rename)."""
    with atomic_path(path) as tmp:
        save_file(tensors, tmp, metadata=metadata)


def copy_tokenizer_files(src_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> None:
    """Copy the tokenizer files present in ``src_dir`` (``vocab.txt`` required)."""
    src, out = Path(src_dir), Path(out_dir)
    if not (src / "vocab.txt").is_file():
        raise CheckpointError(f"{src / 'vocab.txt'}: missing vocabulary file")
    out.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (src / name).is_file() and (src / name).resolve() != (out / name).resolve():
            shutil.copyfile(src / name, out / name)


def save_hf_directory(
    state: dict[str, Tensor],
    config: ElectraConfig,
    architecture: str,
    out_dir: str | os.PathLike[str],
    tokenizer_dir: str | os.PathLike[str] | None = None,
    **config_extra: Any,
) -> Path:
    """Write a directory ``transformers`` loads offline: weights, config, tokenizer."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if config.conv_kernel_size:  # transformers' ConvBERT keeps the body under convbert.
        state = {
            "convbert." + k[8:] if k.startswith("electra.") else k: v for k, v in state.items()
        }
    atomic_save_safetensors(state, out / "model.safetensors", metadata={"format": "pt"})
    atomic_write_json(out / "config.json", hf_config_dict(config, architecture, **config_extra))
    if tokenizer_dir is not None:
        copy_tokenizer_files(tokenizer_dir, out)
    return out


def export_discriminator(
    model: ElectraDiscriminator,
    out_dir: str | os.PathLike[str],
    tokenizer_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Our discriminator as an ``ElectraForPreTraining`` directory."""
    return save_hf_directory(
        unique_state_dict(model), model.config, "ElectraForPreTraining", out_dir, tokenizer_dir
    )


def export_random_discriminator(
    config: ElectraConfig,
    out_dir: str | os.PathLike[str],
    tokenizer_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
) -> Path:
    """A randomly initialised discriminator of ``config`` (seeded), exported once.

    The no-pre-training baseline of ``compare`` and the demo's random start:
    fine-tuned with the same recipe, it shows what pre-training added. An
    existing export in ``out_dir`` is kept.
    """
    out = Path(out_dir)
    if not (out / "config.json").is_file():
        torch.manual_seed(seed)
        export_discriminator(ElectraDiscriminator(config), out, tokenizer_dir)
    return out


def export_generator(
    model: ElectraGenerator,
    out_dir: str | os.PathLike[str],
    tokenizer_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Our generator as an ``ElectraForMaskedLM`` directory (output tied, so not stored)."""
    return save_hf_directory(
        unique_state_dict(model),
        model.config,
        "ElectraForMaskedLM",
        out_dir,
        tokenizer_dir,
        tie_word_embeddings=True,
    )
