"""Corpora in the formats the public datasets ship in: Parquet, Arrow (files, streams,
``datasets.save_to_disk`` directories) and zstd-compressed JSON Lines.

Every file is written here with pyarrow / zstandard; nothing is downloaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from electra.blocks.format import MANIFEST
from electra.blocks.options import PrepareCommand
from electra.blocks.prepare import prepare
from electra.text import columnar, formats
from electra.text.corpus import (
    Corpus,
    CorpusError,
    ReadOptions,
    SourceStats,
    expand_inputs,
    read_documents,
    source_sha256,
)

ROWS = [
    "서울은 대한민국의 수도이다.\n한강이 도시를 가로지른다.",
    "부산은 항구 도시이다.",
    "The quick brown fox jumps over the lazy dog.",
    "제주도는 섬이다.\n감귤이 유명하다.\n바람이 많이 분다.",
]


def docs_of(path: Path, stats: SourceStats | None = None, **kw) -> list[list[str]]:
    return [d.lines for d in read_documents(path, ReadOptions(**kw), stats)]


def expected(rows: list[str]) -> list[list[str]]:
    return [r.split("\n") for r in rows]


def table(rows: list[str] = ROWS, **extra: list) -> pa.Table:
    return pa.table({"id": list(range(len(rows))), "text": rows, **extra})


def write_stream(path: Path, t: pa.Table, chunk: int = 2) -> Path:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, t.schema) as writer:
        writer.write_table(t, max_chunksize=chunk)
    return path


def write_ipc_file(path: Path, t: pa.Table, chunk: int = 2) -> Path:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, t.schema) as writer:
        writer.write_table(t, max_chunksize=chunk)
    return path


def save_to_disk_dir(root: Path, parts: list[list[str]]) -> Path:
    """A directory laid out as ``datasets.Dataset.save_to_disk`` writes it."""
    root.mkdir(parents=True)
    n = len(parts)
    names = [f"data-{i:05d}-of-{n:05d}.arrow" for i in range(n)]
    for name, rows in zip(names, parts, strict=True):
        write_stream(root / name, table(rows))
    info = {"features": {"id": {"dtype": "int64"}, "text": {"dtype": "string"}}}
    (root / "dataset_info.json").write_text(json.dumps(info))
    state = {"_data_files": [{"filename": name} for name in names], "_split": "train"}
    (root / "state.json").write_text(json.dumps(state))
    return root


# ---------------------------------------------------------------------------
# Parquet
# ---------------------------------------------------------------------------


def test_parquet_default_text_column(tmp_path: Path) -> None:
    p = tmp_path / "train-00000-of-00001.parquet"
    pq.write_table(table(), p)
    stats = SourceStats(str(p))
    assert docs_of(p, stats) == expected(ROWS)
    assert (stats.format, stats.documents, stats.lines) == ("parquet", 4, 4)


def test_parquet_text_field_option(tmp_path: Path) -> None:
    p = tmp_path / "c.parquet"
    pq.write_table(pa.table({"content": ["가나다", "라마바"], "text": ["x", "y"]}), p)
    assert docs_of(p, text_field="content") == [["가나다"], ["라마바"]]


def test_parquet_nulls_lists_and_struct_fields(tmp_path: Path) -> None:
    p = tmp_path / "c.parquet"
    t = pa.table(
        {
            "text": ["하나", None, "", "넷"],
            "lines": [["a", "b"], None, ["c", None], []],
            "meta": [{"body": "x"}, None, {"body": None}, {"body": "w"}],
        }
    )
    pq.write_table(t, p)
    stats = SourceStats(str(p))
    assert docs_of(p, stats) == [["하나"], ["넷"]]
    assert (stats.documents, stats.lines) == (2, 4)  # lines are rows, documents rows with text
    assert docs_of(p, text_field="lines") == [["a", "b"], ["c"]]
    assert docs_of(p, text_field="meta.body") == [["x"], ["w"]]  # a null struct is no text


def test_parquet_missing_column_lists_the_columns(tmp_path: Path) -> None:
    p = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": [1], "content": ["x"], "meta": [{"body": "y"}]}), p)
    with pytest.raises(CorpusError) as err:
        docs_of(p)
    msg = str(err.value)
    assert str(p) in msg and "no column 'text'" in msg
    assert "columns: id, content, meta" in msg and "text columns: content, meta.body" in msg
    assert "--text-field" in msg
    with pytest.raises(CorpusError, match="no column 'meta.title'"):
        docs_of(p, text_field="meta.title")
    stats = SourceStats(str(p))  # --on-error skip: the file is skipped and listed
    assert docs_of(p, stats, on_error="skip") == []
    assert stats.skipped_file and "no column 'text'" in stats.problems[0]


def test_parquet_non_string_column_is_named(tmp_path: Path) -> None:
    p = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": [1, 2], "body": ["a", "b"]}), p)
    with pytest.raises(CorpusError, match=r"c\.parquet: column 'text' is int64, not text") as err:
        docs_of(p)
    assert "text columns: body" in str(err.value)


def test_parquet_row_groups_in_order_with_bounded_batches(tmp_path: Path, monkeypatch) -> None:
    rows = [f"문서 {i}번의 본문이다." for i in range(50)]
    p = tmp_path / "big.parquet"
    pq.write_table(table(rows), p, row_group_size=7)
    assert pq.ParquetFile(p).metadata.num_row_groups == 8
    monkeypatch.setattr(columnar, "BATCH_ROWS", 3)
    asked: list[int] = []
    got: list[int] = []
    iter_batches = pq.ParquetFile.iter_batches

    def spy(self, batch_size=65536, **kw):
        asked.append(batch_size)
        assert kw["columns"] == ["text"]  # only the text column is read
        for batch in iter_batches(self, batch_size=batch_size, **kw):
            got.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    corpus = Corpus([p], ReadOptions())
    positions = []
    docs = []
    for _, d in corpus.documents():
        docs.append(d.lines)
        positions.append(corpus.position)
    assert docs == expected(rows)
    assert asked == [3] and max(got) <= 3 and sum(got) == 50
    assert positions == sorted(positions) and corpus.position == corpus.total_bytes


def test_parquet_batch_rows_follow_the_row_size(tmp_path: Path, monkeypatch) -> None:
    p = tmp_path / "long.parquet"
    pq.write_table(table([f"긴 문서 {i}. " * 2000 for i in range(6)]), p)  # ~30 kB a row
    monkeypatch.setattr(columnar, "BATCH_BYTES", 60_000)
    assert columnar.batch_rows(pq.ParquetFile(p).metadata) == 2
    assert len(docs_of(p)) == 6


def test_compressed_parquet_is_refused_clearly(tmp_path: Path) -> None:
    p = tmp_path / "c.parquet"
    pq.write_table(table(), p)
    packed = tmp_path / "c.parquet.zst"
    packed.write_bytes(zstandard.ZstdCompressor().compress(p.read_bytes()))
    with pytest.raises(CorpusError, match=r"c\.parquet\.zst: parquet data .* inside zstd"):
        docs_of(packed)
    unnamed = tmp_path / "blob.gz"  # the name cannot say: found after decompression
    import gzip

    unnamed.write_bytes(gzip.compress(p.read_bytes()))
    with pytest.raises(CorpusError, match=r"blob\.gz: holds parquet data inside gzip"):
        docs_of(unnamed)


def test_not_really_parquet(tmp_path: Path) -> None:
    p = tmp_path / "fake.parquet"
    p.write_text('{"text": "json after all"}\n')
    with pytest.raises(CorpusError, match=r"fake\.parquet: not a readable Parquet file"):
        docs_of(p)
    assert docs_of(p, format="jsonl") == [["json after all"]]


# ---------------------------------------------------------------------------
# Arrow
# ---------------------------------------------------------------------------


def test_arrow_stream_file(tmp_path: Path) -> None:
    p = write_stream(tmp_path / "cache-0001.arrow", table())
    assert p.read_bytes()[:4] == b"\xff\xff\xff\xff"
    stats = SourceStats(str(p))
    assert docs_of(p, stats) == expected(ROWS)
    assert (stats.format, stats.documents, stats.lines) == ("arrow", 4, 4)


def test_arrow_ipc_file_format(tmp_path: Path) -> None:
    p = write_ipc_file(tmp_path / "c.feather", table())
    assert p.read_bytes()[:6] == b"ARROW1"
    assert docs_of(p) == expected(ROWS)
    corpus = Corpus([p], ReadOptions())
    assert sum(1 for _ in corpus.documents()) == 4 and corpus.position == corpus.total_bytes


def test_arrow_big_batches_are_sliced(tmp_path: Path, monkeypatch) -> None:
    rows = [f"행 {i}" for i in range(20)]
    p = write_stream(tmp_path / "c.arrow", table(rows), chunk=20)
    seen: list[int] = []
    values = columnar.TextColumn.values

    def spy(self, batch):
        seen.append(batch.num_rows)
        return values(self, batch)

    monkeypatch.setattr(columnar, "BATCH_ROWS", 6)
    monkeypatch.setattr(columnar.TextColumn, "values", spy)
    assert docs_of(p) == expected(rows)
    assert seen == [6, 6, 6, 2]


def test_save_to_disk_directory(tmp_path: Path) -> None:
    d = save_to_disk_dir(tmp_path / "ds", [ROWS[:3], ROWS[3:]])
    assert expand_inputs([d]) == [d]
    corpus = Corpus([d], ReadOptions())
    docs = [doc.lines for _, doc in corpus.documents()]
    assert docs == expected(ROWS)  # the data files in the order of state.json
    assert corpus.total_bytes == sum(f.stat().st_size for f in d.glob("data-*.arrow"))
    assert corpus.position == corpus.total_bytes
    s = corpus.stats[0]
    assert (s.path, s.format, s.documents, s.lines) == (str(d), "arrow", 4, 4)
    assert len(source_sha256(d)) == 64
    with pytest.raises(CorpusError, match="does not apply"):
        list(Corpus([d], ReadOptions(format="jsonl")).documents())


def test_dataset_dict_directory_is_its_splits(tmp_path: Path) -> None:
    root = tmp_path / "dd"
    save_to_disk_dir(root / "train", [ROWS[:2]])
    save_to_disk_dir(root / "test", [ROWS[2:]])
    (root / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    assert expand_inputs([root]) == [root / "test", root / "train"]
    assert expand_inputs([str(root / "t*")]) == [root / "test", root / "train"]


def test_datasets_cache_directory_skips_its_metadata(tmp_path: Path) -> None:
    """A ``load_dataset`` cache folder: Arrow files beside dataset_info.json, no state.json."""
    cache = tmp_path / "cache" / "default" / "0.0.0" / "abc123"
    cache.mkdir(parents=True)
    write_stream(cache / "corpus-train.arrow", table())
    (cache / "dataset_info.json").write_text('{"features": {}}')
    assert expand_inputs([tmp_path / "cache"]) == [cache / "corpus-train.arrow"]


def test_save_to_disk_with_a_missing_data_file(tmp_path: Path) -> None:
    d = save_to_disk_dir(tmp_path / "ds", [ROWS[:2], ROWS[2:]])
    (d / "data-00001-of-00002.arrow").unlink()
    with pytest.raises(CorpusError, match=r"ds: state.json lists data-00001-of-00002.arrow"):
        Corpus([d], ReadOptions())


# ---------------------------------------------------------------------------
# zstd, sniffing and --format
# ---------------------------------------------------------------------------


def test_jsonl_zst(tmp_path: Path) -> None:
    lines = "".join(json.dumps({"text": r}, ensure_ascii=False) + "\n" for r in ROWS * 300)
    p = tmp_path / "c.jsonl.zst"
    # two frames, as pzstd and concatenated dumps write them
    cut = len(lines) // 2
    cctx = zstandard.ZstdCompressor()
    p.write_bytes(cctx.compress(lines[:cut].encode()) + cctx.compress(lines[cut:].encode()))
    stats = SourceStats(str(p))
    assert docs_of(p, stats) == expected(ROWS * 300)
    assert (stats.format, stats.lines) == ("jsonl", 1200)


def test_zstd_without_extension_is_sniffed(tmp_path: Path, ko_wiki: Path) -> None:
    data = ko_wiki.read_bytes()[:300_000]
    plain = tmp_path / "wiki_plain"
    plain.write_bytes(data)
    packed = tmp_path / "wiki_00"
    packed.write_bytes(zstandard.ZstdCompressor().compress(data))
    assert packed.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"
    stats = SourceStats(str(packed))
    assert docs_of(packed, stats) == docs_of(plain) and stats.format == "wiki"


def test_truncated_zstd_is_an_error(tmp_path: Path) -> None:
    text = "".join(f"line {i * 7919 % 100003}\n" for i in range(100_000)).encode()
    packed = zstandard.ZstdCompressor().compress(text)
    p = tmp_path / "cut.txt.zst"
    p.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(CorpusError, match=r"cut\.txt\.zst: corrupt or truncated zstd data"):
        docs_of(p)


def test_columnar_files_sniffed_by_magic(tmp_path: Path) -> None:
    pq.write_table(table(), tmp_path / "part0")
    write_stream(tmp_path / "part1", table())
    write_ipc_file(tmp_path / "part2", table())
    corpus = Corpus([tmp_path], ReadOptions())
    assert sum(1 for _ in corpus.documents()) == 12
    assert [s.format for s in corpus.stats] == ["parquet", "arrow", "arrow"]
    assert formats.sniff_columnar(b"PAR1\x15\x04") == "parquet"
    assert formats.sniff_columnar(b"ARROW1\x00\x00") == "arrow"
    assert formats.sniff_columnar(b"\xff\xff\xff\xff\x10\x01") == "arrow"
    assert formats.sniff_columnar(b"PARIS is a city") is None
    assert formats.sniff_compression(b"\x28\xb5\x2f\xfd\x24") == "zstd"
    assert formats.detect_format(Path("x.pq"), None, "corpus", b"") == "parquet"
    assert formats.detect_format(Path("x.arrow.gz"), None, "corpus", b"") == "arrow"


def test_format_override(tmp_path: Path) -> None:
    p = tmp_path / "dump.bin"  # a name that says nothing
    pq.write_table(table(), p)
    assert docs_of(p, format="parquet") == expected(ROWS)
    with pytest.raises(CorpusError, match=r"dump\.bin: not a readable Arrow IPC"):
        docs_of(p, format="arrow")
    with pytest.raises(CorpusError, match=r"dump\.bin: is parquet data, not text"):
        docs_of(p, format="text")
    s = write_stream(tmp_path / "rows.parquet", table())  # a misleading name, overridden
    assert docs_of(s, format="arrow") == expected(ROWS)
    assert {"parquet", "arrow"} <= set(formats.CORPUS_FORMATS)


def test_format_choices_on_the_command_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "electra.cli", "prepare", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "parquet" in out and "arrow" in out


def test_pyarrow_is_not_imported_by_the_cli_or_for_text(tmp_path: Path) -> None:
    p = tmp_path / "a.txt"
    p.write_text("본문\n")
    code = (
        "import sys\n"
        "from electra import cli\n"
        "from electra.text.corpus import read_documents\n"
        f"list(read_documents({str(p)!r}))\n"
        "assert 'pyarrow' not in sys.modules and 'zstandard' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# ---------------------------------------------------------------------------
# End to end
# ---------------------------------------------------------------------------


def test_prepare_a_parquet_corpus(tmp_path: Path, ko_wiki: Path, tiny_tokenizer: Path) -> None:
    docs = [d.lines for d in read_documents(ko_wiki)]
    rows = ["\n".join(lines) for lines in docs]
    p = tmp_path / "kowiki.parquet"
    pq.write_table(table(rows), p, row_group_size=40)
    out = prepare(
        PrepareCommand(
            inputs=[str(p)],
            tokenizer=str(tiny_tokenizer),
            output=str(tmp_path / "blocks"),
            max_length=64,
            validation_fraction=0.1,
            workers=2,  # forked tokenizer processes after pyarrow has read
            shard_size=1000,
            progress=False,
        )
    )
    m = json.loads((out / MANIFEST).read_text())
    (src,) = m["sources"]
    assert (src["format"], src["documents"], src["lines"]) == ("parquet", len(rows), len(rows))
    assert src["bytes"] == p.stat().st_size
    splits = m["splits"]
    assert splits["train"]["documents"] + splits["validation"]["documents"] == len(rows)
    assert splits["train"]["blocks"] > 0
