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
accuracy), ``model`` (path, architecture, shape, tokenizer), ``recipe`` (every
hyper-parameter), ``seeds`` (per seed: best epoch, dev and test scores of that
epoch, the per-epoch history of train loss, dev loss, dev scores and
seconds), ``summary`` (median, mean, sample std, min, max per metric over
seeds, for dev and test), ``floors`` (majority class or training mean, and
TF-IDF + logistic/ridge regression, trained and scored on the same examples;
see ``baselines.py``), ``best_seed``, ``timings``, ``versions``. Scores are
fractions (0.91, not 91); the printed tables show them x100. It is rewritten
atomically after every seed (``"complete": false`` until the last one).

``electra evaluate --model DIR`` rebuilds the task's split from the data
options and split seed saved in ``DIR/electra_task.json`` and writes
``DIR/eval-test.json``; ``electra predict --model DIR --input FILE`` writes one
JSON line per example (label and probabilities, a score, tags and entities,
or an answer span) plus ``*.results.json``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import json
import math
import os
import platform
import random
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from electra.finetune.baselines import compute_floors, floor_lines
from electra.finetune.common import (
    Family,
    FeatureSettings,
    TaggingExample,
    prepared_tokenizer,
)
from electra.finetune.modeling import (
    Finetuned,
    TaskInfo,
    get_family,
    load_finetuned,
    save_finetuned,
)
from electra.finetune.recipe import Recipe, build_optimizer, linear_schedule, make_recipe
from electra.finetune.tasks import (
    DataOptions,
    TaskData,
    TaskSpec,
    get_task,
    load_task_data,
    read_task_file,
    resolve_data_dir,
    subsample,
)
from electra.hf import atomic_write_bytes, load_encoder, read_config
from electra.precision import bf16_is_fast
from electra.predict import PredictArgs, predict, predict_cli  # noqa: F401 (the API's home)

# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------


def resolve_device(name: str) -> torch.device:
    """``auto`` (CUDA when available), ``cpu`` or ``cuda[:N]``."""
    if name in ("", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available (use --device cpu)")
    return torch.device(name)


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("electra", "torch", "tokenizers", "numpy", "scikit-learn", "scipy", "seqeval"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[pkg] = importlib.metadata.version(pkg)
    return out


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def write_json(path: Path, obj: Any) -> None:
    body = json.dumps(obj, indent=2, ensure_ascii=False, default=_json_default) + "\n"
    atomic_write_bytes(path, body.encode("utf-8"))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


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
    from electra.finetune.tasks import glue_average

    scores: dict[str, dict[str, float]] = {}
    for p in paths:
        res = json.loads(Path(p).read_text(encoding="utf-8"))
        summary = (res.get("summary") or {}).get(split) or {}
        if not summary:
            raise ValueError(f"{p}: no {split} scores in this results file")
        scores[res["task"]["name"]] = {m: v[stat] for m, v in summary.items()}
    return glue_average(scores, convention)


def default_bf16(device: torch.device) -> bool:
    """bf16 autocast unless told otherwise: where the device multiplies bf16 natively
    (Ampere or newer GPUs; CPUs with AVX512-BF16 or AMX), see ``electra.precision``."""
    return bf16_is_fast(device)


def gpu_defaults(device: torch.device) -> None:
    """TF32 for the fp32 matmuls and convolutions left outside autocast, on a GPU."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def _autocast(device: torch.device, enabled: bool):
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=enabled)


# ---------------------------------------------------------------------------
# Forward passes
# ---------------------------------------------------------------------------


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def run_model(
    model: nn.Module,
    family: Family,
    features: Sequence[dict[str, Any]],
    batch_size: int,
    device: torch.device,
    pad_id: int,
    *,
    with_loss: bool = True,
    bf16: bool = False,
    desc: str = "",
    progress: bool = True,
) -> tuple[list[np.ndarray], float | None]:
    """Per-feature outputs (in input order) and the mean loss, in eval mode.

    Features are batched by length (less padding) and put back in order.
    """
    order = sorted(range(len(features)), key=lambda i: len(features[i]["input_ids"]))
    outputs: list[np.ndarray | None] = [None] * len(features)
    total, count = 0.0, 0
    model.eval()
    steps = math.ceil(len(order) / batch_size)
    bar = tqdm(total=steps, desc=desc or "eval", disable=not progress, leave=False, file=sys.stderr)
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            batch = _to(family.collate([features[i] for i in idx], pad_id), device)
            with _autocast(device, bf16):
                logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            if with_loss:
                loss = family.loss(logits, batch)
                if torch.isfinite(loss):
                    total += float(loss) * len(idx)
                    count += len(idx)
            for i, out in zip(idx, family.split_outputs(logits, batch), strict=True):
                outputs[i] = out
            bar.update(1)
    bar.close()
    return outputs, (total / count if count else None)  # type: ignore[return-value]


@dataclass
class Prepared:
    """One split, featurised."""

    examples: list[Any]
    features: list[dict[str, Any]]


def prepare(
    family: Family,
    examples: list[Any],
    tokenizer: Any,
    settings: FeatureSettings,
    labels: Sequence[str],
) -> Prepared:
    return Prepared(examples, family.featurize(examples, tokenizer, settings, labels))


def evaluate_prepared(
    model: nn.Module,
    family: Family,
    data: Prepared,
    labels: Sequence[str],
    settings: FeatureSettings,
    device: torch.device,
    pad_id: int,
    *,
    batch_size: int = 64,
    qa_style: str = "squad",
    bf16: bool = False,
    desc: str = "",
    progress: bool = True,
    with_scores: bool = True,
) -> tuple[dict[str, float], float | None, list[Any]]:
    """Scores, loss and predictions of ``model`` on a featurised split."""
    outputs, loss = run_model(
        model,
        family,
        data.features,
        batch_size,
        device,
        pad_id,
        with_loss=with_scores,
        bf16=bf16,
        desc=desc,
        progress=progress,
    )
    preds = family.predict(data.examples, data.features, outputs, labels, settings)
    scores = family.score(data.examples, preds, labels, style=qa_style) if with_scores else {}
    return scores, loss, preds


# ---------------------------------------------------------------------------
# electra finetune
# ---------------------------------------------------------------------------


def _doc(text: str, **kw: Any) -> Any:
    return field(metadata={"doc": text, **kw.pop("meta", {})}, **kw)


@dataclass
class FinetuneArgs:
    """Options of ``electra finetune``."""

    model: str = _doc("Model directory to start from: our export or any Hugging Face ELECTRA.")
    task: str = _doc(
        "Task: nsmc, sst2, cola, mrpc, stsb, rte, qnli, wnli, klue-nli, klue-sts, klue-ner, "
        "kornli, korsts, wnut17, korquad, xquad-en, squad, or custom.",
        default="custom",
    )
    output: str = _doc("Output directory (results.json, model/).", default="", meta={"short": "-o"})
    data_dir: str = _doc(
        "Data directory in the shared/data layout (default: $ELECTRA_DATA_DIR or "
        "<repo>/../shared/data).",
        default="",
    )
    train_file: str = _doc("Training file (custom task, or to replace a task's).", default="")
    dev_file: str = _doc("Dev file (default: a seeded slice of train).", default="")
    test_file: str = _doc("Test file.", default="")
    task_type: str = _doc(
        "Family of a custom task: classification, regression, tagging, qa.", default=""
    )
    text_column: str = _doc("Text column of a custom table (default: text).", default="")
    text_pair_column: str = _doc("Second-text column for pairs.", default="")
    label_column: str = _doc("Label column of a custom table (default: label).", default="")
    tokenizer: str = _doc("Tokenizer directory or file (default: the model's).", default="")
    size: Literal["auto", "small", "base", "large"] = _doc(
        "Table 7 recipe to use; auto infers it from the hidden size.", default="auto"
    )
    learning_rate: float | None = _doc("Peak learning rate (default: Table 7).", default=None)
    layer_decay: float | None = _doc(
        "Layer-wise learning-rate decay (default: Table 7; 1 disables).", default=None
    )
    layerwise_decay_official_offset: bool = _doc(
        "Reproduce the official code's off-by-one (top layer lr*decay^2).", default=False
    )
    warmup_fraction: float = _doc("Fraction of steps of linear warmup.", default=0.1)
    weight_decay: float = _doc("AdamW weight decay (not on biases/LayerNorm).", default=0.0)
    batch_size: int = _doc("Training batch size (per optimizer step).", default=32)
    micro_batch_size: int = _doc(
        "Examples per forward pass; smaller than --batch-size accumulates gradients (0: same).",
        default=0,
    )
    eval_batch_size: int = _doc("Evaluation batch size.", default=64)
    epochs: int | None = _doc("Epochs (default: 10 RTE/STS, 2 QA, 3 otherwise).", default=None)
    max_length: int | None = _doc("Max tokens per input (default: 128; QA 384).", default=None)
    doc_stride: int = _doc("QA: tokens between the starts of context windows.", default=128)
    max_query_length: int = _doc("QA: max question tokens.", default=64)
    max_answer_length: int = _doc("QA: max answer tokens.", default=30)
    seeds: list[int] = _doc("Fine-tuning seeds (one run each).", default_factory=lambda: [1])
    split_seed: int = _doc("Seed of the train/dev/test splits made here.", default=42)
    balance: bool = _doc(
        "NSMC from raw reviews: down-sample the majority class to 50/50 like the official "
        "corpus (--no-balance keeps every review).",
        default=True,
    )
    select_by: Literal["metric", "loss"] = _doc(
        "Select the best epoch by the dev metric or the dev loss.", default="metric"
    )
    main_metric: str = _doc("Dev metric to select on (default: the task's).", default="")
    max_train_examples: int = _doc("Use at most N training examples (0: all).", default=0)
    max_eval_examples: int = _doc("Use at most N dev and test examples (0: all).", default=0)
    device: str = _doc("auto, cpu, cuda or cuda:N.", default="auto")
    bf16: bool | None = _doc(
        "bfloat16 autocast (default: where the GPU or CPU has native bf16).", default=None
    )
    grad_clip: float = _doc("Gradient clipping max norm (0: off).", default=1.0)
    keep_all_seeds: bool = _doc("Keep every seed's best model under OUT/seeds/.", default=False)
    floors: bool = _doc(
        "Score the floors on the same split: majority class (or training mean) and TF-IDF + "
        "logistic (ridge) regression.",
        default=True,
    )
    floors_cache: str = _doc(
        "Directory caching the floors per split (default: OUT/floors).", default=""
    )
    progress: bool = _doc("Show progress bars.", default=True)

    def data_options(self) -> DataOptions:
        def absolute(p: str) -> str:
            return str(Path(p).resolve()) if p else ""

        return DataOptions(
            data_dir=absolute(self.data_dir),
            train_file=absolute(self.train_file),
            dev_file=absolute(self.dev_file),
            test_file=absolute(self.test_file),
            task_type=self.task_type,
            text_column=self.text_column,
            text_pair_column=self.text_pair_column,
            label_column=self.label_column,
            split_seed=self.split_seed,
            balance=self.balance,
        )


def _tagging_level(examples: Sequence[Any]) -> str:
    for e in examples:
        if isinstance(e, TaggingExample):
            return e.level
    return "word"


def _truncated(features: Sequence[dict[str, Any]]) -> int:
    return sum(1 for f in features if f.get("truncated"))


def _labels_summary(spec: TaskSpec, examples: Sequence[Any]) -> dict[str, int] | None:
    if spec.family != "classification":
        return None
    out: dict[str, int] = {}
    for e in examples:
        out[str(e.label)] = out.get(str(e.label), 0) + 1
    return dict(sorted(out.items()))


def _majority(spec: TaskSpec, examples: Sequence[Any]) -> float | None:
    """Accuracy of always predicting the most frequent label (a floor to beat)."""
    counts = _labels_summary(spec, examples)
    return max(counts.values()) / len(examples) if counts else None


def _print_table(title: str, rows: list[tuple[str, str, dict[str, float]]]) -> None:
    print(title)
    if not rows:
        return
    print(f"  {'split':<6} {'metric':<14} {'median':>8} {'mean':>8} {'std':>7} {'n':>3}")
    for split, metric, s in rows:
        print(
            f"  {split:<6} {metric:<14} {100 * s['median']:8.2f} {100 * s['mean']:8.2f} "
            f"{100 * s['std']:7.2f} {s['n']:3d}"
        )


def _floors(
    spec: TaskSpec,
    labels: list[str],
    main_metric: str,
    train: Sequence[Any],
    dev: Sequence[Any],
    test: Sequence[Any],
    args: FinetuneArgs,
) -> dict[str, Any] | None:
    """Majority/mean and TF-IDF floors on exactly the examples the model sees (cached)."""
    out = Path(args.output or f"finetuned/{spec.name}")
    cache = Path(args.floors_cache) if args.floors_cache else out / "floors"
    return compute_floors(spec.family, labels, main_metric, train, dev, test, cache)


def finetune(args: FinetuneArgs) -> dict[str, Any]:
    """Fine-tune ``args.model`` on a task for every seed; returns the results dict."""
    from electra.tokenizer import load_tokenizer, special_ids

    t_start = time.perf_counter()
    spec = get_task(args.task)
    model_dir = Path(args.model)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"{model_dir}: no such model directory")
    device = resolve_device(args.device)
    gpu_defaults(device)
    cfg, raw_config = read_config(model_dir)
    num_layers = cfg.num_hidden_layers
    opts = args.data_options()
    data: TaskData = load_task_data(spec, opts)
    spec = data.spec
    family = get_family(spec.family)
    recipe = make_recipe(
        task=spec.name,
        family=spec.family,
        hidden_size=cfg.hidden_size,
        size=args.size,
        overrides={
            "learning_rate": args.learning_rate,
            "layer_decay": args.layer_decay,
            "layerwise_decay_official_offset": args.layerwise_decay_official_offset,
            "warmup_fraction": args.warmup_fraction,
            "weight_decay": args.weight_decay,
            "batch_size": args.batch_size,
            "micro_batch_size": args.micro_batch_size,
            "eval_batch_size": args.eval_batch_size,
            "epochs": args.epochs,
            "max_length": args.max_length,
            "doc_stride": args.doc_stride,
            "max_query_length": args.max_query_length,
            "max_answer_length": args.max_answer_length,
            "grad_clip": args.grad_clip,
            "select_by": args.select_by,
            "main_metric": args.main_metric or spec.main_metric,
            "seeds": list(args.seeds),
            "bf16": default_bf16(device) if args.bf16 is None else args.bf16,
        },
    )
    if recipe.max_length > cfg.max_position_embeddings:
        raise ValueError(
            f"--max-length {recipe.max_length} exceeds the model's max_position_embeddings "
            f"{cfg.max_position_embeddings}"
        )
    settings = FeatureSettings(
        max_length=recipe.max_length,
        doc_stride=recipe.doc_stride,
        max_query_length=recipe.max_query_length,
        max_answer_length=recipe.max_answer_length,
        n_best=recipe.n_best,
    )
    tok_source = Path(args.tokenizer) if args.tokenizer else model_dir
    tokenizer = load_tokenizer(tok_source)
    ids = special_ids(tokenizer)
    if ids.vocab_size > cfg.vocab_size:
        raise ValueError(
            f"tokenizer {tok_source} has {ids.vocab_size} tokens but the model's vocab_size is "
            f"{cfg.vocab_size}; use the model's own tokenizer"
        )
    from electra.finetune.common import check_bert_template

    check_bert_template(tokenizer, ids.cls, ids.sep)

    main_metric = recipe.main_metric
    allowed = metric_names(spec.family, len(data.labels))
    if main_metric not in allowed:
        raise ValueError(
            f"--main-metric {main_metric!r} is not a metric of {spec.family} tasks; "
            f"choose one of {', '.join(allowed)}"
        )

    splits = data.splits
    train_ex = subsample(splits.train, args.max_train_examples, opts.split_seed)
    dev_ex = subsample(splits.dev, args.max_eval_examples, opts.split_seed)
    test_ex = subsample(splits.test, args.max_eval_examples, opts.split_seed)
    labels = data.labels
    t_feat = time.perf_counter()
    train = prepare(family, train_ex, tokenizer, settings, labels)
    dev = prepare(family, dev_ex, tokenizer, settings, labels)
    test = prepare(family, test_ex, tokenizer, settings, labels) if test_ex else None
    feat_seconds = time.perf_counter() - t_feat
    for kind, part in (("train", train), ("dev", dev), ("test", test)):
        cut = _truncated(part.features) if part else 0
        if cut:
            print(
                f"warning: {cut} of {len(part.examples)} {kind} examples are longer than "
                f"--max-length {recipe.max_length} tokens and were truncated",
                file=sys.stderr,
            )
    out_dir = Path(args.output or f"finetuned/{spec.name}")
    out_dir.mkdir(parents=True, exist_ok=True)

    task_section: dict[str, Any] = {
        "name": spec.name,
        "family": spec.family,
        "description": spec.description,
        "main_metric": main_metric,
        "labels": labels,
        "data": dataclasses.asdict(opts),
        "data_dir": str(resolve_data_dir(opts.data_dir).resolve()),
        "splits": {
            kind: {
                "examples": len(p.examples) if p else 0,
                "features": len(p.features) if p else 0,
                "truncated": _truncated(p.features) if p else 0,
                "source": splits.notes.get(kind, ""),
                "label_counts": _labels_summary(spec, p.examples) if p else None,
                "majority_accuracy": _majority(spec, p.examples) if p else None,
            }
            for kind, p in (("train", train), ("dev", dev), ("test", test))
        },
    }
    if "source" in splits.notes:
        task_section["source"] = splits.notes["source"]
    if spec.family == "tagging":
        from electra.finetune.tagging import oracle_f1

        task_section["tagging_level"] = _tagging_level(train_ex)
        task_section["oracle_f1_dev"] = oracle_f1(dev.examples, dev.features, labels)
    results: dict[str, Any] = {
        "format": "electra-finetune-results/1",
        "command": "finetune",
        "created": now(),
        "complete": False,
        "task": task_section,
        "model": {
            "path": str(model_dir.resolve()),
            "architectures": raw_config.get("architectures"),
            "hidden_size": cfg.hidden_size,
            "num_hidden_layers": num_layers,
            "embedding_size": cfg.embedding_size,
            "vocab_size": cfg.vocab_size,
            "tokenizer": str(tok_source.resolve()),
        },
        "recipe": recipe.to_dict(),
        "device": str(device),
        "scale": "fractions (accuracy 0.91 = 91%); tables print x100",
        "seeds": [],
        "summary": {},
        "versions": versions(),
        "timings": {"featurize_seconds": feat_seconds},
    }
    if args.floors:
        results["floors"] = _floors(spec, labels, main_metric, train_ex, dev_ex, test_ex, args)
    results_path = out_dir / "results.json"
    best_overall: float | None = None
    info_base = TaskInfo(
        task=spec.name,
        family=spec.family,
        labels=labels,
        main_metric=main_metric,
        qa_style=spec.qa_style,
        tagging_level=task_section.get("tagging_level", "word"),
        features=dataclasses.asdict(settings),
        data=dataclasses.asdict(opts),
        recipe=recipe.to_dict(),
        source_model=str(model_dir.resolve()),
    )
    for seed in recipe.seeds:
        run = train_seed(
            model_dir=model_dir,
            family=family,
            spec=spec,
            recipe=recipe,
            settings=settings,
            labels=labels,
            train=train,
            dev=dev,
            test=test,
            seed=seed,
            num_layers=num_layers,
            device=device,
            pad_id=ids.pad,
            progress=args.progress,
        )
        model = run.pop("model")
        test_preds = run.pop("test_predictions")
        info = dataclasses.replace(
            info_base,
            seed=seed,
            best_epoch=run["best_epoch"],
            dev_scores=run["dev"],
            created=now(),
        )
        value = run["dev"][main_metric] if recipe.select_by == "metric" else -run["dev_loss"]
        if best_overall is None or value > best_overall:
            best_overall = value
            _save_replacing(model, out_dir / "model", info, tok_source)
            results["best_seed"] = seed
            results["saved_model"] = str((out_dir / "model").resolve())
            if test is not None and test_preds is not None:
                path = out_dir / "test_predictions.jsonl"
                lines = [
                    json.dumps(family.record(e, p, labels), ensure_ascii=False)
                    for e, p in zip(test.examples, test_preds, strict=True)
                ]
                atomic_write_bytes(path, ("\n".join(lines) + "\n").encode("utf-8"))
                results["test_predictions"] = str(path.resolve())
        if args.keep_all_seeds:
            _save_replacing(model, out_dir / "seeds" / f"seed-{seed}", info, tok_source)
            run["saved_model"] = str((out_dir / "seeds" / f"seed-{seed}").resolve())
        del model
        results["seeds"].append(run)
        results["summary"] = {
            "dev": summarize_runs([r["dev"] for r in results["seeds"]]),
            "test": summarize_runs([r["test"] for r in results["seeds"]]),
        }
        write_json(results_path, results)
    results["complete"] = True
    results["timings"]["total_seconds"] = time.perf_counter() - t_start
    write_json(results_path, results)

    rows = [
        (split, m, results["summary"][split][m])
        for split in ("dev", "test")
        for m in _report_metrics(spec.family, main_metric)
        if m in results["summary"].get(split, {})
    ]
    n = len(recipe.seeds)
    _print_table(
        f"{spec.name}: {n} seed{'s' if n > 1 else ''}, best epoch selected by dev "
        f"{main_metric if recipe.select_by == 'metric' else 'loss'} (scores x100)",
        rows,
    )
    if not test:
        print("  (no test split: pass --test-file to score one)")
    for line in floor_lines(results.get("floors"), _report_metrics(spec.family, main_metric)):
        print(line)
    print(f"results: {results_path}")
    print(f"model:   {out_dir / 'model'} (seed {results.get('best_seed')})")
    return results


def metric_names(family: str, num_labels: int) -> list[str]:
    """Metrics a family reports that can select a checkpoint (all: higher is better)."""
    if family == "classification":
        extra = ["f1", "acc_and_f1"] if num_labels == 2 else ["macro_f1"]
        return ["accuracy", "mcc", *extra]
    return {
        "regression": ["pearson", "spearman", "corr"],
        "tagging": ["f1", "precision", "recall", "accuracy"],
        "qa": ["exact_match", "f1"],
    }[family]


def _report_metrics(family: str, main: str) -> list[str]:
    wanted = {
        "classification": ["accuracy", "f1", "macro_f1", "mcc"],
        "regression": ["pearson", "spearman"],
        "tagging": ["f1", "precision", "recall"],
        "qa": ["exact_match", "f1"],
    }[family]
    return [main] + [m for m in wanted if m != main]


def _save_replacing(model: nn.Module, target: Path, info: TaskInfo, tok_source: Path) -> None:
    """Save into a fresh sibling directory, then swap it in (no half-written model dir)."""
    tmp = target.parent / f".{target.name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    save_finetuned(model.to("cpu"), tmp, info, tok_source)
    old = target.parent / f".{target.name}.old"
    if target.exists():
        if old.exists():
            shutil.rmtree(old)
        os.replace(target, old)
    os.replace(tmp, target)
    if old.exists():
        shutil.rmtree(old)


LOSS_READ_EVERY = 50  # training steps between reads of the running loss (a GPU sync)


def train_seed(
    *,
    model_dir: Path,
    family: Family,
    spec: TaskSpec,
    recipe: Recipe,
    settings: FeatureSettings,
    labels: Sequence[str],
    train: Prepared,
    dev: Prepared,
    test: Prepared | None,
    seed: int,
    num_layers: int,
    device: torch.device,
    pad_id: int,
    progress: bool = True,
) -> dict[str, Any]:
    """Train one seed, keep its best epoch on dev, score that on test."""
    t0 = time.perf_counter()
    set_seed(seed)
    encoder, _ = load_encoder(model_dir)
    model = family.build_model(encoder, max(1, len(labels))).to(device)
    optimizer = build_optimizer(model, recipe, num_layers)
    bs = recipe.batch_size
    micro = recipe.micro_batch_size or bs
    n = len(train.features)
    steps_per_epoch = math.ceil(n / bs)
    total = steps_per_epoch * recipe.epochs
    warmup = round(recipe.warmup_fraction * total)
    scheduler = linear_schedule(optimizer, warmup, total)
    gen = torch.Generator().manual_seed(seed)
    main = recipe.main_metric
    history: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    best_state: dict[str, torch.Tensor] | None = None
    step = 0
    for epoch in range(1, recipe.epochs + 1):
        model.train()
        t_epoch = time.perf_counter()
        perm = torch.randperm(n, generator=gen).tolist()
        running, seen = 0.0, 0
        bar = tqdm(
            total=steps_per_epoch,
            desc=f"{spec.name} seed {seed} epoch {epoch}/{recipe.epochs}",
            disable=not progress,
            file=sys.stderr,
        )
        for b in range(steps_per_epoch):
            idx = perm[b * bs : (b + 1) * bs]
            optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            for m in range(0, len(idx), micro):  # gradient accumulation over micro-batches
                part = idx[m : m + micro]
                batch = _to(family.collate([train.features[i] for i in part], pad_id), device)
                with _autocast(device, recipe.bf16):
                    logits = model(
                        batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]
                    )
                loss = family.loss(logits, batch)
                (loss * (len(part) / len(idx))).backward()
                step_loss = step_loss + loss.detach().float() * len(part)  # on the device
            if recipe.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
            optimizer.step()
            scheduler.step()
            step += 1
            running = running + step_loss
            seen += len(idx)
            bar.update(1)
            if step % LOSS_READ_EVERY == 0 or b == steps_per_epoch - 1:
                mean = float(running) / seen  # the only host sync of the loop
                if not math.isfinite(mean):
                    bar.close()
                    raise RuntimeError(
                        f"seed {seed}, epoch {epoch}, by step {step}: the training loss is "
                        f"{mean}; lower --learning-rate, or pass --no-bf16"
                    )
                bar.set_postfix(loss=f"{mean:.4f}")
        running = float(running)
        bar.close()
        train_seconds = time.perf_counter() - t_epoch
        scores, dev_loss, _ = evaluate_prepared(
            model,
            family,
            dev,
            labels,
            settings,
            device,
            pad_id,
            batch_size=recipe.eval_batch_size,
            qa_style=spec.qa_style,
            bf16=recipe.bf16,
            desc=f"dev (epoch {epoch})",
            progress=progress,
        )
        entry = {
            "epoch": epoch,
            "train_loss": running / max(1, seen),
            "dev_loss": dev_loss,
            "dev": scores,
            "train_seconds": train_seconds,
            "eval_seconds": time.perf_counter() - t_epoch - train_seconds,
        }
        history.append(entry)
        value = scores[main] if recipe.select_by == "metric" else -(dev_loss or 0.0)
        if best is None or value > best["value"]:
            best = {"value": value, "epoch": epoch, "dev": scores, "dev_loss": dev_loss}
            best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        # one line per epoch, with or without progress bars
        shown = "n/a" if dev_loss is None else f"{dev_loss:.4f}"
        print(
            f"{spec.name} seed {seed} epoch {epoch}: train loss {entry['train_loss']:.4f}, "
            f"dev loss {shown}, dev {main} {100 * scores[main]:.2f}",
            file=sys.stderr,
        )
    assert best is not None and best_state is not None
    model.load_state_dict(best_state)
    test_scores, test_loss, test_preds = None, None, None
    if test is not None:
        test_scores, test_loss, test_preds = evaluate_prepared(
            model,
            family,
            test,
            labels,
            settings,
            device,
            pad_id,
            batch_size=recipe.eval_batch_size,
            qa_style=spec.qa_style,
            bf16=recipe.bf16,
            desc="test",
            progress=progress,
        )
    return {
        "seed": seed,
        "best_epoch": best["epoch"],
        "dev": best["dev"],
        "dev_loss": best["dev_loss"],
        "test": test_scores,
        "test_loss": test_loss,
        "steps": step,
        "warmup_steps": warmup,
        "history": history,
        "seconds": time.perf_counter() - t0,
        "model": model,
        "test_predictions": test_preds,
    }


def finetune_cli(args: FinetuneArgs) -> int:
    """Fine-tune a model on a task (several seeds), save the best, write results.json.

    Examples:
      electra finetune --task nsmc --model koelectra-base-v3-discriminator
      electra finetune --task rte --model out/export/discriminator --seeds 1 2 3 4 5
      electra finetune --task custom --train-file reviews.csv --text-column review \\
          --label-column stars --model MODEL
    """
    finetune(args)
    return 0


# ---------------------------------------------------------------------------
# electra evaluate
# ---------------------------------------------------------------------------


@dataclass
class EvaluateArgs:
    """Options of ``electra evaluate``."""

    model: str = _doc("Fine-tuned model directory (from electra finetune, or a HF task model).")
    task: str = _doc("Task (default: the one the model was fine-tuned on).", default="")
    split: Literal["test", "dev", "train"] = _doc(
        "Split of the task's data to score (rebuilt with the model's split seed).", default="test"
    )
    test_file: str = _doc("Score this file (the task's format) instead of a split.", default="")
    data_dir: str = _doc("Data directory (default: as when fine-tuned).", default="")
    text_column: str = _doc("Text column (custom tables).", default="")
    text_pair_column: str = _doc("Second-text column (custom tables).", default="")
    label_column: str = _doc("Label column (custom tables).", default="")
    max_eval_examples: int = _doc("Score at most N examples (0: all).", default=0)
    batch_size: int = _doc("Batch size.", default=64)
    device: str = _doc("auto, cpu, cuda or cuda:N.", default="auto")
    bf16: bool = _doc("bfloat16 autocast.", default=False)
    output: str = _doc(
        "Results JSON (default: MODEL/eval-SPLIT.json).", default="", meta={"short": "-o"}
    )
    progress: bool = _doc("Show progress bars.", default=True)


def _data_options_for(ft: Finetuned, args: Any) -> DataOptions:
    stored = dict(ft.info.data)
    known = {f.name for f in dataclasses.fields(DataOptions)}
    opts = DataOptions(**{k: v for k, v in stored.items() if k in known})
    opts.balance = bool(stored.get("balance", False))  # models saved before balancing: all
    if getattr(args, "data_dir", ""):
        opts.data_dir = str(Path(args.data_dir).resolve())
    for name in ("text_column", "text_pair_column", "label_column"):
        if getattr(args, name, ""):
            setattr(opts, name, getattr(args, name))
    if not opts.task_type and ft.info.task == "custom":
        opts.task_type = ft.info.family
    return opts


def evaluate(args: EvaluateArgs) -> dict[str, Any]:
    """Score a fine-tuned model on its task's test (or dev/train) split or on a file."""
    t0 = time.perf_counter()
    device = resolve_device(args.device)
    ft = load_finetuned(args.model, device)
    info = ft.info
    spec = get_task(args.task or info.task)
    if spec.name == "custom":
        spec = dataclasses.replace(spec, family=info.family, main_metric=info.main_metric)
    if spec.family != info.family:
        raise ValueError(
            f"task {spec.name!r} is a {spec.family} task but {args.model} is a {info.family} model"
        )
    opts = _data_options_for(ft, args)
    if args.test_file:
        examples = read_task_file(spec, args.test_file, opts)
        from electra.finetune.common import Splits
        from electra.finetune.tasks import check_labels

        check_labels(spec, Splits([], [], examples), info.labels, origin="the model's labels")
        source = str(Path(args.test_file).resolve())
        split = "file"
    else:
        data = load_task_data(spec, opts, labels=info.labels or None)
        examples = getattr(data.splits, args.split)
        source = data.splits.notes.get(args.split, "")
        split = args.split
        if not examples:
            raise ValueError(f"task {spec.name!r} has no {args.split} split ({source})")
    examples = subsample(examples, args.max_eval_examples, opts.split_seed)
    family = ft.family
    settings = info.settings
    from electra.tokenizer import special_ids

    pad = special_ids(ft.tokenizer).pad
    prepared = prepare(family, examples, ft.tokenizer, settings, info.labels)
    scores, loss, _ = evaluate_prepared(
        ft.model,
        family,
        prepared,
        info.labels,
        settings,
        device,
        pad,
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
        "model": str(Path(args.model).resolve()),
        "task": spec.name,
        "family": spec.family,
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
    out = Path(args.output) if args.output else Path(args.model) / f"eval-{split}.json"
    write_json(out, result)
    print(f"{spec.name} {split} ({len(examples)} examples, scores x100)")
    for k, v in scores.items():
        print(f"  {k:<14} {100 * v:8.2f}")
    print(f"results: {out}")
    result["output"] = str(out)
    return result


def evaluate_cli(args: EvaluateArgs) -> int:
    """Score a fine-tuned model on its task's test split (or --split dev, or --test-file)."""
    evaluate(args)
    return 0


# ---------------------------------------------------------------------------
# electra predict
# ---------------------------------------------------------------------------


class TorchPredictor:
    """``electra predict --backend torch``: a fine-tuned directory run with PyTorch."""

    precision = "fp32"

    def __init__(self, model_dir: str, device: str, bf16: bool, progress: bool) -> None:
        from electra.tokenizer import special_ids

        self.device = resolve_device(device)
        self.ft = load_finetuned(model_dir, self.device)
        self.info = self.ft.info
        max_length = None if self.info.family == "qa" else self.info.settings.max_length
        self.ft.tokenizer = prepared_tokenizer(self.ft.tokenizer, max_length)  # once, not per call
        self.pad = special_ids(self.ft.tokenizer).pad
        self.bf16, self.progress = bf16, progress
        self.precision = "bf16" if bf16 else "fp32"
        self.last_truncated = 0

    def predict_examples(self, examples: Sequence[Any], batch_size: int) -> list[Any]:
        family, info = self.ft.family, self.info
        prepared = prepare(family, list(examples), self.ft.tokenizer, info.settings, info.labels)
        self.last_truncated = _truncated(prepared.features)
        outputs, _ = run_model(
            self.ft.model,
            family,
            prepared.features,
            batch_size,
            self.device,
            self.pad,
            with_loss=False,
            bf16=self.bf16,
            desc="predict",
            progress=self.progress,
        )
        return family.predict(examples, prepared.features, outputs, info.labels, info.settings)

    def record(self, example: Any, prediction: Any) -> dict[str, Any]:
        return self.ft.family.record(example, prediction, self.info.labels)


__all__ = [
    "EvaluateArgs",
    "FinetuneArgs",
    "PredictArgs",
    "evaluate",
    "finetune",
    "glue_score_from_results",
    "predict",
    "resolve_device",
    "run_model",
    "summarize",
]
