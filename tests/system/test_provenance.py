"""The versions recorded beside results."""

from __future__ import annotations

import platform

import numpy as np

from electra.system.provenance import versions


def test_versions_name_what_is_installed_and_skip_what_is_not() -> None:
    got = versions(["numpy", "surely-not-an-installed-package"])
    assert got == {"python": platform.python_version(), "numpy": np.__version__}
