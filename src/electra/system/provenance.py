"""What produced a result: the Python and package versions recorded beside it.

Torch-free (``predict``'s ONNX path records its versions without PyTorch).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import platform
from collections.abc import Iterable


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
