"""What ``electra tokenizer`` takes (torch-free: the command line builds its flags from it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from electra.text.corpus import CorpusOptions


@dataclass
class TokenizerCommand(CorpusOptions):
    """Train a WordPiece vocabulary on corpus files.

    Writes vocab.txt, tokenizer.json, tokenizer_config.json and
    special_tokens_map.json (loadable by transformers' ElectraTokenizerFast
    with identical ids) plus vocab_training.json.

    """

    output: str = field(
        metadata={"doc": "Directory for vocab.txt, tokenizer.json and configs.", "short": "-o"}
    )
    vocab_size: int = field(default=32000, metadata={"doc": "Vocabulary size, specials included."})
    lowercase: bool = field(default=False, metadata={"doc": "Lowercase the text (uncased model)."})
    strip_accents: bool | None = field(
        default=None,
        metadata={
            "doc": "Strip accents (default: as --lowercase, but off for a corpus with Hangul, "
            "which it would decompose into jamo; asking for it on Korean text is an error)."
        },
    )
    morpheme: bool = field(
        default=False,
        metadata={"doc": "Morpheme-aware vocabulary for Korean (kiwipiepy; slower)."},
    )
    min_frequency: int = field(
        default=2, metadata={"doc": "Minimum pair count for a WordPiece merge."}
    )
    limit_alphabet: int | None = field(
        default=None,
        metadata={
            "doc": "Most distinct characters kept (default: those covering 99.95% of the "
            "text, at most 80% of the vocabulary with their ## forms)."
        },
    )
    limit_mb: float | None = field(
        default=None, metadata={"doc": "Train on an evenly spread sample of about this many MB."}
    )
    progress: bool = field(default=True, metadata={"doc": "Show the trainer's progress bar."})
