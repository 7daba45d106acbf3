"""The special token ids the pre-training objective must know.

Torch-free and dependency-free, so the tokenizer and the block reader (which
read them from a vocabulary or a manifest) and the objective (which uses
them) can all import it at module level.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class SpecialIds:
    """The token ids the objective must know (from the vocabulary)."""

    pad: int
    cls: int
    sep: int
    mask: int
    vocab_size: int

    @classmethod
    def from_map(cls, ids: Mapping[str, int], vocab_size: int) -> SpecialIds:
        """From a ``{"pad": .., "cls": .., "sep": .., "mask": ..}`` map (extra keys ignored)."""
        return cls(
            pad=ids["pad"], cls=ids["cls"], sep=ids["sep"], mask=ids["mask"], vocab_size=vocab_size
        )

    @property
    def never_masked(self) -> tuple[int, ...]:
        return (self.pad, self.cls, self.sep, self.mask)
