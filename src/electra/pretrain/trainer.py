"""The pre-training loop: the command users leave running for days.

``electra pretrain --config small --set optim.learning_rate=3e-4`` trains over
blocks made by ``electra prepare``. What it guarantees:

* the paper's recipe by default (AdamW 0.9/0.999/1e-6, weight decay 0.01 off
  LayerNorm and biases, linear warmup then linear decay, clipping at 1.0);
* exact resume: a run killed at any moment and restarted with ``--resume``
  produces the same losses as one never interrupted. Nothing random is kept
  in a hidden state: the data order is a function of (seed, position), the
  objective's randomness a function of (seed, block index) and dropout is
  reseeded from (seed, step, rank) at every step. A checkpoint therefore only
  needs weights, optimizer, scheduler, step and data position;
* data parallelism under ``torchrun`` (DDP; FSDP with ``run.fsdp = true``):
  the global batch is fixed by the config and split across ranks and
  accumulation steps, each rank reads its own slice of the block stream,
  rank 0 alone writes; a run can resume under another world size;
* checkpoints written atomically, the last N kept, one written on SIGTERM or
  SIGINT before a clean exit; never one holding a NaN or an infinity;
* a step with a NaN or infinite loss or gradient is skipped (weights and
  optimizer state untouched; its batch and step number used up, so the
  schedule and the data order are those of any other run) and counted
  (``skipped_steps``); ``run.max_nonfinite_in_a_row`` of them in a row stop
  the run, naming the last good checkpoint. Decided on the device, with no
  host sync, identically on every rank;
* one run per run directory: rank 0 holds its lock (``.electra.lock``, naming
  pid, host and start), a second run refuses to start;
* metrics (losses, accuracies, replaced-token precision/recall, learning
  rate, gradient norm, tokens, cumulative FLOPs) to ``metrics.jsonl`` and
  TensorBoard, a progress bar, periodic validation with health metrics
  (replaced-token and in-row-swap ROC-AUC, token-vector cosine, the unigram
  floor of the generator: ``electra.pretrain.health``);
* at the end, Hugging Face directories for the discriminator and generator
  with the tokenizer, a one-line summary and a plain health verdict.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

from electra.blocks.read import BlockLoader, Blocks, batch_indices, open_blocks
from electra.config import ConfigError, to_dict
from electra.model import checkpoint as ckpt
from electra.model.config import ElectraConfig
from electra.model.encoder import disable_dropout
from electra.model.optim import (
    NonFiniteError,
    NonFiniteSteps,
    adamw,
    linear_warmup_decay,
    nonfinite,
    step_unless,
    weight_decay_groups,
)
from electra.pretrain.config import PretrainConfig, resolve_model
from electra.pretrain.continued import Start, load_start_weights, plan_start
from electra.pretrain.cooccurrence import WARM_START_FILE, warm_start_embeddings
from electra.pretrain.distributed import (
    Dist,
    all_reduce,
    gather_int,
    set_deterministic,
    setup_distributed,
)
from electra.pretrain.export import export_run
from electra.pretrain.flops import FlopsPlan, paper_flops_plan
from electra.pretrain.health import HealthProbe, most_frequent_token, verdict
from electra.pretrain.metrics import MetricsLog, StepWindow, one_line_summary
from electra.pretrain.ngram import ngram_source
from electra.pretrain.objective import (
    ElectraForPretraining,
    SampleRNG,
    drop_from_optimizer,
    frozen_temperature,
    match_frozen_state,
    picks_per_row,
)
from electra.system import allocator
from electra.system.diskspace import DiskFullError
from electra.system.errors import RunError
from electra.system.files import atomic_write_json
from electra.system.locks import DirectoryLock, DirectoryLocked
from electra.system.precision import autocast_for, resolve_precision
from electra.system.tracking import Tracker, flat_params, open_tracker


def forward_blocks(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    first_index: int,
    *,
    special: Any,
    mask_prob: float,
    seed: int,
    device: torch.device,
    keep: bool = False,
):
    """``model``'s objective on a CPU batch whose first block is ``first_index`` of the stream.

    What depends only on the batch (are all blocks full, how many positions each
    row masks) is computed here on the host, so the device is never asked for it
    (no host sync); the blocks go over with non-blocking copies, and each one's
    randomness is its own hashed stream (:class:`SampleRNG`, seeded by the
    block's place in the global stream). The training loop calls this for every
    micro-batch, and ``benchmarks/pretrain_throughput.py`` times this very call, so
    the step it measures is the one ``electra pretrain`` runs.
    """
    cpu_ids, cpu_mask = batch["input_ids"], batch["attention_mask"]
    full = bool(cpu_mask.all())
    picks = picks_per_row(cpu_ids, cpu_mask, special, mask_prob)
    ids = cpu_ids.to(device, non_blocking=True)
    mask = cpu_mask.to(device, non_blocking=True)
    types = batch["token_type_ids"].to(device, non_blocking=True)
    seeds = SampleRNG.seeds_for(seed, range(first_index, first_index + len(ids)))
    rng = SampleRNG(seeds, device, picks=picks)
    extra = {"keep_tensors": True} if keep else {}
    return model(ids, mask, types, rng=rng, full=full, **extra)


def _mix_seed(*parts: int) -> int:
    """A 63-bit seed from integers (splitmix-style, platform independent)."""
    x = 0x9E3779B97F4A7C15
    for p in parts:
        x = (x ^ (int(p) & 0xFFFF_FFFF_FFFF_FFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFF_FFFF_FFFF_FFFF
        x ^= x >> 31
    return x & 0x7FFF_FFFF_FFFF_FFFF


class _Stop:
    """Set by SIGTERM/SIGINT; the loop checkpoints and exits at the next step boundary."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _Stop:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ValueError):  # not in the main thread
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C means now
        self.signal = signum

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


@dataclass
class Trainer:
    """One pre-training run; :meth:`fit` runs it to the end."""

    cfg: PretrainConfig
    resume: bool = False

    def fit(self) -> dict[str, Any]:
        """Run (or resume) the whole run; the summary, or {} where this process did not save.

        Rank 0 holds the run directory's lock throughout (:mod:`electra.system.locks`):
        a second run on the same directory refuses to start, naming this one.
        """
        self.t_fit0 = time.time()  # run.fit_minutes counts from here
        self.tracker = Tracker()  # run.tracker's, opened with the metrics log (rank 0)
        env = self._setup_process()
        with self._run_lock(env):
            return self._fit(env)

    @contextlib.contextmanager
    def _run_lock(self, env: Dist) -> Iterator[None]:
        """Rank 0 locks run.output_dir for the block; when it cannot, every rank raises
        :class:`DirectoryLocked` (none is left waiting in a collective)."""
        lock = DirectoryLock(self.cfg.run.output_dir) if env.main else None
        refused: DirectoryLocked | None = None
        try:
            if lock is not None:
                lock.acquire()
        except DirectoryLocked as exc:
            refused = exc
        if self._any_rank(refused is not None):
            raise refused or DirectoryLocked(
                f"{self.cfg.run.output_dir}: rank 0 could not lock the run directory"
            )
        try:
            yield
        finally:
            if lock is not None:
                lock.release()

    def _fit(self, env: Dist) -> dict[str, Any]:
        """:meth:`fit` once the process is set up and the run directory locked."""
        cfg = self.cfg
        train, val = self._open_blocks()
        start = plan_start(cfg.init, cfg.model, cfg.objective, train)  # None: random init
        model_cfg, gen_cfg, special = self._shapes(start, train)
        micro = self._micro_batch(env.world)
        if cfg.objective.generator_freeze_at > 0 and env.world > 1:
            raise ConfigError(
                "objective.generator_freeze_at: single-process runs only for now (DDP and "
                "FSDP would wait for the frozen generator's gradients)"
            )
        out = self.out = Path(cfg.run.output_dir)
        resolved = self._resolved(model_cfg, gen_cfg, special, train, start)
        torch.manual_seed(_mix_seed(cfg.run.seed, 0x1417))  # the same initial weights on every rank
        model = ElectraForPretraining(model_cfg, cfg.objective, special, gen_cfg).to(env.device)
        if not cfg.optim.dropout:
            disable_dropout(model)  # pre-training only: the exported config keeps the rates
        step, position, state = self._restore(model, out)
        if start is not None and state is None:
            for note in load_start_weights(model, start.init or cfg.init):
                if env.main:
                    print(note, file=sys.stderr)
        if cfg.init.token_embeddings == "ppmi" and state is None:
            self._warm_start(model, train, out, env)
        if cfg.objective.kind.replacements == "ngram":
            self._attach_ngram(model, train, out, env, resumed=state is not None)
        wrapped = self._wrap(model, env)
        opt = self._optimizer(model, state)
        self.scaler = grad_scaler(cfg.run.precision, env.device, state)
        if env.main:
            out.mkdir(parents=True, exist_ok=True)
            atomic_write_json(out / "config.json", resolved)
        log = (
            MetricsLog(out, step, cfg.run.tensorboard, self._tracker(out, resolved))
            if env.main
            else None
        )
        loader = BlockLoader(
            train,
            micro,
            seed=cfg.run.seed,
            rank=env.rank,
            world_size=env.world,
            position=position,
            pin_memory=env.device.type == "cuda",
        )
        flops = self._flops_plan(model_cfg, gen_cfg, train.block_length, state)
        self.model, self.wrapped, self.opt, self.loader = model, wrapped, opt, loader
        self.flops, self.planned, self.micro = flops, self._plan(state, flops), micro
        self.train_blocks, self.val, self.resolved = train, val, resolved
        try:
            return self._loop(step, log)
        finally:
            if log is not None:
                log.close()
            loader.close()

    # -- pieces ------------------------------------------------------------------------------

    def _flops_plan(
        self,
        model_cfg: ElectraConfig,
        gen_cfg: ElectraConfig | None,
        block_length: int,
        state: dict[str, Any] | None,
    ) -> FlopsPlan:
        """The paper counter's FLOPs of this run's steps (what the budget spends), with the
        step its generator froze at when the run resumed after it."""
        cfg = self.cfg
        flops = paper_flops_plan(
            model_cfg, cfg.optim.batch_size, block_length, cfg.objective, gen_cfg
        )
        if state is not None and state.get("generator_frozen_at") is not None:
            flops = dataclasses.replace(flops, frozen_from=int(state["generator_frozen_at"]))
        return flops

    def _tracker(self, out: Path, resolved: dict[str, Any]) -> Tracker:
        """``run.tracker``'s tracker (rank 0), with the resolved config logged once."""
        r = self.cfg.run
        self.tracker = open_tracker(r.tracker, out, r.tracker_uri, r.tracker_project)
        if not self.tracker.resumed:
            self.tracker.log_params(flat_params(resolved))
        return self.tracker

    def _setup_process(self) -> Dist:
        """Determinism, the process group and device, the precision, the thread count."""
        cfg = self.cfg
        if cfg.run.deterministic:
            set_deterministic()
        self.env = env = setup_distributed(cfg.run.device)
        cfg.run.precision = resolve_precision(cfg.run.precision, env.device)
        if cfg.run.threads > 0:
            torch.set_num_threads(cfg.run.threads)
        return env

    def _open_blocks(self) -> tuple[Blocks, Blocks | None]:
        """The training blocks and, where the directory has it, the validation split."""
        if not self.cfg.data.blocks:
            raise ConfigError("data.blocks: no blocks directory given (run `electra prepare`)")
        self.blocks_dir = Path(self.cfg.data.blocks)
        train = open_blocks(self.blocks_dir, "train")
        train.check_tokenizer()  # the files the export will copy into the model
        try:
            val = open_blocks(self.blocks_dir, "validation")
        except (FileNotFoundError, ValueError, KeyError):
            val = None
        return train, val

    def _restore(
        self, model: ElectraForPretraining, out: Path
    ) -> tuple[int, int, dict[str, Any] | None]:
        """(step, data position, training state) of the checkpoint resumed, or a fresh start.

        A run directory that holds checkpoints is only ever continued (``--resume``).
        Sets :attr:`nonfinite`, the skipped-steps counter, to the checkpoint's count.
        """
        main = self.env.main
        limit = self.cfg.run.max_nonfinite_in_a_row
        self.nonfinite = NonFiniteSteps(limit, self.env.device)
        if not self.resume:
            held = (out / "checkpoints").is_dir() and bool(ckpt.step_dirs(out / "checkpoints"))
            if self._any_rank(held):
                raise ConfigError(
                    f"{out} already holds checkpoints; pass --resume to continue it or choose "
                    "another run.output_dir"
                )
            return 0, 0, None
        report = (lambda line: print(line, file=sys.stderr)) if main else (lambda line: None)
        latest = ckpt.load_latest(out / "checkpoints", report)  # a broken one skipped, named
        _same_checkpoint_on_every_rank(latest and latest[0], out, self.env.device)
        if latest is None:
            if main:
                print(f"no checkpoint in {out}; starting from scratch", file=sys.stderr)
            return 0, 0, None
        found, (model_state, state, _) = latest
        match_frozen_state(model, model_state)  # a run saved after its generator froze
        ckpt.load_model_state(model, model_state, str(found.path / "model.safetensors"))
        step, position = int(state["step"]), int(state["position"])
        self.nonfinite = NonFiniteSteps(limit, self.env.device, int(state.get("skipped_steps", 0)))
        if main:
            print(f"resuming from {found.path} (step {step})", file=sys.stderr)
        return step, position, state

    def _optimizer(
        self, model: ElectraForPretraining, state: dict[str, Any] | None
    ) -> torch.optim.Optimizer:
        """The paper's AdamW over the model's parameter groups, restored on resume."""
        o = self.cfg.optim
        opt = adamw(
            weight_decay_groups(model, o.weight_decay),
            lr=o.learning_rate,
            betas=(o.adam_beta1, o.adam_beta2),
            eps=o.adam_eps,
        )
        if state is not None:
            _load_optimizer(model, opt, state["optimizer"])
        return opt

    def _plan(self, state: dict[str, Any] | None, flops: FlopsPlan) -> int:
        """The steps planned: optim.max_steps, a resumed run's fitted plan, the FLOPs cap."""
        run, planned = self.cfg.run, self.cfg.optim.max_steps
        if state is not None and run.fit_minutes > 0 and "planned_steps" in state:
            planned = int(state["planned_steps"])  # the plan fitted before the interruption
            # the budget counts the time already spent on the work kept
            self.t_fit0 -= float(state.get("fit_elapsed_s", 0.0))
        if run.max_flops > 0:
            planned = min(planned, flops.steps_for(run.max_flops))
        return planned

    def _warm_start(self, model: ElectraForPretraining, train, out: Path, env: Dist) -> None:
        """init.token_embeddings = "ppmi": rank 0 computes the table, the others receive it
        (FSDP shards each rank's own copy, so they must be bit-identical)."""
        if env.main:
            warm = warm_start_embeddings(model, train, seed=self.cfg.run.seed)
            out.mkdir(parents=True, exist_ok=True)
            atomic_write_json(out / WARM_START_FILE, warm)
            print(
                f"token table: PPMI-SVD vectors for {warm['rows_replaced']} tokens from "
                f"{warm['tokens_counted']:,} training tokens ({warm['seconds']} s)",
                file=sys.stderr,
            )
        if env.world > 1:
            dist.broadcast(model.shared_embeddings.word_embeddings.weight.data, src=0)

    def _attach_ngram(
        self, model: ElectraForPretraining, train, out: Path, env: Dist, resumed: bool
    ) -> None:
        """rtd-ngram: count the blocks once (rank 0 writes the table into the run directory)
        or, on a resume, read that table back, so the replacements are the same ones."""
        if env.world > 1 and not env.main and not resumed:
            dist.barrier()  # rank 0 builds and writes first; the others read its file
        source, info = ngram_source(
            train,
            self.cfg.objective,
            out,
            env.device,
            reuse=resumed or not env.main,
            write=env.main,
            progress=env.main and self.cfg.run.progress,
        )
        if env.world > 1 and env.main and not resumed:
            dist.barrier()
        model.attach_replacements(source)
        if env.main:
            what = "built" if info["built"] else "read back"
            print(
                f"n-gram replacements: table {what} ({info['contexts']:,} contexts, "
                f"{info['entries']:,} candidates, {info['seconds']} s): {info['table']}",
                file=sys.stderr,
            )

    def _micro_batch(self, world: int) -> int:
        o = self.cfg.optim
        per = world * o.grad_accum
        if o.batch_size % per:
            raise ConfigError(
                f"optim.batch_size ({o.batch_size}) must be divisible by world size ({world}) "
                f"x optim.grad_accum ({o.grad_accum})"
            )
        return o.batch_size // per

    def _shapes(
        self, start: Start | None, blocks
    ) -> tuple[ElectraConfig, ElectraConfig | None, Any]:
        """(discriminator, generator, special ids): from the checkpoint, or preset and blocks."""
        if start is not None:
            return start.discriminator, start.generator, start.special
        model_cfg = resolve_model(self.cfg, blocks.vocab_size, "config")
        gen_cfg = None
        if self.cfg.objective.kind.has_discriminator and self.cfg.objective.kind.trains_generator:
            gen_cfg = self.cfg.objective.generator_shape(model_cfg)
        return model_cfg, gen_cfg, blocks.special

    def _resolved(
        self, model_cfg: ElectraConfig, gen_cfg, special, blocks, start: Start | None
    ) -> dict[str, Any]:
        d = to_dict(self.cfg)
        d["model"] = to_dict(model_cfg)
        d["model"]["preset"] = None if start else self.cfg.model.get("preset", "small")
        if gen_cfg is not None:
            d["generator"] = to_dict(gen_cfg)
        d["data"]["block_length"] = blocks.block_length
        d["data"]["special_ids"] = dataclasses.asdict(special)
        d["origin"] = start.origin if start else None
        return d

    def _wrap(self, model: ElectraForPretraining, env: Dist) -> nn.Module:
        """DDP, FSDP2 or the bare model, compiled as ``run.compile`` asks."""
        parts = [p for p in (model.generator, model.discriminator) if p is not None]
        if env.world > 1 and self.cfg.run.fsdp:
            return self._fully_shard(model, parts)
        if self.cfg.run.compile:
            for part in parts:
                part.electra.encoder.compile()
        if env.world == 1 and not dist.is_initialized():
            return model
        # A process group of one (ELECTRA_PROCESS_GROUP=always) is wrapped too: the GPU
        # check runs DDP's gradient all-reduce over NCCL on a single GPU that way.
        ids = [env.device.index] if env.device.type == "cuda" else None
        return DDP(model, device_ids=ids)

    def _fully_shard(self, model: ElectraForPretraining, parts: list[nn.Module]) -> nn.Module:
        """FSDP2: each encoder layer its own unit, then the root (embeddings, heads).

        With ``run.compile`` each layer is compiled in place before it is sharded
        (Dynamo runs FSDP's hooks eagerly), one graph per unit, rather than the
        whole encoder, whose graph would span every unit's all-gathers. Under
        bf16 the parameters are gathered and used in bf16 and gradients reduced
        in fp32 (``MixedPrecisionPolicy``): half the all-gather traffic, no
        precision lost in the sum over ranks."""
        # Local: public in torch.distributed.fsdp only from torch 2.6 (we allow 2.4),
        # and a second of import time that only FSDP runs should pay.
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        kw = {}
        if self.cfg.run.precision == "bf16":
            kw["mp_policy"] = MixedPrecisionPolicy(
                param_dtype=torch.bfloat16, reduce_dtype=torch.float32
            )
        for part in parts:
            for layer in part.electra.encoder.layer:
                if self.cfg.run.compile:
                    layer.compile()
                fully_shard(layer, **kw)
        fully_shard(model, **kw)
        return model

    def _grad_sync(self, sync: bool):
        """A context in which backward does (or skips) the gradient all-reduce:
        skipped on all but the last micro-batch of an accumulated step."""
        w = self.wrapped
        if hasattr(w, "set_requires_gradient_sync"):  # FSDP2: a flag, not a context
            w.set_requires_gradient_sync(sync)
            return contextlib.nullcontext()
        if not sync and hasattr(w, "no_sync"):  # DDP
            return w.no_sync()
        return contextlib.nullcontext()

    def _autocast(self):
        return autocast_for(self.cfg.run.precision, self.env.device)

    def _forward(self, batch: dict[str, torch.Tensor], first_index: int, keep: bool = False):
        """The objective on a CPU batch (:func:`forward_blocks`), under the run's autocast."""
        with self._autocast():
            return forward_blocks(
                self.wrapped,
                batch,
                first_index,
                special=self.model.special,
                mask_prob=self.cfg.objective.mask_prob,
                seed=self.cfg.run.seed,
                device=self.env.device,
                keep=keep,
            )

    def _train_step(self, step: int, scaler) -> tuple[list[str], torch.Tensor, int, torch.Tensor]:
        """One optimizer step; returns metric names, their values (on device), tokens and
        whether the step was skipped (a 0-d tensor on the device, 1: a non-finite loss or
        gradient; see :meth:`_skip_flag`)."""
        cfg, env = self.cfg, self.env
        torch.manual_seed(_mix_seed(cfg.run.seed, step, env.rank))  # dropout, reproducibly
        accum = cfg.optim.grad_accum
        total = None
        tokens = 0
        for i in range(accum):
            start = self.loader.position + env.rank * self.micro  # this rank's first block
            batch = next(self.loader)
            with self._grad_sync(i == accum - 1):
                out = self._forward(batch, start)
                loss = out.loss / accum
                (scaler.scale(loss) if scaler else loss).backward()
            names, values = out.metrics()
            total = values / accum if total is None else total + values / accum
            tokens += int(batch["attention_mask"].sum())
        if scaler:
            scaler.unscale_(self.opt)  # records fp16 overflow: scaler.update() lowers the scale
        grad_norm = self._clip()
        skip = self._skip_flag(grad_norm, total[names.index("loss")])
        step_unless(self.opt, skip)
        if scaler:
            scaler.update()
        self.opt.zero_grad(set_to_none=True)
        values = torch.cat([total, grad_norm.detach().float().reshape(1).to(total.device)])
        return [*names, "grad_norm"], values, tokens, skip

    def _skip_flag(self, grad_norm: torch.Tensor, loss: torch.Tensor) -> torch.Tensor:
        """1.0 where this step's loss or gradient norm is NaN or infinite, on any rank.

        A 0-d tensor on the device (no host sync), the maximum over ranks: the gradient
        norm is the same everywhere after the all-reduce, a rank's loss is its own, and
        every rank must skip the same steps or their weights would part.
        """
        skip = nonfinite(grad_norm, loss.to(grad_norm.device))
        return all_reduce(skip, dist.ReduceOp.MAX)

    def _clip(self) -> torch.Tensor:
        """Clip the global gradient norm; returns the norm before clipping (no host sync)."""
        clip = self.cfg.optim.grad_clip
        params = [p for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf"))
        if hasattr(norm, "full_tensor"):  # DTensor under FSDP
            norm = norm.full_tensor()
        return norm

    def _set_lr(self, step: int) -> float:
        o = self.cfg.optim
        lr = o.learning_rate * linear_warmup_decay(step, o.warmup_steps, self.planned)
        for g in self.opt.param_groups:
            g["lr"] = lr
        return lr

    def _freeze_if_due(self, step: int) -> None:
        """objective.generator_freeze_at: freeze the generator at its step (its parameters
        leave the optimizer), and set the sampling temperature of ``step``."""
        k = self.flops.freeze_step(self.planned)
        if k is None:
            return
        model = self.model
        if step >= k and not model.generator_frozen:
            drop_from_optimizer(self.opt, model.freeze_generator())
            # the count and the curriculum keep this step, whatever run.fit_minutes re-plans
            self.flops, k = dataclasses.replace(self.flops, frozen_from=step), step
            if self.env.main:
                print(f"step {step}: generator frozen (forward only from now on)", file=sys.stderr)
        model.sampling_temperature = frozen_temperature(self.cfg.objective, step, k, self.planned)

    def _fit_step(self) -> int:
        """The first step after which run.fit_minutes re-plans: half-way through warmup
        (at least 20 steps in), so the learning rate so far is the same under any plan."""
        return max(20, self.cfg.optim.warmup_steps // 2)

    def _fit_to_minutes(
        self, step: int, per_step: float, eval_s: float | None, log: MetricsLog | None
    ) -> None:
        """Set ``self.planned`` to the steps that end when run.fit_minutes are spent.

        ``per_step`` is the mean time of this session's training steps so far (a burst
        of load weighs less the longer the run); ``eval_s`` that of the validation just
        run, or None: then one is run (and logged) here to time those still to come.
        """
        cfg = self.cfg
        record: dict[str, Any] = {"step": step}
        if eval_s is None:
            t = time.time()
            record.update(self.evaluate())
            eval_s = time.time() - t if len(record) > 1 else 0.0
        left = cfg.run.fit_minutes * 60 - (time.time() - self.t_fit0)
        every = cfg.run.eval_every
        planned = step
        for _ in range(3):  # the evaluations to come depend on the plan
            evals = planned // every - step // every if every else 0
            planned = step + max(0, int((left - evals * eval_s) / per_step))
        if cfg.run.max_flops > 0:
            planned = min(planned, self.flops.steps_for(cfg.run.max_flops))
        if dist.is_initialized():  # every rank the same plan: the most cautious one
            mine = torch.tensor([-planned], device=self.env.device)
            planned = -int(all_reduce(mine, dist.ReduceOp.MAX).item())
        first = step == self._fit_step()
        changed = abs(planned - self.planned) > 0.02 * self.planned
        self.planned = planned
        if log is not None:
            log.write({**record, "planned_steps": planned, "step_s": per_step})
        if self.env.main and (first or changed):
            print(
                f"fitted to {cfg.run.fit_minutes:g} min at step {step}: {planned} steps "
                f"({per_step:.3f} s per step, {eval_s:.1f} s per validation)",
                file=sys.stderr,
            )

    def _reduce(self, values: dict[str, float]) -> dict[str, float]:
        """Average metrics over ranks."""
        if not dist.is_initialized():
            return values
        keys = sorted(values)
        t = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=self.env.device)
        all_reduce(t)
        return {k: v / self.env.world for k, v in zip(keys, t.tolist(), strict=True)}

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Validation metrics on fixed blocks with fixed masking (comparable across steps)."""
        if self.val is None or len(self.val) == 0:
            return {}
        self.model.eval()
        sums: dict[str, float] = {}
        n = 0
        seed = self.cfg.run.seed + 1_000_003
        health = self._health_probe(seed)
        for b in range(self.cfg.run.eval_batches):
            pos = b * self.micro * self.env.world
            if pos >= len(self.val):
                break
            idx = batch_indices(len(self.val), seed, pos, self.micro, self.env.rank, self.env.world)
            ids, types = self.val.get(idx)
            ids_t = torch.from_numpy(ids)
            batch = {
                "input_ids": ids_t,
                "token_type_ids": torch.from_numpy(types),
                "attention_mask": (ids_t != self.val.special.pad).long(),
            }
            with health.watching():
                out = self._forward(batch, 1 << 40 | (pos + self.env.rank * self.micro), True)
            health.add(ids_t, batch["token_type_ids"], batch["attention_mask"], out)
            for k, v in out.scalars().items():
                sums[k] = sums.get(k, 0.0) + v
            n += 1
        self.model.train()
        if n == 0:
            return {}
        means = {k: v / n for k, v in sums.items()} | health.result()
        return {f"val/{k}": v for k, v in self._reduce(means).items()}

    def _health_probe(self, seed: int) -> HealthProbe:
        """Health metrics of validation (``electra.pretrain.health``), the unigram floor computed once."""
        special = self.val.special
        if not hasattr(self, "_unigram_mode"):
            self._unigram_mode = most_frequent_token(self.train_blocks, special)
        return HealthProbe(
            self.model,
            special,
            self._unigram_mode,
            seed + self.env.rank,
            autocast=self._autocast,
            probe=not self.cfg.run.fsdp,
        )

    def _state_dicts(self) -> tuple[dict, dict]:
        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        m = get_model_state_dict(self.model, options=opts)
        o = get_optimizer_state_dict(self.model, self.opt, options=opts)
        return m, o

    def save(self, step: int) -> Path | None:
        """Checkpoint ``step`` (rank 0 writes); a state with a NaN or an infinity is refused
        on every rank with :class:`NonFiniteError`, and the checkpoints on disk are kept."""
        model_state, opt_state = self._state_dicts()  # collective under FSDP
        path, refused, full = None, None, None
        if self.env.main:
            train_state = {
                "step": step,
                "position": self.loader.position,
                "planned_steps": self.planned,
                "fit_elapsed_s": time.time() - self.t_fit0,  # run.fit_minutes' clock
                "optimizer": opt_state,
                "world_size": self.env.world,
                "skipped_steps": self.nonfinite.read()[0],
            }
            if self.flops.frozen_from is not None:  # the step the generator froze at
                train_state["generator_frozen_at"] = self.flops.frozen_from
            if self.scaler is not None:  # fp16: the loss scale is state too
                train_state["grad_scaler"] = self.scaler.state_dict()
            aliases = ckpt.alias_names(self.model)
            try:
                path = ckpt.save(
                    self.out / "checkpoints",
                    step,
                    ckpt.dedupe_state(model_state, aliases),
                    train_state,
                    self.resolved,
                    self.cfg.run.keep_last,
                    scheduled_every=self.cfg.run.save_every,
                )
            except ckpt.NonFiniteStateError as exc:
                refused = str(exc)
            except DiskFullError as exc:
                full = exc
        if self._any_rank(refused is not None or full is not None):  # also the barrier
            if full is not None:
                raise DiskFullError(
                    f"{full} Nothing else was lost: {self._last_good()} once space is free "
                    "(it repeats the steps since, exactly)",
                    full.errno,
                    full.filename,
                ) from full
            if refused is None:  # another rank: rank 0 writes, and says why it could not
                raise RunError(f"step {step}: rank 0 could not write the checkpoint")
            raise NonFiniteError(f"step {step}: {refused}; {self._last_good()}")
        return path

    def _any_rank(self, flag: bool) -> bool:
        """Whether ``flag`` is true on any rank (a collective under torchrun)."""
        if not dist.is_initialized():
            return flag
        t = torch.tensor([float(flag)], device=self.env.device)
        return bool(all_reduce(t, dist.ReduceOp.MAX).item())

    def _last_good(self) -> str:
        """Where a stopped run can be continued from, in words."""
        last = _find_resume(self.out)
        if last is None:
            return "no checkpoint has been written yet (--resume starts again from step 0)"
        return (
            f"the last good checkpoint is {last.path} (step {last.step}); "
            "run the same command with --resume to continue from it"
        )

    def _stop_if_nonfinite(self, step: int) -> None:
        """Stop (:class:`NonFiniteError`) once run.max_nonfinite_in_a_row steps in a row
        were skipped. Reads the counters (a host sync): called where the loop syncs anyway
        (a log line, a checkpoint), so the stop comes at most run.log_every steps late,
        and before any checkpoint. Every rank counts the same steps, so all stop together."""
        skipped, hit = self.nonfinite.read()
        if not hit:
            return
        limit = self.cfg.run.max_nonfinite_in_a_row
        raise NonFiniteError(
            f"{self.out}: stopped at step {step}: {limit} steps in a row "
            f"({self.nonfinite.streak()}) had a NaN or infinite loss or gradient "
            f"(run.max_nonfinite_in_a_row = {limit}; {skipped} skipped in all). Their updates "
            f"were skipped and nothing was saved after them; {self._last_good()} (a lower "
            "optim.learning_rate or a smaller optim.grad_clip may get past the spike)"
        )

    def _stop_check_due(self, step: int) -> bool:
        """Every step alone; under torchrun only every ``log_every`` steps, as agreeing
        costs a collective and a host sync (a signal then waits a few steps)."""
        return not dist.is_initialized() or step % self.cfg.run.log_every == 0

    def _stop_reason(self, stop: _Stop, t0: float) -> str | None:
        """ "signal" (SIGTERM/SIGINT), "max_minutes" or None, the same on every rank.

        Ranks decide together, so that none waits forever in a collective that the
        others have left (each rank's clock and signals are its own).
        """
        budget = self.cfg.run.max_minutes * 60
        code = 2 if stop.signal is not None else int(budget > 0 and time.time() - t0 > budget)
        if dist.is_initialized():
            flag = torch.tensor([code], device=self.env.device)
            code = int(all_reduce(flag, dist.ReduceOp.MAX).item())
        return {0: None, 1: "max_minutes", 2: "signal"}[code]

    def _log(self, step: int, lr: float, names: list[str], s: _Session) -> dict[str, float]:
        """Average the window's metrics over the steps taken and the ranks, write them
        with the count of skipped steps, show them. A window of skipped steps only has
        no metrics (every rank agrees: they skip the same steps)."""
        cfg, window = self.cfg, s.window
        means, taken = window.read()
        metrics = self._reduce(dict(zip(names, means, strict=True))) if taken else {}
        before = self.nonfinite.skipped
        skipped, _ = self.nonfinite.read()
        world = self.env.world if dist.is_initialized() else 1
        record = {
            "step": step,
            **metrics,
            "lr": lr,
            "skipped_steps": skipped,
            "tokens_per_s": window.tokens * world / max(window.seconds(), 1e-9),
            "tokens_seen": step * cfg.optim.batch_size * self.train_blocks.block_length,
            "train_flops": self.flops.through(step, self.planned),
            "elapsed_s": time.time() - s.t0,
        }
        window.reset()
        if s.log is not None:
            s.log.write(record)
        if skipped > before and self.env.main:
            print(
                f"step {step}: {skipped - before} step(s) skipped since the last log line "
                f"(NaN or infinite loss or gradient; {skipped} in all)",
                file=sys.stderr,
            )
        if s.bar is not None:
            shown = {"loss": f"{record['loss']:.3f}"} if "loss" in record else {}
            shown |= {"skipped": str(skipped)} if skipped else {}
            s.bar.set_postfix(**shown, tok_s=f"{record['tokens_per_s']:.0f}")
        return record

    def _loop(self, step: int, log: MetricsLog | None) -> dict[str, Any]:
        cfg = self.cfg
        fit_at = self._fit_step() if cfg.run.fit_minutes > 0 else 0
        s = _Session(t0=time.time(), first=step, fit_at=fit_at, bar=self._bar(step), log=log)
        self.model.train()
        stop_reason = "max_steps"
        bar = contextlib.closing(s.bar) if s.bar is not None else contextlib.nullcontext()
        with _Stop() as stop, bar:  # the bar is closed on a NonFiniteError too
            while step < self.planned:
                lr = self._set_lr(step)
                self._freeze_if_due(step)
                names, values, tokens, skip = self._train_step(step, self.scaler)
                step += 1
                s.window.add(values, tokens, skip)
                self.nonfinite.add(skip, step)
                if step % cfg.run.log_every == 0 or step == self.planned:
                    s.last.update(self._log(step, lr, names, s))
                    self._stop_if_nonfinite(step)
                eval_s = self._validate_if_due(step, s)
                self._refit_if_due(step, eval_s, s)
                if s.bar is not None:
                    s.bar.update(1)
                reason = self._stop_reason(stop, s.t0) if self._stop_check_due(step) else None
                if reason is not None:
                    stop_reason = reason
                    break
                self._save_if_due(step, s)
        return self._finish(step, stop_reason, s)

    def _bar(self, step: int) -> tqdm | None:
        if not (self.env.main and self.cfg.run.progress):
            return None
        return tqdm(
            total=self.planned, initial=step, desc="pretrain", unit="step", dynamic_ncols=True
        )

    def _validate_if_due(self, step: int, s: _Session) -> float | None:
        """Validate every run.eval_every steps: the seconds it took (None: not due)."""
        every = self.cfg.run.eval_every
        if not every or step % every:
            return None
        t_eval = time.time()
        ev = self.evaluate()
        if ev and s.log is not None:
            s.log.write({"step": step, **ev})
        eval_s = time.time() - t_eval if ev else 0.0
        s.pause(t_eval)
        return eval_s

    def _refit_if_due(self, step: int, eval_s: float | None, s: _Session) -> None:
        """run.fit_minutes: re-plan half-way through warmup, then after each validation."""
        if not s.fit_at or step <= s.first:
            return
        if not (step == s.fit_at or (step > s.fit_at and eval_s is not None)):
            return
        t_fit = time.time()
        per_step = (t_fit - s.t0 - s.paused) / (step - s.first)
        self._fit_to_minutes(step, per_step, eval_s, s.log)
        s.pause(t_fit)
        if s.bar is not None:
            s.bar.total = self.planned
            s.bar.refresh()

    def _save_if_due(self, step: int, s: _Session) -> None:
        """Checkpoint every run.save_every steps and run.save_every_minutes (not the last)."""
        run = self.cfg.run
        due = step % run.save_every == 0 or time.time() - s.last_save > run.save_every_minutes * 60
        if due and step < self.planned:
            t_save = time.time()
            self._stop_if_nonfinite(step)  # never a checkpoint after too many skipped steps
            self.save(step)
            s.pause(t_save)
            s.last_save = time.time()

    def _finish(self, step: int, stop_reason: str, s: _Session) -> dict[str, Any]:
        """The last checkpoint, validation, export and ``summary.json``; the summary."""
        self._stop_if_nonfinite(step)
        path = self.save(step)
        summary = self._summary(step, stop_reason, s, path)
        if stop_reason != "signal" and self.cfg.run.eval_every:
            summary.update(self.evaluate())
            summary["verdict"] = verdict(summary)
        if not self.env.main:
            return summary
        if self.cfg.run.export and stop_reason != "signal":
            exported = export_run(path, self.out / "hf", summary)
            summary["exported"] = {k: str(v) for k, v in exported.items()}
        atomic_write_json(self.out / "summary.json", summary)
        self.tracker.log_summary(summary)
        print(one_line_summary(summary), file=sys.stderr)
        if summary.get("verdict"):
            print(f"health: {summary['verdict']}", file=sys.stderr)
        if stop_reason == "signal":
            print(f"stopped by signal at step {step}; continue with --resume", file=sys.stderr)
        return summary

    def _summary(
        self, step: int, stop_reason: str, s: _Session, path: Path | None
    ) -> dict[str, Any]:
        summary = {
            "stopped": stop_reason,
            "step": step,
            "tokens": step * self.cfg.optim.batch_size * self.train_blocks.block_length,
            "train_flops": self.flops.through(step, self.planned),
            "planned_steps": self.planned,
            "elapsed_s": time.time() - s.t0,
            "allocator": allocator.current(),
            "distributed": {
                "world_size": self.env.world,
                "backend": dist.get_backend() if dist.is_initialized() else None,
                "wrapper": type(self.wrapped).__name__,
            },
            "checkpoint": str(path) if path else None,
            "skipped_steps": self.nonfinite.skipped,  # NaN or infinite loss or gradient
            **{k: s.last[k] for k in ("loss", "mlm_loss", "disc_loss") if k in s.last},
        }
        if self.resolved.get("origin"):
            summary["origin"] = self.resolved["origin"]
        if (self.out / WARM_START_FILE).is_file():
            summary["token_embeddings"] = json.loads((self.out / WARM_START_FILE).read_text())
        return summary


@dataclass
class _Session:
    """This process's part of a run: its clocks, for logging, fitting and saving."""

    t0: float
    first: int  # the step this session started at (run.fit_minutes measures from it)
    fit_at: int  # the step of the first re-plan (0: run.fit_minutes is off)
    bar: tqdm | None
    log: MetricsLog | None
    window: StepWindow = field(default_factory=StepWindow)
    last_save: float = field(default_factory=time.time)
    paused: float = 0.0  # validation, re-planning and checkpoint time: not training
    last: dict[str, float] = field(default_factory=dict)  # the last logged metrics

    def pause(self, since: float) -> None:
        """Count the time since ``since`` as a pause, not training."""
        spent = time.time() - since
        self.window.paused += spent
        self.paused += spent


def grad_scaler(
    precision: str, device: torch.device, state: dict[str, Any] | None = None
) -> torch.amp.GradScaler | None:
    """fp16's dynamic loss scaler (None for bf16/fp32), restored from a checkpoint's state.

    The scale and its growth counter change during training; a resumed run
    that restarted them at their defaults would skip or scale different steps
    than the uninterrupted run, so they are checkpointed with the optimizer.
    """
    if precision != "fp16":
        return None
    scaler = torch.amp.GradScaler(device.type)
    if state and state.get("grad_scaler"):
        scaler.load_state_dict(state["grad_scaler"])
    return scaler


def _find_resume(out: Path) -> ckpt.Checkpoint | None:
    return ckpt.latest_valid(out / "checkpoints")


def _same_checkpoint_on_every_rank(
    found: ckpt.Checkpoint | None, out: Path, device: torch.device
) -> None:
    """Refuse, on every rank, a resume where the ranks found different checkpoints.

    Every rank loads the checkpoint from its own ``run.output_dir``, but only rank 0
    writes one; on several machines whose run directories are not one shared file
    system, the other nodes would find none (or an old one) and train from another
    state than rank 0's, silently. Under ``--rdzv_backend c10d`` any node may be
    rank 0 (ranks go in the order the nodes join), so no node's directory is safe to
    rely on alone.
    """
    steps = gather_int(-1 if found is None else found.step, device)
    if len(set(steps)) == 1:
        return
    seen = ", ".join(
        f"rank {r}: {'no checkpoint' if s < 0 else f'step {s}'}" for r, s in enumerate(steps)
    )
    raise RunError(
        f"{out / 'checkpoints'}: the ranks found different checkpoints to resume ({seen}); "
        "the run directory must be one directory on a file system every node sees (a shared "
        "file system), since only rank 0 writes and every rank reads it on --resume"
    )


def _load_optimizer(model: nn.Module, opt: torch.optim.Optimizer, state: dict) -> None:
    set_optimizer_state_dict(
        model,
        opt,
        state,
        options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=False),
    )
