"""The fine-tuning loop: forward passes, one seed's training with best-epoch selection.

Written once against :class:`~electra.finetune.families.Family`: the family
featurises, batches, computes the loss and decodes; this module runs the
model, the optimizer (AdamW with layer-wise decay, :mod:`~electra.finetune.recipe`)
and the schedule, and keeps each seed's best epoch on dev (never on test).

A step with a NaN or infinite loss or gradient is skipped (no update of the
weights or of AdamW's state; the schedule moves on) and counted, on the device
(:func:`~electra.model.optim.step_unless`); ``max_nonfinite_in_a_row`` of them
in a row stop the seed with :class:`~electra.model.optim.NonFiniteError`.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from electra.finetune.common import FeatureSettings
from electra.finetune.families import Family
from electra.finetune.recipe import Recipe, build_optimizer, linear_schedule
from electra.finetune.tasks import TaskSpec
from electra.model.hf import load_encoder
from electra.model.optim import NonFiniteError, NonFiniteSteps, nonfinite, step_unless
from electra.system.precision import autocast_for, bf16_is_fast

LOSS_READ_EVERY = 50  # training steps between reads of the running loss (a GPU sync)


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def default_bf16(device: torch.device) -> bool:
    """bf16 autocast unless told otherwise: where the device multiplies bf16 natively
    (Ampere or newer GPUs; CPUs with AVX512-BF16 or AMX), see ``electra.system.precision``."""
    return bf16_is_fast(device)


def gpu_defaults(device: torch.device) -> None:
    """TF32 for the fp32 matmuls and convolutions left outside autocast, on a GPU."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def forward(
    model: nn.Module, batch: dict[str, torch.Tensor], device: torch.device, bf16: bool
) -> torch.Tensor:
    """The model's logits of a collated batch already on ``device``."""
    with autocast_for("bf16" if bf16 else "fp32", device):
        return model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])


# ---------------------------------------------------------------------------
# Forward passes
# ---------------------------------------------------------------------------


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
            logits = forward(model, batch, device, bf16)
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

    @property
    def truncated(self) -> int:
        """Examples cut to the max length."""
        return truncated(self.features)


def truncated(features: Sequence[dict[str, Any]]) -> int:
    """How many features were cut to the max length."""
    return sum(1 for f in features if f.get("truncated"))


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
# One seed
# ---------------------------------------------------------------------------


@dataclass
class TrainingJob:
    """What every seed of one fine-tuning run shares."""

    model_dir: Path
    spec: TaskSpec
    recipe: Recipe
    settings: FeatureSettings
    labels: list[str]
    train: Prepared
    dev: Prepared
    test: Prepared | None
    num_layers: int
    device: torch.device
    pad_id: int
    progress: bool = True
    # Where the model came from when not a local directory (``org/name@sha``).
    source_model: str = ""

    @property
    def family(self) -> Family:
        return self.spec.family

    def evaluate(
        self, model: nn.Module, data: Prepared, desc: str
    ) -> tuple[dict[str, float], float | None, list[Any]]:
        """Scores, loss and predictions on one featurised split."""
        return evaluate_prepared(
            model,
            self.family,
            data,
            self.labels,
            self.settings,
            self.device,
            self.pad_id,
            batch_size=self.recipe.eval_batch_size,
            qa_style=self.spec.qa_style,
            bf16=self.recipe.bf16,
            desc=desc,
            progress=self.progress,
        )


class BestEpoch:
    """The best epoch so far on dev (by the main metric or the loss) and its weights."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self.value: float | None = None
        self.epoch = 0
        self.dev: dict[str, float] = {}
        self.dev_loss: float | None = None
        self.state: dict[str, torch.Tensor] | None = None

    def offer(
        self, model: nn.Module, epoch: int, scores: dict[str, float], dev_loss: float | None
    ) -> None:
        """Keep this epoch (a CPU copy of the weights) when it beats the best so far."""
        if self.recipe.select_by == "metric":
            value = scores[self.recipe.main_metric]
        else:
            value = -(dev_loss or 0.0)
        if self.value is None or value > self.value:
            self.value, self.epoch, self.dev, self.dev_loss = value, epoch, scores, dev_loss
            self.state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


class Optimisation:
    """Model, AdamW with layer-wise decay, schedule and the shuffling generator of one seed."""

    def __init__(self, job: TrainingJob, seed: int) -> None:
        recipe = job.recipe
        encoder, _ = load_encoder(job.model_dir)
        self.model = job.family.build_model(encoder, max(1, len(job.labels))).to(job.device)
        self.optimizer = build_optimizer(self.model, recipe, job.num_layers)
        self.steps_per_epoch = math.ceil(len(job.train.features) / recipe.batch_size)
        total = self.steps_per_epoch * recipe.epochs
        self.warmup = round(recipe.warmup_fraction * total)
        self.scheduler = linear_schedule(self.optimizer, self.warmup, total)
        self.generator = torch.Generator().manual_seed(seed)
        self.step = 0
        self.nonfinite = NonFiniteSteps(recipe.max_nonfinite_in_a_row, job.device)

    def train_step(self, job: TrainingJob, idx: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step over the examples ``idx``: their summed loss and whether the
        step was skipped (1: a NaN or infinite loss or gradient), both 0-d on the device."""
        recipe, family = job.recipe, job.family
        micro = recipe.micro_batch_size or recipe.batch_size
        self.optimizer.zero_grad(set_to_none=True)
        step_loss: Any = 0.0
        for m in range(0, len(idx), micro):  # gradient accumulation over micro-batches
            part = idx[m : m + micro]
            batch = _to(
                family.collate([job.train.features[i] for i in part], job.pad_id), job.device
            )
            loss = family.loss(forward(self.model, batch, job.device, recipe.bf16), batch)
            (loss * (len(part) / len(idx))).backward()
            step_loss = step_loss + loss.detach().float() * len(part)
        clip = recipe.grad_clip if recipe.grad_clip > 0 else float("inf")  # inf: the norm only
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        skip = nonfinite(norm, step_loss)
        step_unless(self.optimizer, skip)
        self.scheduler.step()
        self.step += 1
        self.nonfinite.add(skip, self.step)
        return step_loss, skip

    def stop_if_nonfinite(self, seed: int, epoch: int) -> int:
        """The steps skipped so far (a host sync); :class:`NonFiniteError` once
        ``max_nonfinite_in_a_row`` of them came in a row."""
        skipped, hit = self.nonfinite.read()
        if hit:
            limit = self.nonfinite.limit
            raise NonFiniteError(
                f"seed {seed}, epoch {epoch}, step {self.step}: {limit} steps in a row "
                f"({self.nonfinite.streak()}) had a NaN or infinite loss or gradient "
                f"(--max-nonfinite-in-a-row {limit}; {skipped} skipped in all); their updates "
                "were skipped. Lower --learning-rate, or pass --no-bf16"
            )
        return skipped


GROUP_BATCHES = 50  # batches per length-sorted group (transformers' megabatch_mult)


def epoch_batches(
    lengths: Sequence[int], batch_size: int, generator: torch.Generator, by_length: bool
) -> list[list[int]]:
    """The batches of one epoch: indices into ``lengths``, in a seeded random order.

    Plain: a random permutation cut into batches. ``by_length`` (as
    ``transformers``' ``group_by_length``): the permutation is cut into groups
    of :data:`GROUP_BATCHES` batches, each group sorted by length (longest
    first) and cut into batches, and the batches shuffled. Which examples meet
    in a batch stays random, but they have similar lengths, so dynamic padding
    wastes little: random batches of short reviews (NSMC, SST-2) are about
    two-thirds padding. Either way every example is used once and there are
    ``ceil(n / batch_size)`` batches, all full but at most one.
    """
    perm = torch.randperm(len(lengths), generator=generator).tolist()
    if not by_length:
        return [perm[i : i + batch_size] for i in range(0, len(perm), batch_size)]
    group = batch_size * GROUP_BATCHES
    batches: list[list[int]] = []
    for g in range(0, len(perm), group):
        part = sorted(perm[g : g + group], key=lambda i: -lengths[i])  # stable: ties stay random
        batches += [part[i : i + batch_size] for i in range(0, len(part), batch_size)]
    order = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in order]


def train_epoch(job: TrainingJob, opt: Optimisation, seed: int, epoch: int) -> float:
    """One pass over the training features in a seeded order; the mean training loss."""
    recipe, features = job.recipe, job.train.features
    opt.model.train()
    lengths = [len(f["input_ids"]) for f in features]
    batches = epoch_batches(lengths, recipe.batch_size, opt.generator, recipe.group_by_length)
    running: Any = 0.0  # the summed loss of the steps taken (a skipped one's is NaN)
    seen: Any = 0  # the examples of the steps taken
    bar = tqdm(
        total=opt.steps_per_epoch,
        desc=f"{job.spec.name} seed {seed} epoch {epoch}/{recipe.epochs}",
        disable=not job.progress,
        file=sys.stderr,
    )
    with bar:
        for b, idx in enumerate(batches):
            loss, skip = opt.train_step(job, idx)
            running = running + torch.where(skip > 0, 0.0, loss)
            seen = seen + len(idx) * (1 - skip)
            bar.update(1)
            if opt.step % LOSS_READ_EVERY == 0 or b == opt.steps_per_epoch - 1:
                skipped = opt.stop_if_nonfinite(seed, epoch)  # the loop's only host syncs
                mean = float(running) / max(1.0, float(seen))
                bar.set_postfix(loss=f"{mean:.4f}", **({"skipped": skipped} if skipped else {}))
    return float(running) / float(seen) if float(seen) else float("nan")


def stalled(recipe: Recipe, best: BestEpoch, epoch: int) -> bool:
    """Whether ``recipe.patience`` epochs in a row have passed without a better dev score.

    Early stopping lets one recipe give a slow learner (tagging from a discriminator, which
    was still rising at the third epoch) its epochs without charging a task that peaked at
    the second for all of them.
    """
    return recipe.patience > 0 and epoch < recipe.epochs and epoch - best.epoch >= recipe.patience


def train_seed(job: TrainingJob, seed: int) -> dict[str, Any]:
    """Train one seed, keep its best epoch on dev, score that on test."""
    t0 = time.perf_counter()
    set_seed(seed)
    opt = Optimisation(job, seed)
    main = job.recipe.main_metric
    best = BestEpoch(job.recipe)
    history: list[dict[str, Any]] = []
    for epoch in range(1, job.recipe.epochs + 1):
        t_epoch = time.perf_counter()
        train_loss = train_epoch(job, opt, seed, epoch)
        train_seconds = time.perf_counter() - t_epoch
        scores, dev_loss, _ = job.evaluate(opt.model, job.dev, f"dev (epoch {epoch})")
        history.append(
            {
                "epoch": epoch,
                "train_loss": train_loss,
                "dev_loss": dev_loss,
                "dev": scores,
                "train_seconds": train_seconds,
                "eval_seconds": time.perf_counter() - t_epoch - train_seconds,
            }
        )
        best.offer(opt.model, epoch, scores, dev_loss)
        shown = "n/a" if dev_loss is None else f"{dev_loss:.4f}"  # one line per epoch, always
        skipped = opt.nonfinite.skipped
        print(
            f"{job.spec.name} seed {seed} epoch {epoch}: train loss {train_loss:.4f}, "
            f"dev loss {shown}, dev {main} {100 * scores[main]:.2f}"
            + (f", {skipped} steps skipped (NaN or infinite loss or gradient)" if skipped else ""),
            file=sys.stderr,
        )
        if stalled(job.recipe, best, epoch):
            print(
                f"{job.spec.name} seed {seed}: no better dev {main} for {job.recipe.patience} "
                f"epochs, stopped after epoch {epoch} of {job.recipe.epochs} (best: {best.epoch})",
                file=sys.stderr,
            )
            break
    assert best.state is not None
    opt.model.load_state_dict(best.state)
    test_scores, test_loss, test_preds = None, None, None
    if job.test is not None:
        test_scores, test_loss, test_preds = job.evaluate(opt.model, job.test, "test")
    return {
        "seed": seed,
        "best_epoch": best.epoch,
        "dev": best.dev,
        "dev_loss": best.dev_loss,
        "test": test_scores,
        "test_loss": test_loss,
        "steps": opt.step,
        "skipped_steps": opt.nonfinite.skipped,
        "warmup_steps": opt.warmup,
        "history": history,
        "seconds": time.perf_counter() - t0,
        "model": opt.model,
        "test_predictions": test_preds,
    }
