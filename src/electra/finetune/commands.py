"""The ``electra finetune`` and ``electra evaluate`` commands and their options.

See :mod:`electra.finetune.run` for what they write; the loop is in
:mod:`~electra.finetune.training`, the results files in
:mod:`~electra.finetune.results`.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import time
from dataclasses import field
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from electra.finetune.baselines import compute_floors
from electra.finetune.common import FeatureSettings, check_bert_template
from electra.finetune.modeling import Finetuned, load_finetuned
from electra.finetune.options import EvaluateArgs, FinetuneArgs
from electra.finetune.recipe import Recipe, make_recipe
from electra.finetune.results import (
    RESULTS_FORMAT,
    earlier_seeds,
    model_section,
    now,
    print_report,
    save_replacing,
    task_info,
    task_section,
    update_summary,
    versions,
    write_predictions,
)
from electra.finetune.tasks import (
    DataOptions,
    TaskData,
    TaskSpec,
    custom_task,
    get_task,
    load_task_data,
    read_task_file,
    subsample,
)
from electra.finetune.training import (
    Prepared,
    TrainingJob,
    default_bf16,
    evaluate_prepared,
    gpu_defaults,
    prepare,
    train_seed,
)
from electra.model.hf import read_config
from electra.model.hub import resolve_model_path
from electra.system.files import atomic_write_json
from electra.system.locks import DirectoryLock
from electra.system.precision import resolve_device
from electra.text.tokenizer import load_tokenizer, special_ids

# ---------------------------------------------------------------------------
# electra finetune
# ---------------------------------------------------------------------------


def _doc(text: str, **kw: Any) -> Any:
    return field(metadata={"doc": text, **kw.pop("meta", {})}, **kw)


def finetune_options(command: Any) -> dict[str, Any]:
    """The fine-tuning options another command exposes, by :class:`FinetuneArgs` name.

    A field of ``command``'s dataclass declared with ``metadata={"finetune": NAME}``
    is FinetuneArgs' ``NAME`` (``electra compare`` and ``electra demo`` declare
    theirs so): one added there reaches every fine-tuning they run.
    """
    return {
        f.metadata["finetune"]: copy.copy(getattr(command, f.name))
        for f in dataclasses.fields(command)
        if "finetune" in f.metadata
    }


def finetune_args_from(command: Any, **fixed: Any) -> FinetuneArgs:
    """:class:`FinetuneArgs` of ``command``'s fine-tuning options, then ``fixed`` (model ...)."""
    return FinetuneArgs(**{**finetune_options(command), **fixed})


def build_recipe(args: FinetuneArgs, data: TaskData, cfg: Any, device: torch.device) -> Recipe:
    """Table 7 for the model's size and the task, then the flags given."""
    spec = data.spec
    overrides = args.overrides()
    overrides["main_metric"] = args.main_metric or spec.main_metric
    overrides["bf16"] = default_bf16(device) if args.bf16 is None else args.bf16
    recipe = make_recipe(
        task=spec.name,
        family=spec.family,
        hidden_size=cfg.hidden_size,
        size=args.size,
        overrides=overrides,
    )
    if recipe.max_length > cfg.max_position_embeddings:
        raise ValueError(
            f"--max-length {recipe.max_length} exceeds the model's max_position_embeddings "
            f"{cfg.max_position_embeddings}"
        )
    return recipe


def feature_settings(recipe: Recipe) -> FeatureSettings:
    return FeatureSettings(
        max_length=recipe.max_length,
        doc_stride=recipe.doc_stride,
        max_query_length=recipe.max_query_length,
        max_answer_length=recipe.max_answer_length,
        n_best=recipe.n_best,
    )


def load_checked_tokenizer(tok_source: Path, cfg: Any) -> Tokenizer:
    """The tokenizer, checked to fit the model's vocabulary and to add [CLS] ... [SEP]."""
    tokenizer = load_tokenizer(tok_source)
    ids = special_ids(tokenizer)
    if ids.vocab_size > cfg.vocab_size:
        raise ValueError(
            f"tokenizer {tok_source} has {ids.vocab_size} tokens but the model's vocab_size is "
            f"{cfg.vocab_size}; use the model's own tokenizer"
        )
    check_bert_template(tokenizer, ids.cls, ids.sep)
    return tokenizer


def check_main_metric(data: TaskData, main_metric: str) -> None:
    allowed = data.spec.family.metric_names(len(data.labels))
    if main_metric not in allowed:
        raise ValueError(
            f"--main-metric {main_metric!r} is not a metric of {data.spec.family.name} tasks; "
            f"choose one of {', '.join(allowed)}"
        )


def featurize_splits(
    args: FinetuneArgs, data: TaskData, tokenizer: Tokenizer, settings: FeatureSettings
) -> tuple[dict[str, Prepared | None], float]:
    """Subsampled and featurised train/dev/test (test None when empty), warning of truncation."""
    family, seed = data.spec.family, data.options.split_seed
    t0 = time.perf_counter()
    parts: dict[str, Prepared | None] = {}
    for kind in ("train", "dev", "test"):
        limit = args.max_train_examples if kind == "train" else args.max_eval_examples
        examples = subsample(getattr(data.splits, kind), limit, seed)
        keep = examples or kind != "test"
        parts[kind] = prepare(family, examples, tokenizer, settings, data.labels) if keep else None
    seconds = time.perf_counter() - t0
    for kind, part in parts.items():
        if part and part.truncated:
            print(
                f"warning: {part.truncated} of {len(part.examples)} {kind} examples are longer "
                f"than --max-length {settings.max_length} tokens and were truncated",
                file=sys.stderr,
            )
    return parts, seconds


def floors_of(args: FinetuneArgs, data: TaskData, main_metric: str, parts: dict) -> Any:
    """Majority/mean and TF-IDF floors (pair features too, for pairs) on exactly the
    examples the model sees (cached)."""
    out = Path(args.output or f"finetuned/{data.spec.name}")
    cache = Path(args.floors_cache) if args.floors_cache else out / "floors"
    examples = {k: (p.examples if p else []) for k, p in parts.items()}
    return compute_floors(
        data.spec.family,
        data.labels,
        main_metric,
        examples["train"],
        examples["dev"],
        examples["test"],
        cache,
        qa_style=data.spec.qa_style,
    )


def _selection_value(recipe: Recipe, run: dict[str, Any]) -> float:
    """What picks the best seed: the dev main metric, or minus the dev loss."""
    if recipe.select_by == "metric":
        return run["dev"][recipe.main_metric]
    return -run["dev_loss"]


def run_seeds(
    job: TrainingJob, results: dict[str, Any], out_dir: Path, args: FinetuneArgs, tok: Path
) -> None:
    """Train every seed not already in ``results`` (kept from an interrupted run); keep
    the best on dev as OUT/model; rewrite results.json after each seed."""
    info_base = task_info(job, args.data_options(), results["task"])
    done = {run["seed"]: _selection_value(job.recipe, run) for run in results["seeds"]}
    best_overall: float | None = max(done.values(), default=None)
    for seed in job.recipe.seeds:
        if seed in done:
            continue
        run = train_seed(job, seed)
        model, test_preds = run.pop("model"), run.pop("test_predictions")
        info = dataclasses.replace(
            info_base, seed=seed, best_epoch=run["best_epoch"], dev_scores=run["dev"], created=now()
        )
        value = _selection_value(job.recipe, run)
        if best_overall is None or value > best_overall:
            best_overall = value
            save_replacing(model, out_dir / "model", info, tok)
            results["best_seed"] = seed
            results["saved_model"] = str((out_dir / "model").resolve())
            if job.test is not None and test_preds is not None:
                path = out_dir / "test_predictions.jsonl"
                write_predictions(path, job, job.test, test_preds)
                results["test_predictions"] = str(path.resolve())
        if args.keep_all_seeds:
            save_replacing(model, out_dir / "seeds" / f"seed-{seed}", info, tok)
            run["saved_model"] = str((out_dir / "seeds" / f"seed-{seed}").resolve())
        del model
        results["seeds"].append(run)
        update_summary(results)
        atomic_write_json(out_dir / "results.json", results, ensure_ascii=False)


def keep_earlier_seeds(results: dict[str, Any], out_dir: Path) -> None:
    """Take over the finished seeds of an interrupted run into ``out_dir`` (same task,
    model, recipe and device; :func:`~electra.finetune.results.earlier_seeds`), saying so."""
    earlier = earlier_seeds(out_dir, results)
    if not earlier:
        return
    results.update(earlier)
    update_summary(results)
    kept = ", ".join(str(run["seed"]) for run in earlier["seeds"])
    print(
        f"{out_dir}: resuming an interrupted fine-tuning; seed(s) {kept} finished before "
        "with these settings are kept, not trained again",
        file=sys.stderr,
    )


def start_results(job: TrainingJob, data: TaskData, parts: dict, extra: dict[str, Any]) -> dict:
    """results.json before the first seed (``complete`` false)."""
    return {
        "format": RESULTS_FORMAT,
        "command": "finetune",
        "created": now(),
        "complete": False,
        "task": task_section(data, job.recipe.main_metric, parts),
        "model": extra["model"],
        "recipe": job.recipe.to_dict(),
        "device": str(job.device),
        "scale": "fractions (accuracy 0.91 = 91%); tables print x100",
        "seeds": [],
        "summary": {},
        "versions": versions(),
        "timings": {"featurize_seconds": extra["featurize_seconds"]},
    }


def finetune(args: FinetuneArgs) -> dict[str, Any]:
    """Fine-tune ``args.model`` on a task for every seed; returns the results dict.

    The output directory is locked from before the featurising on
    (:mod:`electra.system.locks`): a second fine-tuning into it refuses to start.
    """
    t_start = time.perf_counter()
    spec = get_task(args.task)
    resolved = resolve_model_path(args.model)  # a local directory, or a Hub snapshot
    model_dir = resolved.path
    if not model_dir.is_dir():
        raise FileNotFoundError(f"{model_dir}: no such model directory")
    device = resolve_device(args.device, option="--device")
    gpu_defaults(device)
    cfg, raw_config = read_config(model_dir)
    data = load_task_data(spec, args.data_options())
    out_dir = Path(args.output or f"finetuned/{data.spec.name}")
    with DirectoryLock(out_dir):  # creates out_dir
        recipe = build_recipe(args, data, cfg, device)
        settings = feature_settings(recipe)
        tok_source = Path(args.tokenizer) if args.tokenizer else model_dir
        tokenizer = load_checked_tokenizer(tok_source, cfg)
        check_main_metric(data, recipe.main_metric)
        parts, feat_seconds = featurize_splits(args, data, tokenizer, settings)
        job = TrainingJob(
            model_dir=model_dir,
            spec=data.spec,
            recipe=recipe,
            settings=settings,
            labels=data.labels,
            train=parts["train"],  # type: ignore[arg-type]
            dev=parts["dev"],  # type: ignore[arg-type]
            test=parts["test"],
            num_layers=cfg.num_hidden_layers,
            device=device,
            pad_id=special_ids(tokenizer).pad,
            progress=args.progress,
            source_model=resolved.name if resolved.from_hub else "",
        )
        extra = {
            "model": model_section(model_dir, cfg, raw_config, tok_source, resolved.source()),
            "featurize_seconds": feat_seconds,
        }
        results = start_results(job, data, parts, extra)
        keep_earlier_seeds(results, out_dir)
        if args.floors:
            results["floors"] = floors_of(args, data, recipe.main_metric, parts)
        run_seeds(job, results, out_dir, args, tok_source)
        results["complete"] = True
        results["timings"]["total_seconds"] = time.perf_counter() - t_start
        atomic_write_json(out_dir / "results.json", results, ensure_ascii=False)
    print_report(job, results, out_dir)
    return results


def finetune_cli(args: FinetuneArgs) -> int:
    """Run ``electra finetune`` (its ``--help`` is :class:`~electra.finetune.options.FinetuneArgs`'s docstring)."""
    finetune(args)
    return 0


# ---------------------------------------------------------------------------
# electra evaluate
# ---------------------------------------------------------------------------


def _data_options_for(ft: Finetuned, args: Any) -> DataOptions:
    """The data options saved with the model, with the flags given to ``electra evaluate``."""
    stored = dict(ft.info.data)
    known = {f.name for f in dataclasses.fields(DataOptions)}
    opts = DataOptions(**{k: v for k, v in stored.items() if k in known})
    opts.balance = bool(stored.get("balance", False))  # models saved before balancing: all
    if getattr(args, "data_dir", ""):
        opts.data_dir = str(Path(args.data_dir).resolve())
    for name in ("text_column", "text_pair_column", "label_column"):
        if getattr(args, name, ""):
            setattr(opts, name, getattr(args, name))
    if getattr(args, "test_file", ""):
        opts.format = ""  # the training files' --format says nothing of another file
    if not opts.task_type and ft.info.task == "custom":
        opts.task_type = ft.info.family
    return opts


def task_of(ft: Finetuned, name: str, model: str) -> TaskSpec:
    """The task to score a model on (default: its own), checked to be of the model's family."""
    info = ft.info
    spec = get_task(name or info.task)
    if spec.name == "custom":
        spec = custom_task(ft.family)
    if spec.family is not ft.family:
        raise ValueError(
            f"task {spec.name!r} is a {spec.family.name} task but {model} is a {info.family} model"
        )
    return spec


def examples_to_score(
    args: EvaluateArgs, ft: Finetuned, spec: TaskSpec, opts: DataOptions
) -> tuple[list[Any], str, str]:
    """The examples of ``--test-file`` or of the split asked for, where they come from, which."""
    if args.test_file:
        examples = read_task_file(spec, args.test_file, opts)
        spec.family.check_labels(examples, ft.info.labels, "test", "the model's labels")
        return examples, str(Path(args.test_file).resolve()), "file"
    data = load_task_data(spec, opts, labels=ft.info.labels or None)
    examples = getattr(data.splits, args.split)
    source = data.splits.notes.get(args.split, "")
    if not examples:
        raise ValueError(f"task {spec.name!r} has no {args.split} split ({source})")
    return examples, source, args.split


def evaluate(args: EvaluateArgs) -> dict[str, Any]:
    """Score a fine-tuned model on its task's test (or dev/train) split or on a file."""
    t0 = time.perf_counter()
    device = resolve_device(args.device, option="--device")
    resolved = resolve_model_path(args.model)  # a local directory, or a Hub snapshot
    ft = load_finetuned(resolved.path, device)
    info = ft.info
    spec = task_of(ft, args.task, args.model)
    opts = _data_options_for(ft, args)
    examples, source, split = examples_to_score(args, ft, spec, opts)
    examples = subsample(examples, args.max_eval_examples, opts.split_seed)
    prepared = prepare(ft.family, examples, ft.tokenizer, info.settings, info.labels)
    scores, loss, _ = evaluate_prepared(
        ft.model,
        ft.family,
        prepared,
        info.labels,
        info.settings,
        device,
        special_ids(ft.tokenizer).pad,
        batch_size=args.batch_size,
        qa_style=info.qa_style or spec.qa_style,
        bf16=args.bf16,
        desc=f"evaluate {split}",
        progress=args.progress,
    )
    result = {
        "format": "electra-evaluate-results/1",
        "command": "evaluate",
        "created": now(),
        "model": str(resolved.path.resolve()),
        "model_source": resolved.source(),
        "task": spec.name,
        "family": spec.family.name,
        "main_metric": info.main_metric or spec.main_metric,
        "split": split,
        "source": source,
        "examples": len(examples),
        "loss": loss,
        "scores": scores,
        "fine_tuning": {"seed": info.seed, "best_epoch": info.best_epoch, "recipe": info.recipe},
        "seconds": time.perf_counter() - t0,
        "versions": versions(),
    }
    # never write into the Hub cache: a Hub model's scores go to the current directory
    default_dir = Path(".") if resolved.from_hub else resolved.path
    out = Path(args.output) if args.output else default_dir / f"eval-{split}.json"
    atomic_write_json(out, result, ensure_ascii=False)
    print(f"{spec.name} {split} ({len(examples)} examples, scores x100)")
    for k, v in scores.items():
        print(f"  {k:<14} {100 * v:8.2f}")
    print(f"results: {out}")
    result["output"] = str(out)
    return result


def evaluate_cli(args: EvaluateArgs) -> int:
    """Run ``electra evaluate`` (its ``--help`` is :class:`~electra.finetune.options.EvaluateArgs`'s docstring)."""
    evaluate(args)
    return 0


# ---------------------------------------------------------------------------
# electra predict --backend torch
# ---------------------------------------------------------------------------


def __getattr__(name: str) -> Any:
    """Names that moved out of this module (0.2) are still found here until 0.3."""
    from electra._moved import moved_attribute

    return moved_attribute("electra.finetune.commands", name)
