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
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import importlib
import inspect
import os
import sys
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

from electra.config import ConfigError

# name -> (module, function, one-line summary)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "tokenizer": ("electra.tokenizer", "train_tokenizer_cli", "Train a WordPiece vocabulary."),
    "prepare": ("electra.data", "prepare_cli", "Turn a raw corpus into packed training blocks."),
    "pretrain": ("electra.train", "pretrain_cli", "Pre-train with RTD (or MLM) over blocks."),
    "extend-vocab": (
        "electra.extend",
        "extend_vocab_cli",
        "Add domain tokens to a checkpoint's vocabulary.",
    ),
    "export": (
        "electra.export",
        "export_cli",
        "Export a run (Hugging Face) or a model directory (ONNX, --onnx).",
    ),
    "finetune": ("electra.finetune.run", "finetune_cli", "Fine-tune on a downstream task."),
    "evaluate": ("electra.finetune.run", "evaluate_cli", "Evaluate a fine-tuned model."),
    "predict": ("electra.predict", "predict_cli", "Predict on a file (JSON Lines out)."),
    "download": (
        "electra.finetune.download",
        "download_cli",
        "Download fine-tuning data sets (when online).",
    ),
    "compare": ("electra.compare", "compare_cli", "RTD vs MLM at equal pre-training FLOPs."),
    "report": ("electra.report", "report_cli", "Plots and an HTML page for a run."),
    "demo": ("electra.demo", "demo_cli", "The main job: vocabulary to fine-tuned model."),
    "flops": ("electra.flops", "flops_cli", "Parameter counts and training FLOPs of a preset."),
}


# Commands whose speed depends on the allocator (see shared/reference/CPU-PERFORMANCE.md:
# tcmalloc removes most page-fault time of a CPU training step, -27 to -35%).
_ALLOCATOR_BOUND = {"pretrain", "finetune", "compare", "demo"}
_TCMALLOC_GLOBS = (
    "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib*/libtcmalloc_minimal.so*",
    "/usr/local/lib/libtcmalloc_minimal.so*",
)


def find_tcmalloc() -> str | None:
    """Path of libtcmalloc_minimal if installed (Debian: libtcmalloc-minimal4)."""
    for pattern in _TCMALLOC_GLOBS:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[0]
    return None


def reexec_with_tcmalloc(argv: list[str]) -> None:
    """Restart this process with tcmalloc preloaded, once, when it is installed.

    Set ``ELECTRA_NO_TCMALLOC=1`` to keep the default allocator.
    """
    if os.environ.get("ELECTRA_NO_TCMALLOC") or "tcmalloc" in os.environ.get("LD_PRELOAD", ""):
        return
    lib = find_tcmalloc()
    if lib is None:
        return
    env = dict(os.environ)
    env["LD_PRELOAD"] = ":".join(p for p in (lib, env.get("LD_PRELOAD", "")) if p)
    env["ELECTRA_NO_TCMALLOC"] = "1"  # never loop
    os.execve(sys.executable, [sys.executable, "-m", "electra.cli", *argv], env)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add one argument per field of dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp, optional = _unwrap_optional(hints[f.name])
        meta = f.metadata
        help_text = meta.get("doc", "")
        has_default = f.default is not dataclasses.MISSING or (
            f.default_factory is not dataclasses.MISSING
        )
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        )
        kwargs: dict[str, Any] = {"help": help_text}
        origin = typing.get_origin(tp)
        if tp is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif origin is typing.Literal:
            kwargs["choices"] = list(typing.get_args(tp))
            kwargs["type"] = type(typing.get_args(tp)[0])
        elif origin is list:
            (item,) = typing.get_args(tp)
            kwargs["nargs"] = "*" if has_default else "+"
            kwargs["type"] = item
        elif tp in (int, float, str):
            kwargs["type"] = tp
        else:
            raise TypeError(f"CLI cannot express field {cls.__name__}.{f.name}: {tp}")
        if has_default and default not in (None, [], "") and tp is not bool:
            kwargs["help"] = f"{help_text} (default: {default})"
        if meta.get("positional"):
            if has_default:
                kwargs["nargs"] = "?" if origin is not list else "*"
                kwargs["default"] = default
            parser.add_argument(f.name, **kwargs)
            continue
        names = ["--" + f.name.replace("_", "-")]
        if "short" in meta:
            names.append(meta["short"])
        kwargs["dest"] = f.name
        kwargs["default"] = default
        if not has_default and not optional:
            kwargs["required"] = True
        parser.add_argument(*names, **kwargs)


def _command_class(fn: Callable[..., Any]) -> type:
    params = list(inspect.signature(fn).parameters.values())
    hints = typing.get_type_hints(fn)
    if len(params) != 1 or not dataclasses.is_dataclass(hints.get(params[0].name)):
        raise TypeError(f"{fn.__qualname__} must take exactly one dataclass argument")
    return hints[params[0].name]


def _load(name: str) -> Callable[..., Any]:
    module, func, _ = COMMANDS[name]
    return getattr(importlib.import_module(module), func)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``electra`` console script."""
    from_shell = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if from_shell and argv and argv[0] in _ALLOCATOR_BOUND:
        reexec_with_tcmalloc(argv)
    top = argparse.ArgumentParser(
        prog="electra",
        description="Pre-train text encoders with ELECTRA's replaced token detection "
        "and fine-tune them.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n"
        + "\n".join(f"  {n:<{max(map(len, COMMANDS))}} {s}" for n, (_, _, s) in COMMANDS.items())
        + "\n\nRun `electra COMMAND --help` for the options of one command.",
    )
    top.add_argument("command", choices=list(COMMANDS), metavar="COMMAND")
    if not argv or argv[0] in ("-h", "--help"):
        top.print_help()
        return 0
    if argv[0] not in COMMANDS:
        top.parse_args(argv[:1])  # prints the usage error and exits 2
    name, rest = argv[0], argv[1:]
    fn = _load(name)
    cls = _command_class(fn)
    parser = argparse.ArgumentParser(
        prog=f"electra {name}",
        description=(inspect.getdoc(fn) or COMMANDS[name][2]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_dataclass_arguments(parser, cls)
    ns = parser.parse_args(rest)
    try:
        config = cls(**vars(ns))
        result = fn(config)
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        print(f"electra {name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"electra {name}: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
