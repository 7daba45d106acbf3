"""Readers for the file formats of the built-in tasks and of custom datasets.

Every reader fails with :class:`~electra.finetune.common.DatasetError` naming
the file, the line (or the JSON path) and the field. Formats:

* GLUE / KorNLU TSV: tab-separated, *unquoted* fields (a ``"`` is text), with
  or without a header; every line must have the header's number of fields.
* custom tables: ``.csv`` (RFC 4180 quoting, header required), ``.tsv`` (as
  GLUE, header required), ``.jsonl`` (one JSON object per line), ``.json``
  (an array of objects); a ``.txt`` table is TSV or CSV, sniffed from its
  first lines. :mod:`electra.text.formats` decides (``--format`` overrides).
* predict input (:func:`read_predict_input`): the tables, ``.txt`` with one
  text per line (``a<TAB>b`` for a pair), CoNLL for tagging, SQuAD for QA.
* CoNLL (WNUT-17): ``token<TAB>tag`` (or space separated, tag last), a blank
  or tab-only line between sentences.
* KLUE-NER: ``## <guid>\\t<marked-up sentence>`` then one ``char\\ttag`` line per
  character (spaces included), a blank line between sentences.
* SQuAD v1.1 JSON (KorQuAD, XQuAD), or JSON Lines of
  ``{"id", "question", "context", "answers": [{"text", "answer_start"}]}``.
* NSMC: the raw per-movie review files (``[{"review", "rating", ...}]``) or the
  official ``ratings_*.txt`` (``id\\tdocument\\tlabel``).
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from electra.finetune.common import (
    Answer,
    DatasetError,
    QAExample,
    TaggingExample,
    TextExample,
    where,
)
from electra.text.formats import HEADER_FORMATS, FormatError, Use, detect_format

PathLike = str | os.PathLike[str]


def read_data_text(path: PathLike) -> str:
    """The whole text of a data file (UTF-8, BOM dropped); errors name the file and line."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file")
    if p.is_dir():
        raise DatasetError(f"{p}: is a directory, expected a data file")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        line = p.read_bytes()[: exc.start].count(b"\n") + 1
        raise DatasetError(f"{where(p, line)}: not valid UTF-8 ({exc.reason})") from None
    if not text.strip():
        raise DatasetError(f"{p}: the file is empty (no examples)")
    return text


def numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    """``(line number from 1, line without its line break)`` of ``text``."""
    for i, line in enumerate(text.split("\n"), start=1):
        yield i, line.rstrip("\r")


# ---------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------


def read_tsv(
    path: PathLike, header: bool = True, columns: list[str] | None = None
) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """Unquoted TSV rows as ``(line number, {column: value})``.

    Without a header, ``columns`` names the fields (or they are ``"0"``, ``"1"``...).
    """
    text = read_data_text(path)
    rows: list[tuple[int, dict[str, str]]] = []
    names: list[str] | None = None if header else columns
    for n, line in numbered_lines(text):
        if not line.strip():
            continue
        fields = line.split("\t")
        if names is None:
            if header:
                names = [f.strip() for f in fields]
                continue
            names = [str(i) for i in range(len(fields))]
        if len(fields) != len(names):
            raise DatasetError(
                f"{where(path, n)}: {len(fields)} tab-separated fields, expected {len(names)} "
                f"({', '.join(names)})"
            )
        rows.append((n, dict(zip(names, fields, strict=True))))
    if not rows:
        raise DatasetError(f"{path}: no examples after the header line")
    return names or [], rows


def read_csv(path: PathLike) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    text = read_data_text(path)
    reader = csv.reader(text.splitlines(keepends=True))
    rows: list[tuple[int, dict[str, str]]] = []
    names: list[str] | None = None
    try:
        for fields in reader:
            if not fields or not any(f.strip() for f in fields):
                continue
            if names is None:
                names = [f.strip() for f in fields]
                continue
            n = reader.line_num
            if len(fields) != len(names):
                raise DatasetError(
                    f"{where(path, n)}: {len(fields)} comma-separated fields, expected "
                    f"{len(names)} ({', '.join(names)})"
                )
            rows.append((n, dict(zip(names, fields, strict=True))))
    except csv.Error as exc:
        raise DatasetError(f"{where(path, reader.line_num)}: malformed CSV ({exc})") from None
    if not rows:
        raise DatasetError(f"{path}: no examples after the header line")
    return names or [], rows


def read_jsonl(path: PathLike) -> tuple[list[str], list[tuple[int, dict[str, Any]]]]:
    text = read_data_text(path)
    rows: list[tuple[int, dict[str, Any]]] = []
    keys: dict[str, None] = {}
    for n, line in numbered_lines(text):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where(path, n)}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise DatasetError(
                f"{where(path, n)}: expected a JSON object, got {type(obj).__name__}"
            )
        keys.update(dict.fromkeys(obj))
        rows.append((n, obj))
    return list(keys), rows


_WS = re.compile(r"\s*")


def read_json_array(path: PathLike) -> tuple[list[str], list[tuple[int, dict[str, Any]]]]:
    """A JSON array of objects; the "line" of each is the line where the object starts."""
    text = read_data_text(path)
    dec = json.JSONDecoder()
    i = _WS.match(text, 0).end()
    if text[i : i + 1] != "[":
        raise DatasetError(f"{path}: expected a JSON array of objects")
    i += 1
    rows: list[tuple[int, dict[str, Any]]] = []
    keys: dict[str, None] = {}
    line, last = 1, 0
    try:
        while True:
            i = _WS.match(text, i).end()
            if text[i : i + 1] == "]":
                break
            line += text.count("\n", last, i)
            last = i
            obj, i = dec.raw_decode(text, i)
            if not isinstance(obj, dict):
                raise DatasetError(f"{where(path, line)}: item {len(rows)} is not a JSON object")
            keys.update(dict.fromkeys(obj))
            rows.append((line, obj))
            i = _WS.match(text, i).end()
            if text[i : i + 1] == ",":
                i += 1
            elif text[i : i + 1] != "]":
                raise json.JSONDecodeError("expected ',' or ']'", text, i)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where(path, exc.lineno)}: not valid JSON ({exc.msg})") from None
    if not rows:
        raise DatasetError(f"{path}: the file is empty (no examples)")
    return list(keys), rows


Rows = list[tuple[int, dict[str, Any]]]


def data_format(path: PathLike, format: str | None = None, use: Use = "table") -> str:
    """The format of data file ``path`` (see :mod:`electra.text.formats`), or a DatasetError."""
    try:
        return detect_format(path, format or None, use)
    except FormatError as exc:
        raise DatasetError(str(exc)) from None


def _read_rows(path: PathLike, fmt: str) -> tuple[list[str], Rows]:
    readers: dict[str, Callable[[PathLike], tuple[list[str], Rows]]] = {
        "csv": read_csv,
        "tsv": read_tsv,
        "jsonl": read_jsonl,
        "json": read_json_array,
    }
    return readers[fmt](path)


def read_table(path: PathLike, format: str | None = None) -> tuple[list[str], Rows]:
    """A custom data file: .csv, .tsv, .txt (TSV or CSV, sniffed), .jsonl, .json.

    ``format`` (``csv``, ``tsv``, ``jsonl``, ``json``) overrides the suffix.
    """
    return _read_rows(path, data_format(path, format))


def read_text_table(
    path: PathLike,
    text_column: str,
    pair_column: str | None,
    label_column: str | None,
    regression: bool = False,
    format: str | None = None,
) -> list[TextExample]:
    """Text examples of a custom table; a missing column of a CSV/TSV is a header error."""
    fmt = data_format(path, format)
    names, rows = _read_rows(path, fmt)
    needed = {"--text-column": text_column}
    if pair_column:
        needed["--text-pair-column"] = pair_column
    if label_column:
        needed["--label-column"] = label_column
    if fmt in HEADER_FORMATS:
        require_columns(path, names, needed)
    return text_examples(path, rows, text_column, pair_column, label_column, regression)


def require_columns(path: PathLike, columns: list[str], needed: dict[str, str]) -> None:
    """Header check: each needed column (option name -> column) must exist."""
    for option, col in needed.items():
        if col and col not in columns:
            raise DatasetError(
                f"{where(path, 1, col)}: no such column (given by {option}); "
                f"the file has: {', '.join(columns) or '(none)'}"
            )


_DROP = object()  # a label_map callable said: leave this row out


def _field_values(
    path: PathLike,
    n: int,
    row: dict[str, Any],
    columns: Sequence[str | None],
    label_column: str | None,
    regression: bool,
) -> dict[str, str]:
    """The row's text fields, present and text (a JSON number label is made text)."""
    values = {}
    for col in columns:
        if not col:
            continue
        if col not in row or row[col] is None:
            raise DatasetError(f"{where(path, n, col)}: missing value")
        value = row[col]
        if isinstance(value, str):
            values[col] = value
        elif col == label_column and isinstance(value, int | float) and not isinstance(value, bool):
            values[col] = repr(value) if regression else str(value)
        else:
            raise DatasetError(f"{where(path, n, col)}: expected text, got {type(value).__name__}")
    return values


def _label(
    raw: str,
    loc: str,
    regression: bool,
    label_map: dict[str, str] | Callable[[str], str | None] | None,
) -> Any:
    """A row's label: a number (regression), or a class name through ``label_map``."""
    if regression:
        try:
            label = float(raw)
        except ValueError:
            raise DatasetError(f"{loc}: {raw!r} is not a number") from None
        if label != label:  # NaN
            raise DatasetError(f"{loc}: label is NaN")
        return label
    if not raw:
        raise DatasetError(f"{loc}: empty label")
    if callable(label_map):
        mapped = label_map(raw)
        return _DROP if mapped is None else mapped
    if label_map is not None:
        if raw not in label_map:
            raise DatasetError(f"{loc}: unknown label {raw!r}; expected one of {sorted(label_map)}")
        return label_map[raw]
    return raw


def text_examples(
    path: PathLike,
    rows: list[tuple[int, dict[str, Any]]],
    text_column: str,
    pair_column: str | None,
    label_column: str | None,
    regression: bool = False,
    label_map: dict[str, str] | Callable[[str], str | None] | None = None,
    skip_empty: bool = False,
) -> list[TextExample]:
    """Examples from table rows; every missing or bad field is reported with its line.

    ``label_map`` renames raw labels (``"1"`` -> ``"positive"``); a callable may
    return None to drop the row (NSMC ratings 5-8). ``skip_empty`` drops rows
    whose text is empty (the official NSMC files have a few) instead of failing.
    """
    out = []
    for n, row in rows:
        columns = (text_column, pair_column, label_column)
        values = _field_values(path, n, row, columns, label_column, regression)
        text = values[text_column]
        if not text.strip():
            if skip_empty:
                continue
            raise DatasetError(f"{where(path, n, text_column)}: empty text")
        pair = values.get(pair_column) if pair_column else None
        if pair is not None and not pair.strip():
            raise DatasetError(f"{where(path, n, pair_column)}: empty text")
        label = None
        if label_column:
            loc = where(path, n, label_column)
            label = _label(values[label_column].strip(), loc, regression, label_map)
            if label is _DROP:
                continue
        source = where(path, n)
        out.append(TextExample(text, pair, label, guid=f"{Path(path).name}:{n}", source=source))
    if not out:
        raise DatasetError(f"{path}: no examples")
    return out


# ---------------------------------------------------------------------------
# Tagging formats
# ---------------------------------------------------------------------------


def read_conll(path: PathLike) -> list[TaggingExample]:
    """Word-level BIO file: ``token<TAB>tag`` per line, blank line between sentences."""
    text = read_data_text(path)
    out: list[TaggingExample] = []
    words: list[str] = []
    tags: list[str] = []
    first = 0

    def flush() -> None:
        if words:
            out.append(
                TaggingExample.from_words(
                    words, tags, guid=f"{Path(path).name}:{first}", source=where(path, first)
                )
            )
        words.clear()
        tags.clear()

    for n, line in numbered_lines(text):
        if not line.strip():
            flush()
            continue
        if line.startswith("-DOCSTART-"):
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        if len(fields) < 2 or not fields[-1].strip():
            raise DatasetError(f"{where(path, n, 'tag')}: expected 'token<TAB>tag', got {line!r}")
        tag = fields[-1].strip()
        if tag != "O" and not (tag[:2] in ("B-", "I-") and len(tag) > 2):
            raise DatasetError(f"{where(path, n, 'tag')}: {tag!r} is not a BIO tag (O, B-X, I-X)")
        word = fields[0].strip()
        if not word:
            raise DatasetError(f"{where(path, n, 'token')}: empty token")
        if not words:
            first = n
        words.append(word)
        tags.append(tag)
    flush()
    if not out:
        raise DatasetError(f"{path}: no sentences")
    return out


def read_klue_ner(path: PathLike) -> list[TaggingExample]:
    """KLUE-NER v1.1: one ``char<TAB>tag`` line per character (spaces included)."""
    text = read_data_text(path)
    out: list[TaggingExample] = []
    chars: list[str] = []
    tags: list[str] = []
    guid, first = "", 0

    def flush() -> None:
        if chars:
            out.append(
                TaggingExample.from_chars(
                    "".join(chars), tags, guid=guid or f"line {first}", source=where(path, first)
                )
            )
        chars.clear()
        tags.clear()

    for n, line in numbered_lines(text):
        if line.startswith("##"):
            body = line[2:].strip()
            if body.startswith("klue-ner") or "\t" in body:
                flush()
                guid, first = body.split("\t", 1)[0], n
            continue
        if not line:
            flush()
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise DatasetError(f"{where(path, n)}: expected 'character<TAB>tag', got {line!r}")
        ch, tag = fields
        if len(ch) != 1:
            raise DatasetError(f"{where(path, n, 'character')}: expected one character, got {ch!r}")
        if tag != "O" and not (tag[:2] in ("B-", "I-") and len(tag) > 2):
            raise DatasetError(f"{where(path, n, 'tag')}: {tag!r} is not a BIO tag (O, B-X, I-X)")
        if not chars:
            first = first or n
        chars.append(ch)
        tags.append(tag)
    flush()
    if not out:
        raise DatasetError(f"{path}: no sentences")
    return out


def tagging_from_rows(
    path: PathLike, rows: list[tuple[int, dict[str, Any]]], tokens_column: str, tags_column: str
) -> list[TaggingExample]:
    """JSON Lines tagging rows: ``{"tokens": [...], "tags": [...]}`` (column names given)."""
    out = []
    for n, row in rows:
        for col in (tokens_column, tags_column):
            if col and col not in row:
                raise DatasetError(f"{where(path, n, col)}: missing value")
        words = row[tokens_column]
        if not isinstance(words, list) or not all(isinstance(w, str) and w for w in words):
            raise DatasetError(f"{where(path, n, tokens_column)}: expected a list of tokens")
        tags = None
        if tags_column:
            tags = row[tags_column]
            if not isinstance(tags, list) or len(tags) != len(words):
                raise DatasetError(
                    f"{where(path, n, tags_column)}: expected a list of {len(words)} tags"
                )
        out.append(TaggingExample.from_words(words, tags, guid=str(n), source=where(path, n)))
    if not out:
        raise DatasetError(f"{path}: no examples")
    return out


# ---------------------------------------------------------------------------
# SQuAD format
# ---------------------------------------------------------------------------


def _qa_line(raw: str, qid: str) -> int | None:
    at = raw.find(json.dumps(qid))
    return raw.count("\n", 0, at) + 1 if at >= 0 else None


def _check_answer(
    path: PathLike, raw: str, loc: str, qid: str, context: str, k: int, ans: Any
) -> Answer:
    field = f"answers[{k}]"

    def fail(message: str) -> DatasetError:
        return DatasetError(
            f"{where(path, _qa_line(raw, qid), field)}: {loc} (id {qid}): {message}"
        )

    if not isinstance(ans, dict) or "text" not in ans or "answer_start" not in ans:
        raise fail("an answer needs 'text' and 'answer_start'")
    text, start = ans["text"], ans["answer_start"]
    if not isinstance(text, str) or not text.strip() or not isinstance(start, int):
        raise fail(f"bad answer {ans!r}")
    if context[start : start + len(text)] == text:
        return Answer(text, start)
    hits = [i for i in range(len(context)) if context.startswith(text, i)]
    if not hits:
        raise fail(f"answer {text!r} does not occur in its context")
    # The text is there, at another offset: take the nearest occurrence.
    return Answer(text, min(hits, key=lambda i: abs(i - start)))


def read_squad(
    path: PathLike, require_answers: bool = True, format: str | None = None
) -> list[QAExample]:
    """SQuAD v1.1 JSON (``{"data": [{"title", "paragraphs": [...]}]}``) or JSON Lines.

    JSON Lines by a ``.jsonl``/``.ndjson`` name or ``format="jsonl"``; SQuAD JSON otherwise.
    """
    try:
        fmt = detect_format(path, format or None, "qa")
    except FormatError:
        if format:
            raise DatasetError(
                f"{path}: format {format!r} is not one of QA's: json, jsonl"
            ) from None
        fmt = "json"  # any other name: SQuAD JSON, as always
    if fmt == "jsonl":
        return _read_qa_jsonl(path, require_answers)
    raw = read_data_text(path)
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where(path, exc.lineno)}: not valid JSON ({exc.msg})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise DatasetError(f"{path}: not SQuAD format (expected an object with a 'data' list)")
    out: list[QAExample] = []
    for i, article in enumerate(doc["data"]):
        title = article.get("title", "") if isinstance(article, dict) else ""
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise DatasetError(f"{path}: data[{i}], field 'paragraphs': missing or not a list")
        for j, para in enumerate(paragraphs):
            out.extend(_squad_paragraph(path, raw, i, j, para, str(title), require_answers))
    if not out:
        raise DatasetError(f"{path}: no questions")
    return out


def _squad_paragraph(
    path: PathLike, raw: str, i: int, j: int, para: Any, title: str, require_answers: bool
) -> list[QAExample]:
    """The questions of ``data[i].paragraphs[j]``, each checked against its context."""
    loc = f"data[{i}].paragraphs[{j}]"
    context = para.get("context") if isinstance(para, dict) else None
    if not isinstance(context, str) or not context.strip():
        raise DatasetError(f"{path}: {loc}, field 'context': missing or empty")
    out = []
    for k, qa in enumerate(para.get("qas") or []):
        qloc = f"{loc}.qas[{k}]"
        if not isinstance(qa, dict):
            raise DatasetError(f"{path}: {qloc}: not an object")
        qid = str(qa.get("id", f"{i}-{j}-{k}"))
        question = qa.get("question")
        if not isinstance(question, str) or not question.strip():
            raise DatasetError(
                f"{where(path, _qa_line(raw, qid), 'question')}: {qloc} (id {qid}): "
                "missing or empty question"
            )
        answers_raw = qa.get("answers") or []
        if require_answers and not answers_raw:
            raise DatasetError(
                f"{where(path, _qa_line(raw, qid), 'answers')}: {qloc} (id {qid}): "
                "no answers (SQuAD v1.1 questions are all answerable)"
            )
        answers = [
            _check_answer(path, raw, qloc, qid, context, m, a) for m, a in enumerate(answers_raw)
        ]
        source = f"{path}: {qloc}"
        out.append(QAExample(qid, question, context, answers, title=title, source=source))
    return out


def _read_qa_jsonl(path: PathLike, require_answers: bool) -> list[QAExample]:
    raw = read_data_text(path)
    _, rows = read_jsonl(path)
    out = []
    for n, row in rows:
        for col in ("question", "context"):
            if not isinstance(row.get(col), str) or not row[col].strip():
                raise DatasetError(f"{where(path, n, col)}: missing or empty")
        qid = str(row.get("id", n))
        answers_raw = row.get("answers") or []
        if require_answers and not answers_raw:
            raise DatasetError(f"{where(path, n, 'answers')}: no answers")
        answers = []
        for m, a in enumerate(answers_raw):
            try:
                answers.append(_check_answer(path, raw, f"line {n}", qid, row["context"], m, a))
            except DatasetError as exc:
                msg = str(exc).split(": ", 1)[-1]
                raise DatasetError(f"{where(path, n, f'answers[{m}]')}: {msg}") from None
        out.append(QAExample(qid, row["question"], row["context"], answers, source=where(path, n)))
    if not out:
        raise DatasetError(f"{path}: no questions")
    return out


# ---------------------------------------------------------------------------
# NSMC
# ---------------------------------------------------------------------------

NSMC_LABELS = ("negative", "positive")


def nsmc_label(rating: int) -> str | None:
    """The NSMC rule: 1-4 negative, 9-10 positive, 5-8 dropped."""
    if 1 <= rating <= 4:
        return "negative"
    if 9 <= rating <= 10:
        return "positive"
    if 5 <= rating <= 8:
        return None
    raise ValueError(f"rating {rating} is outside 1-10")


def read_nsmc_raw(directory: PathLike) -> tuple[list[TextExample], dict[str, int]]:
    """Reviews of the raw per-movie files labelled by the NSMC rule, de-duplicated.

    De-duplication: a ``review_id`` seen before is dropped; a review text (after
    stripping) seen before with the same label is dropped, and a text seen
    with *both* labels is dropped entirely (it cannot be labelled). Returns
    the examples and counts of what was dropped.
    """
    d = Path(directory).resolve()
    files = sorted(d.glob("*.json"), key=lambda p: (len(p.stem), p.stem))
    if not files:
        raise DatasetError(f"{d}: no raw NSMC review files (*.json)")
    key = (str(d), tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files))
    if key in _NSMC_CACHE:  # the same files, read before in this process
        examples, stats = _NSMC_CACHE[key]
        return list(examples), dict(stats)
    examples, stats = _read_nsmc_raw(files)
    _NSMC_CACHE.clear()
    _NSMC_CACHE[key] = (examples, stats)
    return list(examples), dict(stats)


_NSMC_CACHE: dict[tuple[Any, ...], tuple[list[TextExample], dict[str, int]]] = {}


def _read_nsmc_raw(files: list[Path]) -> tuple[list[TextExample], dict[str, int]]:
    d = files[0].parent
    stats = {
        "files": len(files),
        "reviews": 0,
        "neutral_5_8": 0,
        "empty": 0,
        "duplicate_id": 0,
        "duplicate_text": 0,
        "conflicting_text": 0,
    }
    seen_ids: set[str] = set()
    by_text: dict[str, TextExample] = {}
    conflicts: set[str] = set()
    for f in files:
        _, rows = read_json_array(f)
        for n, row in rows:
            stats["reviews"] += 1
            for col in ("review", "rating"):
                if col not in row:
                    raise DatasetError(f"{where(f, n, col)}: missing value")
            try:
                rating = int(str(row["rating"]).strip())
                label = nsmc_label(rating)
            except ValueError:
                raise DatasetError(
                    f"{where(f, n, 'rating')}: {row['rating']!r} is not a rating 1-10"
                ) from None
            if label is None:
                stats["neutral_5_8"] += 1
                continue
            rid = str(row.get("review_id", f"{f.stem}:{n}"))
            if rid in seen_ids:
                stats["duplicate_id"] += 1
                continue
            seen_ids.add(rid)
            text = " ".join(str(row["review"]).split())
            if not text:
                stats["empty"] += 1
                continue
            if text in conflicts:
                stats["conflicting_text"] += 1
                continue
            if text in by_text:
                if by_text[text].label != label:
                    del by_text[text]
                    conflicts.add(text)
                    stats["conflicting_text"] += 2
                else:
                    stats["duplicate_text"] += 1
                continue
            by_text[text] = TextExample(text, None, label, guid=rid, source=where(f, n))
    out = list(by_text.values())
    if not out:
        raise DatasetError(f"{d}: no reviews with rating 1-4 or 9-10")
    stats["kept"] = len(out)
    return out, stats


def read_nsmc_ratings(path: PathLike) -> list[TextExample]:
    """The official ``ratings_train.txt`` / ``ratings_test.txt`` (id, document, label 0/1)."""
    names, rows = read_tsv(path)
    require_columns(path, names, {"NSMC format": "document"})
    require_columns(path, names, {"NSMC format": "label"})
    return text_examples(
        path,
        rows,
        "document",
        None,
        "label",
        label_map={"0": "negative", "1": "positive"},
        skip_empty=True,
    )
