"""The ``electra`` command line.

Every subcommand is a typed library function taking one dataclass; the
arguments and their ``--help`` text are generated from that dataclass's
fields and their ``metadata["doc"]`` (litgpt style), so the CLI and the
Python API cannot drift apart. Subcommand modules are imported lazily so
``electra --help`` stays fast.

Field metadata understood here:
    doc         help text
    positional  the field is a positional argument
    short       an extra short flag such as ``-o``
    dotted      a config dataclass, or ``"module:Name"`` imported only when the
                parser is built: the field, a ``dict``, collects one flag per
                field of that config, ``--SECTION.FIELD VALUE``, as
                ``{"SECTION.FIELD": value}``. Only the flags given appear (the
                argparse default is a sentinel), so a recipe's values are never
                clobbered by defaults. Each section is an argument group of
                ``--help``, each flag's help is its field's doc.
    keys        on a config's ``dict`` field: the dataclass whose fields it may
                hold (``[model]``: a preset plus ElectraConfig's fields)

A dotted flag reads its value as ``--set`` does (TOML, checked by the same
:func:`electra.config.parse_value`; a ``str`` field takes the text verbatim) and
a wrong value is an argparse error naming the flag; a ``bool`` is
``--run.compile`` / ``--no-run.compile`` like every other boolean flag here.
The command decides the precedence; pretrain and compare apply the recipe, then
``--set``, then the dotted flags.

No value given on the command line is ever dropped: a flag that takes several
values (``--set``, ``--seeds``, a ``list`` field) accumulates them when it is
repeated (``--set a=1 --set b=2`` is ``--set a=1 b=2``; the first occurrence
replaces the default, it does not add to it), and a single-valued flag given
twice (``-o a --output b``, ``--progress --no-progress``, ``--optim.max_steps 3
--optim.max_steps 5``) is an error naming it, rather than the last one winning.

Why our own generator rather than tyro or jsonargparse (litgpt's): neither would
remove code. The strict TOML recipe loading with ``--set`` overrides
(:mod:`electra.config`) stays either way, both read help from docstrings or
comments rather than our ``metadata["doc"]``, and either would have to be
taught the ``[model]`` table (a preset plus overrides). The dotted flags are a
little over a hundred lines on top of the generator that already existed.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import inspect
import sys
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from electra.blocks.options import PrepareCommand
from electra.config import ConfigError, parse_value
from electra.experiments.options import CompareCommand, DemoCommand, ReportCommand
from electra.export.options import ExportArgs
from electra.finetune.download import DownloadArgs
from electra.finetune.options import EvaluateArgs, FinetuneArgs
from electra.inference.options import PredictArgs
from electra.pretrain.options import ExtendVocabCommand, FlopsCommand, PretrainCommand
from electra.system.allocator import AllocatorError, reexec_for_speed
from electra.system.diskspace import full_disk_errno
from electra.system.errors import RunError
from electra.text.options import TokenizerCommand


@dataclass(frozen=True)
class Command:
    """One subcommand: the options it takes, the function that runs it, a summary.

    ``options`` lives in a torch-free module, so ``electra COMMAND --help`` builds its
    parser without loading PyTorch; ``run`` (``"module:function"``, a function taking
    one ``options``) is imported only when the command runs, and its module imports
    what it needs at the top.
    """

    options: type
    run: str
    summary: str

    def function(self) -> Callable[..., Any]:
        """The function that runs the command (imported now)."""
        module, _, name = self.run.partition(":")
        return getattr(importlib.import_module(module), name)


COMMANDS: dict[str, Command] = {
    "tokenizer": Command(
        TokenizerCommand,
        "electra.text.vocabulary:train_tokenizer_cli",
        "Train a WordPiece vocabulary.",
    ),
    "prepare": Command(
        PrepareCommand,
        "electra.blocks.prepare:prepare_cli",
        "Turn a raw corpus into packed training blocks.",
    ),
    "pretrain": Command(
        PretrainCommand,
        "electra.pretrain.command:pretrain_cli",
        "Pre-train with RTD (or MLM) over blocks.",
    ),
    "extend-vocab": Command(
        ExtendVocabCommand,
        "electra.pretrain.extend:extend_vocab_cli",
        "Add domain tokens to a checkpoint's vocabulary.",
    ),
    "export": Command(
        ExportArgs,
        "electra.export.command:export_cli",
        "Export a run (Hugging Face) or a model directory (ONNX, --onnx).",
    ),
    "finetune": Command(
        FinetuneArgs, "electra.finetune.commands:finetune_cli", "Fine-tune on a downstream task."
    ),
    "evaluate": Command(
        EvaluateArgs, "electra.finetune.commands:evaluate_cli", "Evaluate a fine-tuned model."
    ),
    "predict": Command(
        PredictArgs, "electra.inference.predict:predict_cli", "Predict on a file (JSON Lines out)."
    ),
    "download": Command(
        DownloadArgs,
        "electra.finetune.download:download_cli",
        "Download fine-tuning data sets (when online).",
    ),
    "compare": Command(
        CompareCommand,
        "electra.experiments.compare:compare_cli",
        "RTD vs MLM at equal pre-training FLOPs.",
    ),
    "report": Command(
        ReportCommand, "electra.experiments.report:report_cli", "Plots and an HTML page for a run."
    ),
    "demo": Command(
        DemoCommand,
        "electra.experiments.demo:demo_cli",
        "The main job: vocabulary to fine-tuned model.",
    ),
    "flops": Command(
        FlopsCommand,
        "electra.pretrain.flops:flops_cli",
        "Parameter counts and training FLOPs of a preset.",
    ),
}


# Commands whose speed depends on the allocator: they restart once with tcmalloc or
# glibc's tuned malloc (see electra.system.allocator and benchmarks/allocator.py).
_ALLOCATOR_BOUND = {"pretrain", "finetune", "compare", "demo"}


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add one argument per field of dataclass ``cls`` (dotted fields: one per config field)."""
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    dotted = [f for f in fields if "dotted" in f.metadata]
    for f in fields:
        if "dotted" not in f.metadata:
            _add_field_argument(parser, cls, f, hints[f.name])
    if dotted:
        # The usage line lists the plain flags; dozens of dotted ones would bury them.
        usage = parser.format_usage().removeprefix("usage: ").rstrip().replace("%", "%%")
        indent = " " * len(f"usage: {parser.prog} ")
        parser.usage = f"{usage}\n{indent}[--SECTION.FIELD VALUE ...]"
    for f in dotted:
        parser.set_defaults(**{f.name: {}})
        withheld = f.metadata.get("withheld", ())
        add_dotted_arguments(parser, _resolve(f.metadata["dotted"]), f.name, withheld)


def _field_default(f: dataclasses.Field) -> tuple[bool, Any]:
    """Whether ``f`` has a default, and that default (``None`` when it has none)."""
    if f.default is not dataclasses.MISSING:
        return True, f.default
    if f.default_factory is not dataclasses.MISSING:
        return True, f.default_factory()
    return False, None


def _seen(parser: argparse.ArgumentParser, namespace: argparse.Namespace) -> set[str]:
    """The destinations given so far in the parse that fills ``namespace``.

    Kept on the parser beside the namespace it belongs to (a new parse has a new
    namespace, hence a fresh set), so the namespace itself holds only the options.
    """
    held = getattr(parser, "_electra_seen", None)
    if held is None or held[0] is not namespace:
        held = (namespace, set())
        parser._electra_seen = held  # type: ignore[attr-defined]
    return held[1]


def _once(action: argparse.Action, parser, namespace, value: Any) -> None:
    """Refuse a second occurrence of the single-valued ``action`` in this parse (argparse
    prefixes the message with the flag: ``argument --output/-o: given more than once``)."""
    seen = _seen(parser, namespace)
    if action.dest in seen:
        first = getattr(namespace, action.dest)
        raise argparse.ArgumentError(
            action, f"given more than once ({first!r}, then {value!r}); give it once"
        )
    seen.add(action.dest)


class _StoreOnce(argparse.Action):
    """A single-valued flag: stored, and an error when given again."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        _once(self, parser, namespace, values)
        setattr(namespace, self.dest, values)


class _BooleanOnce(argparse.BooleanOptionalAction):
    """``--x`` / ``--no-x``: either, once."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if option_string in self.option_strings:
            _once(self, parser, namespace, not option_string.startswith("--no-"))
        super().__call__(parser, namespace, values, option_string)


class _ExtendList(argparse.Action):
    """A flag of several values: repeated, it accumulates them (``--set a --set b`` is
    ``--set a b``); its first occurrence replaces the default rather than adding to it."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        seen = _seen(parser, namespace)
        kept = list(getattr(namespace, self.dest) or []) if self.dest in seen else []
        seen.add(self.dest)
        setattr(namespace, self.dest, [*kept, *values])


def _type_arguments(cls: type, f: dataclasses.Field, tp: Any, has_default: bool) -> dict:
    """``add_argument`` keywords that make argparse parse a flag for a field of type ``tp``:
    one value given once, or a list accumulated over repeats (see the module's doc)."""
    origin = typing.get_origin(tp)
    if tp is bool:
        return {"action": _BooleanOnce}
    if origin is typing.Literal:
        choices = list(typing.get_args(tp))
        return {"choices": choices, "type": type(choices[0]), "action": _StoreOnce}
    if origin is list:
        (item,) = typing.get_args(tp)
        return {"nargs": "*" if has_default else "+", "type": item, "action": _ExtendList}
    if tp in (int, float, str):
        return {"type": tp, "action": _StoreOnce}
    raise TypeError(f"CLI cannot express field {cls.__name__}.{f.name}: {tp}")


def _add_field_argument(
    parser: argparse.ArgumentParser, cls: type, f: dataclasses.Field, hint: Any
) -> None:
    """One flag (or positional argument) for field ``f`` of ``cls``."""
    tp, optional = _unwrap_optional(hint)
    meta = f.metadata
    has_default, default = _field_default(f)
    help_text = meta.get("doc", "").replace("%", "%%")  # argparse formats help with %
    if has_default and default not in (None, [], "") and tp is not bool:
        help_text = f"{help_text} (default: {default})"
    kwargs: dict[str, Any] = {"help": help_text, **_type_arguments(cls, f, tp, has_default)}
    if meta.get("positional"):
        kwargs.pop("action", None)  # given once by its place
        if has_default:
            kwargs["nargs"] = "?" if typing.get_origin(tp) is not list else "*"
            kwargs["default"] = default
        parser.add_argument(f.name, **kwargs)
        return
    names = ["--" + f.name.replace("_", "-")]
    if "short" in meta:
        names.append(meta["short"])
    kwargs["dest"] = f.name
    kwargs["default"] = default
    if not has_default and not optional:
        kwargs["required"] = True
    parser.add_argument(*names, **kwargs)


def _resolve(ref: type | str) -> type:
    """A class, or the class a ``"module:Name"`` string names (imported now)."""
    if isinstance(ref, str):
        module, _, name = ref.partition(":")
        return getattr(importlib.import_module(module), name)
    return ref


def _store(
    action: argparse.Action, namespace: argparse.Namespace, into: str, key: str, value: Any
) -> None:
    """``value`` under ``key`` of the dict ``into``; a key already there was given before
    in this parse (the default dict is empty): an error naming the flag."""
    given = getattr(namespace, into)
    if key in given:
        raise argparse.ArgumentError(
            action, f"given more than once ({given[key]!r}, then {value!r}); give it once"
        )
    # A new dict each time: the parser's default must never be mutated.
    setattr(namespace, into, {**given, key: value})


class _StoreDotted(argparse.Action):
    """``--a.b VALUE``: store ``value`` under key ``a.b`` of the dict field ``into``."""

    def __init__(self, option_strings: list[str], dest: str, *, into: str, **kwargs: Any):
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, **kwargs)
        self.into = into

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        _store(self, namespace, self.into, self.dest, values)


class _StoreDottedBool(argparse.BooleanOptionalAction):
    """``--a.b`` / ``--no-a.b``: store True / False under key ``a.b`` of ``into``."""

    def __init__(self, option_strings: list[str], dest: str, *, into: str, **kwargs: Any):
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, **kwargs)
        self.into = into

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if option_string in self.option_strings:
            value = not option_string.startswith("--no-")
            _store(self, namespace, self.into, self.dest, value)


def _section_schema(f: dataclasses.Field, tp: Any) -> type | None:
    """The dataclass whose fields a config field holds (its type or metadata["keys"])."""
    schema = f.metadata.get("keys")
    if schema is None and dataclasses.is_dataclass(tp):
        schema = tp
    return schema


def config_leaves(cls: type, prefix: str = "") -> Iterator[tuple[str, Any, str]]:
    """``(dotted key, annotation, doc)`` of every leaf field of config dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        schema = _section_schema(f, hints[f.name])
        if schema is not None:
            yield from config_leaves(schema, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", hints[f.name], f.metadata.get("doc", "")


def _metavar(tp: Any) -> str:
    if typing.get_origin(tp) is typing.Literal:
        return "{" + ",".join(map(str, typing.get_args(tp))) + "}"
    return {int: "INT", float: "FLOAT", str: "TEXT"}.get(tp, "VALUE")


def _dotted_type(tp: Any, flag: str) -> Callable[[str], Any]:
    """The argparse ``type`` of a dotted flag: ``--set``'s reading and checks."""

    def convert(text: str) -> Any:
        try:
            return parse_value(text, tp, flag)
        except ConfigError as exc:  # argparse prefixes "argument FLAG: "
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{flag}: ")) from None

    return convert


def _add_dotted(parser: Any, key: str, tp: Any, doc: str, into: str) -> None:
    flag = f"--{key}"
    help_text = doc.replace("%", "%%")
    if tp is bool:
        parser.add_argument(flag, action=_StoreDottedBool, into=into, help=help_text)
    else:
        parser.add_argument(
            flag,
            action=_StoreDotted,
            into=into,
            type=_dotted_type(tp, flag),
            metavar=_metavar(tp),
            help=help_text,
        )


def add_dotted_arguments(
    parser: argparse.ArgumentParser, cls: type, into: str, withheld: Sequence[str] = ()
) -> None:
    """``--SECTION.FIELD`` for every field of config ``cls``, one argument group a section.

    Values land in ``namespace.<into>`` as ``{"SECTION.FIELD": value}``, only for the
    flags given. ``withheld`` keys get no flag: the command sets them itself (a flag
    it would overwrite only misleads).
    """
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        schema = _section_schema(f, hints[f.name])
        if schema is None:
            _add_dotted(parser, f.name, hints[f.name], f.metadata.get("doc", ""), into)
            continue
        summary = (inspect.getdoc(schema) or "").split("\n")[0]
        group = parser.add_argument_group(f.name, summary)
        for key, tp, doc in config_leaves(schema, f"{f.name}."):
            if key not in withheld:
                _add_dotted(group, key, tp, doc, into)


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args``, suggesting the nearest flag for an unknown one."""
    ns, extra = parser.parse_known_args(argv)
    if extra:
        flags = [s for a in parser._actions for s in a.option_strings]
        unknown = next((a.split("=")[0] for a in extra if a.startswith("--")), "")
        close = difflib.get_close_matches(unknown, flags, n=1) if unknown else []
        hint = f" (did you mean {close[0]}?)" if close else ""
        parser.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    return ns


def command_parser(name: str) -> tuple[argparse.ArgumentParser, Command]:
    """The parser of command ``name`` (from its options alone) and the command."""
    command = COMMANDS[name]
    parser = argparse.ArgumentParser(
        prog=f"electra {name}",
        description=(inspect.getdoc(command.options) or command.summary),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_dataclass_arguments(parser, command.options)
    return parser, command


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``electra`` console script."""
    from_shell = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if from_shell and argv and argv[0] in _ALLOCATOR_BOUND:
        try:
            reexec_for_speed(["-m", "electra.cli", *argv])
        except AllocatorError as exc:
            print(f"electra {argv[0]}: error: {exc}", file=sys.stderr)
            return 2
    top = argparse.ArgumentParser(
        prog="electra",
        description="Pre-train text encoders with ELECTRA's replaced token detection "
        "and fine-tune them.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n"
        + "\n".join(f"  {n:<{max(map(len, COMMANDS))}} {c.summary}" for n, c in COMMANDS.items())
        + "\n\nRun `electra COMMAND --help` for the options of one command.",
    )
    top.add_argument("command", choices=list(COMMANDS), metavar="COMMAND")
    if not argv or argv[0] in ("-h", "--help"):
        top.print_help()
        return 0
    if argv[0] not in COMMANDS:
        top.parse_args(argv[:1])  # prints the usage error and exits 2
    name, rest = argv[0], argv[1:]
    parser, command = command_parser(name)
    ns = _parse(parser, rest)
    try:
        options = command.options(**vars(ns))
        result = command.function()(options)
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        print(f"electra {name}: error: {exc}", file=sys.stderr)
        return 2
    except RunError as exc:  # a run that stopped or could not start, saying why
        print(f"electra {name}: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a full disk in a writer not wrapped (the wrapped ones say more)
        if full_disk_errno(exc) is None:
            raise
        print(
            f"electra {name}: error: the disk is full ({type(exc).__name__}: {exc}); every "
            "file is written to a temporary name and renamed, so those written before are "
            "whole: once space is free, run the command again (`pretrain` with --resume)",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print(f"electra {name}: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
