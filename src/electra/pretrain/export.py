"""A pre-training run as Hugging Face directories, and its model back from disk.

:func:`export_run` writes ``discriminator/`` and ``generator/`` (with the
tokenizer of the blocks and a model card); :func:`load_run_model` rebuilds
the pre-training model from any checkpoint of a run (``electra report`` and
the experiments use it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from electra.config import from_dict
from electra.model import checkpoint as ckpt
from electra.model.config import ElectraConfig
from electra.model.hf import export_discriminator, export_generator
from electra.pretrain.config import (
    ObjectiveConfig,
)
from electra.pretrain.modelcard import card_facts, write_model_card
from electra.pretrain.objective import ElectraForPretraining, match_frozen_state
from electra.system.diskspace import reporting_full_disk
from electra.text.special import SpecialIds


def load_run_model(
    checkpoint_dir: str | os.PathLike[str],
) -> tuple[ElectraForPretraining, dict[str, Any], Path]:
    """(model, resolved config, checkpoint path) from a run or checkpoint directory."""
    path = ckpt.resolve(checkpoint_dir)
    model_state, _, config = ckpt.load(path)
    source = str(path / "config.json")
    model_cfg = from_dict(
        ElectraConfig, {k: v for k, v in config["model"].items() if k != "preset"}, source
    )
    objective = from_dict(ObjectiveConfig, config["objective"], source)
    special = SpecialIds(**config["data"]["special_ids"])
    gen_cfg = None
    if config.get("generator"):  # its own shape when continued from a released generator
        gen_cfg = from_dict(ElectraConfig, config["generator"], source)
    model = ElectraForPretraining(model_cfg, objective, special, gen_cfg)
    match_frozen_state(model, model_state)  # saved after its generator froze
    ckpt.load_model_state(model, model_state, str(path / "model.safetensors"))
    return model, config, path


def export_run(
    checkpoint_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    summary: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """HF directories ``OUT/discriminator`` (RTD) and ``OUT/generator`` from a checkpoint
    (rtd-ngram: the discriminator alone, it has no generator).

    ``checkpoint_dir`` may be a run directory, its ``checkpoints/`` or one
    ``step-N`` directory; the tokenizer files come from the blocks directory
    the run was trained on. Each directory gets a model card (``README.md``);
    ``summary`` (the run's, default ``RUN/summary.json`` when it describes
    this checkpoint) adds time and validation scores to it.
    """
    model, config, path = load_run_model(checkpoint_dir)
    blocks = Path(config["data"]["blocks"])
    tok_dir = blocks if (blocks / "vocab.txt").is_file() else None
    out = Path(out_dir)
    step = int(ckpt.verify(path)["step"])
    if summary is None:
        summary = _run_summary(path.parent.parent, step)
    facts = card_facts(config, step, summary)
    done = {}
    then = (
        f"The checkpoint {path} is kept; once space is free, `electra export {path} -o {out}` "
        "writes the export again"
    )
    needed = sum(p.numel() * p.element_size() for p in model.parameters())
    with reporting_full_disk(f"the Hugging Face export of {path.name}", out, needed, then):
        if model.discriminator is not None:
            done["discriminator"] = export_discriminator(
                model.discriminator, out / "discriminator", tok_dir
            )
        if model.generator is not None:  # rtd-ngram trains none
            done["generator"] = export_generator(model.generator, out / "generator", tok_dir)
        for kind, directory in done.items():
            write_model_card(directory, kind, facts)
    return done


def _run_summary(run_dir: Path, step: int) -> dict[str, Any] | None:
    """``RUN/summary.json`` if it is about the checkpoint of ``step``."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return summary if summary.get("step") == step else None
