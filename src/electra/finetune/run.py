"""``electra finetune``, ``electra evaluate``, ``electra predict``: loops, seeds, results.

One command replaces the hand-written workflow (load a model, split the
data, AdamW, a few epochs, keep the best checkpoint on dev, score test):

    electra finetune --task nsmc --model path/to/koelectra --seeds 1 2 3

trains one model per seed with the paper's recipe (Table 7, layer-wise
learning-rate decay), selects each seed's best epoch on the dev metric (or
``--select-by loss``), scores that checkpoint on test, and writes

* ``OUT/results.json``: task, splits, model, recipe, per-seed history, dev and
  test scores, median/mean/std over seeds, timings, versions;
* ``OUT/model/``: the best seed's best checkpoint (selected on dev, never on
  test) as a Hugging Face directory plus ``electra_task.json``;
  ``--keep-all-seeds`` also keeps ``OUT/seeds/seed-N/``;
* ``OUT/test_predictions.jsonl``: that model's prediction for every test
  example, with the gold answer, for error analysis.

``results.json`` holds: ``task`` (name, family, main metric, labels, data
options, and per split the number of examples/features, how many were
truncated, where the split came from, label counts and the majority-class
accuracy), ``model`` (path, architecture, shape, tokenizer, a SHA-256 of the weight
files), ``recipe`` (every
hyper-parameter), ``seeds`` (per seed: best epoch, dev and test scores of that
epoch, the per-epoch history of train loss, dev loss, dev scores and
seconds), ``summary`` (median, mean, sample std, min, max per metric over
seeds, for dev and test), ``floors`` (majority class or training mean, and
TF-IDF + logistic/ridge regression, a sentence pair joined into one text, plus
for pair tasks ``tfidf_pair``, TF-IDF pair features (a, b, |a-b|, a*b) + the same
regression; trained and scored on the same examples, each described in words
under ``descriptions``; see ``baselines.py``), ``best_seed``, ``timings``, ``versions``. Scores are
fractions (0.91, not 91); the printed tables show them x100. It is rewritten
atomically after every seed (``"complete": false`` until the last one); the same
command after a stop keeps the seeds finished with the same task, model, recipe and device
(:func:`~electra.finetune.results.earlier_seeds`).

``electra evaluate --model DIR`` rebuilds the task's split from the data
options and split seed saved in ``DIR/electra_task.json`` and writes
``DIR/eval-test.json``; ``electra predict --model DIR --input FILE`` (:mod:`electra.inference`) writes
one JSON line per example (label and probabilities, a score, tags and entities,
or an answer span) plus ``*.results.json``.

This module is the commands' public face; the code is in
:mod:`~electra.finetune.commands` (the commands and their options),
:mod:`~electra.finetune.training` (the loop) and
:mod:`~electra.finetune.results` (what is written and printed).
"""

from typing import Any

from electra.finetune.commands import (
    evaluate,
    evaluate_cli,
    finetune,
    finetune_args_from,
    finetune_cli,
    finetune_options,
)
from electra.finetune.options import EvaluateArgs, FinetuneArgs
from electra.finetune.results import glue_score_from_results, summarize, summarize_runs
from electra.finetune.training import (
    default_bf16,
    evaluate_prepared,
    prepare,
    run_model,
    train_seed,
)
from electra.system.precision import resolve_device


def __getattr__(name: str) -> Any:
    """``electra predict``'s names moved to :mod:`electra.inference` (0.2); until 0.3 they
    are still found here."""
    from electra._moved import moved_attribute

    return moved_attribute("electra.finetune.run", name)


__all__ = [
    "EvaluateArgs",
    "FinetuneArgs",
    "default_bf16",
    "evaluate",
    "evaluate_cli",
    "evaluate_prepared",
    "finetune",
    "finetune_args_from",
    "finetune_cli",
    "finetune_options",
    "glue_score_from_results",
    "prepare",
    "resolve_device",
    "run_model",
    "summarize",
    "summarize_runs",
    "train_seed",
]
