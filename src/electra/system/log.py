"""Logging of the command line: the ``electra`` logger, written to stderr.

Library modules log to ``logging.getLogger("electra")`` and stay silent
unless a program configures logging; commands call
:func:`setup_cli_logging` first so warnings (skipped lines, empty files)
reach the user. Cheap to import: the standard library only.
"""

from __future__ import annotations

import logging
import sys

LOGGER_NAME = "electra"


def setup_cli_logging() -> None:
    """Send this package's log messages to stderr as ``electra: LEVEL: message``."""
    log = logging.getLogger(LOGGER_NAME)
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("electra: %(levelname)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)


__all__ = ["LOGGER_NAME", "setup_cli_logging"]
