"""The pre-training recipe: every option of a run, as one TOML file.

``[model]`` (a preset plus overrides), ``[init]`` (where a run starts),
``[objective]`` (RTD or MLM and its constants), ``[optim]``, ``[data]`` and
``[run]`` are the dataclasses below; :func:`load_config` reads a file or a
built-in recipe (``electra/pretrain/configs/NAME.toml``: small, base, large,
cpu, tiny, continue) and applies ``--set`` overrides in order. Torch-free, so
``electra pretrain --help`` builds its ``--SECTION.FIELD`` flags from here
without loading PyTorch.

:data:`PRESETS` are the paper's Table 6 columns, read from those recipes.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from electra.config import ConfigError, Override, apply_overrides, from_dict
from electra.model.config import MODELS, SEQ_LENGTHS, ElectraConfig, generator_config, preset
from electra.pretrain.objectives import OBJECTIVES, Objective, ObjectiveName


@dataclass(frozen=True)
class PaperRecipe:
    """One column of the paper's Table 6: the model plus its pre-training recipe."""

    model: ElectraConfig
    generator_size: float
    mask_prob: float
    learning_rate: float
    batch_size: int
    max_steps: int
    max_seq_length: int


def builtin_configs() -> list[str]:
    """Names of the packaged configs (``electra pretrain --config NAME``)."""
    folder = resources.files("electra.pretrain") / "configs"
    return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))


def builtin_config_path(name: str) -> Path:
    """The file of packaged config ``name`` (it may not exist)."""
    return Path(str(resources.files("electra.pretrain") / "configs" / f"{name}.toml"))


def _recipe(name: str) -> PaperRecipe:
    """The Table 6 column ``name``: its model shape and what ``configs/NAME.toml`` trains."""
    path = builtin_config_path(name)
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    objective, optim = raw["objective"], raw["optim"]
    if raw.get("model", {}).get("preset") != name:
        raise ConfigError(f"{path}: model.preset must be {name!r}")
    return PaperRecipe(
        model=MODELS[name],
        generator_size=objective["generator_size"],
        mask_prob=objective["mask_prob"],
        learning_rate=optim["learning_rate"],
        batch_size=optim["batch_size"],
        max_steps=optim["max_steps"],
        max_seq_length=SEQ_LENGTHS[name],
    )


PRESETS: dict[str, PaperRecipe] = {name: _recipe(name) for name in MODELS}


@dataclass
class ObjectiveConfig:
    """What is learned: RTD (ELECTRA) or MLM (BERT), and its constants."""

    objective: ObjectiveName = field(
        default="rtd",
        metadata={
            "doc": "rtd (ELECTRA), mlm (BERT baseline) or rtd-ngram (ELECTRA's discriminator "
            "alone, replacements sampled from the blocks' P(token | left, right neighbours) "
            "counts: no generator trained; electra.pretrain.ngram)."
        },
    )
    mask_prob: float = field(
        default=0.15, metadata={"doc": "Fraction of non-special tokens masked."}
    )
    generator_size: float = field(
        default=0.25,
        metadata={
            "doc": "Generator width as a fraction of the discriminator's (not used when "
            "generator_shared_layers > 0: the generator is then the discriminator's width)."
        },
    )
    generator_shared_layers: int = field(
        default=0,
        metadata={
            "doc": "RTD, experimental (0: off, the paper's separate generator): TEAMS' partial "
            "layer sharing. The generator runs the discriminator's embeddings, projection and "
            "bottom N layers (the same parameters, trained by both losses), then "
            "generator_top_layers of its own, all at the discriminator's width "
            "(generator_size is then not used)."
        },
    )
    generator_top_layers: int = field(
        default=1,
        metadata={
            "doc": "RTD with generator_shared_layers: the generator's own layers above the "
            "shared ones (TEAMS: a task-specific top)."
        },
    )
    gen_weight: float = field(default=1.0, metadata={"doc": "Weight of the generator MLM loss."})
    disc_weight: float = field(
        default=50.0, metadata={"doc": "Weight of the discriminator RTD loss."}
    )
    temperature: float = field(default=1.0, metadata={"doc": "Sampling temperature."})
    mask_token_prob: float = field(
        default=0.85,
        metadata={"doc": "RTD: share of chosen positions set to [MASK] (rest kept)."},
    )
    disc_prior_bias: bool = field(
        default=False,
        metadata={
            "doc": "RTD, experimental (off: the paper's zero init): start the "
            "discriminator's output bias at logit(mask_prob), the share of tokens "
            "replaced, so the first steps need not push every token vector one way to "
            "reach the base rate."
        },
    )
    disc_mlm_weight: float = field(
        default=0.0,
        metadata={
            "doc": "RTD, experimental (0: off, the paper's objective): weight of an "
            "auxiliary loss on the discriminator, predicting the original token at the "
            "chosen positions of the corrupted input (a corrective LM) through a head tied "
            "to the embeddings. The head is used in pre-training only, never exported."
        },
    )
    mws_weight: float = field(
        default=0.0,
        metadata={
            "doc": "RTD, experimental (0: off, the paper's objective): weight of TEAMS' "
            "multi-word selection loss. At each chosen position the discriminator also picks "
            "the original token among mws_candidates candidates (the original and tokens "
            "drawn from the generator's softmax without it), scored against the tied token "
            "table through a head used in pre-training only, never exported."
        },
    )
    mws_candidates: int = field(
        default=5,
        metadata={"doc": "RTD with mws_weight: candidates per position, the original included."},
    )

    embedding_sharing: Literal["tied", "gdes"] = field(
        default="tied",
        metadata={
            "doc": "RTD: how generator and discriminator share the word, position and "
            "token-type tables. tied (the paper): one table trained by both losses. gdes "
            "(DeBERTa-v3's gradient-disentangled sharing): the generator owns the tables and "
            "only its loss updates them; the discriminator reads stop_gradient(table) + a "
            "zero-initialised delta of its own (weight-decayed like the table) and has its "
            "own embedding LayerNorm. Exports merge table + delta: the discriminator stays "
            "a plain ElectraForPreTraining. Ignored by mlm (nothing shared), like the other "
            "RTD settings."
        },
    )

    generator_freeze_at: float = field(
        default=0.0,
        metadata={
            "doc": "RTD, experimental (0: never, the paper): the share of the planned steps "
            "after which the generator stops training (Fast-ELECTRA's fixed auxiliary model, "
            "trained by the run itself first). From then on it runs forward only, in eval "
            "mode, with a frozen copy of the tables it was trained with (under tied "
            "sharing; under gdes it owns them), and the budget charges its forward alone: "
            "more discriminator steps for the same FLOPs. Single-process runs only."
        },
    )
    frozen_temperature_start: float = field(
        default=1.0,
        metadata={
            "doc": "RTD with generator_freeze_at: the sampling temperature at the freeze; it "
            "moves linearly to frozen_temperature_end at the last step (Fast-ELECTRA's "
            "curriculum: above 1 flatter, easier replacements; below 1 sharper, harder)."
        },
    )
    frozen_temperature_end: float = field(
        default=1.0,
        metadata={"doc": "RTD with generator_freeze_at: the sampling temperature at the end."},
    )

    ngram_top_k: int = field(
        default=32,
        metadata={"doc": "rtd-ngram: candidate tokens kept per context (the most frequent)."},
    )
    ngram_min_count: int = field(
        default=2,
        metadata={
            "doc": "rtd-ngram: a context seen fewer times backs off to P(token | left "
            "neighbour), then to the unigram counts."
        },
    )
    ngram_max_contexts: int = field(
        default=2_000_000,
        metadata={"doc": "rtd-ngram: contexts kept at most (the most frequent): bounds memory."},
    )
    ngram_max_tokens: int = field(
        default=20_000_000,
        metadata={"doc": "rtd-ngram: training tokens counted at most (from the split's start)."},
    )
    ngram_temperature: float = field(
        default=1.0,
        metadata={
            "doc": "rtd-ngram: sample proportional to count^(1/T); 1 is exactly the counts, "
            "above 1 flatter (a token of zero count is never drawn either way)."
        },
    )

    def __post_init__(self) -> None:
        self._check_ngram()
        if not 0.0 < self.mask_prob < 1.0:
            raise ConfigError(f"mask_prob must be in (0, 1), got {self.mask_prob}")
        if self.temperature <= 0:
            raise ConfigError(f"temperature must be positive, got {self.temperature}")
        if self.disc_mlm_weight < 0:
            raise ConfigError(f"disc_mlm_weight must be >= 0, got {self.disc_mlm_weight}")
        self._check_freeze()
        self._check_sharing()
        self._check_mws()

    def generator_shape(self, discriminator: ElectraConfig) -> ElectraConfig:
        """The shape of the generator this objective trains beside ``discriminator``:
        ``generator_size`` times its width at its depth, or, sharing layers (TEAMS), its
        width at ``generator_shared_layers + generator_top_layers`` layers."""
        if not self.generator_shared_layers:
            return generator_config(discriminator, self.generator_size)
        depth = self.generator_shared_layers + self.generator_top_layers
        if self.generator_shared_layers > discriminator.num_hidden_layers:
            raise ConfigError(
                f"objective.generator_shared_layers = {self.generator_shared_layers}, but the "
                f"discriminator has {discriminator.num_hidden_layers} layers"
            )
        return dataclasses.replace(discriminator, num_hidden_layers=depth)

    def _check_mws(self) -> None:
        if self.mws_weight < 0:
            raise ConfigError(f"objective.mws_weight must be >= 0, got {self.mws_weight}")
        if self.mws_candidates < 2:
            raise ConfigError(
                f"objective.mws_candidates must be >= 2 (the original and one other), got "
                f"{self.mws_candidates}"
            )
        if not self.mws_weight:
            return
        if not (self.kind.has_discriminator and self.kind.trains_generator):
            raise ConfigError(
                f"objective.mws_weight draws candidates from RTD's generator; "
                f"{self.objective} trains none beside a discriminator"
            )
        if self.embedding_sharing != "tied":
            raise ConfigError(
                "objective.mws_weight scores candidates against the tied token table; it "
                "needs embedding_sharing = 'tied'"
            )

    def _check_sharing(self) -> None:
        for name in ("generator_shared_layers", "generator_top_layers"):
            if getattr(self, name) < 0:
                raise ConfigError(f"objective.{name} must be >= 0, got {getattr(self, name)}")
        if not (self.kind.has_discriminator and self.kind.trains_generator):
            # Nothing to share (mlm, rtd-ngram): the cpu recipe's sharing is ignored, and
            # set to 0 so the resolved config says what ran (and keys compare's runs so).
            self.generator_shared_layers = 0
        if not self.generator_shared_layers:
            return
        if self.embedding_sharing != "tied":
            raise ConfigError(
                "objective.generator_shared_layers needs embedding_sharing = 'tied' (the "
                "shared layers read the discriminator's own embeddings); set "
                "objective.generator_shared_layers=0 for gdes"
            )
        if self.generator_freeze_at > 0:
            raise ConfigError(
                "objective.generator_shared_layers and generator_freeze_at cannot be combined: "
                "freezing the generator would freeze the discriminator's shared layers; set "
                "objective.generator_shared_layers=0 to freeze a separate generator"
            )

    def _check_freeze(self) -> None:
        if not 0.0 <= self.generator_freeze_at < 1.0:
            raise ConfigError(
                f"objective.generator_freeze_at must be in [0, 1), got {self.generator_freeze_at}"
            )
        for name in ("frozen_temperature_start", "frozen_temperature_end"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"objective.{name} must be positive, got {getattr(self, name)}")
        if self.generator_freeze_at > 0 and not (
            self.kind.has_discriminator and self.kind.trains_generator
        ):
            raise ConfigError(
                f"objective.generator_freeze_at freezes RTD's generator; {self.objective} "
                "trains none beside a discriminator"
            )

    def _check_ngram(self) -> None:
        for name in ("ngram_top_k", "ngram_min_count", "ngram_max_contexts", "ngram_max_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"objective.{name} must be >= 1, got {getattr(self, name)}")
        if self.ngram_temperature <= 0:
            raise ConfigError(
                f"objective.ngram_temperature must be positive, got {self.ngram_temperature}"
            )
        if self.objective == "rtd-ngram" and self.embedding_sharing != "tied":
            raise ConfigError(
                "objective.embedding_sharing = 'gdes' needs a generator to share with; "
                "rtd-ngram trains none (use 'tied')"
            )

    @property
    def kind(self) -> Objective:
        """The registry entry of :attr:`objective` (see :mod:`electra.pretrain.objectives`)."""
        return OBJECTIVES[self.objective]


@dataclass
class InitConfig:
    """Where a run starts: a checkpoint to continue, or random weights (with, optionally,
    count-based token vectors)."""

    discriminator: str = field(
        default="",
        metadata={
            "doc": "HF ElectraForPreTraining directory, or Hub id ORG/NAME[@REVISION], to "
            "continue (empty: random init)."
        },
    )
    generator: str = field(
        default="",
        metadata={
            "doc": "HF ElectraForMaskedLM directory (empty: a fresh generator of "
            "objective.generator_size over the discriminator's embeddings)."
        },
    )
    token_embeddings: Literal["random", "ppmi"] = field(
        default="random",
        metadata={
            "doc": "A fresh run's shared token table: random (the paper) or ppmi: the rank-E "
            "SVD of the training blocks' positive-PMI co-occurrence counts (window 5, at most "
            "20M tokens; about 30 s for 3M tokens on one core), scaled to the random init's "
            "std. A plain embedding table: exports are unchanged (electra.pretrain.cooccurrence)."
        },
    )


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
    dropout: bool = field(
        default=True,
        metadata={
            "doc": "Dropout in pre-training at the model's rates; false: none (as Cramming "
            "trains). The exported config keeps the rates, so fine-tuning uses them."
        },
    )


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
            "natively, else fp16 on a GPU and fp32 on a CPU (electra.system.precision)."
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
    max_nonfinite_in_a_row: int = field(
        default=20,
        metadata={
            "doc": "Stop after this many steps in a row with a NaN or infinite loss or "
            "gradient (0: never), naming the step and the last good checkpoint (--resume "
            "continues from it). Each such step is skipped: weights and optimizer state are "
            "left as they were, but its batch is used up and it counts as a step (the "
            "schedule moves on, as for fp16's overflow steps); skipped_steps counts them. "
            "20 is more than the 16 halvings fp16's loss scale may need from 2^16 to 1."
        },
    )
    tensorboard: bool = field(default=True, metadata={"doc": "Also log to TensorBoard."})
    tracker: Literal["none", "mlflow", "wandb"] = field(
        default="none",
        metadata={
            "doc": "Also track the run in MLflow or Weights & Biases (config, metrics, summary; "
            "the package is imported only when chosen; docs/pretraining.md)."
        },
    )
    tracker_uri: str = field(
        default="",
        metadata={"doc": "MLflow tracking URI (empty: a file store in RUN/mlruns, offline)."},
    )
    tracker_project: str = field(
        default="electra", metadata={"doc": "MLflow experiment or W&B project name."}
    )
    progress: bool = field(default=True, metadata={"doc": "Show a progress bar."})
    export: bool = field(default=True, metadata={"doc": "Export HF directories at the end."})
    deterministic: bool = field(
        default=False,
        metadata={
            "doc": "GPU: deterministic kernels and math attention, so a resumed run "
            "repeats the uninterrupted one exactly (slower; CPU runs are exact without)."
        },
    )

    def __post_init__(self) -> None:
        if self.max_nonfinite_in_a_row < 0:
            raise ConfigError(
                f"max_nonfinite_in_a_row must be >= 0 (0: never stop), "
                f"got {self.max_nonfinite_in_a_row}"
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
