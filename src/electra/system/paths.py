"""Where the shared data lives.

``ELECTRA_DATA_DIR`` wins when set; otherwise ``<checkout>/../shared/data``,
the layout of the project's machines (the checkout sits next to ``shared/``).
The checkout root is found from this file's location (``src/electra/system/paths.py``)
for an editable install; for an installed package, from the current directory.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "ELECTRA_DATA_DIR"
REPO_ROOT = Path(__file__).resolve().parents[2]


def default_data_dir() -> Path:
    """The shared data directory (it may not exist; callers report that)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    candidates = [REPO_ROOT.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"]
    return next((c for c in candidates if c.is_dir()), candidates[0])
