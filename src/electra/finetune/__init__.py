"""Fine-tuning and evaluation: task families, datasets, the paper's recipe, the CLIs.

Modules: :mod:`~electra.finetune.families` (the family registry: what differs
between classification, regression, tagging and QA; torch-free),
:mod:`~electra.finetune.features` (featurising and decoding, torch-free),
:mod:`~electra.finetune.heads` (batching and the encoder-plus-head model),
:mod:`~electra.finetune.classification` (single/pair classification and
regression heads and metrics), :mod:`~electra.finetune.tagging` (token
classification), :mod:`~electra.finetune.qa` (SQuAD-style extractive QA),
:mod:`~electra.finetune.recipe` (Table 7, layer-wise decay, schedule),
:mod:`~electra.finetune.tasks` (task registry, built-in datasets and their
paths, splits, GLUE score), :mod:`~electra.finetune.readers` (file formats),
:mod:`~electra.finetune.modeling` (save/load fine-tuned models),
:mod:`~electra.finetune.download` (public URLs), :mod:`~electra.finetune.training`
(the loop), :mod:`~electra.finetune.results` (results files and tables),
:mod:`~electra.finetune.commands` (``finetune`` and ``evaluate``) and
:mod:`~electra.finetune.run` (their public names in one place).

A new family is one :class:`~electra.finetune.families.Family` subclass and
``register_family(MyFamily())``; a new task is one
``register(TaskSpec(...))`` (:mod:`~electra.finetune.tasks`).

Names are loaded on first use (PEP 562), so importing a torch-free submodule
such as :mod:`~electra.finetune.features` does not import PyTorch.
"""

import importlib
from typing import Any

_EXPORTS = {
    "DatasetError": "electra.finetune.common",
    "Family": "electra.finetune.families",
    "get_family": "electra.finetune.families",
    "register_family": "electra.finetune.families",
    "register": "electra.finetune.tasks",
    "TaskSpec": "electra.finetune.tasks",
    "load_finetuned": "electra.finetune.modeling",
    "save_finetuned": "electra.finetune.modeling",
    "Recipe": "electra.finetune.recipe",
    "make_recipe": "electra.finetune.recipe",
    "layerwise_groups": "electra.finetune.recipe",
    "parameter_groups": "electra.finetune.recipe",
    "TASKS": "electra.finetune.tasks",
    "get_task": "electra.finetune.tasks",
    "glue_average": "electra.finetune.tasks",
    "load_task_data": "electra.finetune.tasks",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'electra.finetune' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


__all__ = [
    "TASKS",
    "DatasetError",
    "Family",
    "TaskSpec",
    "get_family",
    "register",
    "register_family",
    "Recipe",
    "get_task",
    "glue_average",
    "load_finetuned",
    "load_task_data",
    "layerwise_groups",
    "make_recipe",
    "save_finetuned",
]
