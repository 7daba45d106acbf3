"""Every pre-training config field is a documented ``--SECTION.FIELD`` flag.

The training itself is replaced by a stub that records the config it is given, so these
tests check what reaches the trainer, not a run.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from electra.cli import COMMANDS, add_dataclass_arguments, command_parser, config_leaves, main
from electra.experiments.compare import arm_run_dir
from electra.experiments.options import ARM_KEYS, CompareCommand
from electra.model.config import ElectraConfig
from electra.pretrain import command as pretrain_command
from electra.pretrain import config as pretrain_config
from electra.pretrain.command import pretrain_cli
from electra.pretrain.config import ModelKeys, PretrainConfig
from electra.pretrain.options import PretrainCommand


@pytest.fixture
def trained(monkeypatch: pytest.MonkeyPatch) -> list[PretrainConfig]:
    """Configs given to the trainer by `electra pretrain` (nothing is trained)."""
    seen: list[PretrainConfig] = []

    class FakeTrainer:
        def __init__(self, cfg: PretrainConfig, resume: bool = False) -> None:
            seen.append(cfg)

        def fit(self) -> dict[str, int]:
            return {"step": 1}

    monkeypatch.setattr(pretrain_command, "Trainer", FakeTrainer)
    return seen


def pretrain(trained: list[PretrainConfig], *args: str) -> PretrainConfig:
    assert main(["pretrain", "--config", "cpu", *args]) == 0
    return trained[-1]


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}


def documented_fields() -> list[tuple[str, str]]:
    """(flag, doc) of every documented field of the pre-training config, section by section.

    Written without the CLI's own walk so that a field it skipped would be caught.
    """
    out = []
    for section in dataclasses.fields(PretrainConfig):
        schema = ModelKeys if section.name == "model" else section.type
        schema = getattr(pretrain_config, schema) if isinstance(schema, str) else schema
        for f in dataclasses.fields(schema):
            if f.metadata.get("doc"):
                out.append((f"--{section.name}.{f.name}", f.metadata["doc"]))
    return out


def test_a_dotted_flag_overrides_the_recipe_and_reaches_the_trainer(trained) -> None:
    cfg = pretrain(trained, "--optim.learning_rate", "3e-4", "--objective.disc_weight", "20")
    assert cfg.optim.learning_rate == 3e-4
    assert cfg.objective.disc_weight == 20.0 and isinstance(cfg.objective.disc_weight, float)


def test_fields_not_given_keep_the_recipe_values(trained) -> None:
    cfg = pretrain(trained, "--optim.learning_rate", "3e-4", "--model.hidden_size", "128")
    # cpu.toml: warmup 100, batch 32, 4 layers of the small preset with ConvBERT's
    # mixed attention, output runs/cpu
    assert (cfg.optim.warmup_steps, cfg.optim.batch_size) == (100, 32)
    want = {"preset": "small", "num_hidden_layers": 4, "conv_kernel_size": 9, "hidden_size": 128}
    assert cfg.model == want
    assert cfg.run.output_dir == "runs/cpu" and cfg.objective.disc_prior_bias is True


def test_set_still_works_and_dotted_flags_come_after_it(trained) -> None:
    cfg = pretrain(trained, "--set", "optim.max_steps=7", "optim.learning_rate=1e-3")
    assert (cfg.optim.max_steps, cfg.optim.learning_rate) == (7, 1e-3)
    cfg = pretrain(trained, "--optim.learning_rate", "2e-4", "--set", "optim.learning_rate=1e-3")
    assert cfg.optim.learning_rate == 2e-4  # recipe < --set < dotted flags
    cfg = pretrain(trained, "--data", "a", "--data.blocks", "b", "-o", "out")
    assert (cfg.data.blocks, cfg.run.output_dir) == ("b", "out")  # shortcuts < dotted flags


def test_bool_fields(trained) -> None:
    cfg = pretrain(trained, "--no-objective.disc_prior_bias", "--run.compile")
    assert cfg.objective.disc_prior_bias is False and cfg.run.compile is True
    cfg = pretrain(trained, "--no-run.tensorboard")
    assert cfg.run.tensorboard is False and cfg.run.compile is False


def test_text_fields_take_the_value_verbatim(trained) -> None:
    cfg = pretrain(trained, "--data.blocks", "2024", "--run.device", "cuda:1")
    assert (cfg.data.blocks, cfg.run.device) == ("2024", "cuda:1")
    cfg = pretrain(trained, "--run.precision", "bf16", "--objective.objective", "mlm")
    assert (cfg.run.precision, cfg.objective.objective) == ("bf16", "mlm")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--optim.max_steps", "ten"], "argument --optim.max_steps: expected an integer"),
        (["--optim.learning_rate", "fast"], "argument --optim.learning_rate: expected a number"),
        (["--run.precision", "fp8"], "argument --run.precision: 'fp8' is not one of"),
        (
            ["--optim.learnig_rate", "1"],
            "--optim.learnig_rate 1 (did you mean --optim.learning_rate?)",
        ),
    ],
)
def test_a_bad_flag_is_a_usage_error_naming_it(trained, capsys, args, message) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["pretrain", *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not trained


def test_a_value_the_config_rejects_is_still_a_config_error(trained, capsys) -> None:
    assert main(["pretrain", "--objective.mask_prob", "1.5"]) == 2
    assert "mask_prob must be in (0, 1)" in capsys.readouterr().err


def test_every_documented_config_field_has_a_flag_with_its_doc_as_help() -> None:
    parser, _ = command_parser("pretrain")
    flags = options(parser)
    expected = documented_fields()
    assert len(expected) >= 40  # the sections really were walked
    for flag, doc in expected:
        assert flag in flags, f"no flag for {flag}"
        assert flags[flag].help.replace("%%", "%") == doc
    model = {f for f, _ in expected if f.startswith("--model.")}
    assert model == {f"--model.{f.name}" for f in dataclasses.fields(ElectraConfig)} | {
        "--model.preset"
    }
    assert len(list(config_leaves(PretrainConfig))) == len(expected)


def test_help_groups_the_flags_by_section(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    out = capsys.readouterr().out
    for section in ("model", "init", "objective", "optim", "data", "run"):
        assert f"\n{section}:\n" in out
    optim = out[out.index("\noptim:\n") : out.index("\ndata:\n")]
    assert "--optim.learning_rate FLOAT" in optim and "Peak learning rate." in optim
    assert "--run.compile, --no-run.compile" in out
    assert "--SECTION.FIELD" in out.split("\n\n")[0]  # the usage line stays short


def test_the_python_api_takes_typed_flags(trained) -> None:
    cmd = PretrainCommand(config="cpu", set=["optim.max_steps=9"], flags={"run.seed": 3})
    assert pretrain_cli(cmd) == 0
    assert (trained[-1].optim.max_steps, trained[-1].run.seed) == (9, 3)


def test_compare_takes_the_same_flags_and_keys_runs_by_the_result(tmp_path: Path) -> None:
    parser, command = command_parser("compare")
    cls = command.options
    ns = parser.parse_args(["--optim.learning_rate", "3e-4", "--no-run.tensorboard"])
    cmd = cls(**vars(ns))
    assert cmd.flags == {"optim.learning_rate": 3e-4, "run.tensorboard": False}
    by_set = CompareCommand(set=["optim.learning_rate=3e-4", "run.tensorboard=false"])
    blocks, out = tmp_path / "blocks", tmp_path / "out"
    blocks.mkdir()
    (blocks / "manifest.json").write_text('{"fingerprint": "0123"}')  # all the key reads
    assert arm_run_dir(cmd, "rtd", blocks, out) == arm_run_dir(by_set, "rtd", blocks, out)
    assert arm_run_dir(cmd, "rtd", blocks, out) != arm_run_dir(CompareCommand(), "rtd", blocks, out)
    # compare fixes the objective, blocks, run directory and steps of each arm: no flag
    flags = options(parser)
    assert "--optim.warmup_steps" in flags and "--run.seed" in flags
    for key in ARM_KEYS:
        assert f"--{key}" not in flags and f"--no-{key}" not in flags, key
    with pytest.raises(SystemExit):
        parser.parse_args(["--optim.max_steps", "5"])
    mlm = CompareCommand(flags={"objective.objective": "mlm"})  # nor does the Python API
    assert arm_run_dir(mlm, "rtd", blocks, out) == arm_run_dir(CompareCommand(), "rtd", blocks, out)


@dataclass
class _Base:
    """A flat command base class, as shared corpus options are."""

    inputs: list[str] = field(metadata={"doc": "Input files.", "positional": True})
    limit: float = field(default=1.0, metadata={"doc": "Megabytes read."})


@dataclass
class _Flat(_Base):
    output: str = field(default="out", metadata={"doc": "Output.", "short": "-o"})
    strip: bool = field(default=False, metadata={"doc": "Strip."})


def test_plain_and_inherited_fields_still_make_plain_flags() -> None:
    parser = argparse.ArgumentParser()
    add_dataclass_arguments(parser, _Flat)
    ns = parser.parse_args(["a", "b", "--limit", "2", "-o", "x", "--strip"])
    assert _Flat(**vars(ns)) == _Flat(inputs=["a", "b"], limit=2.0, output="x", strip=True)
    assert "[--SECTION.FIELD" not in parser.format_usage()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_answers_help(name: str, capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main([name, "--help"])
    assert done.value.code == 0
    assert "usage: electra" in capsys.readouterr().out


# -- an option given twice: accumulated or refused, never dropped --------------------------------


def test_a_repeated_set_keeps_every_override(trained) -> None:
    cfg = pretrain(trained, "--set", "optim.max_steps=3", "--set", "optim.batch_size=4")
    assert (cfg.optim.max_steps, cfg.optim.batch_size) == (3, 4)
    cfg = pretrain(
        trained, "--set", "optim.max_steps=3", "run.seed=5", "--set", "optim.max_steps=6"
    )
    assert (cfg.optim.max_steps, cfg.run.seed) == (6, 5)  # in order: the later one applies


def test_a_repeated_list_flag_accumulates_and_replaces_the_default() -> None:
    parser, command = command_parser("finetune")

    def seeds(*argv: str) -> list[int]:
        return command.options(**vars(parser.parse_args(["--model", "m", *argv]))).seeds

    assert seeds() == [1]
    assert seeds("--seeds", "4") == [4]  # the default [1] is replaced, not added to
    assert seeds("--seeds", "2", "--seeds", "3", "4") == [2, 3, 4]
    assert seeds("--seeds", "2") == [2]  # a later parse starts afresh
    parser, command = command_parser("extend-vocab")
    ns = parser.parse_args(["d", "-o", "x", "--corpus", "a.txt", "--corpus", "b.txt"])
    assert command.options(**vars(ns)).corpus == ["a.txt", "b.txt"]


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["-o", "a", "--output", "b"],
            "argument --output/-o: given more than once ('a', then 'b')",
        ),
        (["--config", "tiny"], "argument --config: given more than once ('cpu', then 'tiny')"),
        (["--optim.max_steps", "3", "--optim.max_steps", "5"], "--optim.max_steps: given more"),
        (["--run.compile", "--no-run.compile"], "--run.compile/--no-run.compile: given more"),
        (["--resume", "--resume"], "argument --resume/--no-resume: given more than once"),
        (["--objective", "mlm", "--objective", "rtd"], "argument --objective: given more"),
    ],
)
def test_a_single_valued_flag_given_twice_is_refused_naming_it(
    trained, capsys, args, message
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["pretrain", "--config", "cpu", *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not trained


def test_no_option_of_any_command_can_drop_a_value() -> None:
    """Every flag of every command is one that refuses a second value or accumulates it."""
    from electra import cli

    kinds = (cli._StoreOnce, cli._BooleanOnce, cli._ExtendList)
    kinds += (cli._StoreDotted, cli._StoreDottedBool)
    for name in cli.COMMANDS:
        parser, _ = command_parser(name)
        for action in parser._actions:
            if action.option_strings and not isinstance(action, argparse._HelpAction):
                assert isinstance(action, kinds), f"electra {name} {action.option_strings}"
    parser, _ = command_parser("pretrain")  # and each parse starts with nothing seen
    assert parser.parse_args(["-o", "a"]).output == "a"
    assert parser.parse_args(["-o", "b"]).output == "b"
