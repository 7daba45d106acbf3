"""``electra compare``: replaced token detection against MLM at equal pre-training compute.

The paper's central claim, checked on the user's own data and machine:

1. one vocabulary and one set of blocks (by default built here from the
   Korean Wikipedia text and English books in the data directory, since the
   downstream tasks are Korean and English, plus each task's unlabelled text
   outside the splits it scores: NSMC reviews, SST-2 sentences);
2. two pre-training runs of the same encoder on the same blocks, RTD
   (generator + discriminator) and MLM (BERT), each stopped when it has spent
   the same training-FLOPs budget (counted as the paper counts them, so the
   RTD arm pays for its generator); checkpoints at fractions of the budget;
3. fine-tuning of every checkpoint, and of the untrained encoder (the
   no-pre-training baseline at 0 FLOPs), on NSMC and SST-2 over several
   seeds, with the Table 7 recipe;
4. the report (:mod:`electra.experiments.compare_report`): ``compare.md`` (a
   table: median test accuracy and spread per arm, budget and task, with the
   floors of each task on the same split: TF-IDF + logistic regression and the
   majority class, and for a sentence-pair task
   the TF-IDF pair-feature floor beside the joined-pair one, see
   ``electra.finetune.baselines``), then the result in words (where RTD passes
   MLM on each task, against the seeds' spread, the floors and the passes over
   the data: ``electra.experiments.crossover``), and ``compare.png``
   (downstream score against pre-training FLOPs on a log axis, one line per arm,
   the untrained starts and the floors as horizontal lines), plus
   ``compare.json`` with every number.

Stages are reused when re-run with the same options; an arm stopped by SIGTERM,
Ctrl-C or ``run.max_minutes`` resumes exactly from its checkpoint. A larger
budget trains anew: the learning rate decays to zero at the budget's last step,
so an arm trained to B is not the start of one trained to 2B (doubling budgets
come from one run to the largest, ``--points``).

Its ``--help`` builds the ``--SECTION.FIELD`` flags from the pre-training config, which
loads PyTorch anyway, so the module imports what it uses at the top (only matplotlib,
optional, waits until a plot is drawn).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from electra.blocks.format import MANIFEST
from electra.blocks.options import PrepareCommand
from electra.blocks.prepare import prepare
from electra.blocks.read import open_blocks
from electra.config import ConfigError, Override
from electra.experiments.arms import Arm, as_arm, parse_arms
from electra.experiments.compare_report import TABLE_ARM, is_tagging, write_report
from electra.experiments.compare_report import log as _log  # one progress voice
from electra.experiments.heldout import unscored_reviews, unscored_task_text
from electra.experiments.options import ARM_KEYS, CompareCommand
from electra.finetune.baselines import floor_scores
from electra.finetune.recipe import TABLE7, infer_size
from electra.finetune.results import results_complete
from electra.finetune.run import finetune, finetune_args_from, finetune_options
from electra.model.hf import export_random_discriminator, word_table_key
from electra.pretrain.config import load_config, resolve_model
from electra.pretrain.export import export_run
from electra.pretrain.flops import FlopsPlan, executed_flops_plan, paper_flops_plan
from electra.pretrain.objectives import OBJECTIVES
from electra.pretrain.trainer import Trainer
from electra.system.files import atomic_write_json
from electra.system.paths import default_data_dir
from electra.system.workers import processes_used, run_jobs
from electra.text.corpus import ReadOptions
from electra.text.vocabulary import train_tokenizer

ARMS = tuple(OBJECTIVES)  # the plain arms; a variant is OBJECTIVE:KEY=VALUE (arms.py)


def check_arms(cmd: CompareCommand) -> list[Arm]:
    """The parsed ``--arms`` (:mod:`electra.experiments.arms`), each arm's recipe loaded
    once, so that a bad override fails before the first arm trains, not an hour later."""
    arms = parse_arms(cmd.arms, ARM_KEYS)
    for arm in arms:
        load_config(cmd.config, arm_overrides(cmd, arm))
    return arms


def default_corpus(data_dir: Path, out: Path, tasks: list[str]) -> list[Path]:
    """Korean Wikipedia + English books + each task's own unscored text.

    The tasks' text is what a user adapting to a domain would add: for NSMC
    the raw reviews outside its scored dev and test splits (as in the demo,
    ``out/nsmc_reviews.txt``), for another text task its training split's texts
    outside dev and test (``out/TASK_text.txt``; SST-2: movie-review sentences
    and phrases, where the books alone share little with the task). Never the
    text compare scores: that would flatter every pre-trained arm against
    ``none`` and the TF-IDF floor, which never see it.
    """
    from electra.finetune.tasks import get_task

    names = [get_task(t).name for t in tasks]
    files = sorted((data_dir / "pretrain/ko/kowiki").glob("*/wiki_*"))
    files += sorted((data_dir / "pretrain/en/gutenberg").glob("*.txt"))
    raw_reviews = [data_dir / "nsmc/raw_subset"] if "nsmc" in names else []
    missing = [f for f in [*files, *raw_reviews] if not f.exists()]
    if not files or missing:
        raise FileNotFoundError(
            f"{data_dir}: the default corpus is missing ({missing[:1] or 'pretrain/'}); "
            "pass --data-dir or --blocks"
        )
    for task in names:
        if task == "nsmc":
            files.append(unscored_reviews(data_dir, out / "nsmc_reviews.txt"))
        elif text := unscored_task_text(task, data_dir, out / f"{task}_text.txt"):
            files.append(text)
        else:
            _log(f"{task}: not a text task; none of its text added to the corpus")
    return files


def build_blocks(cmd: CompareCommand, out: Path, data_dir: Path) -> Path:
    """Tokenizer + blocks of the default corpus (reused when already built)."""
    files = default_corpus(data_dir, out, cmd.tasks)
    tok = out / "tokenizer"
    stamp = {"sources": [f.name for f in files], "vocab_size": cmd.vocab_size}
    built = tok / "corpus.json"  # a vocabulary from other sources is trained anew
    same = built.is_file() and json.loads(built.read_text()) == stamp
    retrain = not ((tok / "vocab.txt").is_file() and same)
    if retrain:
        _log(f"training a {cmd.vocab_size}-token vocabulary on {len(files)} sources")
        train_tokenizer(
            [str(f) for f in files],
            tok,
            vocab_size=cmd.vocab_size,
            limit_mb=cmd.corpus_mb * 2,
            read_options=ReadOptions(strip_gutenberg=True),
            progress=cmd.progress,
        )
        atomic_write_json(built, stamp)
    blocks = out / ("blocks-packed" if cmd.pack_blocks else "blocks")  # both may be kept
    prepare(
        PrepareCommand(
            inputs=[str(f) for f in files],
            tokenizer=str(tok),
            output=str(blocks),
            max_length=128,
            strip_gutenberg=True,
            pack=cmd.pack_blocks,
            overwrite=retrain,  # blocks of the old vocabulary are rebuilt with it
            progress=cmd.progress,
        )
    )
    return blocks


def recipe_overrides(cmd: CompareCommand) -> list[Override]:
    """The user's pre-training overrides: ``--set`` first, then the dotted flags."""
    return [*cmd.set, *cmd.flags.items()]


def arm_overrides(cmd: CompareCommand, arm: Arm) -> list[Override]:
    """An arm's recipe: the shared overrides, then the arm's own, then its objective."""
    return [*recipe_overrides(cmd), *arm.overrides, f"objective.objective='{arm.objective}'"]


def blocks_id(blocks: Path) -> str:
    """The content fingerprint of prepared blocks (their manifest's), not their path.

    Rebuilt blocks at the same path (another vocabulary, another corpus) get another
    id, so nothing trained on the old ones is taken for a run on the new ones.
    """
    manifest = blocks / MANIFEST
    if not manifest.is_file():
        raise FileNotFoundError(f"{blocks}: no {MANIFEST}; not prepared blocks")
    return json.loads(manifest.read_text())["fingerprint"]


def corpus_size(blocks: Path) -> dict[str, int]:
    """The training split's tokens, blocks and block length (the manifest's): what a pass is."""
    manifest = json.loads((blocks / MANIFEST).read_text())
    train = manifest["splits"]["train"]
    return {
        "train_tokens": int(train["tokens"]),
        "train_blocks": int(train["blocks"]),
        "block_length": int(manifest["block_length"]),
    }


def _arm_key(cmd: CompareCommand, arm: Arm | str, blocks: Path, by_path: bool = False) -> list[Any]:
    """What keys an arm's run, but its budget and points: its recipe and the blocks'
    content (:func:`blocks_id`), not the path they were named by (``by_path``: as runs
    were keyed before, when ``data/blocks`` and ``./data/blocks`` trained twice)."""
    arm = as_arm(arm)
    recipe = load_config(cmd.config, arm_overrides(cmd, arm))
    recipe.data.blocks = str(blocks) if by_path else ""
    clock = load_config(cmd.config).run  # the config's own: runs keyed before keep their names
    recipe.run.max_minutes, recipe.run.save_every_minutes = 0.0, clock.save_every_minutes
    key = dataclasses.asdict(recipe)
    for (section, name), before in ADDED_SINCE.items():  # at the old behaviour: not keyed
        if key[section].get(name) == before:
            del key[section][name]
    return [key, blocks_id(blocks)]


# Recipe fields added after runs were keyed, with the value that behaves as before they
# existed: at that value a field keys nothing, so a run trained before it keeps its name and
# is still reused and resumed.
ADDED_SINCE: dict[tuple[str, str], Any] = {
    ("optim", "dropout"): True,
    ("objective", "generator_shared_layers"): 0,
    ("objective", "generator_top_layers"): 1,
    ("objective", "mws_weight"): 0.0,
    ("objective", "mws_candidates"): 5,
}


def arm_run_dir(cmd: CompareCommand, arm: Arm | str, blocks: Path, out: Path) -> Path:
    """``OUT/OBJECTIVE-XXXXXXXX``, keyed by the arm's recipe, blocks (content), budget and points.

    Changing the config, a ``--set``, the blocks or the budget therefore never reuses
    (or resumes) a run trained with other settings. When a run stops (``run.max_minutes``)
    and how often it saves by the clock change no weight, so they key nothing: an arm
    stopped by a time limit resumes without it. Nor does the path the blocks are named by:
    ``data/blocks``, its absolute path or a copy find the same run (a run keyed by the
    path, as before, is still found by it). A variant arm (``rtd:KEY=VALUE``) is keyed by
    the recipe its overrides make: one that changes nothing is the plain arm's run.
    """
    arm = as_arm(arm)
    here = out / f"{arm.objective}-{_fingerprint(_run_key(cmd, arm, blocks))}"
    before = out / f"{arm.objective}-{_fingerprint(_run_key(cmd, arm, blocks, by_path=True))}"
    return before if before.is_dir() and not here.is_dir() else here  # old runs keep theirs


def _run_key(cmd: CompareCommand, arm: Arm | str, blocks: Path, by_path: bool = False) -> list[Any]:
    """The whole key of an arm's run: :func:`_arm_key` with the budget and its counter."""
    arm = as_arm(arm)
    recipe, blocks_key = _arm_key(cmd, arm, blocks, by_path)
    key = [recipe, cmd.budget_flops, cmd.points, blocks_key]
    key.append({"warmup_share": WARMUP_SHARE})  # runs from before the cap are not resumed
    if cmd.counter != "paper":  # another counter buys other steps; paper runs keep their names
        key.append({"counter": cmd.counter})
    return key


ARM_FILE = "compare_arm.json"  # in an arm's run directory: its recipe key, budget and points


def other_budgets(cmd: CompareCommand, arm: Arm | str, blocks: Path, out: Path) -> list[dict]:
    """The runs in ``out`` of this arm's recipe and blocks at another budget or points.

    None of them is continued (the learning rate decays to zero at a budget's last step,
    so an arm trained to B is not the start of one trained to 2B); compare names them
    before training anew, so a user who meant to reuse one knows why it is not.
    """
    arm = as_arm(arm)
    keys = {_fingerprint(_arm_key(cmd, arm, blocks, by_path)) for by_path in (False, True)}
    here = arm_run_dir(cmd, arm, blocks, out)
    found = []
    for f in sorted(out.glob(f"{arm.objective}-*/{ARM_FILE}")):
        record = json.loads(f.read_text())
        if f.parent != here and record.get("recipe") in keys:
            found.append({**record, "run": f.parent.name})
    return found


def pretrain_arm(
    cmd: CompareCommand, arm: Arm | str, blocks: Path, out: Path
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Train one arm to the FLOPs budget; export a checkpoint at each budget point.

    Returns one record per point (steps, FLOPs by ``cmd.counter`` and by both counters,
    passes over the training blocks, HF directory) and what one step costs
    (:func:`step_costs`, with the seconds measured). An arm that was stopped (SIGTERM,
    Ctrl-C, ``run.max_minutes``) resumes from its last checkpoint, exactly; a finished one
    is reused without building a Trainer. The budget is charged by ``cmd.counter`` for
    every arm; the Trainer logs the paper's count, and a run whose own count differs from
    compare's is refused (:func:`_check_charged`).
    """
    arm = as_arm(arm)
    run = arm_run_dir(cmd, arm, blocks, out)
    probe = load_config(cmd.config, arm_overrides(cmd, arm))
    plans = step_plans(probe, blocks)
    flops_step = plans[cmd.counter].per_step
    steps = plans[cmd.counter].steps_for(cmd.budget_flops)
    if steps < 10:
        raise ConfigError(
            f"--budget-flops {cmd.budget_flops:.3g} buys only {steps} {arm.name} steps "
            f"({flops_step:.3g} FLOPs each); raise it"
        )
    interval = max(1, steps // cmd.points)  # checkpoints land exactly on the marks
    marks = sorted({interval * (i + 1) for i in range(cmd.points - 1)} | {steps})
    summary_path = run / "summary.json"
    done = summary_path.is_file() and json.loads(summary_path.read_text()).get("step") == steps
    if not done:
        _note_other_budgets(cmd, arm, blocks, out, run, steps)
        plan = plans[cmd.counter]
        frozen = plan.freeze_step(steps)
        after = (
            f", {plan.frozen_step:.3g} each once the generator is frozen after step {frozen}"
            if frozen is not None
            else ""
        )
        _log(
            f"pre-training {arm.name}: {steps} steps of {flops_step:.3g} FLOPs ({cmd.counter} "
            f"count{after}) = {plan.through(steps, steps):.3g}"
        )
        _train_arm(_arm_config(cmd, arm, blocks, run, steps, interval, len(marks)), arm, run)
    charged = plans["paper"].through(steps, steps)
    _check_charged(json.loads(summary_path.read_text()), arm.name, charged, run)
    train = open_blocks(blocks, "train")
    records = [_export_mark(arm, run, mark, plans, steps, cmd.counter) for mark in marks]
    costs = {name: plan.mean_step(steps) for name, plan in plans.items()}
    for r in records:  # each block seen once per pass (run.seed orders them)
        r["passes"] = r["steps"] * probe.optim.batch_size / len(train)
    seconds = measured_step_seconds(run)
    return records, {**costs, "seconds": seconds}


def _note_other_budgets(
    cmd: CompareCommand, arm: Arm, blocks: Path, out: Path, run: Path, steps: int
) -> None:
    """Record this run's budget (:data:`ARM_FILE`); say which runs of the same recipe at
    other budgets are not continued, and why (:func:`other_budgets`)."""
    for other in other_budgets(cmd, arm, blocks, out):
        _log(
            f"{arm.name}: {other['run']} has this recipe at --budget-flops {other['budget_flops']:.3g} "
            f"--points {other['points']}; not continued (its learning rate decays to zero at "
            "its own budget): for several budgets, run once to the largest with --points"
        )
    run.mkdir(parents=True, exist_ok=True)
    record = {"recipe": _fingerprint(_arm_key(cmd, arm, blocks)), "steps": steps}
    atomic_write_json(
        run / ARM_FILE, {**record, "budget_flops": cmd.budget_flops, "points": cmd.points}
    )


def _check_charged(summary: dict[str, Any], arm: str, charged: float, run: Path) -> None:
    """The Trainer's own FLOPs count of the run must be the one compare charged.

    compare buys the steps whose whole schedule fits the budget (``charged`` paper FLOPs);
    the Trainer logs its own count of the steps it ran (``train_flops``). Were they two
    counts (another generator shape, another model, another freeze step), the arms would no
    longer be charged alike: refuse rather than report such a point.
    """
    counted = summary.get("train_flops")
    if counted is None:
        return  # a run from before the summary counted FLOPs
    if abs(counted - charged) > 1e-9 * max(charged, 1.0):
        raise ConfigError(
            f"{run}: the trainer counted {counted:.6g} FLOPs for {summary['step']} {arm} "
            f"steps, compare charged {charged:.6g}: the counts differ, the budget is not fair"
        )


WARMUP_SHARE = 0.1  # the most of an arm's steps its learning-rate warm-up may take


def capped_warmup(warmup_steps: int, steps: int) -> int:
    """The recipe's warm-up, at most ``WARMUP_SHARE`` of the arm's ``steps`` (at least 1).

    Recipes are written for runs of a million steps (``small`` warms up for
    10,000); an arm of a small budget would otherwise end before its learning
    rate peaked, and an RTD and an MLM arm of the same FLOPs (so of different
    step counts) would reach different fractions of it. Every arm gets the same
    rule, so each peaks at the same point of its run.
    """
    return max(1, min(warmup_steps, int(WARMUP_SHARE * steps)))


def _arm_config(
    cmd: CompareCommand,
    arm: Arm | str,
    blocks: Path,
    run: Path,
    steps: int,
    interval: int,
    marks: int,
) -> Any:
    """The arm's recipe: ``steps`` steps, a checkpoint kept at every ``interval``, the
    warm-up capped (:func:`capped_warmup`)."""
    arm = as_arm(arm)
    overrides = [
        *arm_overrides(cmd, arm),
        f"data.blocks={json.dumps(str(blocks))}",
        f"run.output_dir={json.dumps(str(run))}",
        f"optim.max_steps={steps}",
        f"run.save_every={interval}",
        f"run.keep_last={marks + 1}",
        "run.export=false",
        f"run.progress={'true' if cmd.progress else 'false'}",
    ]
    cfg = load_config(cmd.config, overrides)
    warmup = capped_warmup(cfg.optim.warmup_steps, steps)
    if warmup != cfg.optim.warmup_steps:
        _log(
            f"{arm.name}: warm-up capped at {warmup} steps ({WARMUP_SHARE:.0%} of {steps}; "
            f"the recipe's is {cfg.optim.warmup_steps})"
        )
        cfg.optim.warmup_steps = warmup
    return cfg


def _train_arm(cfg: Any, arm: Arm, run: Path) -> None:
    """Train (or resume) one arm; stop the comparison if the run ended short of its steps.

    A SIGTERM or Ctrl-C (a closed laptop, a pre-empted machine) or ``run.max_minutes``
    checkpoints the step reached; the later marks do not exist yet, so compare stops,
    saying how to resume (the same command again).
    """
    summary = Trainer(cfg, resume=(run / "checkpoints").is_dir()).fit()
    if summary.get("stopped") == "signal" or summary.get("step", 0) < cfg.optim.max_steps:
        raise SystemExit(
            f"pre-training {arm.name} was interrupted at step {summary.get('step')} "
            f"({summary.get('stopped')}; checkpoint saved in {run}); run the same compare "
            "command again to resume it"
        )


def _export_mark(
    arm: Arm, run: Path, mark: int, plans: dict[str, FlopsPlan], steps: int, counter: str
) -> dict[str, Any]:
    """The budget point at step ``mark`` of ``steps``: its checkpoint exported (once) for
    fine-tuning; its FLOPs by ``counter`` (``flops``) and by each counter of ``plans``."""
    ckpt_dir = run / "checkpoints" / f"step-{mark:08d}"
    hf = run / "hf" / f"step-{mark:08d}"
    if not (hf / "generator" / "config.json").is_file():
        export_run(ckpt_dir, hf)
    model = hf / OBJECTIVES[arm.objective].kept_encoder
    return {
        "arm": arm.name,
        "run": run.name,
        "steps": mark,
        "flops": plans[counter].through(mark, steps),
        **{f"{name}_flops": plan.through(mark, steps) for name, plan in plans.items()},
        "model": str(model),
    }


def step_costs(cfg: Any, blocks: Path) -> dict[str, float]:
    """FLOPs of one training step of ``cfg`` on ``blocks`` by both counters (before any
    freeze of the generator: :func:`step_plans` has the whole schedule's)."""
    return {name: plan.per_step for name, plan in step_plans(cfg, blocks).items()}


def step_plans(cfg: Any, blocks: Path) -> dict[str, FlopsPlan]:
    """What the steps of ``cfg`` on ``blocks`` cost by both counters, step by step (a
    frozen generator's steps cost less: :class:`~electra.pretrain.flops.FlopsPlan`).

    ``paper``: :func:`~electra.pretrain.flops.paper_train_flops_per_step`, the official
    script's count the Trainer logs (embedding lookups as one-hot matmuls, 2 x vocab x
    width per token and encoder: at the cpu recipe's shape most of what RTD's small
    generator is charged). ``executed``:
    :func:`~electra.pretrain.flops.executed_matmul_flops_per_step`, the matmuls the step
    runs (lookups free, the generator's head at the masked positions only).
    """
    b = open_blocks(blocks, "train")
    model = resolve_model(cfg, b.vocab_size, "compare")
    batch, seq = cfg.optim.batch_size, b.block_length
    return {
        "paper": paper_flops_plan(model, batch, seq, cfg.objective),
        "executed": executed_flops_plan(model, batch, seq, cfg.objective),
    }


def measured_step_seconds(run: Path) -> float | None:
    """Seconds per step on this machine: the median over the run's log intervals of the
    time between two records over the steps between them (each interval's own, so a
    resume's gap is one interval among many); None when the run logged fewer than two.

    Not from the logged ``tokens_per_s``: that counts text tokens, not padding, so
    ``positions / tokens_per_s`` overstates a step by the share of padding (1.44x in
    compare's default corpus)."""
    log = run / "metrics.jsonl"
    if not log.is_file():
        return None
    marks = []
    for line in log.read_text().splitlines():
        rec = json.loads(line) if line.strip() else {}
        if "elapsed_s" in rec and "step" in rec and "loss" in rec:
            marks.append((rec["step"], rec["elapsed_s"]))
    per_step = [
        (t1 - t0) / (s1 - s0)
        for (s0, t0), (s1, t1) in zip(marks, marks[1:], strict=False)
        if s1 > s0 and t1 > t0
    ]
    return statistics.median(per_step) if per_step else None


def untrained_encoder(cmd: CompareCommand, blocks: Path, out: Path) -> Path:
    """The same discriminator shape, randomly initialised: the no-pre-training baseline."""
    cfg = load_config(cmd.config, recipe_overrides(cmd))
    model_cfg = resolve_model(cfg, open_blocks(blocks, "train").vocab_size, "compare")
    key = [dataclasses.asdict(model_cfg), blocks_id(blocks)]  # the blocks give its tokenizer
    target = out / f"none-{_fingerprint(key)}" / "hf" / "discriminator"
    return export_random_discriminator(model_cfg, target, blocks)


def table_only_encoder(cmd: CompareCommand, blocks: Path, none: Path, out: Path) -> Path | None:
    """The untrained encoder with the recipe's PPMI token table (None: a random-table recipe).

    ``none``'s weights with its token rows replaced by the vectors a ``ppmi`` run
    starts from: fine-tuned beside the arms, it shows what their pre-training
    added beyond the table.
    """
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from electra.pretrain.cooccurrence import ppmi_table

    cfg = load_config(cmd.config, recipe_overrides(cmd))
    if cfg.init.token_embeddings != "ppmi":
        return None
    train = open_blocks(blocks, "train")
    name = f"ppmi-{_fingerprint([none.parents[1].name, blocks_id(blocks), cfg.run.seed])}"
    target = out / name / "hf" / "discriminator"
    if (target / "model.safetensors").is_file():
        return target
    state = load_file(str(none / "model.safetensors"))
    table = state[word_table_key(state, str(none))]
    std = float(resolve_model(cfg, table.shape[0], "compare").initializer_range)
    rows, values, _ = ppmi_table(train, table.shape[1], std, seed=cfg.run.seed)
    table[torch.from_numpy(rows)] = torch.from_numpy(values).to(table.dtype)
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(none, tmp)
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    tmp.rename(target)
    return target


def _fingerprint(obj: Any) -> str:
    """Eight hex digits naming a JSON-able set of settings."""
    body = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:8]


def task_options(cmd: CompareCommand, task: str) -> dict[str, Any]:
    """The fine-tuning options of ``task``: compare's, with the tagging tasks' epochs."""
    opts = finetune_options(cmd)
    if is_tagging(task):
        opts["epochs"] = cmd.tagging_epochs
    return opts


def finetune_settings(cmd: CompareCommand, task: str) -> str:
    """A short fingerprint of ``task``'s fine-tuning options (results reused only if equal)."""
    # "data": NSMC became balanced and results gained floors; older results are not reused.
    # Shuffled batches key as before the option existed, so their results are still found.
    opts = task_options(cmd, task)
    batches = {"batches": "by-length"} if opts.pop("group_by_length") else {}
    return _fingerprint({"data": "balanced-floors/1", **batches, **opts})


def finetune_point(
    cmd: CompareCommand,
    model: str,
    task: str,
    out: Path,
    data_dir: Path,
    floors_cache: Path | None = None,
    learning_rate: float | None = None,
) -> dict:
    """Fine-tuning results of one point on one task (reused if done); floors shared by cache.
    ``learning_rate``: the peak rate (``None``: Table 7's for the model's size)."""

    res_path = out / "results.json"
    if results_complete(res_path):
        return json.loads(res_path.read_text())
    args = finetune_args_from(
        cmd,
        epochs=task_options(cmd, task)["epochs"],
        model=model,
        task=task,
        output=str(out),
        data_dir=str(data_dir),
        floors_cache=str(floors_cache) if floors_cache else "",
        progress=cmd.progress,
        learning_rate=learning_rate,
    )
    return finetune(args)


def finetune_all(
    cmd: CompareCommand, points: list[dict[str, Any]], out: Path, data_dir: Path
) -> dict[str, Any]:
    """Fine-tune every point on every task (``cmd.finetune_jobs`` at a time), at each rate
    of ``cmd.finetune_lrs`` (or Table 7's).

    Fills each point's ``scores`` (with several rates, the rate of the best dev median per
    task: :func:`best_rate`); returns each task's floors (one split for every point).
    """
    rates: list[float | None] = list(dict.fromkeys(cmd.finetune_lrs)) or [None]  # each once
    jobs = [(i, task, lr) for i, _ in _trained_first(points) for task in cmd.tasks for lr in rates]
    args = [
        (
            f"{points[i]['arm']} @ {points[i]['flops']:.3g} FLOPs",
            points[i]["model"],
            task,
            _point_dir(points[i], out)
            / finetune_dir(cmd, task, lr, table7_rate(points[i]["model"])),
            data_dir,
            out / "floors",
            lr,
        )
        for i, task, lr in jobs
    ]
    results = _run_jobs(cmd, args)
    floors: dict[str, Any] = {}
    by_rate: dict[tuple[int, str], dict[float | None, dict[str, Any]]] = {}
    for (i, task, lr), res in zip(jobs, results, strict=True):
        by_rate.setdefault((i, task), {})[lr] = _main_scores(res)
        floors.setdefault(task, _task_floors(res))
    for i, p in enumerate(points):
        p["scores"] = {task: best_rate(by_rate[i, task]) for task in cmd.tasks}
    return floors


def _trained_first(points: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """``(index, point)`` with the pre-trained points first: the comparison a user waits for
    lands before the controls' fine-tunings (which a finished earlier study often holds)."""
    return sorted(enumerate(points), key=lambda ip: ip[1]["steps"] == 0)


def table7_rate(model: str) -> float | None:
    """Table 7's fine-tuning rate for the exported model at ``model`` (by its hidden size),
    or None where it has no readable ``config.json``."""
    try:
        hidden = json.loads((Path(model) / "config.json").read_text())["hidden_size"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return TABLE7[infer_size(int(hidden))].learning_rate


def _point_dir(point: dict[str, Any], out: Path) -> Path:
    """The directory of one point's fine-tunings: its run and step."""
    return out / "finetune" / f"{point['run']}-{point['steps']}"


def finetune_dir(
    cmd: CompareCommand, task: str, lr: float | None, default_lr: float | None = None
) -> str:
    """Where one point's fine-tuning of ``task`` at rate ``lr`` goes, under the point's
    directory. Table 7's rate (``lr`` None, or equal to the point's ``default_lr``) keeps
    the name it had before rates could be chosen, so adding ``--finetune-lrs`` to a
    finished study reuses those fine-tunings."""
    name = f"{task}-{finetune_settings(cmd, task)}"
    return name if lr is None or lr == default_lr else f"{name}-lr{lr:g}"


def best_rate(scores: dict[float | None, dict[str, Any]]) -> dict[str, Any]:
    """The scores of the rate whose dev median is highest (the first such rate on a tie),
    with ``lr`` and every rate's dev median (``dev_by_lr``) added when there were several."""
    if list(scores) == [None]:
        return scores[None]

    def dev(r: float | None) -> float:
        median = scores[r].get("dev_median")
        return float("-inf") if median is None else median

    lr = max(scores, key=dev)
    by_lr = {f"{r:g}": s.get("dev_median") for r, s in scores.items()}
    return {**scores[lr], "lr": lr, "dev_by_lr": by_lr}


def _finetune_job(cmd: CompareCommand, label: str, model: str, task: str, *rest: Path) -> dict:
    _log(f"fine-tuning {label} on {task}")
    return finetune_point(cmd, model, task, *rest)


def _run_jobs(cmd: CompareCommand, args: list[tuple], job: Callable = _finetune_job) -> list[dict]:
    """``job(cmd, *a)`` for each ``a``: here one at a time, or in up to
    ``cmd.finetune_jobs`` spawned processes (:func:`electra.system.workers.run_jobs`; a job
    whose ``a[3]/results.json`` is complete is only read back)."""

    def done(a: tuple) -> bool:
        return results_complete(a[3] / "results.json")

    if processes_used(sum(not done(a) for a in args), cmd.finetune_jobs):
        cmd = dataclasses.replace(cmd, progress=False)  # bars side by side would mix
    return run_jobs(functools.partial(job, cmd), args, cmd.finetune_jobs, done)


def _main_scores(results: dict) -> dict[str, Any]:
    """The main metric's test summary, its dev median (what a rate is chosen by), how many
    seeds chose their last epoch, and each seed's score (``by_seed``: the arms are paired
    by fine-tuning seed in :func:`~electra.experiments.crossover.paired_seeds`)."""
    metric = results["task"]["main_metric"]
    test = results["summary"].get("test") or results["summary"]["dev"]
    dev = (results["summary"].get("dev") or {}).get(metric) or {}
    seeds = results.get("seeds") or []
    epochs = (results.get("recipe") or {}).get("epochs")
    last = sum(s.get("best_epoch") == epochs for s in seeds)
    split = "test" if results["summary"].get("test") else "dev"
    by_seed = {
        str(s["seed"]): s[split][metric]
        for s in seeds
        if "seed" in s and metric in (s.get(split) or {})
    }
    return {
        "metric": metric,
        **test[metric],
        "dev_median": dev.get("median"),
        "last_epoch_best": last,
        **({"by_seed": by_seed} if by_seed else {}),
    }


def _task_floors(results: dict) -> dict[str, Any]:
    """The task's floors on the main metric: ``tfidf`` (a pair joined), ``tfidf_pair``
    (pair features; ``None`` for a single text) and ``constant`` (majority or mean)."""

    floors = results.get("floors")
    if not floors:
        return {}
    split = "test" if results["summary"].get("test") else "dev"
    s = floor_scores(floors, split, results["task"]["main_metric"])
    return {
        "tfidf": s.get("tfidf"),
        "tfidf_pair": s.get("tfidf_pair"),
        "constant": s.get(floors["constant"]),
        "constant_name": floors["constant"],
        "descriptions": floors.get("descriptions") or {},
    }


def compare(cmd: CompareCommand) -> dict[str, Any]:
    """Run the whole comparison; returns what ``compare.json`` holds."""
    if cmd.finetune_jobs < 1:
        raise ConfigError(f"finetune_jobs: at least 1 (got {cmd.finetune_jobs})")
    if min(cmd.epochs, cmd.tagging_epochs) < 1:
        raise ConfigError(
            f"epochs, tagging_epochs: at least 1 (got {cmd.epochs}, {cmd.tagging_epochs})"
        )
    arms = check_arms(cmd)
    t0 = time.time()
    out = Path(cmd.output)
    out.mkdir(parents=True, exist_ok=True)
    data_dir = Path(cmd.data_dir) if cmd.data_dir else default_data_dir()
    blocks = Path(cmd.blocks) if cmd.blocks else build_blocks(cmd, out / "data", data_dir)
    none = untrained_encoder(cmd, blocks, out)
    points: list[dict[str, Any]] = [
        {"arm": "none", "run": none.parents[1].name, "steps": 0, "flops": 0.0, "model": str(none)}
    ]
    if table := table_only_encoder(cmd, blocks, none, out):  # what both arms start from
        points.append(
            {
                "arm": TABLE_ARM,
                "run": table.parents[1].name,
                "steps": 0,
                "flops": 0.0,
                "model": str(table),
            }
        )
    costs = {}
    for arm in arms:
        arm_points, costs[arm.name] = pretrain_arm(cmd, arm, blocks, out)
        points += arm_points
    floors = finetune_all(cmd, points, out, data_dir)
    result = {
        "command": asdict(cmd),
        "blocks": str(blocks),
        "counter": cmd.counter,
        "flops_per_step": {arm: c[cmd.counter] for arm, c in costs.items()},
        "step_costs": costs,
        "corpus": corpus_size(blocks),
        "points": points,
        "floors": floors,
        "elapsed_s": time.time() - t0,
    }
    table = write_report(out, result)
    _log(f"wrote {out / 'compare.md'} and {out / 'compare.png'}")
    print(table)
    return result


def compare_cli(cmd: CompareCommand) -> int:
    """Run ``electra compare`` (its ``--help`` is :class:`~electra.experiments.options.CompareCommand`'s docstring)."""
    compare(cmd)
    return 0
