"""The arms of ``electra compare``: an objective, or a variant of one with its own overrides.

An arm is written ``OBJECTIVE`` (``rtd``, ``mlm``, ``rtd-ngram``) or
``OBJECTIVE:KEY=VALUE[:KEY=VALUE...]``, a variant of that objective with pre-training
overrides of its own, applied after the ones every arm shares (``--set`` and the dotted
flags)::

    electra compare --arms rtd mlm rtd:objective.disc_mlm_weight=1

measures a lever (here a corrective LM on the discriminator) at the same FLOPs as plain
RTD and MLM, in one table and one plot. An arm's run is keyed by the recipe it trains, so
adding a variant to a finished comparison trains only the variant: ``rtd`` and ``mlm``,
their fine-tunings and the controls are reused.

Pure string handling, no torch: the CLI and :mod:`electra.experiments.crossover` use it too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from electra.config import ConfigError

OBJECTIVE_NAMES = ("rtd", "mlm", "rtd-ngram")  # electra.pretrain.objectives.OBJECTIVES' keys
SEPARATOR = ":"


@dataclass(frozen=True)
class Arm:
    """One parsed arm: ``name`` as written (its label in tables and plots), its
    ``objective`` and its own ``overrides`` (``--set`` text, in order)."""

    name: str
    objective: str
    overrides: tuple[str, ...] = ()

    @property
    def is_variant(self) -> bool:
        """Whether the arm carries overrides of its own."""
        return bool(self.overrides)


def objective_of(name: str) -> str:
    """The objective an arm's name trains (``rtd:optim.dropout=false`` -> ``rtd``)."""
    return name.split(SEPARATOR, 1)[0]


def parse_arm(name: str, withheld: Iterable[str] = ()) -> Arm:
    """Parse one arm; ConfigError naming it when the objective is unknown, an override is
    not ``KEY=VALUE`` or it sets a key compare sets per arm itself (``withheld``)."""
    objective, *overrides = name.split(SEPARATOR)
    if objective not in OBJECTIVE_NAMES:
        raise ConfigError(
            f"arm {name!r}: unknown objective {objective!r}; one of {list(OBJECTIVE_NAMES)}, "
            f"optionally followed by {SEPARATOR}KEY=VALUE overrides"
        )
    for text in overrides:
        key = text.split("=", 1)[0].strip()
        if "=" not in text or not key:
            raise ConfigError(f"arm {name!r}: {text!r} is not KEY=VALUE")
        if key in withheld:
            raise ConfigError(f"arm {name!r}: {key} is set by compare for every arm")
    return Arm(name, objective, tuple(overrides))


def parse_arms(names: list[str], withheld: Iterable[str] = ()) -> list[Arm]:
    """Parse ``--arms``: at least one, all distinct (ConfigError otherwise)."""
    if not names or len(set(names)) != len(names):
        raise ConfigError(f"arms: {names} must be a non-empty list of distinct arms")
    keys = tuple(withheld)
    return [parse_arm(n, keys) for n in names]


def as_arm(arm: Arm | str) -> Arm:
    """``arm`` itself, or the arm a name such as ``"rtd"`` parses to (:func:`parse_arm`)."""
    return arm if isinstance(arm, Arm) else parse_arm(arm)
