"""Columnar corpora: Parquet, Arrow IPC files and streams, ``datasets`` save_to_disk directories.

The large public corpora ship as Parquet (most of the Hugging Face hub, what
``datasets`` exports) or as the Arrow files ``datasets.Dataset.save_to_disk``
writes: a directory with ``dataset_info.json``, ``state.json`` and
``data-00000-of-0000N.arrow`` files in the Arrow IPC *stream* format. Each row
is one document; its text is in the column the ``--text-field`` option names
(default ``text``): a string, or a list of strings taken as the document's
lines; a null is skipped. A dotted name (``meta.body``) reaches into struct
columns when no column has that exact name. A missing column, or one that
holds no text, is a :class:`~electra.text.errors.ColumnError` naming the file
and listing the columns there are.

Memory stays bounded whatever the size of the file: a Parquet file is read by
record batches of at most :data:`BATCH_ROWS` rows (fewer when its rows are
big, so that a batch holds about :data:`BATCH_BYTES`), only the text column,
pages through a :data:`READ_BUFFER` buffer rather than whole column chunks;
an Arrow file or stream is read one record batch at a time, as it was
written, and turned into Python objects :data:`BATCH_ROWS` rows at a time.

pyarrow is imported when such a file is opened, so ``electra --help`` and a
text corpus never load it. It starts no threads here (``use_threads=False``,
no pre-buffering): ``electra prepare`` forks its tokenizer processes after
reading has begun.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from electra.system.files import sha256_file
from electra.text.errors import ColumnError, CorpusError
from electra.text.formats import ARROW_FILE_MAGIC

BATCH_ROWS = 1024  # most rows turned into Python objects at once
BATCH_BYTES = 16 << 20  # aimed-at data per Parquet batch, from the file's own row sizes
READ_BUFFER = 1 << 20  # Parquet pages are read through a buffer of this size
DATASET_FILES = ("dataset_info.json", "state.json")  # what marks a save_to_disk directory
# The JSON ``datasets`` writes beside its Arrow files (a DatasetDict's list of splits too)
DATASET_METADATA = frozenset({*DATASET_FILES, "dataset_dict.json"})
MAX_LISTED = 20


# ---------------------------------------------------------------------------
# save_to_disk directories
# ---------------------------------------------------------------------------


def is_dataset_dir(path: Path) -> bool:
    """True for a directory written by ``datasets.Dataset.save_to_disk``."""
    return path.is_dir() and all((path / name).is_file() for name in DATASET_FILES)


def dataset_files(path: Path) -> list[Path]:
    """The Arrow files of a save_to_disk directory, in the order its ``state.json`` lists them.

    Without a ``_data_files`` list (an older or hand-made directory) the
    ``data-*.arrow`` files in name order. Raises :class:`CorpusError` naming
    the directory when ``state.json`` is unreadable or a listed file is missing.
    """
    state = path / "state.json"
    try:
        info = json.loads(state.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorpusError(f"{state}: not a readable datasets state file ({exc})") from None
    entries = info.get("_data_files") if isinstance(info, dict) else None
    if entries:
        names = [e.get("filename") if isinstance(e, dict) else None for e in entries]
        for name in names:
            if not isinstance(name, str) or Path(name).name != name:
                raise CorpusError(f"{state}: _data_files must hold file names, got {name!r}")
    else:
        names = sorted(p.name for p in path.glob("data-*.arrow"))
    files = [path / name for name in names]
    for f in files:
        if not f.is_file():
            raise CorpusError(f"{path}: state.json lists {f.name}, which is missing")
    if not files:
        raise CorpusError(f"{path}: a datasets save_to_disk directory without data files")
    return files


def source_bytes(path: Path) -> int:
    """Size of one corpus input: a file's, or the sum of a save_to_disk directory's data files."""
    if path.is_dir():
        return sum(f.stat().st_size for f in dataset_files(path))
    return path.stat().st_size


def source_sha256(path: Path) -> str:
    """Digest of one corpus input: a file's sha256; for a save_to_disk directory the
    sha256 of the lines ``<name> <sha256>`` of its data files, in order (so a dataset
    saved again with the same data and sharding keeps its digest)."""
    if not path.is_dir():
        return sha256_file(path)
    lines = "".join(f"{f.name} {sha256_file(f)}\n" for f in dataset_files(path))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------
# The text column
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TextColumn:
    """Where a file's text is: a top-level column and the struct fields below it."""

    top: str
    children: tuple[str, ...] = ()

    @property
    def dotted(self) -> str:
        return ".".join((self.top, *self.children))

    def values(self, batch: Any) -> list[Any]:
        """The column's values in record batch ``batch``: ``str``, list of ``str`` or ``None``."""
        arr = batch.column(batch.schema.get_field_index(self.top))
        for name in self.children:
            # flatten(), not field(): a null struct makes its fields null too
            arr = arr.flatten()[arr.type.get_field_index(name)]
        return arr.to_pylist()


def _is_string(t: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    is_view = getattr(pa.types, "is_string_view", None)  # pyarrow >= 16
    return pa.types.is_string(t) or pa.types.is_large_string(t) or bool(is_view and is_view(t))


def _is_text(t: Any) -> bool:
    """A string type, or a list of strings (a document's lines)."""
    import pyarrow as pa

    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _is_string(t.value_type)
    return _is_string(t)


def _fields(t: Any) -> list[Any]:
    """The fields of a schema or a struct type."""
    return [t.field(i) for i in range(len(t))]


def _text_columns(fields: list[Any], prefix: str = "") -> list[str]:
    """Dotted names of the columns holding text, struct fields included."""
    import pyarrow as pa

    out: list[str] = []
    for f in fields:
        if _is_text(f.type):
            out.append(prefix + f.name)
        elif pa.types.is_struct(f.type):
            out.extend(_text_columns(_fields(f.type), f"{prefix}{f.name}."))
    return out


def _nested(schema: Any, key: str) -> tuple[TextColumn | None, Any]:
    """``key`` as a path through struct columns (``meta.body``), or ``(None, None)``."""
    import pyarrow as pa

    top, *children = key.split(".")
    if not children or schema.get_field_index(top) < 0:
        return None, None
    field = schema.field(top)
    for name in children:
        if not pa.types.is_struct(field.type) or field.type.get_field_index(name) < 0:
            return None, None
        field = field.type.field(name)
    return TextColumn(top, tuple(children)), field


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_LISTED]) or "none"
    return shown + (f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")


def resolve_column(schema: Any, key: str, path: Path) -> TextColumn:
    """The column ``key`` names in the Arrow ``schema`` of file ``path``.

    A column of exactly that name first, else a dotted path into struct
    columns. Raises :class:`ColumnError` naming ``path`` and listing the
    columns there are (and those holding text) when there is no such column
    or it holds something other than text.
    """
    column: TextColumn | None
    if schema.get_field_index(key) >= 0:
        column, field = TextColumn(key), schema.field(key)
    else:
        column, field = _nested(schema, key)
    texts = _listed(_text_columns(_fields(schema)))
    if column is None:
        raise ColumnError(
            f"{path}: no column {key!r} (columns: {_listed(list(schema.names))}; "
            f"text columns: {texts}); choose one with --text-field"
        )
    if not _is_text(field.type):
        kind = str(field.type)
        kind = kind if len(kind) <= 60 else kind[:57] + "..."
        raise ColumnError(
            f"{path}: column {key!r} is {kind}, not text (text columns: {texts}); "
            "choose one with --text-field"
        )
    return column


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


def batch_rows(metadata: Any) -> int:
    """Rows per Parquet batch: :data:`BATCH_ROWS`, fewer when the file's rows are big.

    The rows' size is taken from the file's row groups (their data as stored
    before compression, all columns: for text, near its size in memory), so a
    batch holds about :data:`BATCH_BYTES`; at least one row.
    """
    rows = metadata.num_rows
    if not rows:
        return BATCH_ROWS
    total = sum(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))
    per_row = max(1, total // rows)
    return max(1, min(BATCH_ROWS, BATCH_BYTES // per_row))


def _guarded(batches: Iterator[Any], path: Path, what: str) -> Iterator[Any]:
    """``batches``, with pyarrow's errors while reading them turned into :class:`CorpusError`."""
    import pyarrow as pa

    try:
        yield from batches
    except (pa.ArrowException, OSError) as exc:
        raise CorpusError(f"{path}: corrupt or truncated {what} data ({exc})") from None


class ColumnarSource:
    """A Parquet or Arrow file, or a save_to_disk directory, opened for its text column.

    ``position`` is the number of input bytes consumed so far (for progress
    and for the even sampling of ``electra tokenizer --limit-mb``): exact for
    an Arrow stream, by rows (Parquet) or record batches (Arrow file) read
    otherwise.
    """

    def __init__(self, path: Path, fmt: str) -> None:
        self.path = path
        self.format = fmt
        self.files = dataset_files(path) if path.is_dir() else [path]
        self.sizes = [f.stat().st_size for f in self.files]
        self._done = 0  # bytes of the files read to their end
        self._at = 0  # bytes of the current file consumed
        self._open: list[Any] = []  # pyarrow handles to close

    @property
    def position(self) -> int:
        return self._done + self._at

    def batches(self, key: str) -> Iterator[list[Any]]:
        """The values of text column ``key``, at most :data:`BATCH_ROWS` at a time, file by file."""
        read = self._parquet if self.format == "parquet" else self._arrow
        for file, size in zip(self.files, self.sizes, strict=True):
            self._at = 0
            yield from read(file, key, size)
            self.close()
            self._done += size
            self._at = 0

    def _parquet(self, file: Path, key: str, size: int) -> Iterator[list[Any]]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(file, pre_buffer=False, buffer_size=READ_BUFFER)
        except (pa.ArrowException, OSError) as exc:
            raise CorpusError(
                f"{file}: not a readable Parquet file ({exc}); choose the format with --format"
            ) from None
        self._open.append(pf)
        column = resolve_column(pf.schema_arrow, key, file)
        total, done = pf.metadata.num_rows, 0
        batches = pf.iter_batches(
            batch_size=batch_rows(pf.metadata), columns=[column.dotted], use_threads=False
        )
        for batch in _guarded(batches, file, "Parquet"):
            done += batch.num_rows
            self._at = size * done // max(total, 1)
            yield column.values(batch)

    def _arrow(self, file: Path, key: str, size: int) -> Iterator[list[Any]]:
        """An Arrow IPC file (``ARROW1`` magic, random access) or stream, batch by batch."""
        import pyarrow as pa

        f = pa.OSFile(str(file))
        self._open.append(f)
        options = pa.ipc.IpcReadOptions(use_threads=False)
        n = 0  # record batches of an IPC file; 0 for a stream
        try:
            magic = f.read(len(ARROW_FILE_MAGIC))
            f.seek(0)
            if magic == ARROW_FILE_MAGIC:
                reader = pa.ipc.open_file(f, options=options)
                n = reader.num_record_batches
                batches: Iterator[Any] = (reader.get_batch(i) for i in range(n))
            else:
                reader = pa.ipc.open_stream(f, options=options)
                batches = iter(reader)
        except (pa.ArrowException, OSError) as exc:
            raise CorpusError(
                f"{file}: not a readable Arrow IPC file or stream ({exc}); "
                "choose the format with --format"
            ) from None
        column = resolve_column(reader.schema, key, file)
        for i, batch in enumerate(_guarded(batches, file, "Arrow")):
            self._at = size * (i + 1) // n if n else f.tell()
            for start in range(0, batch.num_rows, BATCH_ROWS):
                yield column.values(batch.slice(start, BATCH_ROWS))

    def close(self) -> None:
        """Close the files pyarrow holds open."""
        for handle in self._open:
            handle.close()
        self._open.clear()


__all__ = [
    "BATCH_BYTES",
    "BATCH_ROWS",
    "DATASET_METADATA",
    "ColumnarSource",
    "TextColumn",
    "batch_rows",
    "dataset_files",
    "is_dataset_dir",
    "resolve_column",
    "source_bytes",
    "source_sha256",
]
