"""Strict, typed loading of option dataclasses from dicts (TOML, JSON, ``--set``).

Every loader in the project goes through :func:`from_dict`, which rejects
unknown keys and wrong types with a message naming the source and the field:
a typo in a config file must never be silently ignored for a run that lasts
days. ``--set SECTION.FIELD=VALUE`` overrides are read as TOML values
(:func:`parse_override`) and applied in order (:func:`apply_overrides`).

The model's own config and presets are in :mod:`electra.model.config`; the
pre-training recipe in :mod:`electra.pretrain.config`.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import tomllib
import types
import typing
from collections.abc import Sequence
from dataclasses import field, fields
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names where and which."""


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check (and gently coerce int->float) ``value`` against annotation ``tp``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{where}: invalid value {value!r}")
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{where}: {value!r} is not one of {list(typing.get_args(tp))}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        items = [_coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table for {tp.__name__}, got {value!r}")
        return from_dict(tp, value, source=where)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")
    return value


def from_dict(cls: type[T], data: dict[str, Any], source: str = "config") -> T:
    """Build dataclass ``cls`` from ``data``, rejecting unknown keys and bad types.

    ``source`` names where the data came from (a file, a preset) so the error
    says e.g. ``pretrain.toml: unknown key 'learnig_rate' (did you mean
    'learning_rate'?)``.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a table of keys, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        if key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"{source}: unknown key {key!r}{hint}; valid keys: {', '.join(sorted(known))}"
            )
        kwargs[key] = _coerce(value, hints[key], f"{source}: {key}")
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except TypeError as exc:  # a required field is missing
        raise ConfigError(f"{source}: {exc}") from None


def to_dict(obj: Any) -> dict[str, Any]:
    """A dataclass as a plain dict (JSON/TOML friendly)."""
    return dataclasses.asdict(obj)


def _toml_value(raw: str) -> Any:
    """``raw`` read as a TOML value (``3e-4``, ``10``, ``true``, ``"x"``), else the bare text."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw  # a bare string such as a path


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse ``a.b=value`` from ``--set``; the value is read as TOML when it can be."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"--set {text!r}: empty key")
    return key.split("."), _toml_value(raw)


def parse_value(text: str, tp: Any, where: str) -> Any:
    """A command-line value for a field annotated ``tp``, checked as :func:`from_dict` checks.

    The text is read as TOML as ``--set`` reads it, except for a plain ``str`` field, which
    takes it verbatim (a path named ``2024`` or ``true`` stays a string).
    """
    return _coerce(text if tp is str else _toml_value(text), tp, where)


Override = str | tuple[str, Any]
"""One override: ``--set`` text ``"a.b=value"`` or an already typed ``("a.b", value)``."""


def apply_overrides(data: dict[str, Any], overrides: Sequence[Override]) -> dict[str, Any]:
    """Apply overrides, in order, to a nested dict (returns a new dict).

    Each is ``--set`` text ``a.b=value`` or a typed pair ``("a.b", value)`` (the dotted
    flags such as ``--optim.learning_rate``).
    """
    out = copy.deepcopy(data)
    for item in overrides:
        if isinstance(item, str):
            path, value = parse_override(item)
            label = f"--set {item!r}"
        else:
            key, value = item
            path, label = key.split("."), f"--{key}"
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{label}: {part!r} is not a table")
        node[path[-1]] = value
    return out


def option(doc: str, **kw: Any) -> Any:
    """A dataclass field of a command's options: ``doc`` is its ``--help`` text.

    ``meta`` adds other metadata the command line reads (``positional``, ``short``);
    every other keyword goes to :func:`dataclasses.field` (``default=``, ...).
    """
    return field(metadata={"doc": doc, **kw.pop("meta", {})}, **kw)


def __getattr__(name: str) -> Any:
    """The model config and presets moved (0.2): their old path works until 0.3."""
    from electra._moved import moved_attribute

    return moved_attribute("electra.config", name)
