"""Models by their Hugging Face Hub names: ``org/name`` or ``org/name@revision``.

Every command that takes a model directory (``electra finetune/evaluate/predict
--model``, ``electra pretrain --init-from/--init-generator``, ``electra export``)
turns its string into a directory here, with :func:`resolve_model_path`:

* a local path that exists always wins, even when it is spelled like a Hub id;
* otherwise a Hub id is fetched with ``huggingface_hub.snapshot_download`` into
  its usual cache (``HF_HOME``, ``HF_HUB_CACHE``), only ``config.json``, the
  safetensors weights and the tokenizer files; ``HF_HUB_OFFLINE=1`` reads the
  cache and never the network;
* only safetensors are accepted: a repo with pickled weights only
  (``pytorch_model.bin``) is refused, and no remote code is ever run.

The resolved repo id, commit sha and the SHA-256 of each weight file are kept
in :class:`ResolvedModel` and recorded (:meth:`ResolvedModel.source`) in
``results.json``, a pre-training run's ``summary.json`` and its model cards.
``huggingface_hub`` is imported only when a Hub id is resolved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from electra.system.files import sha256_file
from electra.system.provenance import model_source

# What a model directory needs; nothing else (pickles, TF/Flax weights) is downloaded.
ALLOW_PATTERNS = [
    "config.json",
    "*.safetensors",
    "*.safetensors.index.json",
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
]
# ORG/NAME, then an optional @REVISION (a branch, tag, commit sha or refs/pr/N).
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
_REVISION = re.compile(r"^[\w.][\w./-]*$")
_PICKLES = ("pytorch_model.bin", "pytorch_model.bin.index.json")


class HubModelError(ValueError):
    """A Hub id that cannot be used; the message names it and says what to do."""


@dataclass(frozen=True)
class ResolvedModel:
    """A model directory, and where it came from when it is a Hub snapshot.

    ``repo_id`` is empty for a local directory; ``revision`` is the snapshot's
    commit sha, ``requested`` the revision asked for (``main`` by default).
    """

    path: Path
    repo_id: str = ""
    revision: str = ""
    requested: str = ""
    files_sha256: dict[str, str] = field(default_factory=dict)

    @property
    def from_hub(self) -> bool:
        """Whether this is a Hub snapshot (not a local directory)."""
        return bool(self.repo_id)

    @property
    def name(self) -> str:
        """How to name the model in messages: ``org/name@sha`` or the directory."""
        return f"{self.repo_id}@{self.revision}" if self.from_hub else str(self.path)

    def source(self) -> dict[str, Any]:
        """The provenance record of this model (see :func:`electra.system.provenance.model_source`)."""
        return model_source(
            self.path, self.repo_id, self.revision, self.requested, self.files_sha256
        )


def split_hub_id(spec: str) -> tuple[str, str] | None:
    """``(repo_id, revision)`` of ``org/name[@revision]``, or None when ``spec`` is not one.

    ``revision`` is "" when none is given. Paths (``./x``, ``/x``, ``a/b/c``) are not ids.
    """
    repo_id, _, revision = spec.partition("@")
    if not _HUB_ID.match(repo_id) or ".." in repo_id:
        return None
    if "@" in spec and not _REVISION.match(revision):
        return None
    return repo_id, revision


def resolve_model_path(spec: str | Path) -> ResolvedModel:
    """The model directory ``spec`` names: a local path (always first) or a Hub id.

    A local path (and any :class:`~pathlib.Path`) is returned as it is (the
    commands say when it is not a directory). A Hub id is downloaded (or found in the cache, offline) and
    checked to hold safetensors weights.
    """
    text = str(spec)
    if Path(text).expanduser().exists() or isinstance(spec, Path):
        return ResolvedModel(path=Path(text).expanduser())
    parts = split_hub_id(text)
    if parts is None:
        if "@" in text or text.count("/") == 1:
            raise HubModelError(
                f"{text}: no such model directory, and not a Hugging Face Hub id "
                "(ORG/NAME or ORG/NAME@REVISION, e.g. google/electra-small-discriminator@main)"
            )
        return ResolvedModel(path=Path(text))  # a missing path: the command says so
    repo_id, revision = parts
    snapshot = Path(download_snapshot(repo_id, revision))
    files = weight_hashes(snapshot, repo_id, revision)
    return ResolvedModel(
        path=snapshot,
        repo_id=repo_id,
        revision=snapshot.name,
        requested=revision or "main",
        files_sha256=files,
    )


def download_snapshot(repo_id: str, revision: str) -> str:
    """``snapshot_download`` of the files a model directory needs; clear errors for the rest."""
    try:
        import huggingface_hub
        from huggingface_hub import constants
        from huggingface_hub import utils as errors  # its errors, there since 0.20
    except ImportError:  # pragma: no cover - a declared dependency
        raise HubModelError(
            f"{repo_id}: no such model directory; to fetch it from the Hugging Face Hub "
            "install huggingface_hub (pip install 'huggingface_hub>=0.20')"
        ) from None
    offline = bool(constants.HF_HUB_OFFLINE)
    shown = f"{repo_id}@{revision}" if revision else repo_id
    try:
        return huggingface_hub.snapshot_download(
            repo_id,
            revision=revision or None,
            allow_patterns=ALLOW_PATTERNS,
            local_files_only=offline,
        )
    except errors.RevisionNotFoundError:
        raise HubModelError(
            f"{shown}: the Hub repo {repo_id} has no revision {revision!r} "
            "(a branch, tag or commit sha)"
        ) from None
    except (errors.RepositoryNotFoundError, errors.GatedRepoError):
        raise HubModelError(
            f"{shown}: no such local directory, and no such model on the Hugging Face Hub "
            "(check the spelling; a private or gated repo needs `huggingface-cli login`)"
        ) from None
    except errors.HFValidationError as exc:
        raise HubModelError(f"{shown}: not a valid Hugging Face Hub id ({exc})") from None
    except errors.LocalEntryNotFoundError:
        raise HubModelError(not_cached_message(shown, constants.HF_HUB_CACHE, offline)) from None


def not_cached_message(shown: str, cache: str, offline: bool) -> str:
    """What to say when a Hub id is neither a local directory nor in the cache."""
    repo_id, _, revision = shown.partition("@")
    command = f"huggingface-cli download {repo_id}" + (
        f" --revision {revision}" if revision else ""
    )
    why = "HF_HUB_OFFLINE is set" if offline else "the Hugging Face Hub could not be reached"
    return (
        f"{shown}: no such local directory, and not in the Hugging Face cache {cache} "
        f"({why}); download it first with `{command}`"
        + (", or unset HF_HUB_OFFLINE" if offline else "")
    )


def weight_hashes(snapshot: Path, repo_id: str, revision: str) -> dict[str, str]:
    """SHA-256 of each safetensors file of a snapshot; refuses one without safetensors.

    A repo (or a cached snapshot) with only ``pytorch_model.bin`` is refused:
    pickled weights are never loaded from the Hub.
    """
    files = sorted(p for p in snapshot.glob("*.safetensors") if p.is_file())  # what is loaded
    if not files:
        shown = f"{repo_id}@{revision}" if revision else repo_id
        pickled = [n for n in _PICKLES if (snapshot / n).is_file()] or _remote_pickles(
            repo_id, snapshot.name
        )
        what = (
            f"the Hub repo has only {', '.join(pickled)}"
            if pickled
            else f"its snapshot {snapshot} has no safetensors weights"
        )
        raise HubModelError(
            f"{shown}: {what}; only safetensors weights are loaded from the "
            "Hub (pickled weights can run code). Look for a safetensors revision (the Hub's "
            "conversion bot opens one as a pull request: ORG/NAME@refs/pr/N), or convert it "
            "yourself and pass the local directory"
        )
    return {str(p.relative_to(snapshot)): sha256_file(p) for p in files}


def _remote_pickles(repo_id: str, revision: str) -> list[str]:
    """The pickled weight files the repo lists (online only; [] when it cannot be asked)."""
    try:
        from huggingface_hub import HfApi, constants

        if constants.HF_HUB_OFFLINE:
            return []
        names = HfApi().list_repo_files(repo_id, revision=revision)
    except Exception:  # only to word a message better
        return []
    return [n for n in _PICKLES if n in names]
