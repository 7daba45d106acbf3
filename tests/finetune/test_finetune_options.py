"""Each fine-tuning option is declared once and reaches every place by structure.

``FinetuneArgs`` inherits the data flags (``DataFlags``) and the recipe flags
(``RecipeFlags``); compare and demo tag their fine-tuning flags with the
``FinetuneArgs`` field they set. These tests iterate the fields, so an option
added in one place that does not reach the others fails here.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import electra.experiments.compare as compare_module
import electra.finetune.run as run_module
from electra.cli import command_parser
from electra.experiments.compare import finetune_point, finetune_settings
from electra.experiments.demo import SMOKE_FINETUNING, finetune_nsmc
from electra.experiments.options import CompareCommand, DemoCommand
from electra.finetune.commands import build_recipe
from electra.finetune.options import FinetuneArgs, RecipeFlags
from electra.finetune.recipe import Recipe
from electra.finetune.tasks import DataFlags, DataOptions, get_task

# Fields set in code, never by a flag: adding one here is a decision, not an accident.
DATA_NOT_FLAGS = {"dev_fraction", "test_fraction"}
RECIPE_NOT_FLAGS = {"n_best", "adam_betas", "adam_eps"}


def names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def other_value(tp: Any, default: Any) -> Any:
    """A valid value of type ``tp`` that differs from ``default``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        (tp,) = [a for a in typing.get_args(tp) if a is not type(None)]
    if tp is bool:
        return True if default is None else not default
    if typing.get_origin(tp) is typing.Literal:
        return next(c for c in typing.get_args(tp) if c != default)
    if typing.get_origin(tp) is list:
        return [3, 4]
    if tp is int:
        return 2 * default if default else 12
    if tp is float:
        return default / 2 if default else 0.25
    if tp is str:
        return f"{default}x7"
    raise TypeError(f"no sample value for {tp}")


def samples(cls: type, only: typing.Container[str] | None = None) -> dict[str, Any]:
    """A non-default value for every field of dataclass ``cls`` (or those named ``only``)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if only is not None and f.name not in only:
            continue
        default = f.default_factory() if callable(f.default_factory) else f.default
        out[f.name] = other_value(hints[f.name], default)
    return out


def argv_of(values: dict[str, Any]) -> list[str]:
    """Command-line flags giving ``values`` (``--no-x`` for a false boolean)."""
    argv = []
    for name, value in values.items():
        flag = name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(f"--{flag}" if value else f"--no-{flag}")
        elif isinstance(value, list):
            argv += [f"--{flag}", *map(str, value)]
        else:
            argv += [f"--{flag}", str(value)]
    return argv


def parse_finetune(values: dict[str, Any]) -> FinetuneArgs:
    parser, command = command_parser("finetune")
    cls = command.options
    return cls(**vars(parser.parse_args(["--model", "m", *argv_of(values)])))


def test_every_data_option_is_a_finetune_flag_that_reaches_the_data_options() -> None:
    missing = names(DataOptions) - names(FinetuneArgs)
    assert missing == DATA_NOT_FLAGS, (
        f"DataOptions fields {sorted(missing - DATA_NOT_FLAGS)} are no flag of electra "
        "finetune: declare them in DataFlags (or list them in DATA_NOT_FLAGS on purpose)"
    )
    given = samples(DataFlags)
    opts = parse_finetune(given).data_options()
    assert isinstance(opts, DataOptions)
    for f in dataclasses.fields(DataFlags):
        value = given[f.name]
        expected = os.path.abspath(value) if f.metadata.get("path") else value
        assert getattr(opts, f.name) == expected, f.name
    for name in DATA_NOT_FLAGS:  # the fractions keep their defaults
        assert getattr(opts, name) == getattr(DataOptions(), name)


def test_every_recipe_field_is_a_finetune_flag_that_reaches_the_recipe() -> None:
    assert names(RecipeFlags) <= names(Recipe), "a recipe flag must name a Recipe field"
    missing = names(Recipe) - names(FinetuneArgs)
    assert missing == RECIPE_NOT_FLAGS, (
        f"Recipe fields {sorted(missing - RECIPE_NOT_FLAGS)} are no flag of electra finetune: "
        "declare them in RecipeFlags (or list them in RECIPE_NOT_FLAGS on purpose)"
    )
    given = samples(RecipeFlags)
    args = parse_finetune(given)
    data = SimpleNamespace(spec=get_task("sst2"))
    cfg = SimpleNamespace(hidden_size=1024, max_position_embeddings=512)
    recipe = build_recipe(args, data, cfg, torch.device("cpu"))  # type: ignore[arg-type]
    for name, value in given.items():
        assert getattr(recipe, name) == value, name
    # what the flags leave alone: Table 7 for a 1024-wide model, the task's metric
    default = build_recipe(FinetuneArgs(model="m"), data, cfg, torch.device("cpu"))  # type: ignore[arg-type]
    assert (default.size, default.learning_rate, default.main_metric) == ("large", 5e-5, "accuracy")


def tagged(cls: type) -> dict[str, str]:
    """``{field: FinetuneArgs field}`` of a command's fine-tuning options."""
    return {
        f.name: f.metadata["finetune"] for f in dataclasses.fields(cls) if "finetune" in f.metadata
    }


@pytest.mark.parametrize("cls", [CompareCommand, DemoCommand])
def test_fine_tuning_options_of_compare_and_demo_name_finetune_fields(cls: type) -> None:
    assert tagged(cls), f"{cls.__name__} exposes no fine-tuning option"
    assert set(tagged(cls).values()) <= names(FinetuneArgs)
    # a field named like a fine-tuning option but not tagged would silently not reach it
    own = {"output", "data_dir", "progress"}  # the command's own, passed explicitly
    untagged = (names(cls) & names(FinetuneArgs)) - set(tagged(cls)) - own
    assert not untagged, f"{cls.__name__}: tag {sorted(untagged)} with metadata 'finetune'"


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[FinetuneArgs]:
    """The FinetuneArgs that compare and demo hand to ``finetune`` (which does not run)."""
    calls: list[FinetuneArgs] = []

    def record(args: FinetuneArgs) -> dict:
        calls.append(args)
        return {}

    monkeypatch.setattr(run_module, "finetune", record)  # demo imports it when it runs
    monkeypatch.setattr(compare_module, "finetune", record)  # compare at the top
    return calls


def test_compare_fine_tuning_options_reach_its_finetune_args(
    built: list[FinetuneArgs], tmp_path: Path
) -> None:
    given = samples(CompareCommand, only=tagged(CompareCommand))
    cmd = CompareCommand(**given, progress=False)
    finetune_point(cmd, "model-dir", "sst2", tmp_path / "out", tmp_path / "data", tmp_path / "f")
    (args,) = built
    for name, target in tagged(CompareCommand).items():
        assert getattr(args, target) == given[name], name
    assert (args.model, args.task, args.progress) == ("model-dir", "sst2", False)
    assert (args.output, args.data_dir) == (str(tmp_path / "out"), str(tmp_path / "data"))
    # and each keys the reused results: another value is another directory
    for name, value in given.items():
        other = dataclasses.replace(CompareCommand(), **{name: value})
        assert finetune_settings(other, "sst2") != finetune_settings(CompareCommand(), "sst2"), name


def test_compare_tags_for_its_own_epochs(built: list[FinetuneArgs], tmp_path: Path) -> None:
    """A tagging task trains --tagging-epochs and keys its results by them; the sentence
    tasks keep --epochs and the key they had before the option existed."""
    cmd = CompareCommand(epochs=3, tagging_epochs=7, progress=False)
    for task in ("klue-ner", "nsmc", "wnut17"):
        finetune_point(cmd, "m", task, tmp_path / task, tmp_path, tmp_path / "f")
    assert [args.epochs for args in built] == [7, 3, 7]
    fewer = dataclasses.replace(cmd, tagging_epochs=3)
    assert finetune_settings(fewer, "klue-ner") == finetune_settings(cmd, "nsmc")
    assert finetune_settings(cmd, "klue-ner") != finetune_settings(fewer, "klue-ner")
    assert finetune_settings(cmd, "nsmc") == finetune_settings(fewer, "nsmc")


def test_demo_fine_tuning_options_reach_its_finetune_args(
    built: list[FinetuneArgs], tmp_path: Path
) -> None:
    given = samples(DemoCommand, only=tagged(DemoCommand))
    cmd = DemoCommand(**given, progress=False)
    finetune_nsmc(cmd, tmp_path / "model", tmp_path / "out", tmp_path / "data", tmp_path / "f")
    finetune_nsmc(
        dataclasses.replace(cmd, smoke=True), tmp_path, tmp_path / "o2", tmp_path, tmp_path
    )
    args, smoke = built
    for name, target in tagged(DemoCommand).items():
        assert getattr(args, target) == given[name], name
    assert (args.task, args.max_length, args.bf16, args.progress) == ("nsmc", 64, None, False)
    for name, value in SMOKE_FINETUNING.items():  # --smoke: tiny, whatever was asked
        assert getattr(smoke, name) == value, name
    assert smoke.seeds == given["seeds"]
