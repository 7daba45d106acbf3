"""compare's arms: an objective, or a variant of one with overrides of its own."""

from __future__ import annotations

import pytest

from electra.config import ConfigError
from electra.experiments.arms import (
    OBJECTIVE_NAMES,
    Arm,
    as_arm,
    objective_of,
    parse_arm,
    parse_arms,
)


def test_the_names_are_the_objectives_registry() -> None:
    from electra.pretrain.objectives import OBJECTIVES

    assert OBJECTIVE_NAMES == tuple(OBJECTIVES)


def test_a_plain_arm_and_a_variant_parse() -> None:
    assert parse_arm("mlm") == Arm("mlm", "mlm", ())
    arm = parse_arm("rtd:objective.disc_mlm_weight=1:optim.dropout=false")
    assert arm.objective == "rtd" and arm.is_variant
    assert arm.overrides == ("objective.disc_mlm_weight=1", "optim.dropout=false")
    assert objective_of(arm.name) == "rtd" and objective_of("rtd-ngram") == "rtd-ngram"
    assert as_arm("rtd") == Arm("rtd", "rtd") and as_arm(arm) is arm


@pytest.mark.parametrize(
    ("arms", "says"),
    [
        (["bert"], "unknown objective 'bert'"),
        (["rtd:optim.dropout"], "'optim.dropout' is not KEY=VALUE"),
        (["rtd:=1"], "'=1' is not KEY=VALUE"),
        (["rtd:run.output_dir='x'"], "run.output_dir is set by compare"),
        (["rtd", "rtd"], "distinct"),
        ([], "non-empty"),
    ],
)
def test_a_bad_arm_is_refused_by_name(arms: list[str], says: str) -> None:
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(".", r"\.")):
        parse_arms(arms, withheld=("run.output_dir",))
