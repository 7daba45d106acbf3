"""Old import paths, for one release: ``electra.train`` and friends before 0.2's layout.

Version 0.2 gave each stage its package (``text``, ``blocks``, ``pretrain``,
``finetune``, ``inference``, ``export``, ``experiments``; see docs/layout.md). Code
that imports an old path keeps working until 0.3 with a ``DeprecationWarning``
naming the new one: ``import electra.train`` gives a stand-in module whose names
are looked up in their new homes on first use. A name that has no new home is an
``ImportError`` that names the modules to look in.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any


def _names(*groups: tuple[str, str]) -> dict[str, str]:
    return {name: module for module, names in groups for name in names.split()}


MOVED: dict[str, str] = {
    "electra.allocator": "electra.system.allocator",
    "electra.checkpoint": "electra.model.checkpoint",
    "electra.compare": "electra.experiments.compare",
    "electra.cooccurrence": "electra.pretrain.cooccurrence",
    "electra.corpus": "electra.text.corpus",
    "electra.export": "electra.export.command",
    "electra.extend": "electra.pretrain.extend",
    "electra.files": "electra.system.files",
    "electra.flops": "electra.pretrain.flops",
    "electra.formats": "electra.text.formats",
    "electra.health": "electra.pretrain.health",
    "electra.hf": "electra.model.hf",
    "electra.log": "electra.system.log",
    "electra.model": "electra.model.encoder",
    "electra.modelcard": "electra.pretrain.modelcard",
    "electra.objectives": "electra.pretrain.objectives",
    "electra.onnx_export": "electra.export.onnx",
    "electra.optim": "electra.model.optim",
    "electra.paths": "electra.system.paths",
    "electra.precision": "electra.system.precision",
    "electra.predict": "electra.inference.predict",
    "electra.provenance": "electra.system.provenance",
    "electra.report": "electra.experiments.report",
    "electra.runtime": "electra.inference.runtime",
    "electra.special": "electra.text.special",
    "electra.workers": "electra.system.workers",
}
"""Modules that moved whole: old path -> new path."""

SPLIT: dict[str, dict[str, str]] = {
    "electra.config": _names(
        (
            "electra.model.config",
            "CONVBERT_ARCHITECTURES ElectraConfig MODELS SEQ_LENGTHS generator_config preset",
        ),
        ("electra.pretrain.config", "PRESETS PaperRecipe builtin_config_path builtin_configs"),
    ),
    "electra.continued": _names(
        ("electra.pretrain.config", "InitConfig"),
        (
            "electra.pretrain.continued",
            "OVERRIDABLE SHARED_FIELDS Start check_tokenizer is_headless load_discriminator_weights load_start_weights origin plan_start read_discriminator_shape read_generator_shape weights_sha256",
        ),
    ),
    "electra.data": _names(
        (
            "electra.blocks.build",
            "BlockPlan BuildParams SENTENCE_MARK build_document_blocks split_sentences",
        ),
        ("electra.blocks.format", "FORMAT_NAME FORMAT_VERSION MANIFEST SPLITS"),
        ("electra.blocks.prepare", "CHUNK_CHARS PrepareCommand prepare prepare_cli"),
        (
            "electra.blocks.read",
            "BlockLoader Blocks batch_indices epoch_permutation open_blocks stream_slice token_types",
        ),
        ("electra.blocks.shards", "NPY_HEADER_BYTES"),
    ),
    "electra.demo": _names(
        (
            "electra.experiments.demo",
            "CORPORA Corpus DemoCommand ROWS SMOKE_FINETUNING STAGES check_stage_options demo demo_cli few_label_count finetune_nsmc finetune_pairs gains korean_corpus plan_finetuning print_results random_start results_complete side_by_side",
        ),
        ("electra.experiments.options", "CORPORA Corpus"),
        ("electra.experiments.heldout", "TEXTS_PER_DOCUMENT unscored_reviews unscored_task_text"),
        ("electra.experiments.timing", "estimate_finetune_seconds estimate_step_seconds"),
    ),
    "electra.finetune.commands": _names(
        ("electra.finetune.options", "EvaluateArgs FinetuneArgs FinetuneTarget"),
        ("electra.inference.torch_predictor", "TorchPredictor"),
    ),
    "electra.finetune.recipe": _names(
        ("electra.finetune.options", "RecipeFlags"),
    ),
    "electra.finetune.run": _names(
        ("electra.inference.options", "PredictArgs"),
        ("electra.inference.predict", "predict predict_cli"),
        ("electra.inference.torch_predictor", "TorchPredictor"),
    ),
    "electra.pretraining": _names(
        ("electra.pretrain.config", "ObjectiveConfig"),
        (
            "electra.pretrain.objective",
            "ElectraForPretraining METRIC_NAMES Masked PretrainOutput Randomness SampleRNG choose_positions mask_batch max_predictions_per_seq mlm_loss_and_sample picks_per_row sample_from_weights sample_softmax saved_grad_dtype",
        ),
    ),
    "electra.tokenizer": _names(
        (
            "electra.text.tokenizer",
            "CLS MASK MAX_INPUT_CHARS_PER_WORD MODEL_MAX_LENGTH MORPHEME_MARK PAD SEP SPECIAL_TOKENS TOKENIZER_FILES TokenizerError UNK build_tokenizer encoding_tokenizer load_tokenizer save_tokenizer_files special_id_map special_ids tokenizer_settings tokenizer_sha256 vocab_list",
        ),
        (
            "electra.text.vocabulary",
            "ALPHABET_SHARE CHARACTER_COVERAGE TokenizerCommand TrainReport train_tokenizer train_tokenizer_cli",
        ),
    ),
    "electra.train": _names(
        ("electra.pretrain.command", "PretrainCommand pretrain_cli"),
        (
            "electra.pretrain.config",
            "DataConfig ModelKeys OptimConfig PretrainConfig RunConfig load_config resolve_model",
        ),
        ("electra.pretrain.distributed", "Dist set_deterministic setup_distributed"),
        ("electra.pretrain.export", "export_run load_run_model"),
        ("electra.pretrain.metrics", "MetricsLog one_line_summary"),
        ("electra.pretrain.trainer", "Trainer grad_scaler"),
    ),
}
"""Modules split in several (or that lost names): old path -> {name: new module}."""


def _warn(old: str, new: str, name: str | None = None) -> None:
    what = f"{old}.{name}" if name else old
    warnings.warn(
        f"{what} moved to {new}{'.' + name if name else ''}; the old path goes in 0.3",
        DeprecationWarning,
        stacklevel=3,
    )


def moved_attribute(old: str, name: str) -> Any:
    """Attribute ``name`` of old module ``old``, from its new home (with a warning)."""
    if name.startswith("__"):  # probes such as __all__ or __path__ are no moved names
        raise AttributeError(f"module {old!r} has no attribute {name!r}")
    if old in MOVED:
        new = MOVED[old]
    elif name in SPLIT.get(old, {}):
        new = SPLIT[old][name]
    else:
        homes = sorted(set(SPLIT.get(old, {}).values()))
        # ImportError, not AttributeError: ``from OLD import name`` would replace an
        # AttributeError with a bare "cannot import name" and lose where to look.
        raise ImportError(
            f"cannot import name {name!r} from {old!r}"
            + (f": its names moved to {', '.join(homes)}" if homes else "")
        )
    _warn(old, new, name)
    return getattr(importlib.import_module(new), name)


class _OldModule(types.ModuleType):
    """The stand-in for a module that moved: every name is fetched from its new home."""

    def __getattr__(self, name: str) -> Any:
        return moved_attribute(self.__name__, name)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old module paths (only those: every other import is untouched)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        moved = fullname in MOVED or fullname in SPLIT
        if moved and importlib.machinery.PathFinder.find_spec(fullname, path) is None:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _OldModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        new = MOVED.get(module.__name__)
        if new is not None:
            _warn(module.__name__, new)


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once; ``electra/__init__.py`` calls it)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
