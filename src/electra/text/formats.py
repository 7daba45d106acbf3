"""Input file formats, decided in one place: by ``--format``, by name, or by content.

Every command that reads a user's file asks :func:`detect_format` which
format it is in, for one *use*:

``corpus``
    raw text for ``electra tokenizer`` / ``electra prepare``
    (:mod:`electra.text.corpus` reads it): ``text``, ``jsonl``, ``wiki``, ``nsmc``,
    and the columnar ``parquet`` and ``arrow`` (:mod:`electra.text.columnar`).
``table``
    labelled examples for ``electra finetune --task custom`` and tables given
    to ``electra predict`` (:mod:`electra.finetune.readers`): ``csv``, ``tsv``,
    ``jsonl``, ``json``. A ``.txt`` table is tab- or comma-separated; which one
    is sniffed from its first lines (:func:`sniff_delimiter`).
``predict``
    the input of ``electra predict``: the table formats, ``lines`` (one text
    per line, ``a<TAB>b`` for a pair; what a ``.txt`` input means there) and
    ``conll`` for tagging.
``qa``
    SQuAD questions: ``json`` (SQuAD v1.1) or ``jsonl`` (one question a line).

An explicit format (``--format``) always wins. Otherwise the suffix of the
path *as given* decides (a symlink ``train.tsv`` to ``data.txt`` is a TSV
file), then, where the suffix cannot, the content. Errors name the file and
say how to choose a format.

Corpus files are also sniffed by their first bytes for the compressions
(:func:`sniff_compression`: gzip, bzip2, xz, zstd; a corpus file may be any
of them whatever its name) and the binary columnar formats
(:func:`sniff_columnar`: Parquet starts with ``PAR1``, an Arrow IPC file with
``ARROW1``, an Arrow IPC stream with the continuation marker ``FF FF FF FF``).

This module imports nothing beyond the standard library, so the CLI and the
torch-free ``predict --backend onnx`` path can use it.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

Use = Literal["corpus", "table", "predict", "qa"]

# The values of ``electra prepare/tokenizer --format`` (the CLI reads the choices from here).
CorpusFormat = Literal["auto", "text", "jsonl", "wiki", "nsmc", "parquet", "arrow"]
CORPUS_FORMATS: tuple[str, ...] = get_args(CorpusFormat)

# How a bad input line is handled while reading a corpus.
OnError = Literal["skip", "fail"]
ON_ERROR: tuple[str, ...] = get_args(OnError)

COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".zstd")
# Corpus formats read by column with pyarrow (binary; never inside a compressed stream).
COLUMNAR_FORMATS = frozenset({"parquet", "arrow"})
PARQUET_MAGIC = b"PAR1"
ARROW_FILE_MAGIC = b"ARROW1"
ARROW_STREAM_MAGIC = b"\xff\xff\xff\xff"  # the IPC continuation marker opening every message
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SNIFF_BYTES = 1 << 16
SNIFF_LINES = 50


class FormatError(ValueError):
    """The format of a file cannot be decided (or the one asked for does not apply)."""


@dataclass(frozen=True)
class Format:
    """One input format: its name, the suffixes that select it, and where it applies."""

    name: str
    suffixes: tuple[str, ...]
    uses: frozenset[str]
    doc: str


def _fmt(name: str, suffixes: tuple[str, ...], uses: str, doc: str) -> Format:
    return Format(name, suffixes, frozenset(uses.split()), doc)


# The corpus formats come in the order of ``CorpusFormat`` (tests check the two agree).
# Within one use no two formats share a suffix: ``.txt`` is ``text`` for a corpus,
# ``lines`` for predict input, and a sniffed ``tsv`` or ``csv`` for a table.
REGISTRY: tuple[Format, ...] = (
    _fmt("text", (".txt",), "corpus", "plain text, a blank line between documents"),
    _fmt("jsonl", (".jsonl", ".ndjson"), "corpus table predict qa", "JSON Lines"),
    _fmt("wiki", (), "corpus", "WikiExtractor output (<doc ...> ... </doc>)"),
    _fmt("nsmc", (), "corpus", "a JSON array of objects (NSMC raw review files)"),
    _fmt("parquet", (".parquet", ".pq"), "corpus", "Apache Parquet, one row a document"),
    _fmt(
        "arrow",
        (".arrow", ".arrows", ".feather", ".ipc"),
        "corpus",
        "Arrow IPC file or stream (datasets save_to_disk), one row a document",
    ),
    _fmt("csv", (".csv",), "table predict", "comma-separated, RFC 4180 quoting, header line"),
    _fmt("tsv", (".tsv", ".tab"), "table predict", "tab-separated, unquoted, header line"),
    _fmt("json", (".json",), "table predict qa", "a JSON array of objects (SQuAD for QA)"),
    _fmt("lines", (".txt", ""), "predict", "one text per line ('a<TAB>b' for a pair)"),
    _fmt("conll", (".conll", ".bio"), "predict", "token<TAB>tag lines, sentences apart"),
)

# Formats whose first line names the columns (a missing column is a header error).
HEADER_FORMATS = frozenset({"csv", "tsv"})


def formats_for(use: Use) -> tuple[str, ...]:
    """Names of the formats that apply to ``use``, in registry order."""
    return tuple(f.name for f in REGISTRY if use in f.uses)


def format_help(use: Use) -> str:
    """One line for ``--help``: the formats of ``use`` and the suffixes selecting them."""
    parts = []
    for f in REGISTRY:
        if use in f.uses:
            shown = ", ".join(s or "no suffix" for s in f.suffixes)
            parts.append(f"{f.name} ({shown})" if shown else f.name)
    return "; ".join(parts)


def _suffix(path: str | os.PathLike[str], use: Use) -> str:
    """The lower-case suffix of the path as given (not resolved through symlinks)."""
    name = os.path.basename(os.fspath(path)).lower()
    if use == "corpus":
        for comp in COMPRESSION_SUFFIXES:
            if name.endswith(comp):
                name = name[: -len(comp)]
    return Path(name).suffix


def detect_format(
    path: str | os.PathLike[str],
    override: str | None = None,
    use: Use = "table",
    head: bytes | None = None,
) -> str:
    """The format of ``path`` for ``use``: ``override`` if given, else by name, else by content.

    ``head`` is the file's first bytes (decompressed, for a corpus); it is read
    from the file when needed and not given. Raises :class:`FormatError`
    naming the file when ``override`` does not apply to ``use`` or the
    format cannot be decided.
    """
    names = formats_for(use)
    if override and override != "auto":
        if override not in names:
            raise FormatError(
                f"{path}: format {override!r} cannot be used here; choose one of {', '.join(names)}"
            )
        return override
    if use == "corpus":
        return _corpus_format(path, head if head is not None else _head(path))
    suffix = _suffix(path, use)
    if use == "table" and suffix == ".txt":
        return sniff_delimiter(path, head)
    for f in REGISTRY:
        if use in f.uses and suffix in f.suffixes:
            return f.name
    known = sorted({s for f in REGISTRY if use in f.uses for s in f.suffixes if s})
    if use == "table":
        known.append(".txt")
    raise FormatError(
        f"{path}: unknown data format {suffix or '(no extension)'!r}; use "
        f"{', '.join(sorted(known))} or choose one with --format ({', '.join(names)})"
    )


def _head(path: str | os.PathLike[str]) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(SNIFF_BYTES)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise FormatError(f"{path}: is a directory, expected a data file") from None


def sniff_compression(head: bytes) -> str | None:
    """``gzip``, ``bzip2``, ``xz``, ``zstd`` or ``zip`` from a file's first bytes, else ``None``."""
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"BZh") and head[4:10] in (b"1AY&SY", b"\x17rE8P\x90"):
        return "bzip2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    if head.startswith(b"PK\x03\x04"):
        return "zip"
    return None


def sniff_columnar(head: bytes) -> str | None:
    """``parquet`` or ``arrow`` when a file's first bytes are that format's magic, else ``None``.

    The Arrow stream's ``FF FF FF FF`` is never UTF-8; a text that starts with
    ``PAR1`` or ``ARROW1`` needs ``--format text``.
    """
    if head.startswith((ARROW_STREAM_MAGIC, ARROW_FILE_MAGIC)):
        return "arrow"
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    return None


def _corpus_format(path: str | os.PathLike[str], head: bytes) -> str:
    """A corpus file's format from its name and first (decompressed) bytes."""
    suffix = _suffix(path, "corpus")
    for f in REGISTRY:
        if f.name in COLUMNAR_FORMATS and suffix in f.suffixes:
            return f.name
    columnar = sniff_columnar(head)
    if columnar:
        return columnar
    stripped = head.decode("utf-8", errors="ignore").lstrip("\ufeff").lstrip()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".json" or stripped[:1] in ("[", "{"):
        if stripped.startswith("["):
            return "nsmc"
        if stripped.startswith("{") and suffix == ".json":
            return "jsonl"
    if stripped.startswith("<doc"):
        return "wiki"
    return "text"


def sniff_delimiter(path: str | os.PathLike[str], head: bytes | None = None) -> str:
    """``tsv`` or ``csv`` for a ``.txt`` table, from its first lines.

    A delimiter is *consistent* when every sampled line (header included)
    splits into the same number (at least two) of fields by it. Exactly one
    consistent delimiter decides; none or both raise :class:`FormatError`
    naming the file.
    """
    data = head if head is not None else _head(path)
    truncated = len(data) >= SNIFF_BYTES
    text = data.decode("utf-8-sig", errors="replace").replace("\r\n", "\n")
    lines = text.split("\n")
    if truncated:
        lines = lines[:-1]  # a line cut by the sample
    lines = [s for s in lines if s.strip()][:SNIFF_LINES]
    if not lines:
        raise FormatError(f"{path}: the file is empty (no examples)")
    counts = {
        "tsv": {len(s.split("\t")) for s in lines},
        "csv": _csv_field_counts(lines),
    }
    consistent = [name for name, c in counts.items() if len(c) == 1 and min(c) >= 2]
    if consistent:
        return consistent[0]  # both fit: TSV, what a .txt table always meant before
    why = "neither tabs nor commas split every line into the same number of fields"
    raise FormatError(
        f"{path}: cannot tell whether this .txt table is tab- or comma-separated ({why} in "
        f"its first {len(lines)} lines); choose with --format tsv or --format csv"
    )


def _csv_field_counts(lines: list[str]) -> set[int]:
    try:
        return {len(r) for r in csv.reader(io.StringIO("\n".join(lines))) if r}
    except csv.Error:
        return set()


__all__ = [
    "COLUMNAR_FORMATS",
    "CORPUS_FORMATS",
    "HEADER_FORMATS",
    "ON_ERROR",
    "REGISTRY",
    "CorpusFormat",
    "Format",
    "FormatError",
    "OnError",
    "detect_format",
    "format_help",
    "formats_for",
    "sniff_columnar",
    "sniff_compression",
    "sniff_delimiter",
]
