"""Errors that end a command with a message rather than a traceback.

Torch-free, so the command line (``electra.cli``) can catch them without
loading PyTorch: it prints the message and exits with status 1.
"""

from __future__ import annotations


class RunError(RuntimeError):
    """A run cannot start or cannot go on; the message names where, why and what to do."""
