"""What ``electra finetune`` and ``electra evaluate`` write and print.

``results.json`` (its fields are described in :mod:`electra.finetune.run`),
the saved best model (swapped in whole, never half-written), the test
predictions, the summaries over seeds and the printed tables.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from torch import nn

from electra.finetune.baselines import floor_lines
from electra.finetune.features import TaskInfo
from electra.finetune.modeling import TASK_FILE, save_finetuned
from electra.finetune.tasks import DataOptions, TaskData, glue_average, resolve_data_dir
from electra.finetune.training import Prepared, TrainingJob
from electra.model.hf import weights_sha256
from electra.system import provenance
from electra.system.diskspace import reporting_full_disk
from electra.system.files import atomic_write_bytes

RESULTS_FORMAT = "electra-finetune-results/1"


# The packages a fine-tuning result depends on (recorded in results.json).
PACKAGES = ("electra", "torch", "tokenizers", "numpy", "scikit-learn", "scipy", "seqeval")


def versions() -> dict[str, str]:
    """Python and :data:`PACKAGES` versions, for results.json."""
    return provenance.versions(PACKAGES)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------
# Summaries over seeds
# ---------------------------------------------------------------------------


def summarize(values: Sequence[float]) -> dict[str, float]:
    """median, mean, std (sample, 0 for one seed), min, max, n."""
    v = [float(x) for x in values]
    return {
        "median": statistics.median(v),
        "mean": statistics.fmean(v),
        "std": statistics.stdev(v) if len(v) > 1 else 0.0,
        "min": min(v),
        "max": max(v),
        "n": len(v),
    }


def summarize_runs(runs: Sequence[dict[str, float] | None]) -> dict[str, dict[str, float]]:
    present = [r for r in runs if r]
    if not present:
        return {}
    keys = [k for k in present[0] if all(k in r for r in present)]
    return {k: summarize([r[k] for r in present]) for k in keys}


def glue_score_from_results(
    paths: Sequence[str | os.PathLike[str]],
    convention: str = "paper",
    split: str = "test",
    stat: str = "median",
) -> dict[str, Any]:
    """The GLUE score of several ``electra finetune`` results files (one per task).

    Uses each task's ``stat`` (median over seeds by default, as the paper)
    on ``split`` ("test" is the official GLUE dev set, see
    :mod:`electra.finetune.tasks`); see :func:`electra.finetune.tasks.glue_average`.
    """
    scores: dict[str, dict[str, float]] = {}
    for p in paths:
        res = json.loads(Path(p).read_text(encoding="utf-8"))
        summary = (res.get("summary") or {}).get(split) or {}
        if not summary:
            raise ValueError(f"{p}: no {split} scores in this results file")
        scores[res["task"]["name"]] = {m: v[stat] for m, v in summary.items()}
    return glue_average(scores, convention)


# ---------------------------------------------------------------------------
# results.json
# ---------------------------------------------------------------------------


def task_section(
    data: TaskData, main_metric: str, parts: dict[str, Prepared | None]
) -> dict[str, Any]:
    """The ``task`` section: name, family, labels, data options and every split's numbers."""
    spec, opts, notes = data.spec, data.options, data.splits.notes
    family = spec.family
    section: dict[str, Any] = {
        "name": spec.name,
        "family": family.name,
        "description": spec.description,
        "main_metric": main_metric,
        "labels": data.labels,
        "data": dataclasses.asdict(opts),
        "data_dir": str(resolve_data_dir(opts.data_dir).resolve()),
        "splits": {
            kind: _split_section(family, p, notes.get(kind, "")) for kind, p in parts.items()
        },
    }
    if "source" in notes:
        section["source"] = notes["source"]
    train = parts["train"]
    section.update(family.task_report(train.examples if train else [], parts["dev"], data.labels))
    return section


def _split_section(family: Any, p: Prepared | None, source: str) -> dict[str, Any]:
    counts = family.label_counts(p.examples) if p else None
    return {
        "examples": len(p.examples) if p else 0,
        "features": len(p.features) if p else 0,
        "truncated": p.truncated if p else 0,
        "source": source,
        "label_counts": counts,
        # accuracy of always predicting the most frequent label (a floor to beat)
        "majority_accuracy": max(counts.values()) / len(p.examples) if counts and p else None,
    }


def model_section(
    model_dir: Path,
    cfg: Any,
    raw_config: dict[str, Any],
    tok: Path,
    source: dict[str, Any] | None = None,
) -> dict:
    """The ``model`` section: path, architecture, shape, tokenizer and ``source``.

    ``source`` says where the model came from (:func:`electra.system.provenance.model_source`):
    a local directory, or a Hub repo id with its commit sha and weight checksums.
    """
    return {
        "path": str(model_dir.resolve()),
        "architectures": raw_config.get("architectures"),
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "embedding_size": cfg.embedding_size,
        "vocab_size": cfg.vocab_size,
        "tokenizer": str(tok.resolve()),
        "source": source or {"kind": "local", "path": str(model_dir.resolve())},
        "weights_sha256": weights_sha256(model_dir)[1],
    }


# What must be the same for an interrupted fine-tuning's finished seeds to be kept.
RESUME_SECTIONS = ("task", "model", "recipe", "device")


def _as_json(section: str, value: Any) -> Any:
    """``value`` as results.json holds it; the recipe without its seed list (seeds are
    matched one by one)."""
    value = json.loads(json.dumps(value))
    if section == "recipe" and isinstance(value, dict):
        value.pop("seeds", None)
    return value


def earlier_seeds(out_dir: Path, results: dict[str, Any]) -> dict[str, Any]:
    """What an interrupted fine-tuning into ``out_dir`` finished that this one can keep.

    An incomplete ``results.json`` there (the run was stopped between seeds) with the
    same task and splits, model (path and weights), recipe and device gives its finished
    seeds that are among this run's, with ``best_seed``, ``saved_model`` and
    ``test_predictions``; anything else gives ``{}`` and every seed is trained. A run
    stopped after saving a better model but before recording it (the saved model is not
    the recorded best seed's) keeps nothing: the model on disk must be its best seed's.
    A finished run is never resumed: the same command trains it again.
    """
    try:
        earlier = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if earlier.get("format") != results["format"] or earlier.get("complete", True):
        return {}
    for section in RESUME_SECTIONS:
        if _as_json(section, earlier.get(section)) != _as_json(section, results[section]):
            return {}
    wanted = set(results["recipe"]["seeds"])
    kept = [run for run in earlier.get("seeds", []) if run.get("seed") in wanted]
    if not kept or _saved_seed(out_dir / "model") != earlier.get("best_seed"):
        return {}
    if earlier["best_seed"] not in {run["seed"] for run in kept}:
        return {}  # the best model is of a seed this run does not train
    names = ("best_seed", "saved_model", "test_predictions")
    return {"seeds": kept, **{k: earlier[k] for k in names if k in earlier}}


def _saved_seed(model_dir: Path) -> int | None:
    """The seed ``electra_task.json`` of a saved fine-tuned model names (None if unreadable)."""
    try:
        return json.loads((model_dir / TASK_FILE).read_text(encoding="utf-8")).get("seed")
    except (OSError, ValueError):
        return None


def task_info(job: TrainingJob, options: DataOptions, task: dict[str, Any]) -> TaskInfo:
    """``electra_task.json`` of the models this run saves (seed fields filled per seed)."""
    return TaskInfo(
        task=job.spec.name,
        family=job.family.name,
        labels=job.labels,
        main_metric=job.recipe.main_metric,
        qa_style=job.spec.qa_style,
        tagging_level=task.get("tagging_level", "word"),
        features=dataclasses.asdict(job.settings),
        data=dataclasses.asdict(options),
        recipe=job.recipe.to_dict(),
        source_model=job.source_model or str(job.model_dir.resolve()),
    )


def update_summary(results: dict[str, Any]) -> None:
    """Median/mean/std over the seeds so far, for dev and test."""
    results["summary"] = {
        "dev": summarize_runs([r["dev"] for r in results["seeds"]]),
        "test": summarize_runs([r["test"] for r in results["seeds"]]),
    }


# ---------------------------------------------------------------------------
# Saved files
# ---------------------------------------------------------------------------


def save_replacing(model: nn.Module, target: Path, info: TaskInfo, tok_source: Path) -> None:
    """Save into a fresh sibling directory, then swap it in (no half-written model dir)."""
    tmp = target.parent / f".{target.name}.tmp"
    needed = sum(p.numel() * p.element_size() for p in model.parameters())
    then = (
        f"The model saved before in {target} (if any) is kept: once space is free, run the same "
        "command again (the seeds already finished are kept)"
    )
    what = f"the fine-tuned model {target.name}/"
    with reporting_full_disk(what, target.parent, needed, then):
        if tmp.exists():
            shutil.rmtree(tmp)
        try:
            save_finetuned(model.to("cpu"), tmp, info, tok_source)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    old = target.parent / f".{target.name}.old"
    if target.exists():
        if old.exists():
            shutil.rmtree(old)
        os.replace(target, old)
    os.replace(tmp, target)
    if old.exists():
        shutil.rmtree(old)


def write_predictions(path: Path, job: TrainingJob, test: Prepared, preds: list[Any]) -> None:
    """``test_predictions.jsonl``: one record per test example, with its gold answer."""
    lines = [
        json.dumps(job.family.record(e, p, job.labels), ensure_ascii=False)
        for e, p in zip(test.examples, preds, strict=True)
    ]
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode("utf-8"))


# ---------------------------------------------------------------------------
# Printed tables
# ---------------------------------------------------------------------------


def print_table(title: str, rows: list[tuple[str, str, dict[str, float]]]) -> None:
    print(title)
    if not rows:
        return
    print(f"  {'split':<6} {'metric':<14} {'median':>8} {'mean':>8} {'std':>7} {'n':>3}")
    for split, metric, s in rows:
        print(
            f"  {split:<6} {metric:<14} {100 * s['median']:8.2f} {100 * s['mean']:8.2f} "
            f"{100 * s['std']:7.2f} {s['n']:3d}"
        )


def print_report(job: TrainingJob, results: dict[str, Any], out_dir: Path) -> None:
    """The summary over seeds, the floors, and where the results and model are."""
    recipe, main = job.recipe, job.recipe.main_metric
    metrics = job.family.report_metrics(main)
    rows = [
        (split, m, results["summary"][split][m])
        for split in ("dev", "test")
        for m in metrics
        if m in results["summary"].get(split, {})
    ]
    n = len(recipe.seeds)
    print_table(
        f"{job.spec.name}: {n} seed{'s' if n > 1 else ''}, best epoch selected by dev "
        f"{main if recipe.select_by == 'metric' else 'loss'} (scores x100)",
        rows,
    )
    if not job.test:
        print("  (no test split: pass --test-file to score one)")
    for line in floor_lines(results.get("floors"), metrics):
        print(line)
    print(f"results: {out_dir / 'results.json'}")
    print(f"model:   {out_dir / 'model'} (seed {results.get('best_seed')})")


def results_complete(results: Path) -> bool:
    """Whether a fine-tuning's ``results.json`` exists and says every seed is done."""
    return results.is_file() and bool(json.loads(results.read_text()).get("complete"))
