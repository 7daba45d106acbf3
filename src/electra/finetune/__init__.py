"""Fine-tuning and evaluation: task families, datasets, the paper's recipe, the CLIs.

Modules: :mod:`~electra.finetune.recipe` (Table 7, layer-wise decay, schedule),
:mod:`~electra.finetune.classification` (single/pair classification and
regression), :mod:`~electra.finetune.tagging` (token classification),
:mod:`~electra.finetune.qa` (SQuAD-style extractive QA),
:mod:`~electra.finetune.tasks` (registry, built-in datasets, splits, GLUE score),
:mod:`~electra.finetune.readers` (file formats), :mod:`~electra.finetune.modeling`
(save/load fine-tuned models), :mod:`~electra.finetune.download` (public URLs),
:mod:`~electra.finetune.run` (training loop and the ``finetune``, ``evaluate``,
``predict`` commands).
"""

from electra.finetune.common import DatasetError
from electra.finetune.modeling import load_finetuned, save_finetuned
from electra.finetune.recipe import Recipe, make_recipe, parameter_groups
from electra.finetune.tasks import TASKS, get_task, glue_average, load_task_data

__all__ = [
    "TASKS",
    "DatasetError",
    "Recipe",
    "get_task",
    "glue_average",
    "load_finetuned",
    "load_task_data",
    "make_recipe",
    "parameter_groups",
    "save_finetuned",
]
