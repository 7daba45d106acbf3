"""What ``electra pretrain``, ``extend-vocab`` and ``flops`` take.

Torch-free, so the command line builds their flags (``--SECTION.FIELD`` from the
recipe in :mod:`electra.pretrain.config` included) without loading PyTorch; the
commands themselves import what they use at the top.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from electra.pretrain.config import PretrainConfig
from electra.pretrain.objectives import ObjectiveName


@dataclass
class PretrainCommand:
    """Pre-train over blocks from `electra prepare`; --resume continues a run exactly.

    Every recipe field is also a flag (--optim.learning_rate 3e-4); precedence, lowest
    first: the --config recipe, --set, --data/--output/--objective/--init-*, dotted flags.

    Data parallel: torchrun --nproc_per_node N -m electra.cli pretrain ...
    Continue a released ELECTRA on your domain:
    electra pretrain --config continue --init-from DISC [--init-generator GEN] --data ...

    """

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
    objective: ObjectiveName | None = field(
        default=None, metadata={"doc": "rtd, mlm or rtd-ngram."}
    )
    init_from: str | None = field(
        default=None,
        metadata={
            "doc": "Continue pre-training a Hugging Face ELECTRA discriminator directory, or "
            "Hub id ORG/NAME[@REVISION] (init.discriminator); its config.json gives the shape."
        },
    )
    init_generator: str | None = field(
        default=None,
        metadata={
            "doc": "Its generator directory or Hub id (init.generator); without it a fresh generator "
            "of objective.generator_size is built."
        },
    )
    resume: bool = field(default=False, metadata={"doc": "Continue from the last checkpoint."})


@dataclass
class ExtendVocabCommand:
    """Append domain tokens to an ELECTRA checkpoint's vocabulary.

    New embedding rows (and generator output biases) are the mean of the pieces
    the old tokenizer cut each token into. Then prepare the domain blocks with
    --tokenizer OUT/discriminator and continue with --init-from OUT/discriminator.

    """

    discriminator: str = field(
        metadata={"doc": "ELECTRA discriminator directory to extend.", "positional": True}
    )
    output: str = field(
        metadata={"doc": "Where to write discriminator/ (and generator/).", "short": "-o"}
    )
    generator: str = field(default="", metadata={"doc": "Its generator directory, if any."})
    tokens: str = field(default="", metadata={"doc": "File of tokens to add, one per line."})
    corpus: list[str] = field(
        default_factory=list,
        metadata={"doc": "Domain text to pick frequent split words from (instead of --tokens)."},
    )
    add: int = field(default=1000, metadata={"doc": "How many words to pick from --corpus."})
    min_count: int = field(default=20, metadata={"doc": "Fewest occurrences of a picked word."})


@dataclass
class FlopsCommand:
    """Parameter counts and the paper-methodology training FLOPs of a preset."""

    preset: str = field(default="small", metadata={"doc": "Model preset (small, base, large)."})
    batch_size: int | None = field(default=None, metadata={"doc": "Batch (default: paper's)."})
    seq_len: int | None = field(default=None, metadata={"doc": "Sequence length."})
    steps: int | None = field(default=None, metadata={"doc": "Training steps."})
    objective: ObjectiveName = field(default="rtd", metadata={"doc": "rtd, mlm or rtd-ngram."})
