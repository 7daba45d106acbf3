"""The registry of pre-training objectives: what each one is, in one place.

An objective is named in configs (``objective.objective``), on the command
line (``--objective``) and in run directories. Everything that differs between
objectives outside the loss itself (whether a discriminator is trained, which
encoder is kept, how FLOPs are counted, how a model card or a plot names it)
reads it from here instead of comparing the name with a string. The losses
themselves are in :mod:`electra.pretrain.objective`, which looks up the same entry.

Torch-free: the FLOPs counter, the model card and config validation use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Objective:
    """One pre-training objective.

    With a discriminator (ELECTRA's replaced token detection), a generator of
    ``objective.generator_size`` is trained beside it (or, for ``rtd-ngram``, the
    replacements are sampled from counts and nothing else is trained) and the
    discriminator is the encoder users fine-tune; without (the BERT MLM
    baseline), a single full-size encoder with an MLM head is trained and kept.
    """

    name: str
    title: str  # for plots and tables
    has_discriminator: bool
    masking: Literal["electra", "bert"]  # ``mask_batch`` style: [MASK]/keep or 80/10/10
    # RTD's replacements: from a generator trained beside the discriminator, or counted
    # from the blocks before step 0 (electra.pretrain.ngram: nothing trained, almost free).
    replacements: Literal["generator", "ngram", "none"] = "generator"

    @property
    def trains_generator(self) -> bool:
        """Whether a generator (an MLM encoder) is trained: RTD and MLM, not rtd-ngram."""
        return self.replacements != "ngram"

    @property
    def kept_encoder(self) -> str:
        """The exported model users fine-tune: ``discriminator`` or ``generator``."""
        return "discriminator" if self.has_discriminator else "generator"

    @property
    def main_head(self) -> str:
        """The head of the full-size encoder, as the FLOPs counter names it."""
        return "disc" if self.has_discriminator else "mlm"


RTD = Objective("rtd", "ELECTRA (RTD)", has_discriminator=True, masking="electra")
MLM = Objective("mlm", "BERT (MLM)", has_discriminator=False, masking="bert", replacements="none")
RTD_NGRAM = Objective(
    "rtd-ngram", "ELECTRA (RTD, n-gram replacements)", True, "electra", replacements="ngram"
)

OBJECTIVES: dict[str, Objective] = {o.name: o for o in (RTD, MLM, RTD_NGRAM)}
"""Every objective by name, ELECTRA first (the default)."""

ObjectiveName = Literal[tuple(OBJECTIVES)]  # type: ignore[valid-type]
"""The allowed names, as a type: config validation and ``--help`` choices read it."""


def objective_named(name: str) -> Objective:
    """The objective called ``name``; ValueError naming the choices for any other."""
    try:
        return OBJECTIVES[name]
    except KeyError:
        raise ValueError(f"unknown objective {name!r}: one of {list(OBJECTIVES)}") from None
