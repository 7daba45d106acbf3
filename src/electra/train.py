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
  SIGINT before a clean exit;
* metrics (losses, accuracies, replaced-token precision/recall, learning
  rate, gradient norm, tokens, cumulative FLOPs) to ``metrics.jsonl`` and
  TensorBoard, a progress bar, periodic validation with health metrics
  (replaced-token and in-row-swap ROC-AUC, token-vector cosine, the unigram
  floor of the generator: ``electra.health``);
* at the end, Hugging Face directories for the discriminator and generator
  with the tokenizer, a one-line summary and a plain health verdict.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sys
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

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

from electra import allocator
from electra import checkpoint as ckpt
from electra.config import (
    ConfigError,
    ElectraConfig,
    Override,
    apply_overrides,
    builtin_config_path,
    builtin_configs,
    from_dict,
    generator_config,
    preset,
    to_dict,
)
from electra.continued import InitConfig, Start, load_start_weights, plan_start
from electra.cooccurrence import WARM_START_FILE, warm_start_embeddings
from electra.data import BlockLoader, batch_indices, open_blocks
from electra.files import atomic_write_json, atomic_write_text
from electra.flops import paper_train_flops_per_step
from electra.health import HealthProbe, most_frequent_token, verdict
from electra.hf import export_discriminator, export_generator
from electra.modelcard import card_facts, write_model_card
from electra.objectives import ObjectiveName
from electra.optim import adamw, linear_warmup_decay, parameter_groups
from electra.precision import autocast_for, resolve_device, resolve_precision
from electra.pretraining import (
    ElectraForPretraining,
    ObjectiveConfig,
    SampleRNG,
    picks_per_row,
)
from electra.special import SpecialIds

# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------


@dataclass
class OptimConfig:
    """Optimizer and schedule (paper defaults)."""

    learning_rate: float = field(default=5e-4, metadata={"doc": "Peak learning rate."})
    adam_beta1: float = field(default=0.9, metadata={"doc": "Adam beta1."})
    adam_beta2: float = field(default=0.999, metadata={"doc": "Adam beta2."})
    adam_eps: float = field(default=1e-6, metadata={"doc": "Adam epsilon."})
    weight_decay: float = field(
        default=0.01, metadata={"doc": "Decoupled weight decay (not on LayerNorm/biases)."}
    )
    warmup_steps: int = field(default=10_000, metadata={"doc": "Linear warmup steps."})
    max_steps: int = field(default=1_000_000, metadata={"doc": "Total optimizer steps."})
    batch_size: int = field(
        default=128, metadata={"doc": "Global batch (blocks per optimizer step, all ranks)."}
    )
    grad_accum: int = field(default=1, metadata={"doc": "Micro-batches per optimizer step."})
    grad_clip: float = field(default=1.0, metadata={"doc": "Max global gradient norm (0: off)."})


@dataclass
class DataConfig:
    """Where the blocks are."""

    blocks: str = field(default="", metadata={"doc": "Directory made by `electra prepare`."})


@dataclass
class RunConfig:
    """Everything about running, logging and saving."""

    output_dir: str = field(default="runs/pretrain", metadata={"doc": "Run directory."})
    seed: int = field(default=0, metadata={"doc": "Seed of data order, masking and dropout."})
    device: str = field(default="auto", metadata={"doc": "auto, cpu, cuda or cuda:N."})
    precision: Literal["auto", "bf16", "fp32", "fp16"] = field(
        default="auto",
        metadata={
            "doc": "Autocast dtype (weights stay fp32); auto: bf16 where the hardware has it "
            "natively, else fp16 on a GPU and fp32 on a CPU (electra.precision)."
        },
    )
    compile: bool = field(default=False, metadata={"doc": "torch.compile the encoders."})
    fsdp: bool = field(default=False, metadata={"doc": "Shard with FSDP2 instead of DDP."})
    threads: int = field(default=0, metadata={"doc": "CPU threads (0: torch default)."})
    log_every: int = field(default=10, metadata={"doc": "Steps between metric records."})
    eval_every: int = field(default=1000, metadata={"doc": "Steps between validations (0: off)."})
    eval_batches: int = field(default=10, metadata={"doc": "Validation micro-batches."})
    save_every: int = field(default=1000, metadata={"doc": "Steps between checkpoints."})
    save_every_minutes: float = field(
        default=30.0, metadata={"doc": "Also checkpoint after this many minutes."}
    )
    keep_last: int = field(
        default=3,
        metadata={
            "doc": "Checkpoints kept at multiples of save_every (plus the newest, whatever "
            "its step: a time-based save never evicts a scheduled one)."
        },
    )
    max_minutes: float = field(
        default=0.0, metadata={"doc": "Stop (checkpoint, export) after this long (0: off)."}
    )
    fit_minutes: float = field(
        default=0.0,
        metadata={
            "doc": "Fit the schedule to this many minutes from the start (0: off): after "
            "warmup_steps/2 steps (at least 20), and again after each validation, "
            "optim.max_steps is replaced by the steps that fit, from the measured time per "
            "step and per validation, so the learning rate reaches zero when the time is up. "
            "A resumed run keeps its checkpoint's plan and clock (the time until the checkpoint "
            "counts; later re-plans depend on time, so it is not bit-identical)."
        },
    )
    max_flops: float = field(
        default=0.0, metadata={"doc": "Stop once this many training FLOPs are spent (0: off)."}
    )
    tensorboard: bool = field(default=True, metadata={"doc": "Also log to TensorBoard."})
    progress: bool = field(default=True, metadata={"doc": "Show a progress bar."})
    export: bool = field(default=True, metadata={"doc": "Export HF directories at the end."})
    deterministic: bool = field(
        default=False,
        metadata={
            "doc": "GPU: deterministic kernels and math attention, so a resumed run "
            "repeats the uninterrupted one exactly (slower; CPU runs are exact without)."
        },
    )


@dataclass
class ModelKeys(ElectraConfig):
    """The model: a preset's shape, with any of these fields overriding it.

    The keys the ``[model]`` table may hold, for the ``--model.*`` flags; never built.
    """

    preset: str = field(
        default="small",
        metadata={"doc": "Paper shape the other model keys override (small, base, large, tiny)."},
    )


@dataclass
class PretrainConfig:
    """A whole pre-training run (one TOML file)."""

    # A table rather than an ElectraConfig so that only the keys given override the preset;
    # ModelKeys lists the keys it may hold (the CLI's --model.* flags).
    model: dict[str, Any] = field(
        default_factory=lambda: {"preset": "small"}, metadata={"keys": ModelKeys}
    )
    init: InitConfig = field(default_factory=InitConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    data: DataConfig = field(default_factory=DataConfig)
    run: RunConfig = field(default_factory=RunConfig)


def load_config(source: str | None, overrides: Sequence[Override] = ()) -> PretrainConfig:
    """A config from a TOML file or a built-in name, with overrides applied in order.

    An override is ``--set`` text ``"optim.learning_rate=3e-4"`` or a typed pair
    ``("optim.learning_rate", 3e-4)`` (what the ``--optim.learning_rate`` flag gives).
    """
    data: dict[str, Any] = {}
    where = "defaults"
    if source:
        path = Path(source)
        if not path.is_file() and source in builtin_configs():
            path = builtin_config_path(source)
        if not path.is_file():
            raise ConfigError(
                f"{source}: no such config file or built-in config "
                f"(built-in: {', '.join(builtin_configs())})"
            )
        where = str(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML ({exc})") from None
    data = apply_overrides(data, list(overrides))
    cfg = from_dict(PretrainConfig, data, source=where)
    resolve_model(cfg, vocab_size=None, source=where)  # validate model keys early
    return cfg


def resolve_model(cfg: PretrainConfig, vocab_size: int | None, source: str) -> ElectraConfig:
    """The discriminator config: ``model.preset`` plus field overrides, vocab from the data."""
    fields = dict(cfg.model)
    name = fields.pop("preset", "small")
    if vocab_size is not None:
        if "vocab_size" in fields and fields["vocab_size"] != vocab_size:
            raise ConfigError(
                f"{source}: model.vocab_size = {fields['vocab_size']} but the blocks' "
                f"vocabulary has {vocab_size} tokens"
            )
        fields["vocab_size"] = vocab_size
    try:
        return preset(name, **fields)
    except ConfigError as exc:
        raise ConfigError(f"{source}: model: {exc}") from None


# ---------------------------------------------------------------------------
# Distributed setup
# ---------------------------------------------------------------------------


@dataclass
class Dist:
    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup_distributed(device_pref: str) -> Dist:
    """Read torchrun's environment; one process when it is absent."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device_pref, local, world)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Dist(rank, world, local, device)


def set_deterministic() -> None:
    """Make CUDA runs repeatable bit for bit (``run.deterministic``).

    cuBLAS gets a fixed workspace (``CUBLAS_WORKSPACE_CONFIG``, read when the
    first handle is created, hence before any GPU work), PyTorch its
    deterministic kernels (warning, not failing, where an op has none; the
    warning names it), cuDNN no autotuning, and attention the math SDPA
    kernel: the flash and memory-efficient backward passes accumulate with
    atomics, in an order that changes between runs. Costs speed, mostly in
    attention; the CPU path is deterministic already.
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
        torch.backends.cuda.enable_cudnn_sdp(False)
    torch.backends.cuda.enable_math_sdp(True)


def _all_reduce(x: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
    if dist.is_initialized():
        dist.all_reduce(x, op=op)
    return x


# ---------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------


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


class _Window:
    """Metrics summed over the steps since the last log line (kept on the device)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.sum: torch.Tensor | None = None
        self.steps = 0
        self.tokens = 0
        self.start = time.time()
        self.paused = 0.0  # evaluation and checkpoint time, not training

    def add(self, values: torch.Tensor, tokens: int) -> None:
        self.sum = values if self.sum is None else self.sum + values
        self.steps += 1
        self.tokens += tokens

    def seconds(self) -> float:
        """Wall time of the window's training; call after a host sync (e.g. ``tolist``)."""
        return time.time() - self.start - self.paused

    def mean(self) -> torch.Tensor:
        return self.sum / max(self.steps, 1)


class MetricsLog:
    """``metrics.jsonl`` (+ TensorBoard) written by rank 0 only."""

    def __init__(self, out: Path, resume_step: int, tensorboard: bool) -> None:
        self.path = out / "metrics.jsonl"
        if self.path.exists():  # drop records the resumed run will redo
            kept = [
                line
                for line in self.path.read_text(encoding="utf-8").splitlines()
                if line.strip() and _record_step(line) <= resume_step
            ]
            atomic_write_text(self.path, "".join(line + "\n" for line in kept))
        self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(out / "tensorboard"), purge_step=resume_step + 1)
            except ImportError:
                self.tb = None

    def write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, int | float):
                    self.tb.add_scalar(k, v, record["step"])

    def close(self) -> None:
        self.file.close()
        if self.tb is not None:
            self.tb.close()


def _record_step(line: str) -> int:
    try:
        return int(json.loads(line).get("step", 0))
    except (json.JSONDecodeError, AttributeError, ValueError):
        return 1 << 62  # a torn last line: drop it


@dataclass
class Trainer:
    """One pre-training run; :meth:`fit` runs it to the end."""

    cfg: PretrainConfig
    resume: bool = False

    def fit(self) -> dict[str, Any]:
        cfg = self.cfg
        self.t_fit0 = time.time()  # run.fit_minutes counts from here
        if cfg.run.deterministic:
            set_deterministic()
        self.env = env = setup_distributed(cfg.run.device)
        cfg.run.precision = resolve_precision(cfg.run.precision, env.device)
        if cfg.run.threads > 0:
            torch.set_num_threads(cfg.run.threads)
        if not cfg.data.blocks:
            raise ConfigError("data.blocks: no blocks directory given (run `electra prepare`)")
        train = open_blocks(cfg.data.blocks, "train")
        try:
            val = open_blocks(cfg.data.blocks, "validation")
        except (FileNotFoundError, ValueError, KeyError):
            val = None
        self.blocks_dir = Path(cfg.data.blocks)
        start = plan_start(cfg.init, cfg.model, cfg.objective, train)  # None: random init
        model_cfg, gen_cfg, special = self._shapes(start, train)
        micro = self._micro_batch(env.world)
        out = Path(cfg.run.output_dir)
        self.out = out
        resolved = self._resolved(model_cfg, gen_cfg, special, train, start)

        torch.manual_seed(_mix_seed(cfg.run.seed, 0x1417))  # the same initial weights on every rank
        model = ElectraForPretraining(model_cfg, cfg.objective, special, gen_cfg).to(env.device)
        step, position, planned = 0, 0, cfg.optim.max_steps
        state = None
        if self.resume:
            found = _find_resume(out)
            if found is not None:
                model_state, state, _ = ckpt.load(found.path)
                ckpt.load_model_state(model, model_state, str(found.path / "model.safetensors"))
                step, position = int(state["step"]), int(state["position"])
                if env.main:
                    print(f"resuming from {found.path} (step {step})", file=sys.stderr)
            elif env.main:
                print(f"no checkpoint in {out}; starting from scratch", file=sys.stderr)
        elif (out / "checkpoints").is_dir() and ckpt.step_dirs(out / "checkpoints"):
            raise ConfigError(
                f"{out} already holds checkpoints; pass --resume to continue it or choose "
                "another run.output_dir"
            )
        if start is not None and state is None:
            for note in load_start_weights(model, cfg.init):
                if env.main:
                    print(note, file=sys.stderr)
        if cfg.init.token_embeddings == "ppmi" and state is None:
            self._warm_start(model, train, out, env)
        wrapped = self._wrap(model, env)
        opt = adamw(
            parameter_groups(model, cfg.optim.weight_decay),
            lr=cfg.optim.learning_rate,
            betas=(cfg.optim.adam_beta1, cfg.optim.adam_beta2),
            eps=cfg.optim.adam_eps,
        )
        if state is not None:
            _load_optimizer(model, opt, state["optimizer"])
        self.scaler = grad_scaler(cfg.run.precision, env.device, state)

        if env.main:
            out.mkdir(parents=True, exist_ok=True)
            atomic_write_json(out / "config.json", resolved)
        log = MetricsLog(out, step, cfg.run.tensorboard) if env.main else None
        loader = BlockLoader(
            train,
            micro,
            seed=cfg.run.seed,
            rank=env.rank,
            world_size=env.world,
            position=position,
            pin_memory=env.device.type == "cuda",
        )
        flops_step = paper_train_flops_per_step(
            model_cfg,
            cfg.optim.batch_size,
            train.block_length,
            cfg.objective.objective,
            cfg.objective.generator_size,
            cfg.objective.mask_prob,
            generator=gen_cfg,
        )
        if state is not None and cfg.run.fit_minutes > 0 and "planned_steps" in state:
            planned = int(state["planned_steps"])  # the plan fitted before the interruption
            # the budget counts the time already spent on the work kept
            self.t_fit0 -= float(state.get("fit_elapsed_s", 0.0))
        if cfg.run.max_flops > 0:
            planned = min(planned, int(cfg.run.max_flops // flops_step))
        self.model, self.wrapped, self.opt, self.loader = model, wrapped, opt, loader
        self.flops_step, self.planned, self.micro = flops_step, planned, micro
        self.train_blocks, self.val = train, val
        self.resolved = resolved
        try:
            return self._loop(step, log)
        finally:
            if log is not None:
                log.close()
            loader.close()

    # -- pieces ------------------------------------------------------------------------------

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
        if self.cfg.objective.kind.has_discriminator:
            gen_cfg = generator_config(model_cfg, self.cfg.objective.generator_size)
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
        if env.world == 1:
            return model
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
        """The objective on a CPU batch; what depends only on the batch (are all blocks
        full, how many positions each row masks) is computed here on the host, so
        the device is never asked for it (no host sync)."""
        dev = self.env.device
        cpu_ids, cpu_mask = batch["input_ids"], batch["attention_mask"]
        full = bool(cpu_mask.all())
        picks = picks_per_row(cpu_ids, cpu_mask, self.model.special, self.cfg.objective.mask_prob)
        ids = cpu_ids.to(dev, non_blocking=True)
        mask = cpu_mask.to(dev, non_blocking=True)
        types = batch["token_type_ids"].to(dev, non_blocking=True)
        seeds = SampleRNG.seeds_for(self.cfg.run.seed, range(first_index, first_index + len(ids)))
        rng = SampleRNG(seeds, dev, picks=picks)
        extra = {"keep_tensors": True} if keep else {}
        with self._autocast():
            return self.wrapped(ids, mask, types, rng=rng, full=full, **extra)

    def _train_step(self, step: int, scaler) -> tuple[list[str], torch.Tensor, int]:
        """One optimizer step; returns metric names, their values (on device) and tokens."""
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
            scaler.unscale_(self.opt)
        grad_norm = self._clip()
        if scaler:
            scaler.step(self.opt)
            scaler.update()
        else:
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        values = torch.cat([total, grad_norm.detach().float().reshape(1).to(total.device)])
        return [*names, "grad_norm"], values, tokens

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
            planned = min(planned, int(cfg.run.max_flops // self.flops_step))
        if dist.is_initialized():  # every rank the same plan: the most cautious one
            mine = torch.tensor([-planned], device=self.env.device)
            planned = -int(_all_reduce(mine, dist.ReduceOp.MAX).item())
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
        _all_reduce(t)
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
        """Health metrics of validation (``electra.health``), the unigram floor computed once."""
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
        model_state, opt_state = self._state_dicts()  # collective under FSDP
        path = None
        if self.env.main:
            train_state = {
                "step": step,
                "position": self.loader.position,
                "planned_steps": self.planned,
                "fit_elapsed_s": time.time() - self.t_fit0,  # run.fit_minutes' clock
                "optimizer": opt_state,
                "world_size": self.env.world,
            }
            if self.scaler is not None:  # fp16: the loss scale is state too
                train_state["grad_scaler"] = self.scaler.state_dict()
            aliases = ckpt.alias_names(self.model)
            path = ckpt.save(
                self.out / "checkpoints",
                step,
                ckpt.dedupe_state(model_state, aliases),
                train_state,
                self.resolved,
                self.cfg.run.keep_last,
                scheduled_every=self.cfg.run.save_every,
            )
        if dist.is_initialized():
            dist.barrier()
        return path

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
            code = int(_all_reduce(flag, dist.ReduceOp.MAX).item())
        return {0: None, 1: "max_minutes", 2: "signal"}[code]

    def _log(self, step, lr, names, window: _Window, t0, log, bar) -> dict[str, float]:
        """Average the window's metrics over steps and ranks, write them, show them."""
        cfg = self.cfg
        metrics = self._reduce(dict(zip(names, window.mean().tolist(), strict=True)))
        world = self.env.world if dist.is_initialized() else 1
        record = {
            "step": step,
            **metrics,
            "lr": lr,
            "tokens_per_s": window.tokens * world / max(window.seconds(), 1e-9),
            "tokens_seen": step * cfg.optim.batch_size * self.train_blocks.block_length,
            "train_flops": step * self.flops_step,
            "elapsed_s": time.time() - t0,
        }
        window.reset()
        if log is not None:
            log.write(record)
        if bar is not None:
            bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{record['tokens_per_s']:.0f}")
        return record

    def _loop(self, step: int, log: MetricsLog | None) -> dict[str, Any]:
        cfg, env = self.cfg, self.env
        scaler = self.scaler
        bar = None
        if env.main and cfg.run.progress:
            bar = tqdm(
                total=self.planned, initial=step, desc="pretrain", unit="step", dynamic_ncols=True
            )
        self.model.train()
        t0 = time.time()
        last_save = time.time()
        window = _Window()
        first, paused = step, 0.0  # for run.fit_minutes: this session's steps and pauses
        fit_at = self._fit_step() if cfg.run.fit_minutes > 0 else 0
        last: dict[str, float] = {}
        stop_reason = "max_steps"
        with _Stop() as stop:
            while step < self.planned:
                lr = self._set_lr(step)
                names, values, tokens = self._train_step(step, scaler)
                step += 1
                window.add(values, tokens)
                if step % cfg.run.log_every == 0 or step == self.planned:
                    last = self._log(step, lr, names, window, t0, log, bar)
                eval_s = None
                if cfg.run.eval_every and step % cfg.run.eval_every == 0:
                    t_eval = time.time()
                    ev = self.evaluate()
                    if ev and log is not None:
                        log.write({"step": step, **ev})
                    eval_s = time.time() - t_eval if ev else 0.0
                    window.paused += time.time() - t_eval
                    paused += time.time() - t_eval
                # run.fit_minutes: re-plan half-way through warmup, then after each validation
                if (
                    fit_at
                    and step > first
                    and (step == fit_at or (step > fit_at and eval_s is not None))
                ):
                    t_fit = time.time()
                    per_step = (t_fit - t0 - paused) / (step - first)
                    self._fit_to_minutes(step, per_step, eval_s, log)
                    window.paused += time.time() - t_fit
                    paused += time.time() - t_fit
                    if bar is not None:
                        bar.total = self.planned
                        bar.refresh()
                if bar is not None:
                    bar.update(1)
                reason = self._stop_reason(stop, t0) if self._stop_check_due(step) else None
                if reason is not None:
                    stop_reason = reason
                    break
                due = step % cfg.run.save_every == 0 or (
                    time.time() - last_save > cfg.run.save_every_minutes * 60
                )
                if due and step < self.planned:
                    t_save = time.time()
                    self.save(step)
                    last_save = time.time()
                    window.paused += last_save - t_save
                    paused += last_save - t_save
        if bar is not None:
            bar.close()
        path = self.save(step)
        summary = {
            "stopped": stop_reason,
            "step": step,
            "tokens": step * cfg.optim.batch_size * self.train_blocks.block_length,
            "train_flops": step * self.flops_step,
            "planned_steps": self.planned,
            "elapsed_s": time.time() - t0,
            "allocator": allocator.current(),
            "checkpoint": str(path) if path else None,
            **{k: last[k] for k in ("loss", "mlm_loss", "disc_loss") if k in last},
        }
        if self.resolved.get("origin"):
            summary["origin"] = self.resolved["origin"]
        if (self.out / WARM_START_FILE).is_file():
            summary["token_embeddings"] = json.loads((self.out / WARM_START_FILE).read_text())
        if stop_reason != "signal" and cfg.run.eval_every:
            summary.update(self.evaluate())
            summary["verdict"] = verdict(summary)
        if env.main and cfg.run.export and stop_reason != "signal":
            exported = export_run(path, self.out / "hf", summary)
            summary["exported"] = {k: str(v) for k, v in exported.items()}
        if env.main:
            atomic_write_json(self.out / "summary.json", summary)
            print(one_line_summary(summary), file=sys.stderr)
            if summary.get("verdict"):
                print(f"health: {summary['verdict']}", file=sys.stderr)
            if stop_reason == "signal":
                print(f"stopped by signal at step {step}; continue with --resume", file=sys.stderr)
        return summary


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


def _load_optimizer(model: nn.Module, opt: torch.optim.Optimizer, state: dict) -> None:
    set_optimizer_state_dict(
        model,
        opt,
        state,
        options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=False),
    )


def one_line_summary(s: dict[str, Any]) -> str:
    losses = " ".join(
        f"{k}={s[k]:.4f}" for k in ("loss", "mlm_loss", "disc_loss", "val/loss") if k in s
    )
    return (
        f"done: {s['step']} steps, {s['tokens'] / 1e6:.2f}M tokens, "
        f"{s['train_flops']:.3g} FLOPs, {s['elapsed_s'] / 60:.1f} min, {losses}"
        + (
            f" -> {s['exported'].get('discriminator') or s['exported'].get('generator')}"
            if s.get("exported")
            else ""
        )
    )


# ---------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------


def load_run_model(
    checkpoint_dir: str | os.PathLike[str],
) -> tuple[ElectraForPretraining, dict[str, Any], Path]:
    """(model, resolved config, checkpoint path) from a run or checkpoint directory."""
    path = ckpt.resolve(checkpoint_dir)
    model_state, _, config = ckpt.load(path)
    source = str(path / "config.json")
    model_cfg = from_dict(
        ElectraConfig, {k: v for k, v in config["model"].items() if k != "preset"}, source
    )
    objective = from_dict(ObjectiveConfig, config["objective"], source)
    special = SpecialIds(**config["data"]["special_ids"])
    gen_cfg = None
    if config.get("generator"):  # its own shape when continued from a released generator
        gen_cfg = from_dict(ElectraConfig, config["generator"], source)
    model = ElectraForPretraining(model_cfg, objective, special, gen_cfg)
    ckpt.load_model_state(model, model_state, str(path / "model.safetensors"))
    return model, config, path


def export_run(
    checkpoint_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    summary: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """HF directories ``OUT/discriminator`` (RTD) and ``OUT/generator`` from a checkpoint.

    ``checkpoint_dir`` may be a run directory, its ``checkpoints/`` or one
    ``step-N`` directory; the tokenizer files come from the blocks directory
    the run was trained on. Each directory gets a model card (``README.md``);
    ``summary`` (the run's, default ``RUN/summary.json`` when it describes
    this checkpoint) adds time and validation scores to it.
    """
    model, config, path = load_run_model(checkpoint_dir)
    blocks = Path(config["data"]["blocks"])
    tok_dir = blocks if (blocks / "vocab.txt").is_file() else None
    out = Path(out_dir)
    step = int(ckpt.verify(path)["step"])
    if summary is None:
        summary = _run_summary(path.parent.parent, step)
    facts = card_facts(config, step, summary)
    done = {}
    if model.discriminator is not None:
        done["discriminator"] = export_discriminator(
            model.discriminator, out / "discriminator", tok_dir
        )
    done["generator"] = export_generator(model.generator, out / "generator", tok_dir)
    for kind, directory in done.items():
        write_model_card(directory, kind, facts)
    return done


def _run_summary(run_dir: Path, step: int) -> dict[str, Any] | None:
    """``RUN/summary.json`` if it is about the checkpoint of ``step``."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return summary if summary.get("step") == step else None


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


@dataclass
class PretrainCommand:
    """Pre-train an ELECTRA discriminator (or an MLM baseline) over prepared blocks."""

    config: str | None = field(
        default=None,
        metadata={"doc": "TOML file or built-in name (small, base, large, cpu, tiny, continue)."},
    )
    set: list[str] = field(
        default_factory=list,
        metadata={
            "doc": "Overrides such as optim.learning_rate=3e-4 (after the recipe; the "
            "--SECTION.FIELD flags below apply after --set)."
        },
    )
    flags: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "doc": "Typed overrides {dotted key: value}, applied after --set and the "
            "shortcuts below (on the command line: one --SECTION.FIELD flag per field).",
            "dotted": PretrainConfig,
        },
    )
    data: str | None = field(default=None, metadata={"doc": "Blocks directory (data.blocks)."})
    output: str | None = field(
        default=None, metadata={"doc": "Run directory (run.output_dir).", "short": "-o"}
    )
    objective: ObjectiveName | None = field(default=None, metadata={"doc": "rtd or mlm."})
    init_from: str | None = field(
        default=None,
        metadata={
            "doc": "Continue pre-training a Hugging Face ELECTRA discriminator directory "
            "(init.discriminator); its config.json gives the shape."
        },
    )
    init_generator: str | None = field(
        default=None,
        metadata={
            "doc": "Its generator directory (init.generator); without it a fresh generator "
            "of objective.generator_size is built."
        },
    )
    resume: bool = field(default=False, metadata={"doc": "Continue from the last checkpoint."})


def pretrain_cli(cmd: PretrainCommand) -> int:
    """Pre-train over blocks from `electra prepare`; --resume continues a run exactly.

    Every recipe field is also a flag (--optim.learning_rate 3e-4); precedence, lowest
    first: the --config recipe, --set, --data/--output/--objective/--init-*, dotted flags.

    Data parallel: torchrun --nproc_per_node N -m electra.cli pretrain ...
    Continue a released ELECTRA on your domain:
    electra pretrain --config continue --init-from DISC [--init-generator GEN] --data ...
    """
    overrides = list(cmd.set)
    if cmd.data:
        overrides.append(f"data.blocks={json.dumps(cmd.data)}")
    if cmd.output:
        overrides.append(f"run.output_dir={json.dumps(cmd.output)}")
    if cmd.objective:
        overrides.append(f"objective.objective={json.dumps(cmd.objective)}")
    if cmd.init_from:
        overrides.append(f"init.discriminator={json.dumps(cmd.init_from)}")
    if cmd.init_generator:
        if not cmd.init_from:
            raise ConfigError("--init-generator needs --init-from (the discriminator directory)")
        overrides.append(f"init.generator={json.dumps(cmd.init_generator)}")
    cfg = load_config(cmd.config, [*overrides, *cmd.flags.items()])
    summary = Trainer(cfg, resume=cmd.resume).fit()
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0 if summary else 1


@dataclass
class ExportCommand:
    """Export a pre-training checkpoint as Hugging Face directories."""

    run: str = field(
        metadata={
            "doc": "Run directory, its checkpoints/ or one step-N directory.",
            "positional": True,
        }
    )
    output: str | None = field(
        default=None, metadata={"doc": "Where to write (default: RUN/hf).", "short": "-o"}
    )


def export_cli(cmd: ExportCommand) -> int:
    """Write discriminator/ and generator/ HF directories (with tokenizer) from a checkpoint."""
    path = ckpt.resolve(cmd.run)
    out = Path(cmd.output) if cmd.output else path.parent.parent / "hf"
    for name, d in export_run(path, out).items():
        print(f"{name}: {d}")
    return 0


__all__ = [
    "PretrainConfig",
    "OptimConfig",
    "RunConfig",
    "DataConfig",
    "Trainer",
    "load_config",
    "parameter_groups",
    "export_run",
]
