"""Corpus readers on the real files, every format, compression, and every kind of bad input."""

from __future__ import annotations

import bz2
import gzip
import json
import logging
import lzma
import zipfile
from pathlib import Path

import pytest

from electra.text.corpus import (
    Corpus,
    CorpusError,
    ReadOptions,
    SourceStats,
    detect_format,
    expand_inputs,
    read_documents,
)


def docs_of(path: Path, **kw) -> list[list[str]]:
    return [d.lines for d in read_documents(path, ReadOptions(**kw))]


# ---------------------------------------------------------------------------
# Formats on real data
# ---------------------------------------------------------------------------


def test_wikiextractor_articles_are_documents(ko_wiki: Path) -> None:
    stats = SourceStats(str(ko_wiki))
    docs = list(read_documents(ko_wiki, ReadOptions(), stats))
    assert stats.format == "wiki"
    assert len(docs) == 131  # MANIFEST.md: 131 articles
    assert docs[0].lines[0] == "지미 카터"  # the title line opens the article
    assert all(not line.startswith(("<doc", "</doc")) for d in docs for line in d.lines)
    assert all(line.strip() for d in docs for line in d.lines)
    assert [d.index for d in docs] == list(range(131))


def test_plain_text_blank_lines_separate_documents_and_crlf(ko_law: Path) -> None:
    docs = docs_of(ko_law)
    assert len(docs) > 5
    assert docs[0] == ["대한민국헌법"]
    assert not any("\r" in line for d in docs for line in d)
    whole = docs_of(ko_law, file_is_document=True)
    assert len(whole) == 1
    assert whole[0] == [line for d in docs for line in d]


def test_gutenberg_header_and_footer_are_stripped(en_book: Path) -> None:
    raw = [line for d in docs_of(en_book) for line in d]
    assert raw[0].startswith("Project Gutenberg's Frankenstein")  # BOM and CR removed
    assert any("START OF THIS PROJECT GUTENBERG" in line for line in raw)
    body = [line for d in docs_of(en_book, strip_gutenberg=True) for line in d]
    text = "\n".join(body)
    assert "Project Gutenberg" not in text
    assert "PROJECT GUTENBERG" not in text
    assert "Frankenstein" in text and "St. Petersburgh" in text
    assert body[-1] == "lost in darkness and distance."  # the end of the novel
    assert len(body) < len(raw) - 300


def test_gutenberg_without_markers_warns_and_keeps_text(tmp_path: Path, caplog) -> None:
    """A book that names Project Gutenberg but has no START line the patterns know: a warning."""
    p = tmp_path / "book.txt"
    p.write_text("The Project Gutenberg eBook of Nothing\n\nno markers here\n")
    with caplog.at_level(logging.WARNING, logger="electra"):
        docs = docs_of(p, strip_gutenberg=True)
    assert docs == [["The Project Gutenberg eBook of Nothing"], ["no markers here"]]
    assert "no Project Gutenberg START line" in caplog.text and "book.txt" in caplog.text


def test_gutenberg_stripping_leaves_other_files_alone_quietly(tmp_path: Path, caplog) -> None:
    """Other sources in a corpus read with strip_gutenberg (reviews beside books): no warning."""
    p = tmp_path / "plain.txt"
    p.write_text("no markers here\n\nsecond\n")
    with caplog.at_level(logging.WARNING, logger="electra"):
        docs = docs_of(p, strip_gutenberg=True)
    assert docs == [["no markers here"], ["second"]]
    assert "Gutenberg" not in caplog.text


def test_nsmc_file_is_one_document_of_reviews(nsmc_files: list[Path]) -> None:
    path = nsmc_files[0]
    records = json.loads(path.read_text(encoding="utf-8"))
    stats = SourceStats(str(path))
    docs = list(read_documents(path, ReadOptions(), stats))
    assert stats.format == "nsmc"
    assert len(docs) == 1
    expected = [line for r in records for line in r["review"].split("\n") if line.strip()]
    assert docs[0].lines == expected
    assert stats.lines == len(records)


def test_jsonl_text_field_nested_and_lists(tmp_path: Path) -> None:
    p = tmp_path / "c.jsonl"
    rows = [
        {"text": "첫 문서.\n두 번째 줄.", "id": 1},
        {"text": None},
        {"text": ["a", "b"]},
        {"meta": {"body": "nested"}, "text": "x"},
    ]
    p.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n\n")
    assert docs_of(p) == [["첫 문서.", "두 번째 줄."], ["a", "b"], ["x"]]
    assert docs_of(p, text_field="meta.body", on_error="skip") == [["nested"]]


@pytest.mark.parametrize("kind", ["gzip", "bz2", "xz"])
def test_compressed_files_read_the_same(tmp_path: Path, ko_wiki: Path, kind: str) -> None:
    data = ko_wiki.read_bytes()[:200_000]
    plain = tmp_path / "wiki_plain"
    plain.write_bytes(data)
    packed = tmp_path / f"wiki.{kind}"  # the name does not matter: content decides
    opener = {"gzip": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[kind]
    packed.write_bytes(opener(data))
    assert docs_of(packed) == docs_of(plain)
    assert len(docs_of(packed)) > 5


def test_detect_format_by_name_and_content(tmp_path: Path) -> None:
    assert detect_format(Path("a.jsonl.gz"), b'{"text": 1}') == "jsonl"
    assert detect_format(Path("a.json"), b'[{"review": "x"}]') == "nsmc"
    assert detect_format(Path("a.json"), b'{"text": "x"}\n') == "jsonl"
    assert detect_format(Path("wiki_00"), b'\n<doc id="1" url="u" title="t">\n') == "wiki"
    assert detect_format(Path("x.txt"), "\ufeff본문".encode()) == "text"


def test_expand_inputs_files_globs_directories(tmp_path: Path) -> None:
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ["d/b.txt", "d/a.txt", "d/sub/c.txt", "d/.hidden.txt", "e.txt"]:
        (tmp_path / name).write_text("x\n")
    got = expand_inputs([tmp_path / "d", str(tmp_path / "*.txt"), tmp_path / "d" / "a.txt"])
    names = [p.relative_to(tmp_path).as_posix() for p in got]
    assert names == ["d/a.txt", "d/b.txt", "d/sub/c.txt", "e.txt"]


def test_long_document_is_cut_into_parts(tmp_path: Path) -> None:
    p = tmp_path / "long.txt"
    p.write_text("\n".join(f"line {i} " + "x" * 50 for i in range(100)) + "\n\nnext doc\n")
    docs = list(read_documents(p, ReadOptions(max_document_chars=1000)))
    assert [d.index for d in docs][:2] == [0, 0]
    assert [d.part for d in docs if d.index == 0] == list(range(len(docs) - 1))
    assert docs[-1].index == 1 and docs[-1].lines == ["next doc"]
    assert sum(len(d.lines) for d in docs if d.index == 0) == 100


def test_corpus_tracks_position_and_stats(ko_wiki: Path, nsmc_files: list[Path]) -> None:
    corpus = Corpus([ko_wiki, *nsmc_files[:3]], ReadOptions())
    n = sum(1 for _ in corpus.documents())
    assert n == 131 + 3
    assert corpus.position == corpus.total_bytes
    assert [s.format for s in corpus.stats] == ["wiki", "nsmc", "nsmc", "nsmc"]


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------


def test_missing_path_names_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.txt: no such file"):
        expand_inputs([tmp_path / "nope.txt"])
    with pytest.raises(FileNotFoundError, match=r"\*.zzz: no files match"):
        expand_inputs([str(tmp_path / "*.zzz")])
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(CorpusError, match="empty_dir: directory contains no files"):
        expand_inputs([tmp_path / "empty_dir"])


def test_invalid_utf8_names_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "latin1.txt"
    p.write_bytes(b"good line\n" + "caf\u00e9 au lait\n".encode("latin-1") + b"fine\n")
    with pytest.raises(CorpusError, match=r"latin1.txt:2: invalid UTF-8 \(byte 0xe9"):
        docs_of(p)
    stats = SourceStats(str(p))
    docs = [d.lines for d in read_documents(p, ReadOptions(on_error="skip"), stats)]
    assert docs == [["good line", "fine"]]  # the skipped line does not split the document
    assert stats.skipped_lines == 1
    assert "latin1.txt:2" in stats.problems[0]


def test_invalid_utf8_in_nsmc_json(tmp_path: Path) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(b'[{"review": "ok"},\n {"review": "\xff"}]')
    with pytest.raises(CorpusError, match=r"bad.json:2: invalid UTF-8"):
        docs_of(p)
    stats = SourceStats(str(p))
    assert list(read_documents(p, ReadOptions(on_error="skip"), stats)) == []
    assert stats.skipped_file and stats.skipped_lines == 1


def test_empty_file_warns_and_empty_corpus_fails(tmp_path: Path, caplog) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    blank = tmp_path / "blank.txt"
    blank.write_bytes(b"\n \r\n\t\n")
    corpus = Corpus([empty, blank], ReadOptions())
    with caplog.at_level(logging.WARNING, logger="electra"):
        assert list(corpus.documents()) == []
    assert "empty.txt: empty file" in caplog.text
    assert corpus.stats[0].empty
    with pytest.raises(CorpusError, match="empty corpus: no text in .*empty.txt"):
        corpus.check_not_empty()


@pytest.mark.parametrize("size", [5_000, 3_000_000])
def test_one_enormous_line(tmp_path: Path, size: int) -> None:
    p = tmp_path / "huge.txt"
    p.write_bytes(b"first\n" + b"y" * size + b"\nlast\n")
    opts = dict(max_line_bytes=4096)
    with pytest.raises(CorpusError, match=r"huge.txt:2: line longer than 4,096 bytes"):
        docs_of(p, **opts)
    stats = SourceStats(str(p))
    docs = [d.lines for d in read_documents(p, ReadOptions(on_error="skip", **opts), stats)]
    assert docs == [["first", "last"]]
    assert stats.skipped_lines == 1


def test_file_that_is_one_enormous_line_without_newline(tmp_path: Path) -> None:
    p = tmp_path / "oneline.txt"
    p.write_bytes(b"z" * 2_500_000)
    with pytest.raises(CorpusError, match=r"oneline.txt:1: line longer than"):
        docs_of(p, max_line_bytes=1 << 20)
    corpus = Corpus([p], ReadOptions(on_error="skip", max_line_bytes=1 << 20))
    assert list(corpus.documents()) == []
    assert corpus.skipped_lines == 1
    with pytest.raises(CorpusError, match="empty corpus"):
        corpus.check_not_empty()


def test_binary_file(tmp_path: Path, caplog) -> None:
    p = tmp_path / "model.bin"
    p.write_bytes(b"\x00\x01\x02binary" * 100)
    with pytest.raises(CorpusError, match=r"model.bin: looks like a binary file \(NUL byte"):
        docs_of(p)
    stats = SourceStats(str(p))
    with caplog.at_level(logging.WARNING, logger="electra"):
        assert list(read_documents(p, ReadOptions(on_error="skip"), stats)) == []
    assert stats.skipped_file and "model.bin" in caplog.text


def test_utf16_zip_and_truncated_gzip(tmp_path: Path) -> None:
    u16 = tmp_path / "u16.txt"
    u16.write_bytes("한국어".encode("utf-16"))
    with pytest.raises(CorpusError, match="u16.txt: is UTF-16 text"):
        docs_of(u16)
    z = tmp_path / "c.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("a.txt", "hello")
    with pytest.raises(CorpusError, match="c.zip: is a zip archive"):
        docs_of(z)
    gz = tmp_path / "cut.txt.gz"
    text = "".join(f"line {i * 7919 % 100003}\n" for i in range(100_000)).encode()
    packed = gzip.compress(text)
    gz.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(CorpusError, match="cut.txt.gz: corrupt or truncated gzip"):
        docs_of(gz)


def test_bad_json_lines(tmp_path: Path) -> None:
    p = tmp_path / "c.jsonl"
    p.write_text('{"text": "ok"}\n{"text": \n[1, 2]\n{"body": "no text"}\n{"text": 3}\n')
    with pytest.raises(CorpusError, match=r"c.jsonl:2: invalid JSON"):
        docs_of(p)
    stats = SourceStats(str(p))
    docs = [d.lines for d in read_documents(p, ReadOptions(on_error="skip"), stats)]
    assert docs == [["ok"]]
    assert stats.skipped_lines == 4
    joined = " | ".join(stats.problems)
    assert "c.jsonl:3: expected a JSON object" in joined
    assert "c.jsonl:4: no field 'text' (fields: 'body'); choose one with --text-field" in joined
    assert "c.jsonl:5: field 'text' is a int" in joined


def test_bad_nsmc_files(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('[{"review": "a"}, {"review": ')
    with pytest.raises(CorpusError, match="broken.json:1: invalid JSON"):
        docs_of(broken)
    other = tmp_path / "other.json"
    other.write_text('[{"review": "좋아요"}, {"comment": "x"}]')
    with pytest.raises(CorpusError, match=r"other.json: record 1: no field 'review'"):
        docs_of(other)
    assert docs_of(other, on_error="skip") == [["좋아요"]]


def test_wiki_text_outside_doc(tmp_path: Path) -> None:
    p = tmp_path / "wiki_99"
    p.write_text('<doc id="1" url="u" title="t">\nt\nbody\n</doc>\nstray text\n')
    with pytest.raises(CorpusError, match=r"wiki_99:5: text outside <doc>"):
        docs_of(p)
    assert docs_of(p, on_error="skip") == [["t", "body"]]


def test_unknown_format_is_rejected() -> None:
    with pytest.raises(CorpusError, match="unknown format 'csv'"):
        ReadOptions(format="csv")
