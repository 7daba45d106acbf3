"""Checkpoints that never lose work.

A checkpoint is a directory ``checkpoints/step-00001234/`` holding

* ``model.safetensors`` — the weights (each shared table stored once);
* ``train_state.pt`` — optimizer and scheduler state, step, data position,
  loaded with ``torch.load(weights_only=True)`` (no pickled code runs);
* ``config.json`` — the resolved run configuration;
* ``meta.json`` — step and the SHA-256 of every file above, written last.

The directory is assembled under a temporary name, every file fsynced, then
renamed into place, so a crash at any moment leaves either the previous
checkpoint or a complete new one. On resume the newest checkpoint whose
``meta.json`` checksums verify is used; a truncated or corrupted one is
reported and skipped. A state holding a NaN or an infinity is never written
(:class:`NonFiniteStateError`): resuming from it could only fail.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from electra.system.diskspace import reporting_full_disk
from electra.system.files import fsync_dir, fsync_file, sha256_file


class CheckpointError(ValueError):
    """A model directory or weights file is missing, corrupt or does not fit."""


class NonFiniteStateError(CheckpointError):
    """A checkpoint was refused: a weight or an optimizer value is NaN or infinite."""


FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"^step-(\d{8,})$")
FILES = ("model.safetensors", "train_state.pt", "config.json")


def alias_names(module: nn.Module) -> dict[str, str]:
    """Map each duplicate name of a shared parameter to its first (canonical) name."""
    first: dict[int, str] = {}
    aliases = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        if id(p) in first:
            aliases[name] = first[id(p)]
        else:
            first[id(p)] = name
    return aliases


def dedupe_state(state: dict[str, Tensor], aliases: dict[str, str]) -> dict[str, Tensor]:
    """Drop alias keys and make tensors contiguous CPU copies for safetensors."""
    return {k: v.detach().cpu().contiguous() for k, v in state.items() if k not in aliases}


def load_model_state(module: nn.Module, state: dict[str, Tensor], source: str) -> None:
    """Strict load that accepts missing alias keys (shared tables stored once)."""
    aliases = alias_names(module)
    result = module.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if k not in aliases]
    if missing:
        raise CheckpointError(f"{source}: missing parameter {missing[0]!r}")
    if result.unexpected_keys:
        raise CheckpointError(f"{source}: unexpected parameter {result.unexpected_keys[0]!r}")


@dataclass
class Checkpoint:
    path: Path
    step: int


def step_dirs(root: Path) -> list[Checkpoint]:
    """Completed-looking checkpoint directories, newest first."""
    out = []
    if root.is_dir():
        for child in root.iterdir():
            m = _STEP_DIR.match(child.name)
            if m and child.is_dir():
                out.append(Checkpoint(child, int(m.group(1))))
    return sorted(out, key=lambda c: c.step, reverse=True)


def verify(path: Path) -> dict[str, Any]:
    """The checkpoint's meta if every file is present and matches its checksum."""
    meta_path = path / "meta.json"
    if not meta_path.is_file():
        raise CheckpointError(f"{path}: no meta.json (the checkpoint was never completed)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{meta_path}: corrupted ({exc})") from None
    for name, digest in meta.get("sha256", {}).items():
        f = path / name
        if not f.is_file():
            raise CheckpointError(f"{f}: missing")
        if sha256_file(f) != digest:
            raise CheckpointError(f"{f}: checksum mismatch (truncated or corrupted)")
    return meta


def latest_valid(root: Path) -> Checkpoint | None:
    """Newest checkpoint that verifies; warns about each broken one skipped."""
    for ckpt in step_dirs(root):
        try:
            verify(ckpt.path)
            return ckpt
        except CheckpointError as exc:
            warnings.warn(f"skipping checkpoint: {exc}", stacklevel=2)
    return None


def nonfinite_entries(tree: Any, prefix: str) -> list[str]:
    """Dotted names of the NaN or infinite values in ``tree``: floating-point tensors and
    floats, in dicts and lists (a state dict, an optimizer's state)."""
    if isinstance(tree, Tensor):
        finite = not tree.is_floating_point() or bool(torch.isfinite(tree).all())
        return [] if finite else [prefix]
    if isinstance(tree, float):
        return [] if math.isfinite(tree) else [prefix]
    if isinstance(tree, dict):
        items: Any = tree.items()
    elif isinstance(tree, list | tuple):
        items = enumerate(tree)
    else:
        return []
    return [name for k, v in items for name in nonfinite_entries(v, f"{prefix}.{k}")]


def check_finite(path: Path, model_state: dict[str, Tensor], train_state: dict[str, Any]) -> None:
    """Raise :class:`NonFiniteStateError` naming the first NaN or infinite values of the
    checkpoint that would be written at ``path``."""
    bad = nonfinite_entries(model_state, "model") + nonfinite_entries(train_state, "train_state")
    if bad:
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise NonFiniteStateError(
            f"refusing to write checkpoint {path}: NaN or infinite values in "
            f"{', '.join(bad[:3])}{more}"
        )


def save(
    root: Path,
    step: int,
    model_state: dict[str, Tensor],
    train_state: dict[str, Any],
    config: dict[str, Any],
    keep_last: int = 3,
    scheduled_every: int = 0,
) -> Path:
    """Write checkpoint ``step`` atomically under ``root`` and prune old ones.

    With ``scheduled_every`` (the run's ``save_every``), the ``keep_last`` newest
    checkpoints at multiples of it are kept, plus the newest of all: a checkpoint
    written off schedule (after ``save_every_minutes``, on a signal) never evicts a
    scheduled one, which ``compare`` fine-tunes later. Without it, the
    ``keep_last`` newest are kept. A state with a NaN or an infinity anywhere is refused
    (:class:`NonFiniteStateError`) before anything is written.
    """
    final = root / f"step-{step:08d}"
    check_finite(final, model_state, train_state)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-step-{step:08d}-{os.getpid()}"
    needed = state_bytes(model_state) + state_bytes(train_state)
    kept = "The partial files were removed and the checkpoints already there are intact."
    with reporting_full_disk(f"checkpoint {final.name}", root, needed, kept):
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        try:
            _write_files(tmp, step, model_state, train_state, config)
            if final.exists():  # re-saving the same step (e.g. end of run after a periodic save)
                shutil.rmtree(final)
            os.replace(tmp, final)
            fsync_dir(root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    for old in _prunable(step_dirs(root), max(keep_last, 1), scheduled_every):
        shutil.rmtree(old.path, ignore_errors=True)
    return final


def _write_files(
    tmp: Path,
    step: int,
    model_state: dict[str, Tensor],
    train_state: dict[str, Any],
    config: dict[str, Any],
) -> None:
    """The files of a checkpoint, fsynced, into ``tmp``; ``meta.json`` (the checksums) last.

    ``torch.save`` writes through a Python file, so a full disk surfaces as the
    ``OSError`` it is (through a path, torch's writer reports no errno).
    """
    save_file(model_state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    with open(tmp / "train_state.pt", "wb") as f:
        torch.save(train_state, f)
    with open(tmp / "config.json", "w", encoding="utf-8") as f:
        f.write(json.dumps(config, indent=2) + "\n")
    for name in FILES:
        fsync_file(tmp / name)
    meta = {
        "format_version": FORMAT_VERSION,
        "step": step,
        "sha256": {name: sha256_file(tmp / name) for name in FILES},
    }
    with open(tmp / "meta.json", "w", encoding="utf-8") as f:
        f.write(json.dumps(meta, indent=2) + "\n")
    fsync_file(tmp / "meta.json")
    fsync_dir(tmp)


def state_bytes(tree: Any) -> int:
    """The bytes of the tensors in ``tree`` (dicts and lists of them): what a checkpoint
    of it takes on disk, near enough (the estimate a full disk is reported with)."""
    if isinstance(tree, Tensor):
        return tree.numel() * tree.element_size()
    if isinstance(tree, dict):
        return sum(state_bytes(v) for v in tree.values())
    if isinstance(tree, list | tuple):
        return sum(state_bytes(v) for v in tree)
    return 8 if isinstance(tree, int | float) else 0


def _prunable(newest_first: list[Checkpoint], keep_last: int, every: int) -> list[Checkpoint]:
    """The checkpoints :func:`save` removes (see its docstring)."""
    if every <= 0:
        return newest_first[keep_last:]
    scheduled = [c for c in newest_first if c.step % every == 0][:keep_last]
    keep = {c.step for c in scheduled} | {c.step for c in newest_first[:1]}
    return [c for c in newest_first if c.step not in keep]


def load(path: Path) -> tuple[dict[str, Tensor], dict[str, Any], dict[str, Any]]:
    """(model state, train state, config) of a verified checkpoint directory.

    ``train_state.pt`` is read with ``torch.load(weights_only=True)``: a pickle that
    would build anything but tensors and plain containers is refused (no code runs),
    naming the file. Every error names the file that failed.
    """
    verify(path)
    model_state = _load_one(path / "model.safetensors", lambda f: load_file(str(f)))
    train_state = _load_one(
        path / "train_state.pt",
        lambda f: torch.load(f, map_location="cpu", weights_only=True),
    )
    config = _load_one(path / "config.json", lambda f: json.loads(f.read_text(encoding="utf-8")))
    return model_state, train_state, config


def _load_one(file: Path, read: Any) -> Any:
    """``read(file)``, any failure a :class:`CheckpointError` naming ``file``."""
    try:
        return read(file)
    except Exception as exc:
        lines = [x.strip() for x in str(exc).splitlines() if x.strip()] or [""]
        first = next((x for x in lines if "Unsupported global" in x), lines[0])
        refused = "weights only" in str(exc).lower() or "weights_only" in str(exc)
        why = (
            "refused: it holds a pickled object that is not a tensor or a plain value "
            "(torch.load(weights_only=True) never runs pickled code)"
            if refused
            else "cannot load"
        )
        raise CheckpointError(f"{file}: {why} ({type(exc).__name__}: {first})") from None


def load_latest(
    root: Path, report: Any = None
) -> tuple[Checkpoint, tuple[dict, dict, dict]] | None:
    """The newest checkpoint under ``root`` that verifies and loads, and what it holds.

    A broken one (a checksum that differs, a file that cannot be read or is refused)
    is skipped, named to ``report`` (a function of one line; default a warning). None
    when ``root`` holds no checkpoint; a :class:`CheckpointError` listing every one
    when none of them loads (never a silent fresh start over broken checkpoints).
    """
    problems = []
    for found in step_dirs(root):
        try:
            return found, load(found.path)
        except CheckpointError as exc:
            problems.append(str(exc))
            line = f"skipping checkpoint {found.path.name}: {exc}"
            report(line) if report is not None else warnings.warn(line, stacklevel=2)
    if problems:
        raise CheckpointError(
            f"{root}: no checkpoint there can be loaded: " + "; ".join(problems) + ". Move "
            "them away to start again from step 0"
        )
    return None


def resolve(path: str | os.PathLike[str]) -> Path:
    """A checkpoint directory from a step dir, a ``checkpoints`` dir or a run dir."""
    p = Path(path)
    if (p / "meta.json").is_file():
        return p
    for root in (p, p / "checkpoints"):
        ckpt = latest_valid(root)
        if ckpt is not None:
            return ckpt.path
    raise CheckpointError(f"{p}: no valid checkpoint found")
