"""The corpus readers' error, in a module of its own so every reader can raise it.

:mod:`electra.text.corpus` (the line formats) and :mod:`electra.text.columnar`
(Parquet and Arrow) both raise :class:`CorpusError`; the class lives here so
that neither imports the other for it. ``electra.text.corpus.CorpusError`` is
the same class.
"""

from __future__ import annotations


class CorpusError(ValueError):
    """Unreadable input; the message names the file (and line where it applies)."""


class ColumnError(CorpusError):
    """The text column of a Parquet/Arrow file is missing or not text (a whole-file problem)."""


__all__ = ["ColumnError", "CorpusError"]
