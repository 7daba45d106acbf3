"""What ``electra prepare`` takes (torch-free: the command line builds its flags from it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from electra.config import ConfigError
from electra.text.corpus import CorpusOptions, ReadOptions


@dataclass
class PrepareCommand(CorpusOptions):
    """Turn a raw corpus into packed pre-training blocks.

    Writes memory-mappable shards of [CLS] A [SEP] B [SEP] blocks, the
    tokenizer files and manifest.json (written last) into --output.

    """

    inputs: list[str] = field(
        default_factory=list,
        metadata={
            "doc": "Corpus files, globs or directories (a datasets save_to_disk "
            "directory is one Arrow dataset).",
            "positional": True,
        },
    )
    tokenizer: str = field(
        default="",
        metadata={"doc": "Tokenizer directory (or its tokenizer.json / vocab.txt); required."},
    )
    output: str = field(default="", metadata={"doc": "Output directory; required.", "short": "-o"})
    max_length: int = field(default=128, metadata={"doc": "Block length in tokens."})
    validation_fraction: float = field(
        default=0.01, metadata={"doc": "Share of documents held out for validation."}
    )
    seed: int = field(default=0, metadata={"doc": "Seed of the split and the block builder."})
    file_is_document: bool = field(
        default=False,
        metadata={"doc": "Plain text: a whole file is one document (books), not blank-line units."},
    )
    pack: bool = field(
        default=False,
        metadata={
            "doc": "Fold consecutive part-filled blocks into one while they fit (RoBERTa's "
            "full sentences), instead of ending a block at every document's end as the "
            "official builder does: less padding per step on corpora of short documents."
        },
    )
    workers: int = field(
        default=0, metadata={"doc": "Tokenizer worker processes (0: one per CPU core)."}
    )
    shard_size: int = field(default=100_000, metadata={"doc": "Blocks per shard file."})
    max_unk_rate: float = field(
        default=0.2,
        metadata={
            "doc": "Stop when more than this share of the corpus's tokens are [UNK]: the "
            "tokenizer cannot read the text (a vocabulary trained on the corpus gives under "
            "1%; over 2% is warned about; 1: never stop)."
        },
    )
    overwrite: bool = field(
        default=False, metadata={"doc": "Rebuild even if the output directory is complete."}
    )
    progress: bool = field(default=True, metadata={"doc": "Show a progress bar."})
    verify: str = field(
        default="",
        metadata={
            "doc": "Only check the prepared directory VERIFY: every shard's sha256 against "
            "its manifest.json; names each bad file, exit status 1 if any (no INPUTS then)."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.verify:
            if self.inputs or self.tokenizer or self.output:
                raise ConfigError("--verify DIR checks a prepared directory: give it alone")
            return
        missing = [n for n in ("inputs", "tokenizer", "output") if not getattr(self, n)]
        if missing:
            flags = {"inputs": "INPUTS", "tokenizer": "--tokenizer", "output": "--output/-o"}
            raise ConfigError(
                f"prepare needs {', '.join(flags[n] for n in missing)} (or --verify DIR)"
            )
        if not 8 <= self.max_length <= 65535:
            raise ConfigError(f"max_length must be in [8, 65535], got {self.max_length}")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ConfigError(
                f"validation_fraction must be in [0, 1), got {self.validation_fraction}"
            )
        if self.seed < 0:
            raise ConfigError(f"seed must be >= 0, got {self.seed}")
        if self.workers < 0:
            raise ConfigError(f"workers must be >= 0, got {self.workers}")
        if not 0.0 <= self.max_unk_rate <= 1.0:
            raise ConfigError(f"max_unk_rate must be in [0, 1], got {self.max_unk_rate}")
        if self.shard_size < 1:
            raise ConfigError(f"shard_size must be positive, got {self.shard_size}")

    def read_options(self, **extra: Any) -> ReadOptions:
        """The corpus options, with ``--file-is-document`` (a flag of this command only)."""
        return super().read_options(file_is_document=self.file_is_document, **extra)
