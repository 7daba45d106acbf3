"""Corpus readers: the text formats users have, streamed as documents.

A *document* is a list of lines (paragraphs or sentences) that belong
together; the block builder (:mod:`electra.blocks.prepare`) never packs text of two
documents into one block, and the train/validation split is by document.

Formats (``--format``; ``auto`` decides per file):

``text``
    Plain UTF-8 text; a blank line separates documents (the convention of
    BERT's and ELECTRA's builders). ``file_is_document`` makes a whole file
    one document (books, where blank lines only separate paragraphs).
``jsonl``
    JSON Lines, one object per document; the text is in ``text_field``
    (default ``text``; a dotted path such as ``meta.body`` reaches into
    nested objects; a list of strings is taken as the document's lines).
``wiki``
    WikiExtractor output: ``<doc id=.. url=.. title=..>`` ... ``</doc>``.
``nsmc``
    A JSON array of objects, as in the NSMC raw per-movie files; the text is
    in ``text_field`` (default ``review``). The records of one file form one
    document (the reviews of one film), each record one or more lines, so
    that short reviews are packed into full blocks.
``parquet``
    Apache Parquet (the Hugging Face hub's format), one row per document; the
    text is in the column ``text_field`` (default ``text``; dotted: a struct
    field; a list of strings is taken as the document's lines).
``arrow``
    Arrow IPC, file or stream format (``.arrow``, what ``datasets`` caches
    and saves), one row per document, the column as for ``parquet``. A
    directory written by ``datasets.Dataset.save_to_disk`` (``state.json``,
    ``dataset_info.json``, ``data-*.arrow``) is one input: its data files in
    the order of its ``state.json``. See :mod:`electra.text.columnar`.

``auto`` picks ``parquet`` / ``arrow`` by suffix or by magic bytes (``PAR1``;
``ARROW1`` or ``FF FF FF FF``), ``jsonl`` for ``*.jsonl``/``*.ndjson``, ``nsmc`` for a
``*.json`` file that starts with ``[`` (``jsonl`` when it starts with ``{``),
``wiki`` when the first non-blank line starts with ``<doc``, else ``text``
(decided by :func:`electra.text.formats.detect_format`, from the file name as
given, so a symlink's own name counts).
Any line-format file may be gzip, bzip2, xz or zstd compressed (recognised by
content, not by name: ``corpus.jsonl.zst`` and an unnamed zstd file alike;
zstd is decompressed as a stream, frame after frame). Parquet and Arrow files
compress their own data and are read uncompressed. Inputs may be files, glob
patterns (``**`` recurses) or directories (all non-hidden files below, sorted;
a save_to_disk directory below is one input; the JSON metadata ``datasets``
writes beside Arrow files, such as ``dataset_info.json``, is left out).

A UTF-8 byte-order mark and CRLF line ends are removed. ``strip_gutenberg``
drops a Project Gutenberg header (up to the ``*** START OF ...`` line) and
everything from the ``End of the Project Gutenberg EBook`` / ``*** END OF``
line; a file whose header names Project Gutenberg but has no START line the
patterns know gets a warning naming it, any other file passes quietly.

Bad input never passes silently. A missing path, a glob matching nothing, a
binary file, UTF-16 text, an unreadable compressed stream or an empty corpus
raise :class:`CorpusError` (a ``ValueError``) or ``FileNotFoundError`` naming
the file (with ``on_error="skip"`` a binary file is skipped with a warning
and listed in the manifest instead). Per-line
problems (invalid UTF-8, a line longer than ``max_line_bytes``, a JSON line
that does not parse or lacks the text field, text outside ``<doc>``) name the
file and line; with ``on_error="skip"`` the line is skipped and counted in
:class:`SourceStats` (and so in the manifest), with ``"fail"`` the run stops.
Empty files are reported as a warning and counted.

Memory is bounded: files are read in 1 MiB blocks (Parquet and Arrow by
record batches), a line may not exceed
``max_line_bytes`` and a document longer than ``max_document_chars``
characters is emitted in consecutive parts (a part boundary only forces a
block boundary).
JSON-array files are parsed whole, so they are limited to
``MAX_JSON_ARRAY_BYTES``; convert bigger ones to JSON Lines.
"""

from __future__ import annotations

import bz2
import codecs
import glob
import gzip
import json
import logging
import lzma
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from electra.config import ConfigError
from electra.system.files import sha256_file
from electra.system.log import LOGGER_NAME, setup_cli_logging
from electra.text import formats
from electra.text.columnar import (
    DATASET_METADATA,
    ColumnarSource,
    is_dataset_dir,
    source_bytes,
    source_sha256,
)
from electra.text.errors import ColumnError, CorpusError
from electra.text.formats import (
    COLUMNAR_FORMATS,
    CORPUS_FORMATS,
    ON_ERROR,
    CorpusFormat,
    OnError,
)

log = logging.getLogger(LOGGER_NAME)

FORMATS = CORPUS_FORMATS  # the one list, kept here under its old name

READ_BLOCK = 1 << 20
ZSTD_READ = 1 << 16  # compressed bytes fed to the zstd decompressor at a time
SNIFF_BYTES = formats.SNIFF_BYTES
MAX_JSON_ARRAY_BYTES = 1 << 30
MAX_PROBLEMS_KEPT = 20
GUTENBERG_HEADER_MAX_LINES = 2000

_START_RE = re.compile(
    r"^\s*\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG|^\s*\*END\*THE SMALL PRINT", re.I
)
_END_RE = re.compile(
    r"^\s*\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG|^\s*End of (the )?Project Gutenberg", re.I
)
_NAMED_RE = re.compile(r"project gutenberg", re.I)
_GLOB_CHARS = re.compile(r"[*?\[]")


@dataclass
class ReadOptions:
    """How to read a corpus (shared by ``electra tokenizer`` and ``electra prepare``)."""

    format: CorpusFormat = "auto"
    text_field: str | None = None
    strip_gutenberg: bool = False
    on_error: OnError = "fail"
    file_is_document: bool = False
    max_line_bytes: int = 16 << 20
    max_document_chars: int = 8 << 20

    def __post_init__(self) -> None:
        if self.format not in CORPUS_FORMATS:
            raise CorpusError(
                f"unknown format {self.format!r}; choose one of {', '.join(CORPUS_FORMATS)}"
            )
        if self.on_error not in ON_ERROR:
            raise CorpusError(f"on_error must be 'skip' or 'fail', got {self.on_error!r}")
        if self.max_line_bytes < 1 or self.max_document_chars < 1:
            raise CorpusError("max_line_bytes and max_document_chars must be positive")

    def field_for(self, fmt: str) -> str:
        if self.text_field:
            return self.text_field
        return "review" if fmt == "nsmc" else "text"


@dataclass
class CorpusOptions:
    """The corpus-reading options of ``electra tokenizer`` and ``electra prepare``.

    Both commands inherit these fields (and so the same flags, validated
    once, by :class:`ReadOptions`); the command's own fields follow. ``inputs``
    stays positional; the options after it are keyword-only.
    """

    inputs: list[str] = field(
        metadata={
            "doc": "Corpus files, globs or directories (a datasets save_to_disk "
            "directory is one Arrow dataset).",
            "positional": True,
        }
    )
    _: KW_ONLY
    format: CorpusFormat = field(
        default="auto",
        metadata={"doc": "Input format; auto decides per file (by name, else by content)."},
    )
    text_field: str | None = field(
        default=None,
        metadata={
            "doc": "JSON field or Parquet/Arrow column holding the text, dotted for nested "
            "ones (default: text; review for nsmc)."
        },
    )
    strip_gutenberg: bool = field(
        default=False, metadata={"doc": "Drop Project Gutenberg headers and licence footers."}
    )
    on_error: OnError = field(
        default="fail",
        metadata={"doc": "A bad input line: skip it (and count it) or stop."},
    )
    max_line_mb: float = field(default=16.0, metadata={"doc": "Longest accepted input line in MB."})

    def __post_init__(self) -> None:
        if self.max_line_mb <= 0:
            raise ConfigError(f"max_line_mb must be positive, got {self.max_line_mb}")
        try:
            self.read_options()
        except CorpusError as exc:
            raise ConfigError(str(exc)) from None

    def read_options(self, **extra: Any) -> ReadOptions:
        """These options as :class:`ReadOptions` (``extra``: further fields of it)."""
        return ReadOptions(
            format=self.format,
            text_field=self.text_field,
            strip_gutenberg=self.strip_gutenberg,
            on_error=self.on_error,
            max_line_bytes=int(self.max_line_mb * (1 << 20)),
            **extra,
        )


@dataclass
class SourceStats:
    """What reading one file found; goes into manifests."""

    path: str
    format: str = ""
    documents: int = 0
    lines: int = 0
    skipped_lines: int = 0
    skipped_file: bool = False
    empty: bool = False
    problems: list[str] = field(default_factory=list)

    def problem(self, message: str, on_error: str) -> None:
        """Record a bad line: raise under ``fail``, count it under ``skip``."""
        if on_error == "fail":
            raise CorpusError(message + " (use --on-error skip to skip such lines)")
        self.skipped_lines += 1
        if len(self.problems) < MAX_PROBLEMS_KEPT:
            self.problems.append(message)
        if self.skipped_lines <= 3:
            log.warning("skipped: %s", message)
        elif self.skipped_lines == 4:
            log.warning("%s: more lines skipped; the manifest counts them", self.path)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "documents": self.documents,
            "lines": self.lines,
            "skipped_lines": self.skipped_lines,
            "skipped_file": self.skipped_file,
            "empty": self.empty,
            "problems": list(self.problems),
        }


@dataclass
class Document:
    """One document (or one part of a very long one) of a source file."""

    lines: list[str]
    index: int  # position of the document in its file
    part: int = 0  # > 0 for the continuation parts of a very long document

    @property
    def nbytes(self) -> int:
        """Size in UTF-8 bytes, newlines included."""
        return sum(len(s.encode("utf-8")) for s in self.lines) + len(self.lines)


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------


def expand_inputs(inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Files named by ``inputs`` (files, globs, directories), in a stable order.

    Within one glob or directory the files are sorted by path; the inputs keep
    the order given; a file named twice is read once. A ``datasets``
    save_to_disk directory (given, matched or found below a directory) is one
    input, read as one Arrow dataset.
    """
    if isinstance(inputs, str | os.PathLike):
        inputs = [inputs]
    if not inputs:
        raise CorpusError("no input files given")
    out: list[Path] = []
    seen: set[Path] = set()

    def add(p: Path) -> None:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            out.append(p)

    for item in inputs:
        text = os.fspath(item)
        path = Path(text).expanduser()
        if path.is_file() or is_dataset_dir(path):
            add(path)
        elif path.is_dir():
            found = _directory_inputs(path)
            if not found:
                raise CorpusError(f"{text}: directory contains no files")
            for p in found:
                add(p)
        elif _GLOB_CHARS.search(text):
            found = sorted(Path(p) for p in glob.glob(os.path.expanduser(text), recursive=True))
            found = [p for p in found if p.is_file() or is_dataset_dir(p)]
            if not found:
                raise FileNotFoundError(f"{text}: no files match this pattern")
            for p in found:
                add(p)
        else:
            raise FileNotFoundError(f"{text}: no such file or directory")
    return out


def _directory_inputs(root: Path) -> list[Path]:
    """The inputs below directory ``root``, sorted: its non-hidden files, where a
    save_to_disk directory is one input (its files are not listed) and the JSON
    metadata ``datasets`` writes beside Arrow files or dataset directories
    (``dataset_dict.json``, ``dataset_info.json``, ``state.json``: not text) is left out."""
    entries = [
        p
        for p in root.rglob("*")
        if not any(part.startswith(".") for part in p.relative_to(root).parts)
    ]
    datasets = {p for p in entries if p.is_dir() and is_dataset_dir(p)}
    files = [p for p in entries if p.is_file() and not any(d in datasets for d in p.parents)]
    holders = {d.parent for d in datasets} | {p.parent for p in files if p.suffix == ".arrow"}
    files = [p for p in files if not (p.name in DATASET_METADATA and p.parent in holders)]
    return sorted([*files, *datasets])


# ---------------------------------------------------------------------------
# Byte level: decompression, sniffing, lines
# ---------------------------------------------------------------------------


class _ZstdReader:
    """zstd frames decompressed one after the other, read like a file.

    The decompressor is fed :data:`ZSTD_READ` compressed bytes at a time, so
    memory stays bounded. ``zstandard``'s own stream reader ends quietly at a
    truncated frame; this one raises ``EOFError`` there, as gzip, bzip2 and xz do.
    """

    def __init__(self, raw: BinaryIO) -> None:
        import zstandard

        self._raw = raw
        self._dctx = zstandard.ZstdDecompressor()
        self._obj = self._dctx.decompressobj()
        self._in_frame = False
        self._out = bytearray()
        self._eof = False

    def read(self, n: int) -> bytes:
        while len(self._out) < n and not self._eof:
            data = self._raw.read(ZSTD_READ)
            if not data:
                if self._in_frame:
                    raise EOFError("compressed file ended before the end of its last frame")
                self._eof = True
            while data:
                self._out += self._obj.decompress(data)
                self._in_frame = not self._obj.eof
                data = b""
                if self._obj.eof:  # a frame ended; the bytes after it start the next one
                    data = self._obj.unused_data
                    self._obj = self._dctx.decompressobj()
        out = bytes(self._out[:n])
        del self._out[:n]
        return out

    def close(self) -> None:
        self._out.clear()


def _open_source(path: Path, opts: ReadOptions) -> _Source | ColumnarSource:
    """``path`` opened for reading as the format it is in: a Parquet or Arrow file or a
    save_to_disk directory by column, anything else as (decompressed) lines."""
    if path.is_dir():
        if not is_dataset_dir(path):
            raise CorpusError(
                f"{path}: is a directory, not a datasets save_to_disk directory "
                "(no state.json and dataset_info.json in it)"
            )
        if opts.format not in ("auto", "arrow"):
            raise CorpusError(
                f"{path}: is a datasets save_to_disk directory of Arrow files; "
                f"--format {opts.format} does not apply (use auto or arrow)"
            )
        return ColumnarSource(path, "arrow")
    magic = _magic(path)
    fmt = formats.detect_format(path, opts.format, "corpus", magic)
    if fmt not in COLUMNAR_FORMATS:
        return _Source(path)
    packed = formats.sniff_compression(magic)
    if packed:
        raise CorpusError(
            f"{path}: {fmt} data cannot be read from inside {packed} compression; "
            "decompress it first (Parquet and Arrow files compress their own data)"
        )
    return ColumnarSource(path, fmt)


def _magic(path: Path) -> bytes:
    """The first bytes of file ``path`` (its compression or columnar magic)."""
    try:
        with open(path, "rb") as f:
            return f.read(16)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except OSError as exc:
        raise CorpusError(f"{path}: cannot open: {exc.strerror or exc}") from None


class _Source:
    """A file opened for reading, decompressed, with the first bytes sniffed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.raw: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed in close()
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: no such file") from None
        except OSError as exc:
            raise CorpusError(f"{path}: cannot open: {exc.strerror or exc}") from None
        magic = self.raw.read(10)
        self.raw.seek(0)
        self.compression = formats.sniff_compression(magic) or ""
        self.errors: tuple[type[BaseException], ...] = (OSError, EOFError, lzma.LZMAError)
        stream: Any = self.raw
        if self.compression == "gzip":
            stream = gzip.GzipFile(fileobj=self.raw, mode="rb")
        elif self.compression == "bzip2":
            stream = bz2.BZ2File(self.raw, mode="rb")
        elif self.compression == "xz":
            stream = lzma.LZMAFile(self.raw, mode="rb")  # noqa: SIM115
        elif self.compression == "zstd":
            import zstandard

            stream = _ZstdReader(self.raw)
            self.errors += (zstandard.ZstdError,)
        elif self.compression == "zip":
            self.raw.close()
            raise CorpusError(f"{path}: is a zip archive; unpack it and pass the files")
        self.stream = stream
        self.head = self._read(SNIFF_BYTES)

    def _read(self, n: int) -> bytes:
        try:
            return self.stream.read(n)
        except self.errors as exc:
            what = self.compression or "file"
            raise CorpusError(f"{self.path}: corrupt or truncated {what} data: {exc}") from None

    @property
    def position(self) -> int:
        """Bytes of the underlying file consumed so far (for progress)."""
        try:
            return self.raw.tell()
        except (OSError, ValueError):
            return 0

    def binary_reason(self) -> str | None:
        head = self.head
        columnar = formats.sniff_columnar(head)
        if columnar and self.compression:
            return (
                f"holds {columnar} data inside {self.compression} compression; decompress it "
                "first (Parquet and Arrow files compress their own data)"
            )
        if columnar:
            return f"is {columnar} data, not text; read it with --format auto or {columnar}"
        if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            return "is UTF-16 text; convert it to UTF-8 (e.g. iconv -f UTF-16 -t UTF-8)"
        if head.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
            return "is UTF-32 text; convert it to UTF-8"
        nul = head.find(b"\x00")
        if nul >= 0:
            return f"looks like a binary file (NUL byte at offset {nul}), not text"
        return None

    def blocks(self) -> Iterator[bytes]:
        head = self.head
        if head.startswith(codecs.BOM_UTF8):
            head = head[len(codecs.BOM_UTF8) :]
        if head:
            yield head
        while block := self._read(READ_BLOCK):
            yield block

    def read_all(self, limit: int) -> bytes:
        parts: list[bytes] = []
        total = 0
        for block in self.blocks():
            total += len(block)
            if total > limit:
                raise CorpusError(
                    f"{self.path}: JSON array file is larger than {limit >> 20} MiB; "
                    "convert it to JSON Lines (one object per line) to stream it"
                )
            parts.append(block)
        return b"".join(parts)

    def close(self) -> None:
        if self.stream is not self.raw:
            self.stream.close()
        self.raw.close()


def _decode_error_message(path: Path, lineno: int, raw: bytes, exc: UnicodeDecodeError) -> str:
    bad = raw[exc.start : exc.start + 1]
    return (
        f"{path}:{lineno}: invalid UTF-8 (byte 0x{bad.hex()} at byte {exc.start + 1} of the line); "
        "is the file in another encoding (e.g. CP949/EUC-KR)? Convert it with iconv"
    )


def _too_long(path: Path, lineno: int, limit: int) -> str:
    return (
        f"{path}:{lineno}: line longer than {limit:,} bytes; is this a text file? "
        "(raise --max-line-mb if it is)"
    )


def _iter_line_blocks(
    src: _Source, stats: SourceStats, opts: ReadOptions
) -> Iterator[tuple[int, list[str | None]]]:
    """Yield ``(number of the first line, lines)`` per block of the file.

    Lines are decoded, without their ``\\n`` / ``\\r\\n``. A bad line is
    reported through ``stats.problem`` and, when skipped, given as ``None``
    so that the numbers of the lines after it stay right.
    """
    path, limit = src.path, opts.max_line_bytes
    pending = bytearray()
    lineno = 1  # number of the line that starts ``pending``
    discarding = False  # inside an over-long line that is being skipped
    for block in src.blocks():
        start = 0
        if discarding:
            newline = block.find(b"\n")
            if newline < 0:
                continue
            start, discarding = newline + 1, False
            lineno += 1
        cut = block.rfind(b"\n", start)
        if cut < 0:
            pending += memoryview(block)[start:]
        else:
            pending += memoryview(block)[start : cut + 1]
            data = bytes(pending)
            pending.clear()
            pending += memoryview(block)[cut + 1 :]
            lines = _decode_lines(data, path, lineno, stats, opts)
            yield lineno, lines
            lineno += len(lines)
        if len(pending) > limit:
            stats.problem(_too_long(path, lineno, limit), opts.on_error)
            pending.clear()
            discarding = True
    if pending and not discarding:
        yield lineno, _decode_lines(bytes(pending) + b"\n", path, lineno, stats, opts)


def _decode_lines(
    data: bytes, path: Path, first: int, stats: SourceStats, opts: ReadOptions
) -> list[str | None]:
    """``data`` ends with ``\\n``; return its lines, decoded (``None`` for a skipped one)."""
    lines: list[str | None]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        lines = []
        for i, raw in enumerate(data[:-1].split(b"\n")):
            try:
                lines.append(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                stats.problem(_decode_error_message(path, first + i, raw, exc), opts.on_error)
                lines.append(None)
    else:
        if "\r" in text:
            text = text.replace("\r\n", "\n")
        lines = list(text[:-1].split("\n"))
    limit = opts.max_line_bytes
    if len(data) > limit:  # one block can hold a whole line longer than the limit
        for i, line in enumerate(lines):
            if line is not None and len(line) * 4 > limit and len(line.encode()) > limit:
                stats.problem(_too_long(path, first + i, limit), opts.on_error)
                lines[i] = None
    for i, line in enumerate(lines):
        if line and line[-1] == "\r":
            lines[i] = line[:-1]
    return lines


# ---------------------------------------------------------------------------
# Format level
# ---------------------------------------------------------------------------


def detect_format(path: Path, head: bytes) -> str:
    """The format of corpus file ``path`` from its name and first bytes (decompressed).

    Decided by :func:`electra.text.formats.detect_format` (the one place formats are decided).
    """
    return formats.detect_format(path, None, "corpus", head)


def _gutenberg_filter(
    lines: Iterable[tuple[int, list[str | None]]], path: Path
) -> Iterator[tuple[int, list[str | None]]]:
    """Drop the Project Gutenberg header (to the START line) and footer (from END).

    A file whose header never names Project Gutenberg (another source in the same
    corpus) passes unchanged and quietly; a Gutenberg book without a START line
    the patterns know passes unchanged with a warning.
    """
    state = "header"
    held: list[tuple[int, list[str | None]]] = []
    held_lines = 0
    named = False  # the header names Project Gutenberg: a missing START line is worth a warning
    for first, block in lines:
        if state == "footer":
            continue
        if state == "header":
            start = next((i for i, s in enumerate(block) if s and _START_RE.match(s)), None)
            if start is None:
                held.append((first, block))
                held_lines += len(block)
                named = named or any(s and _NAMED_RE.search(s) for s in block)
                if held_lines > GUTENBERG_HEADER_MAX_LINES:
                    if named:
                        log.warning(
                            "%s: no Project Gutenberg START line in the first %d lines; "
                            "nothing stripped from its start",
                            path,
                            GUTENBERG_HEADER_MAX_LINES,
                        )
                    state = "body"
                    yield from held
                    held = []
                continue
            held = []
            state = "body"
            first, block = first + start + 1, block[start + 1 :]
        end = next((i for i, s in enumerate(block) if s and _END_RE.match(s)), None)
        if end is not None:
            state = "footer"
            block = block[:end]
        if block:
            yield first, block
    if state == "header":
        if named:
            log.warning("%s: no Project Gutenberg START line; nothing stripped", path)
        yield from held


def _lookup(record: Any, dotted: str) -> Any:
    value = record
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


_MISSING = object()


def _text_lines(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return value.split("\n")
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [line for v in value for line in v.split("\n")]
    return None


class _DocAssembler:
    """Collect lines into documents, cutting very long ones into parts."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.lines: list[str] = []
        self.size = 0
        self.index = 0
        self.part = 0

    def add(self, line: str) -> Document | None:
        if not line or line.isspace():
            return None
        self.lines.append(line)
        self.size += len(line) + 1
        if self.size >= self.max_bytes:
            doc = Document(self.lines, self.index, self.part)
            self.lines, self.size = [], 0
            self.part += 1
            return doc
        return None

    def extend(self, lines: list[str]) -> list[Document]:
        """Add many lines (blank ones are dropped); return the parts completed."""
        lines = [s for s in lines if s and not s.isspace()]
        size = sum(map(len, lines)) + len(lines)
        if self.size + size < self.max_bytes:
            self.lines += lines
            self.size += size
            return []
        return [doc for line in lines if (doc := self.add(line)) is not None]

    def end(self) -> Document | None:
        """End the current document; return it unless it is empty."""
        doc = Document(self.lines, self.index, self.part) if self.lines else None
        if self.lines or self.part:
            self.index += 1
        self.lines, self.size, self.part = [], 0, 0
        return doc


def read_documents(
    path: str | os.PathLike[str],
    opts: ReadOptions | None = None,
    stats: SourceStats | None = None,
    source: _Source | ColumnarSource | None = None,
) -> Iterator[Document]:
    """Stream the documents of one file (or save_to_disk directory).

    ``stats`` (created when not given) receives the counts and the skipped
    lines. Raises :class:`CorpusError` / ``FileNotFoundError`` for a file
    that cannot be read at all (under ``on_error="skip"`` a binary file, or a
    Parquet/Arrow file without a text column, is skipped with a warning instead).
    """
    opts = opts or ReadOptions()
    path = Path(path)
    stats = stats if stats is not None else SourceStats(str(path))
    src = source or _open_source(path, opts)
    try:
        if isinstance(src, ColumnarSource):
            docs = _read_columnar(src, opts, stats)
        else:
            docs = _read_lines(src, opts, stats)
        for doc in docs:
            if doc.part == 0:
                stats.documents += 1
            yield doc
    finally:
        if source is None:
            src.close()


def _skip_file(path: Path, reason: str, stats: SourceStats) -> None:
    """Record a file skipped under ``on_error="skip"``, with a warning naming it."""
    log.warning("skipped file %s: %s", path, reason)
    stats.skipped_file = True
    if len(stats.problems) < MAX_PROBLEMS_KEPT:
        stats.problems.append(f"{path}: {reason}")


def _read_lines(src: _Source, opts: ReadOptions, stats: SourceStats) -> Iterator[Document]:
    """The documents of a file in one of the line formats (text, jsonl, wiki, nsmc)."""
    path = src.path
    reason = src.binary_reason()
    if reason:
        if opts.on_error == "fail":
            raise CorpusError(f"{path}: {reason}")
        _skip_file(path, reason, stats)
        return
    fmt = formats.detect_format(path, opts.format, "corpus", src.head)
    stats.format = fmt
    if not src.head.strip(b" \t\r\n\xef\xbb\xbf"):
        stats.empty = True
        log.warning("%s: empty file (no text)", path)
        return
    if fmt == "nsmc":
        yield from _read_json_array(src, opts, stats)
        return
    blocks: Iterable[tuple[int, list[str | None]]] = _iter_line_blocks(src, stats, opts)
    if opts.strip_gutenberg and fmt == "text":
        blocks = _gutenberg_filter(blocks, path)
    if fmt == "text":
        yield from _read_text(blocks, opts, stats)
    elif fmt == "jsonl":
        yield from _read_jsonl(blocks, path, opts, stats)
    else:
        yield from _read_wiki(blocks, path, opts, stats)


def _read_columnar(
    src: ColumnarSource, opts: ReadOptions, stats: SourceStats
) -> Iterator[Document]:
    """The rows of a Parquet/Arrow source as documents, one per row with text.

    A row's string is split at newlines into the document's lines (a list of
    strings gives its lines); null and empty rows are counted in ``lines``
    (one per row) but make no document, as blank JSON Lines records do.
    """
    stats.format = src.format
    asm = _DocAssembler(opts.max_document_chars)
    try:
        for values in src.batches(opts.field_for(src.format)):
            stats.lines += len(values)
            for value in values:
                if value is None:
                    continue
                if isinstance(value, str):
                    lines = value.split("\n")
                else:
                    lines = [s for v in value if v is not None for s in v.split("\n")]
                yield from asm.extend(lines)
                if (doc := asm.end()) is not None:
                    yield doc
    except ColumnError as exc:
        if opts.on_error == "fail":
            raise
        _skip_file(src.path, str(exc).removeprefix(f"{src.path}: "), stats)
        return
    if not stats.lines:
        stats.empty = True
        log.warning("%s: empty %s file (no rows)", src.path, src.format)


def _read_text(
    blocks: Iterable[tuple[int, list[str | None]]], opts: ReadOptions, stats: SourceStats
) -> Iterator[Document]:
    asm = _DocAssembler(opts.max_document_chars)
    whole = opts.file_is_document
    for _, block in blocks:
        stats.lines += len(block)
        if None in block:
            block = [s for s in block if s is not None]
        if whole:
            yield from asm.extend(block)  # type: ignore[arg-type]
            continue
        start = 0
        for i in [i for i, s in enumerate(block) if not s or s.isspace()]:
            if i > start:
                yield from asm.extend(block[start:i])  # type: ignore[arg-type]
            if (doc := asm.end()) is not None:
                yield doc
            start = i + 1
        if start < len(block):
            yield from asm.extend(block[start:])  # type: ignore[arg-type]
    doc = asm.end()
    if doc is not None:
        yield doc


def _read_wiki(
    blocks: Iterable[tuple[int, list[str | None]]],
    path: Path,
    opts: ReadOptions,
    stats: SourceStats,
) -> Iterator[Document]:
    asm = _DocAssembler(opts.max_document_chars)
    inside = False
    for first, block in blocks:
        stats.lines += len(block)
        for i, line in enumerate(block):
            if line is None:
                continue
            if line.startswith("<doc") and (len(line) == 4 or line[4] in " >"):
                if inside:
                    log.warning("%s:%d: <doc> without a closing </doc> before it", path, first + i)
                    if (doc := asm.end()) is not None:
                        yield doc
                inside = True
            elif line.rstrip() == "</doc>":
                if not inside:
                    stats.problem(f"{path}:{first + i}: </doc> without <doc>", opts.on_error)
                    continue
                inside = False
                if (doc := asm.end()) is not None:
                    yield doc
            elif inside:
                if (doc := asm.add(line)) is not None:
                    yield doc
            elif line.strip():
                stats.problem(
                    f"{path}:{first + i}: text outside <doc> ... </doc> (is this WikiExtractor "
                    "output? use --format text otherwise)",
                    opts.on_error,
                )
    if inside:
        log.warning("%s: the last <doc> has no closing </doc>", path)
    if (doc := asm.end()) is not None:
        yield doc


def _read_jsonl(
    blocks: Iterable[tuple[int, list[str | None]]],
    path: Path,
    opts: ReadOptions,
    stats: SourceStats,
) -> Iterator[Document]:
    key = opts.field_for("jsonl")
    asm = _DocAssembler(opts.max_document_chars)
    for first, block in blocks:
        stats.lines += len(block)
        for i, line in enumerate(block):
            if line is None or not line.strip():
                continue
            where = f"{path}:{first + i}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                stats.problem(
                    f"{where}: invalid JSON ({exc.msg} at column {exc.colno})", opts.on_error
                )
                continue
            if not isinstance(record, dict):
                stats.problem(
                    f"{where}: expected a JSON object, got {type(record).__name__}", opts.on_error
                )
                continue
            value = _lookup(record, key)
            if value is _MISSING:
                fields = ", ".join(repr(k) for k in list(record)[:10])
                stats.problem(
                    f"{where}: no field {key!r} (fields: {fields}); choose one with --text-field",
                    opts.on_error,
                )
                continue
            if value is None:
                continue
            lines = _text_lines(value)
            if lines is None:
                stats.problem(
                    f"{where}: field {key!r} is a {type(value).__name__}, not text", opts.on_error
                )
                continue
            for text in lines:
                if (doc := asm.add(text)) is not None:
                    yield doc
            if (doc := asm.end()) is not None:
                yield doc


def _read_json_array(src: _Source, opts: ReadOptions, stats: SourceStats) -> Iterator[Document]:
    """A file that is one JSON array of records (the NSMC raw format)."""
    records = _parse_json_array(src, opts, stats)
    if records is None:
        return
    stats.lines = len(records)
    asm = _DocAssembler(opts.max_document_chars)
    key = opts.field_for("nsmc")
    texts: list[str] = []
    for i, record in enumerate(records):
        lines = _record_text(record, key, f"{src.path}: record {i}", opts, stats)
        if lines:
            texts.extend(lines)
    yield from asm.extend("\n".join(texts).split("\n"))
    if (doc := asm.end()) is not None:
        yield doc


def _parse_json_array(src: _Source, opts: ReadOptions, stats: SourceStats) -> list | None:
    """The file's records, or ``None`` when it is skipped (``--on-error skip``): the array
    cannot be parsed around a bad byte or a syntax error, so the file is the bad unit."""
    path = src.path
    data = src.read_all(MAX_JSON_ARRAY_BYTES)
    message = None
    try:
        records = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        lineno = data.count(b"\n", 0, exc.start) + 1
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        line_end = data.find(b"\n", exc.start)
        raw = data[line_start : line_end if line_end >= 0 else len(data)]
        exc2 = UnicodeDecodeError("utf-8", raw, exc.start - line_start, exc.end - line_start, "")
        message = _decode_error_message(path, lineno, raw, exc2)
    except json.JSONDecodeError as exc:
        message = f"{path}:{exc.lineno}: invalid JSON ({exc.msg} at column {exc.colno})"
    if message is not None:
        if opts.on_error == "fail":
            raise CorpusError(message + " (use --on-error skip to skip such files)") from None
        stats.problem(message + "; file skipped", "skip")
        stats.skipped_file = True
        return None
    if not isinstance(records, list):
        raise CorpusError(
            f"{path}: expected a JSON array of objects (NSMC raw format), got "
            f"{type(records).__name__}; use --format jsonl for one object per line"
        )
    return records


def _record_text(
    record: Any, key: str, where: str, opts: ReadOptions, stats: SourceStats
) -> list[str] | None:
    """The text lines of one record's field ``key`` (dotted: nested), or ``None`` (counted
    as a problem when the field is missing or not text; a null field is skipped)."""
    if "." not in key and isinstance(record, dict):
        value = record.get(key, _MISSING)
        if isinstance(value, str):  # the common case, kept fast
            return [value]
    else:
        value = _lookup(record, key) if isinstance(record, dict) else _MISSING
    if value is _MISSING:
        fields = ", ".join(repr(k) for k in list(record)[:10]) if isinstance(record, dict) else ""
        stats.problem(
            f"{where}: no field {key!r}"
            + (f" (fields: {fields}); choose one with --text-field" if fields else ""),
            opts.on_error,
        )
        return None
    if value is None:
        return None
    lines = _text_lines(value)
    if lines is None:
        stats.problem(
            f"{where}: field {key!r} is a {type(value).__name__}, not text", opts.on_error
        )
    return lines


# ---------------------------------------------------------------------------
# Whole corpora
# ---------------------------------------------------------------------------


class Corpus:
    """Documents of many files in order, with per-file statistics and progress.

    ``position`` is the number of (compressed) input bytes consumed so far,
    against ``total_bytes`` (the sum of the file sizes).
    """

    def __init__(
        self, inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], opts: ReadOptions
    ) -> None:
        self.files = expand_inputs(inputs)
        self.opts = opts
        self.sizes = [source_bytes(f) for f in self.files]
        self.total_bytes = sum(self.sizes)
        self.stats = [SourceStats(str(f)) for f in self.files]
        self._done_bytes = 0
        self._current: _Source | ColumnarSource | None = None

    @property
    def position(self) -> int:
        cur = self._current.position if self._current is not None else 0
        return self._done_bytes + cur

    def documents(self) -> Iterator[tuple[int, Document]]:
        """``(file index, document)`` for every document of every file."""
        for i, path in enumerate(self.files):
            src = _open_source(path, self.opts)
            self._current = src
            try:
                yield from ((i, d) for d in read_documents(path, self.opts, self.stats[i], src))
            finally:
                src.close()
                self._current = None
                self._done_bytes += self.sizes[i]

    @property
    def skipped_lines(self) -> int:
        return sum(s.skipped_lines for s in self.stats)

    def check_not_empty(self) -> None:
        """Raise if nothing was read (call after iterating)."""
        if not any(s.documents for s in self.stats):
            names = ", ".join(str(f) for f in self.files[:5])
            more = f" and {len(self.files) - 5} more" if len(self.files) > 5 else ""
            raise CorpusError(f"empty corpus: no text in {names}{more}")


__all__ = [
    "FORMATS",
    "Corpus",
    "CorpusError",
    "CorpusOptions",
    "Document",
    "ReadOptions",
    "SourceStats",
    "detect_format",
    "expand_inputs",
    "read_documents",
    "sha256_file",
    "setup_cli_logging",
    "source_bytes",
    "source_sha256",
]
