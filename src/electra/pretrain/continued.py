"""Continued pre-training: a run that starts from Hugging Face ELECTRA directories.

``electra pretrain --config continue --init-from DISC [--init-generator GEN]``
takes a released ELECTRA (KoELECTRA, google/electra-*) or one of our exports
and keeps pre-training it on a domain corpus. What the official code needs
hand edits for is done here:

* the shape comes from the directories' ``config.json``, not from a preset;
  only dropout may be overridden (``model.hidden_dropout_prob`` ...), any
  other ``model.*`` key that disagrees with the checkpoint is an error;
* generator and discriminator share one embedding module, the
  discriminator's, as in the official code (whose checkpoints hold a single
  table); a generator directory whose own copy differs is used with the
  discriminator's tables, and the log says so;
* with ``objective.embedding_sharing = "gdes"`` the discriminator directory's
  tables become the generator-owned shared ones, its embedding LayerNorm the
  discriminator's own, and the discriminator's deltas start at zero: the
  model starts from exactly the directory's discriminator;
* many releases ship only the discriminator: a fresh generator of
  ``objective.generator_size`` is then built over its embeddings; some ship
  only its encoder (``ElectraModel``, ``ConvBertModel``, or a fine-tuned
  model's): a fresh replaced-token head is then trained on top of it;
* the blocks must have been prepared with the checkpoint's tokenizer: the
  manifest's tokenizer hash is compared with the hash of the directory's
  vocabulary, and a mismatch names both;
* releases carry no optimizer state, so AdamW starts fresh, and the run counts
  its own steps, tokens and FLOPs from zero while recording where it started
  (directories and SHA-256 of their weight files) in ``config.json``,
  ``summary.json`` and the exported model cards.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from electra.config import ConfigError
from electra.model.checkpoint import CheckpointError
from electra.model.config import ElectraConfig
from electra.model.encoder import EMBEDDING_TABLES, DisentangledEmbeddings
from electra.model.hf import (
    load_into,
    read_config,
    read_weights,
    weight_names,
    weights_sha256,
)
from electra.model.hub import resolve_model_path
from electra.pretrain.config import InitConfig, ObjectiveConfig
from electra.pretrain.objective import ElectraForPretraining
from electra.text.special import SpecialIds
from electra.text.tokenizer import TokenizerError, load_tokenizer, tokenizer_sha256

# Model fields a continued run may change: everything else is the checkpoint's shape.
OVERRIDABLE = ("hidden_dropout_prob", "attention_probs_dropout_prob")


# Fields generator and discriminator must agree on: they share these embedding tables.
SHARED_FIELDS = ("vocab_size", "embedding_size", "max_position_embeddings", "type_vocab_size")


_EMBEDDINGS = "electra.embeddings."


_HEAD = "discriminator_predictions."


@dataclass(frozen=True)
class Start:
    """Shapes, special ids and provenance of a continued run, before any weight is read."""

    discriminator: ElectraConfig
    generator: ElectraConfig
    special: SpecialIds
    origin: dict[str, Any]
    # ``init`` with Hub ids replaced by their snapshot directories (what is read)
    init: InitConfig | None = None


def resolve_init(init: InitConfig) -> tuple[InitConfig, dict[str, dict[str, Any]]]:
    """``init`` with each Hub id (``org/name[@rev]``) replaced by its snapshot directory.

    Also returns each model's source record (``{"discriminator": ..., "generator": ...}``),
    so the run says which repo and commit it started from, not only a cache path.
    A local directory that exists wins over a Hub id of the same spelling.
    """
    sources: dict[str, dict[str, Any]] = {}
    changes: dict[str, str] = {}
    for role in ("discriminator", "generator"):
        spec = getattr(init, role)
        if not spec:
            continue
        resolved = resolve_model_path(spec)
        changes[role] = str(resolved.path)
        sources[role] = resolved.source()
    return dataclasses.replace(init, **changes), sources


def _architectures(raw: dict[str, Any]) -> list[str]:
    return list(raw.get("architectures") or [])


def read_discriminator_shape(model_dir: str, overrides: dict[str, Any]) -> ElectraConfig:
    """The discriminator's config from ``config.json``, with the allowed ``model.*`` overrides."""
    config, raw = read_config(model_dir)
    path = Path(model_dir) / "config.json"
    archs = _architectures(raw)
    if any(a.endswith("ForMaskedLM") for a in archs) and "ElectraForPreTraining" not in archs:
        raise CheckpointError(
            f"{path}: architectures is {', '.join(archs)}, a generator; pass it with "
            "--init-generator and the discriminator (ElectraForPreTraining) with --init-from"
        )
    fields = {f.name for f in dataclasses.fields(ElectraConfig)}
    changes = {}
    for key, value in overrides.items():
        if key == "preset":
            continue
        if key not in fields:
            raise ConfigError(
                f"model.{key}: unknown field; valid fields: {', '.join(sorted(fields))}"
            )
        if key in OVERRIDABLE:
            changes[key] = value
        elif value != getattr(config, key):
            raise ConfigError(
                f"model.{key} = {value!r}, but {path} has {key} = {getattr(config, key)!r}: "
                "a continued run takes its shape from the checkpoint (only "
                f"{', '.join(OVERRIDABLE)} may change)"
            )
    return dataclasses.replace(config, **changes)


def read_generator_shape(
    model_dir: str, discriminator: ElectraConfig, disc_dir: str, overrides: dict[str, Any]
) -> ElectraConfig:
    """The generator's config from ``config.json``, checked against the discriminator's."""
    config, raw = read_config(model_dir)
    path = Path(model_dir) / "config.json"
    if "ElectraForPreTraining" in _architectures(raw):
        raise CheckpointError(
            f"{path}: architectures is ElectraForPreTraining, a discriminator; --init-generator "
            "takes an ElectraForMaskedLM directory"
        )
    for key in SHARED_FIELDS:
        ours, theirs = getattr(config, key), getattr(discriminator, key)
        if ours != theirs:
            raise CheckpointError(
                f"{path}: {key} = {ours}, but the discriminator's "
                f"({Path(disc_dir) / 'config.json'}) is {theirs}; generator and discriminator "
                "share one embedding table, so they must agree"
            )
    changes = {k: v for k, v in overrides.items() if k in OVERRIDABLE}
    return dataclasses.replace(config, **changes)


def check_tokenizer(model_dir: str, blocks: Any, vocab_size: int) -> str:
    """The checkpoint tokenizer's hash, after checking it is the one the blocks were made with.

    ``blocks`` is an open :class:`electra.blocks.read.Blocks`. Returns the hash.
    """
    try:
        tok = load_tokenizer(model_dir)
        ours = tokenizer_sha256(tok)
    except (TokenizerError, FileNotFoundError) as exc:
        raise CheckpointError(
            f"{model_dir}: no usable tokenizer files ({exc}); without the checkpoint's "
            "vocabulary the blocks cannot be checked against it"
        ) from None
    manifest = blocks.directory / "manifest.json"
    info = blocks.manifest.get("tokenizer", {})
    theirs = info.get("sha256", "")
    if ours != theirs:
        raise ConfigError(
            f"{manifest}: the blocks were prepared with tokenizer {info.get('source', '?')} "
            f"(sha256 {theirs[:12]}), but {model_dir} has another vocabulary "
            f"(sha256 {ours[:12]}); prepare them again with "
            f"`electra prepare ... --tokenizer {model_dir}`"
        )
    size = tok.get_vocab_size(with_added_tokens=True)
    if size > vocab_size:
        raise CheckpointError(
            f"{Path(model_dir) / 'config.json'}: vocab_size = {vocab_size} is smaller than the "
            f"{size} tokens of its tokenizer"
        )
    if size < vocab_size // 2:  # a padded table is a few rows larger, never twice the size
        raise ConfigError(
            f"{manifest}: the blocks' vocabulary has {size:,} tokens but "
            f"{Path(model_dir) / 'config.json'} has vocab_size = {vocab_size:,}: its tokenizer "
            "files do not hold the model's vocabulary (see the blocks' unk_rate); prepare the "
            "blocks with a tokenizer that does"
        )
    return ours


def plan_start(
    init: InitConfig, model_fields: dict[str, Any], objective: ObjectiveConfig, blocks: Any
) -> Start | None:
    """Check the directories against each other and the blocks; read no weights yet.

    None when the run starts from random weights (no ``init.discriminator``).
    """
    if not init.discriminator:
        if init.generator:
            raise ConfigError("init.generator needs init.discriminator (the discriminator)")
        return None
    if init.token_embeddings != "random":
        raise ConfigError(
            f"init.token_embeddings = {init.token_embeddings!r} is for a run from random "
            f"weights; init.discriminator ({init.discriminator}) brings its own token table "
            "(use --config continue, or --init.token_embeddings random)"
        )
    if not objective.kind.has_discriminator:
        raise ConfigError(
            f"objective.objective = {objective.objective!r}: init.discriminator continues "
            "ELECTRA (rtd) pre-training"
        )
    if not objective.kind.trains_generator:
        raise ConfigError(
            f"objective.objective = {objective.objective!r}: init.discriminator continues "
            "rtd pre-training with its generator; continuing with counted replacements is "
            "not supported yet"
        )
    init, sources = resolve_init(init)
    disc = read_discriminator_shape(init.discriminator, model_fields)
    if init.generator and objective.generator_shared_layers:
        raise ConfigError(
            f"init.generator ({init.generator}) brings layers of its own; "
            "objective.generator_shared_layers builds the generator from the discriminator's"
        )
    if init.generator:
        gen = read_generator_shape(init.generator, disc, init.discriminator, model_fields)
    else:
        gen = objective.generator_shape(disc)
    if blocks.block_length > disc.max_position_embeddings:
        raise ConfigError(
            f"{blocks.directory}: blocks of {blocks.block_length} tokens, but "
            f"{Path(init.discriminator) / 'config.json'} has max_position_embeddings = "
            f"{disc.max_position_embeddings}"
        )
    tokenizer_hash = check_tokenizer(init.discriminator, blocks, disc.vocab_size)
    # A table padded beyond the vocabulary (some releases) keeps its size.
    special = dataclasses.replace(blocks.special, vocab_size=disc.vocab_size)
    return Start(disc, gen, special, origin(init, tokenizer_hash, sources), init)


def origin(
    init: InitConfig, tokenizer_hash: str, sources: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Where the run started: directories and weight checksums (recorded in the run).

    ``sources`` (from :func:`resolve_init`) adds ``discriminator_source`` and
    ``generator_source``: the Hub repo id, commit sha and per-file SHA-256 of a
    model given by its Hub id, or the local path.
    """
    sources = sources or {}
    d_file, d_sha = weights_sha256(init.discriminator)
    out: dict[str, Any] = {
        "discriminator": str(Path(init.discriminator).resolve()),
        "discriminator_weights": d_file,
        "discriminator_sha256": d_sha,
        "fresh_head": is_headless(weight_names(init.discriminator)),
        "generator": None,
        "generator_weights": None,
        "generator_sha256": None,
        "tokenizer_sha256": tokenizer_hash,
        "discriminator_source": sources.get("discriminator"),
        "generator_source": sources.get("generator"),
    }
    if init.generator:
        g_file, g_sha = weights_sha256(init.generator)
        out.update(
            generator=str(Path(init.generator).resolve()),
            generator_weights=g_file,
            generator_sha256=g_sha,
        )
    return out


def load_start_weights(model: ElectraForPretraining, init: InitConfig) -> list[str]:
    """Copy the directories' weights into ``model``; returns lines for the log.

    The discriminator's embedding tables are the shared ones. The generator
    directory's own tables are not loaded: when they differ from the
    discriminator's (two separately trained models), that is said.
    """
    state, source = read_weights(init.discriminator)
    fresh_head = load_discriminator_weights(model, state, source)
    notes = [f"continuing from {init.discriminator} ({source})"]
    if fresh_head:
        notes.append(
            f"{source} holds an encoder without the replaced-token head "
            f"({_HEAD}*: e.g. an ElectraModel, ConvBertModel or fine-tuned release): "
            "a fresh head starts on top of it"
        )
    gen_cfg = model.generator.config
    if not init.generator:
        notes.append(
            f"no generator given: a fresh generator (hidden {gen_cfg.hidden_size}, "
            f"{gen_cfg.num_attention_heads} heads, FFN {gen_cfg.intermediate_size}, "
            f"{gen_cfg.num_hidden_layers} layers; objective.generator_size = "
            f"{model.objective.generator_size:g}) is built over the discriminator's embeddings"
        )
        return notes
    gen_state, gen_source = read_weights(init.generator)
    load_into(model.generator, gen_state, gen_source, skip=(_EMBEDDINGS,))
    shared = model.shared_embeddings.state_dict()
    differ = [
        _EMBEDDINGS + k
        for k, v in shared.items()
        if _EMBEDDINGS + k in gen_state
        and not torch.equal(gen_state[_EMBEDDINGS + k].to(v.dtype), v.cpu())
    ]
    notes.append(f"generator from {init.generator} ({gen_source})")
    if differ:
        notes.append(
            f"{gen_source}: the generator's own {', '.join(differ)} differ from the "
            "discriminator's; both now use the discriminator's (the official code shares one "
            "embedding table)"
        )
    return notes


def is_headless(names: Any) -> bool:
    """Whether tensor ``names`` (keys of a directory's weights) lack the replaced-token
    head entirely: an encoder-only release, to which a fresh head is added."""
    return not any(k.startswith(_HEAD) for k in names)


def load_discriminator_weights(model: ElectraForPretraining, state: dict, source: str) -> bool:
    """A plain ELECTRA discriminator's tensors (HF names) into ``model.discriminator``.

    Tied, that is a key-for-key copy. Under gdes the directory's tables go to the
    shared (generator-owned) embedding module, its LayerNorm to the discriminator's
    own, and the deltas are zeroed, so the merged tables are the directory's.

    A directory with no replaced-token head at all (an encoder-only release) keeps
    the model's freshly initialised head; returns True then. A head with only some
    of its tensors is an error, like any other missing tensor.
    """
    headless = is_headless(state)
    allow = (_HEAD,) if headless else ()
    embeddings = model.discriminator.electra.embeddings
    if not isinstance(embeddings, DisentangledEmbeddings):
        load_into(model.discriminator, state, source, allow_missing=allow)
        return headless
    load_into(model.discriminator, state, source, skip=(_EMBEDDINGS,), allow_missing=allow)
    load_into(model.shared_embeddings, state, source, prefix=_EMBEDDINGS)
    load_into(embeddings.LayerNorm, state, source, prefix=_EMBEDDINGS + "LayerNorm.")
    with torch.no_grad():
        for name in EMBEDDING_TABLES:
            getattr(embeddings, f"{name}_delta").zero_()
    return headless
