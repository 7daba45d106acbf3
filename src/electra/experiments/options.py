"""What ``electra demo``, ``compare`` and ``report`` take.

Torch-free, so the command line builds their flags without loading PyTorch (and the
experiments import what they use at the top).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from electra.config import ConfigError

Corpus = Literal["reviews", "wiki+reviews"]


CORPORA: tuple[str, ...] = get_args(Corpus)


@dataclass
class DemoCommand:
    """The main job: vocabulary, blocks, pre-training, NSMC fine-tuning, report."""

    data_dir: str = field(default="", metadata={"doc": "Data directory (default: shared/data)."})
    output: str = field(default="runs/demo", metadata={"doc": "Output directory.", "short": "-o"})
    minutes: float = field(
        default=10.0,
        metadata={
            "doc": "Pre-training time budget, the PPMI token table included: the step count "
            "is fitted to it from the measured step time (run.fit_minutes)."
        },
    )
    set: list[str] = field(
        default_factory=list,
        metadata={
            "doc": "Overrides of the cpu pre-training recipe, KEY=VALUE as `electra pretrain "
            "--set` reads them (e.g. optim.dropout=false): a recipe change judged at the "
            "demo's budget. The steps, blocks and run folder stay the demo's."
        },
    )
    vocab_size: int = field(default=16000, metadata={"doc": "Vocabulary size."})
    corpus: Corpus = field(
        default="wiki+reviews",
        metadata={
            "doc": "Pre-training text: Korean Wikipedia and the NSMC reviews outside the "
            "scored dev/test splits (wiki+reviews), or those reviews alone (reviews).",
        },
    )
    # "finetune": the FinetuneArgs field each sets (finetune_options).
    nsmc_train_examples: int = field(
        default=12000,
        metadata={
            "doc": "NSMC training reviews used (0: all 18k of the balanced set).",
            "finetune": "max_train_examples",
        },
    )
    few_labels: int = field(
        default=3000,
        metadata={
            "doc": "Also fine-tune both models on this many of those training reviews (0: "
            "skip): few labels are where pre-training pays off most, and users often "
            "have only a few thousand."
        },
    )
    nsmc_eval_examples: int = field(
        default=4000,
        metadata={
            "doc": "NSMC dev and test reviews used (0: all 6k each).",
            "finetune": "max_eval_examples",
        },
    )
    epochs: int = field(
        default=3, metadata={"doc": "NSMC fine-tuning epochs.", "finetune": "epochs"}
    )
    # Table 7's 0.8 is for a 12-layer Small; on the cpu recipe's 4 layers it cost both
    # fine-tunings (2 seeds each: pre-trained 69.8 -> 75.9, random start 74.9 -> 77.7 with
    # 1.0; benchmarks/results/recipe_search.md).
    layer_decay: float = field(
        default=1.0,
        metadata={
            "doc": "Layer-wise learning-rate decay of the NSMC fine-tunings (1: none).",
            "finetune": "layer_decay",
        },
    )
    finetune_minutes: float = field(
        default=5.0,
        metadata={
            "doc": "Time budget of each NSMC fine-tuning: the training reviews used (at most "
            "--nsmc-train-examples) are planned from a step timed on all threads (0: no cap). "
            "Two side by side take up to 1.5x that each, the pair less than twice it."
        },
    )
    seeds: list[int] = field(
        default_factory=lambda: [1], metadata={"doc": "Fine-tuning seeds.", "finetune": "seeds"}
    )
    finetune_jobs: int = field(
        default=2,
        metadata={
            "doc": "Fine-tunings run side by side, each in its own process on an equal share "
            "of the CPU threads (on 2 cores two 12,000-review fine-tunings took 4.3-5.2 "
            "minutes side by side against 6.6 one after the other; 1: one at a time, with "
            "progress bars)."
        },
    )
    smoke: bool = field(
        default=False, metadata={"doc": "A tiny version of every stage (about a minute)."}
    )
    progress: bool = field(default=True, metadata={"doc": "Show progress bars."})

    def __post_init__(self) -> None:
        for name in ("nsmc_train_examples", "few_labels", "nsmc_eval_examples"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}: 0 or more (got {getattr(self, name)})")
        if self.finetune_jobs < 1:
            raise ConfigError(f"finetune_jobs: at least 1 (got {self.finetune_jobs})")


# Pre-training keys compare sets for each arm itself (so they get no --SECTION.FIELD flag).
ARM_KEYS = (
    "objective.objective",
    "data.blocks",
    "run.output_dir",
    "optim.max_steps",
    "run.save_every",
    "run.keep_last",
    "run.export",
    "run.progress",
)


@dataclass
class CompareCommand:
    """Pre-train RTD and MLM at equal FLOPs, fine-tune both (and no pre-training), report."""

    output: str = field(
        default="runs/compare", metadata={"doc": "Output directory.", "short": "-o"}
    )
    data_dir: str = field(default="", metadata={"doc": "Data directory (default: shared/data)."})
    blocks: str = field(
        default="", metadata={"doc": "Prepared blocks to use instead of building them here."}
    )
    budget_flops: float = field(
        default=1.8e14,
        metadata={
            "doc": "Pre-training FLOPs per arm, counted as the paper does (the default took "
            "8-10 minutes per RTD arm of the cpu config on 2 cores with native bf16 "
            "(AVX512-BF16 or AMX); more in fp32 on older CPUs)."
        },
    )
    counter: Literal["paper", "executed"] = field(
        default="paper",
        metadata={
            "doc": "What --budget-flops counts: paper (the official script's count, as the "
            "paper reports: embedding lookups as dense matmuls, so a small RTD step costs "
            "1.4x an MLM step at the cpu recipe's shape) or executed (the matmuls a step "
            "runs: 1.08x). Every arm is charged by the same counter; compare.md gives both.",
        },
    )
    points: int = field(
        default=2, metadata={"doc": "Checkpoints fine-tuned per arm (evenly spaced in FLOPs)."}
    )
    arms: list[str] = field(
        default_factory=lambda: ["rtd", "mlm"],
        metadata={
            "doc": "Pre-training objectives compared at the same FLOPs: rtd, mlm, rtd-ngram "
            "(ELECTRA's discriminator alone, replacements from counts), or a variant of one "
            "with overrides of its own, OBJECTIVE:KEY=VALUE[:KEY=VALUE...] (e.g. "
            "rtd:objective.disc_mlm_weight=1: a lever measured beside rtd and mlm; finished "
            "arms are reused)."
        },
    )
    config: str = field(default="cpu", metadata={"doc": "Pre-training config (both arms)."})
    set: list[str] = field(
        default_factory=list,
        metadata={
            "doc": "Pre-training overrides (both arms); the --SECTION.FIELD flags below "
            "apply after them."
        },
    )
    flags: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "doc": "Typed pre-training overrides {dotted key: value} (both arms), applied "
            "after --set (on the command line: --optim.learning_rate 3e-4 and so on). "
            "What compare fixes per arm (objective, blocks, run directory, steps, "
            "checkpoints) wins over both and has no flag.",
            # By name: importing electra.pretrain.trainer (torch) waits until compare runs.
            "dotted": "electra.pretrain.config:PretrainConfig",
            "withheld": ARM_KEYS,
        },
    )
    tasks: list[str] = field(
        default_factory=lambda: ["nsmc", "sst2"], metadata={"doc": "Fine-tuning tasks."}
    )
    # "finetune": the FinetuneArgs field each sets (finetune_options); they key the results too.
    seeds: list[int] = field(
        default_factory=lambda: [1, 2, 3],
        metadata={"doc": "Fine-tuning seeds.", "finetune": "seeds"},
    )
    max_train_examples: int = field(
        default=4000,
        metadata={
            "doc": "Fine-tuning examples per task (0: all).",
            "finetune": "max_train_examples",
        },
    )
    max_eval_examples: int = field(
        default=1000,
        metadata={"doc": "Dev/test examples per task (0: all).", "finetune": "max_eval_examples"},
    )
    epochs: int = field(
        default=3,
        metadata={
            "doc": "Fine-tuning epochs (tagging tasks: --tagging-epochs).",
            "finetune": "epochs",
        },
    )
    # At 3 epochs on 4,000 KLUE-NER sentences the dev F1 of every model, the random start
    # included, was still rising at the last epoch (best epoch 3 in 33 of 33 fine-tunings).
    # At 10 (2e14 FLOPs, 3 seeds) the random start went 36.1 -> 51.9 and RTD's gap to MLM
    # 5.5 -> 2.3 F1; SST-2's dev accuracy had peaked by epoch 3 (recipe_search.md, 2026-12-06).
    tagging_epochs: int = field(
        default=10,
        metadata={
            "doc": "Fine-tuning epochs of the tagging tasks (klue-ner, wnut17): at 3 their "
            "dev F1 was still rising for every model (README, recipe_search.md)."
        },
    )
    # As in the demo: Table 7's 0.8 is for a 12-layer Small; on the cpu recipe's 4 layers it
    # held a barely trained encoder near its pre-trained values (recipe_search.md).
    layer_decay: float = field(
        default=1.0,
        metadata={
            "doc": "Layer-wise learning-rate decay of every fine-tuning (1: none; Table 7 "
            "uses 0.8 for Small, 0.9 for Base/Large).",
            "finetune": "layer_decay",
        },
    )
    max_length: int = field(
        default=64, metadata={"doc": "Fine-tuning max tokens.", "finetune": "max_length"}
    )
    # One rate for every model favours whichever objective it suits: the paper chose its
    # fine-tuning rate per model on dev. Each rate is a whole fine-tuning of every point.
    finetune_lrs: list[float] = field(
        default_factory=list,
        metadata={
            "doc": "Fine-tuning peak learning rates tried for every point and task; each "
            "point keeps, per task, the rate with the best dev median and reports its test "
            "score (empty: Table 7's rate only, 3e-4 for Small). Costs one fine-tuning per "
            "rate."
        },
    )
    # On (unlike `electra finetune`): every arm alike, and the whole study fits a session.
    group_by_length: bool = field(
        default=True,
        metadata={
            "doc": "Fine-tune every point with length-grouped batches (~3x faster here; "
            "absolute scores may sit a little lower than with shuffled batches, README).",
            "finetune": "group_by_length",
        },
    )
    bf16: bool | None = field(
        default=None,
        metadata={
            "doc": "Fine-tune under bf16 autocast (default: where the CPU/GPU has it).",
            "finetune": "bf16",
        },
    )
    finetune_jobs: int = field(
        default=1,
        metadata={
            "doc": "Fine-tunings run side by side, each in its own process on an equal "
            "share of the CPU threads (2 on 2 cores: 1.26x the throughput of 1, README)."
        },
    )
    vocab_size: int = field(default=16000, metadata={"doc": "Vocabulary size when built here."})
    corpus_mb: float = field(
        default=12.0, metadata={"doc": "Megabytes of text per language when built here."}
    )
    pack_blocks: bool = field(
        default=False,
        metadata={
            "doc": "When built here, fold part-filled blocks together (electra prepare "
            "--pack; into DATA/blocks-packed): about 89% of a step's positions are text "
            "instead of 69% in the default corpus, for every arm alike."
        },
    )
    progress: bool = field(default=True, metadata={"doc": "Show progress bars."})


@dataclass
class ReportCommand:
    """Render RUN/report/*.png and RUN/report/index.html from a run's logs."""

    run: str = field(metadata={"doc": "Run directory (holds metrics.jsonl).", "positional": True})
    example: int = field(default=0, metadata={"doc": "Which validation block to visualise."})
