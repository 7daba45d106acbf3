"""What produced a result: the Python and package versions recorded beside it.

Torch-free (``predict``'s ONNX path records its versions without PyTorch).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import platform
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def versions(packages: Iterable[str]) -> dict[str, str]:
    """``{"python": X.Y.Z, package: version, ...}`` for the installed ``packages``.

    A package that is not installed is left out rather than failing: the
    record says what was there.
    """
    out = {"python": platform.python_version()}
    for pkg in packages:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[pkg] = importlib.metadata.version(pkg)
    return out


def model_source(
    path: Any,
    repo_id: str = "",
    revision: str = "",
    requested: str = "",
    files_sha256: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Where a starting model came from: a local directory or a Hugging Face Hub snapshot.

    A Hub record holds the repo id, the commit sha it resolved to, the revision
    asked for, and the SHA-256 of each weight file, enough to fetch and check the
    very same weights again (``org/name@sha``). A local one holds its path.
    """
    if not repo_id:
        return {"kind": "local", "path": str(Path(path).resolve())}
    return {
        "kind": "hub",
        "repo_id": repo_id,
        "revision": revision,
        "requested_revision": requested,
        "files_sha256": dict(files_sha256 or {}),
        "path": str(path),
    }
