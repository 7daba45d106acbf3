"""Saving and loading fine-tuned models: one Hugging Face directory plus ``electra_task.json``.

A fine-tuned model directory is what ``transformers`` expects
(``config.json`` with ``architectures``, ``id2label``/``label2id``,
``num_labels``, ``problem_type``; ``model.safetensors``; the tokenizer files)
plus ``electra_task.json``, which records what our commands need to use it
without further flags: the task, family, labels, feature settings (max length,
doc stride), how the data was split, the recipe, the source model and seed.

:func:`load_finetuned` also reads Hugging Face fine-tuned directories that
have no ``electra_task.json`` (the family comes from ``architectures``, the
labels from ``id2label``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import nn

from electra.config import ConfigError, from_dict
from electra.finetune.families import Family, family_of_hf_config, get_family
from electra.finetune.features import TaskInfo
from electra.model.checkpoint import CheckpointError
from electra.model.encoder import ElectraModel
from electra.model.hf import (
    TOKENIZER_FILES,
    load_into,
    normalise_keys,
    read_config,
    read_state_dict,
    save_hf_directory,
    unique_state_dict,
    weights_source,
)
from electra.pretrain.modelcard import finetuned_card, write_card_text
from electra.system.files import atomic_write_bytes
from electra.text.tokenizer import TokenizerError, load_tokenizer, tokenizer_settings

TASK_FILE = "electra_task.json"


@dataclass
class Finetuned:
    """A loaded fine-tuned model, its tokenizer and task description."""

    model: nn.Module
    tokenizer: Tokenizer
    info: TaskInfo
    path: Path

    @property
    def family(self) -> Family:
        return get_family(self.info.family)


def hf_task_config(family: Family, labels: list[str]) -> dict[str, Any]:
    """``config.json`` fields that make ``transformers`` build the right head."""
    return family.hf_config(labels)


def copy_tokenizer(source: str | os.PathLike[str], out_dir: Path) -> None:
    """Copy the tokenizer files of a model directory (or one tokenizer file) into ``out_dir``."""
    src = Path(source)
    out_dir.mkdir(parents=True, exist_ok=True)
    if src.is_file():
        name = "tokenizer.json" if src.suffix == ".json" else "vocab.txt"
        shutil.copyfile(src, out_dir / name)
        _ensure_tokenizer_config(out_dir)
        return
    copied = False
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            if (src / name).resolve() != (out_dir / name).resolve():
                shutil.copyfile(src / name, out_dir / name)
            copied = copied or name in ("vocab.txt", "tokenizer.json")
    if not copied:
        raise CheckpointError(f"{src}: no tokenizer files (vocab.txt or tokenizer.json) to copy")
    _ensure_tokenizer_config(out_dir)


def _ensure_tokenizer_config(out_dir: Path) -> None:
    """A vocab.txt alone would make ``transformers`` lower-case (its default); say what we did."""
    cfg = out_dir / "tokenizer_config.json"
    if cfg.is_file() or (out_dir / "tokenizer.json").is_file():
        return
    body = {"do_lower_case": False, "tokenizer_class": "ElectraTokenizer"}
    atomic_write_bytes(cfg, (json.dumps(body, indent=2) + "\n").encode("utf-8"))


def record_max_length(out_dir: Path, max_length: int) -> None:
    """Set ``model_max_length`` in ``tokenizer_config.json`` to the length the model was tuned at.

    ``transformers`` truncates to this value (``truncation=True``); left at the
    tokenizer's 512, a pipeline would see more of a long text than the model
    was fine-tuned on and than ``electra predict`` gives it.
    """
    path = out_dir / "tokenizer_config.json"
    body = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else _casing(out_dir)
    body["model_max_length"] = int(max_length)
    atomic_write_bytes(path, (json.dumps(body, indent=2, ensure_ascii=False) + "\n").encode())


def _casing(tokenizer_dir: Path) -> dict[str, Any]:
    """A new tokenizer_config.json must state the casing (``transformers`` would lower-case)."""
    try:
        settings = tokenizer_settings(load_tokenizer(tokenizer_dir))
    except TokenizerError:
        settings = {}
    return {"tokenizer_class": "ElectraTokenizer", **settings}


def save_finetuned(
    model: nn.Module,
    out_dir: str | os.PathLike[str],
    info: TaskInfo,
    tokenizer_source: str | os.PathLike[str],
) -> Path:
    """Write ``model`` as a Hugging Face directory plus ``electra_task.json``."""
    out = Path(out_dir)
    family = get_family(info.family)
    save_hf_directory(
        unique_state_dict(model),
        model.config,
        family.architecture,
        out,
        **hf_task_config(family, info.labels),
    )
    copy_tokenizer(tokenizer_source, out)
    record_max_length(out, info.settings.max_length)
    body = json.dumps(dataclasses.asdict(info), indent=2, ensure_ascii=False) + "\n"
    atomic_write_bytes(out / TASK_FILE, body.encode("utf-8"))
    arch = model.config.hf_architecture(family.architecture)  # ConvBERT's for mixed attention
    card = finetuned_card(arch, dataclasses.asdict(info), model.config.conv_kernel_size)
    write_card_text(out, card)
    return out


def read_task_info(model_dir: str | os.PathLike[str]) -> TaskInfo:
    """``electra_task.json``, or a description inferred from a Hugging Face ``config.json``."""
    d = Path(model_dir)
    path = d / TASK_FILE
    if path.is_file():
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
        try:
            return from_dict(TaskInfo, raw, source=str(path))
        except ConfigError as exc:
            raise CheckpointError(str(exc)) from None
    _, cfg = read_config(d)
    family = family_of_hf_config(cfg)
    if family is None:
        raise CheckpointError(
            f"{d}: not a fine-tuned model (no {TASK_FILE}, and architectures "
            f"{cfg.get('architectures') or []} has no task head); fine-tune it first with "
            "`electra finetune`"
        )
    labels: list[str] = []
    if family.has_labels:
        id2label = cfg.get("id2label") or {}
        labels = [id2label[k] for k in sorted(id2label, key=int)]
        if not labels:
            raise CheckpointError(f"{d / 'config.json'}: no id2label for a {family.name} model")
    features = {"max_length": family.default_max_length}
    return TaskInfo(task="custom", family=family.name, labels=labels, features=features)


def build_task_model(encoder: ElectraModel, info: TaskInfo) -> nn.Module:
    family = get_family(info.family)
    return family.build_model(encoder, max(1, len(info.labels)))


def load_finetuned(
    model_dir: str | os.PathLike[str], device: str | torch.device = "cpu"
) -> Finetuned:
    """The one loader of fine-tuned models (ours, or Hugging Face task directories)."""
    d = Path(model_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such model directory")
    info = read_task_info(d)
    config, _ = read_config(d)
    state = normalise_keys(read_state_dict(d))
    model = build_task_model(ElectraModel(config), info)
    load_into(model, state, weights_source(d))
    model.to(device).eval()
    return Finetuned(model=model, tokenizer=load_tokenizer(d), info=info, path=d)
