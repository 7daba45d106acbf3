"""Input formats decided in one place (electra.text.formats): corpora, custom tables, predict input."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from electra.blocks.options import PrepareCommand
from electra.cli import add_dataclass_arguments
from electra.config import ConfigError
from electra.finetune.common import DatasetError, TextExample
from electra.finetune.features import TaskInfo
from electra.finetune.readers import read_squad, read_table
from electra.finetune.tasks import DataOptions, load_task_data
from electra.inference.options import PredictArgs
from electra.inference.predict import read_predict_input as predict_input
from electra.text import corpus, formats
from electra.text.corpus import CorpusOptions, ReadOptions
from electra.text.formats import FormatError, detect_format
from electra.text.options import TokenizerCommand

# A Korean question-pair set as a new user finds it: tab-separated, named .txt.
PAIRS_HEADER = "question1\tquestion2\tis_duplicate"
PAIRS = [
    ("비 오는 날, 뭐 먹지?", "비 오는 날 먹을 음식은?", "1"),
    ("서울에서 부산까지 얼마나 걸려?", "부산 날씨 어때?", "0"),
    ("파이썬을 배우려면?", "파이썬, 어떻게 공부해?", "1"),
    ("오늘 몇 시에 만나?", "내일 뭐 해?", "0"),
    ("영화 추천해 줘", "볼 만한 영화, 있어?", "1"),
    ("고양이가 좋아, 강아지가 좋아?", "커피는 어디서 사?", "0"),
    ("책 추천 좀", "읽을 만한 책은?", "1"),
    ("버스 몇 번 타?", "점심, 뭐 먹었어?", "0"),
    ("운동은 언제 해?", "운동하기 좋은 시간은?", "1"),
    ("집에 언제 와?", "숙제, 다 했어?", "0"),
]


def write_pairs(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    path.write_text(
        "\n".join([PAIRS_HEADER, *("\t".join(r) for r in rows)]) + "\n", encoding="utf-8"
    )
    return path


def pair_options(**kw: str) -> DataOptions:
    return DataOptions(
        task_type="classification",
        text_column="question1",
        text_pair_column="question2",
        label_column="is_duplicate",
        **kw,
    )


def as_tuples(examples: list[TextExample]) -> set[tuple[str, str | None, str | float | None]]:
    return {(e.text, e.text_pair, e.label) for e in examples}


# An ambiguous table: every line splits into two fields by a tab *and* by a comma.
AMBIGUOUS = "a,b\tc\n1,2\t3\n4,5\t6\n"


def read_predict_input(path: Path, family: str, **options: str) -> Any:
    """What ``electra predict --input path`` reads for a model of ``family``."""
    info = TaskInfo(task="custom", family=family, labels=["neg", "pos"])
    return predict_input(info, PredictArgs(model="m", input=str(path), **options))


# ---------------------------------------------------------------------------
# Custom tables (finetune --task custom)
# ---------------------------------------------------------------------------


def test_tab_separated_txt_train_and_dev_load(tmp_path: Path) -> None:
    train = write_pairs(tmp_path / "train.txt", PAIRS[:8])
    dev = write_pairs(tmp_path / "dev.txt", PAIRS[8:])
    data = load_task_data("custom", pair_options(train_file=str(train), dev_file=str(dev)))
    assert as_tuples(data.splits.dev) == set(PAIRS[8:])
    # no --test-file: a test split is carved from train; together they are the file
    assert as_tuples(data.splits.train + data.splits.test) == set(PAIRS[:8])
    assert data.labels == ["0", "1"]
    assert data.splits.dev[0].source == f"{dev}, line 2"


def test_symlink_named_tsv_is_read_as_tsv(tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text(AMBIGUOUS, encoding="utf-8")
    link = tmp_path / "train.tsv"
    link.symlink_to(tmp_path / "data.txt")
    assert detect_format(link) == "tsv"  # the name as given, not the target's
    names, rows = read_table(link)
    assert names == ["a,b", "c"]
    assert [r for _, r in rows] == [{"a,b": "1,2", "c": "3"}, {"a,b": "4,5", "c": "6"}]


def test_symlinked_pairs_fine_tune_load(tmp_path: Path) -> None:
    write_pairs(tmp_path / "pairs.txt", PAIRS[:8])
    write_pairs(tmp_path / "held_out.txt", PAIRS[8:])
    (tmp_path / "train.tsv").symlink_to(tmp_path / "pairs.txt")
    (tmp_path / "dev.tsv").symlink_to(tmp_path / "held_out.txt")
    opts = pair_options(train_file=str(tmp_path / "train.tsv"), dev_file=str(tmp_path / "dev.tsv"))
    data = load_task_data("custom", opts)
    assert as_tuples(data.splits.train + data.splits.test) == set(PAIRS[:8])
    assert as_tuples(data.splits.dev) == set(PAIRS[8:])


def test_format_overrides_the_suffix(tmp_path: Path) -> None:
    p = write_pairs(tmp_path / "train.csv", PAIRS[:8])  # tab-separated despite its name
    dev = write_pairs(tmp_path / "dev.csv", PAIRS[8:])
    assert read_table(p, "tsv")[0] == ["question1", "question2", "is_duplicate"]
    with pytest.raises(DatasetError, match=r"train\.csv, line 2: 2 comma-separated"):
        load_task_data("custom", pair_options(train_file=str(p), dev_file=str(dev)))
    opts = pair_options(train_file=str(p), dev_file=str(dev), format="tsv")
    assert as_tuples(load_task_data("custom", opts).splits.dev) == set(PAIRS[8:])
    ambiguous = tmp_path / "data.txt"
    ambiguous.write_text(AMBIGUOUS, encoding="utf-8")
    assert read_table(ambiguous, "csv")[0] == ["a", "b\tc"]
    assert read_table(ambiguous, "tsv")[0] == ["a,b", "c"]


def test_undecidable_txt_table_names_the_file(tmp_path: Path) -> None:
    ambiguous = tmp_path / "ambiguous.txt"
    ambiguous.write_text(AMBIGUOUS, encoding="utf-8")
    # Both delimiters fit: TSV, what a .txt table meant before sniffing existed.
    assert read_table(ambiguous)[0] == ["a,b", "c"]
    ragged = tmp_path / "ragged.txt"
    ragged.write_text("just a sentence\nanother, with a comma\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"ragged\.txt: cannot tell .*neither"):
        load_task_data("custom", DataOptions(train_file=str(ragged)))


def test_comma_separated_txt_is_sniffed(tmp_path: Path) -> None:
    p = tmp_path / "reviews.txt"
    p.write_text('text,label\n"good, really",pos\nbad,neg\n', encoding="utf-8")
    assert detect_format(p) == "csv"
    assert [r["text"] for _, r in read_table(p)[1]] == ["good, really", "bad"]


def test_unknown_suffix_and_bad_override_name_the_file(tmp_path: Path) -> None:
    p = tmp_path / "data.dat"
    p.write_text("text\tlabel\nx\ty\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"data\.dat: unknown data format '\.dat'.*--format"):
        read_table(p)
    with pytest.raises(DatasetError, match=r"data\.dat: format 'wiki' cannot be used here"):
        read_table(p, "wiki")
    assert read_table(p, "tsv")[0] == ["text", "label"]


def test_missing_column_of_a_sniffed_table_is_a_header_error(tmp_path: Path) -> None:
    p = write_pairs(tmp_path / "train.txt", PAIRS)
    with pytest.raises(DatasetError, match=r"train\.txt, line 1, field 'text': no such column"):
        load_task_data("custom", DataOptions(train_file=str(p)))


# ---------------------------------------------------------------------------
# Predict input
# ---------------------------------------------------------------------------


def test_predict_txt_is_one_text_per_line_unless_told(tmp_path: Path) -> None:
    p = write_pairs(tmp_path / "pairs.txt", PAIRS[:3])
    lines = read_predict_input(p, "classification")
    assert lines.lines == [1, 2, 3, 4]  # the header line is a text too
    assert lines.examples[1].text_pair == "\t".join(PAIRS[0][1:])  # 'a<TAB>b' split once
    table = read_predict_input(
        p,
        "classification",
        format="tsv",
        text_column="question1",
        text_pair_column="question2",
        label_column="is_duplicate",
    )
    assert table.lines is None
    assert as_tuples(table.examples) == set(PAIRS[:3])


def test_predict_lines_keep_empty_lines_as_skipped(tmp_path: Path) -> None:
    p = tmp_path / "in.txt"
    p.write_text("좋아요\n\n별로\tA\n", encoding="utf-8")
    data = read_predict_input(p, "classification")
    assert [e.text for e in data.examples] == ["좋아요", "별로"]
    assert data.examples[1].text_pair == "A"
    assert data.lines == [1, 3]
    assert data.skipped == [(2, "empty line")]


def test_predict_tables_use_the_custom_table_reader(tmp_path: Path) -> None:
    p = tmp_path / "in.csv"
    p.write_text("review,label\n좋아요,pos\n", encoding="utf-8")
    data = read_predict_input(p, "classification", text_column="review")
    assert [(e.text, e.label) for e in data.examples] == [("좋아요", None)]
    with pytest.raises(DatasetError, match=r"in\.csv, line 1, field 'text': no such column"):
        read_predict_input(p, "classification")
    with pytest.raises(DatasetError, match=r"in\.csv: CoNLL input is for tagging"):
        read_predict_input(p, "classification", format="conll")


def test_predict_has_a_format_option() -> None:
    parser = argparse.ArgumentParser()
    add_dataclass_arguments(parser, PredictArgs)
    ns = parser.parse_args(["--model", "m", "--input", "x.txt", "--format", "tsv"])
    assert PredictArgs(**vars(ns)).format == "tsv"
    assert "lines (.txt, no suffix)" in parser.format_help().replace("\n", " ").replace("  ", " ")


def test_squad_jsonl_by_override(tmp_path: Path) -> None:
    p = tmp_path / "qa.txt"
    p.write_text(
        '{"id": "1", "question": "어디?", "context": "서울에 있다", "answers": []}\n',
        encoding="utf-8",
    )
    assert [q.question for q in read_squad(p, require_answers=False, format="jsonl")] == ["어디?"]
    with pytest.raises(DatasetError, match="not SQuAD format|not valid JSON"):
        read_squad(p, require_answers=False)  # by its name: SQuAD JSON, as always


# ---------------------------------------------------------------------------
# Corpora: one list of formats, one validation, one set of options
# ---------------------------------------------------------------------------


def test_corpus_formats_are_one_list() -> None:
    assert formats.CORPUS_FORMATS == ("auto", *formats.formats_for("corpus"))
    assert corpus.FORMATS is formats.CORPUS_FORMATS
    hints = {f.name: f.type for f in dataclasses.fields(CorpusOptions)}
    assert hints["format"] == "CorpusFormat"
    assert hints["on_error"] == "OnError"


@pytest.mark.parametrize(
    ("name", "head", "expected"),
    [
        ("a.jsonl.gz", b'{"text": 1}', "jsonl"),
        ("a.json", b'[{"review": "x"}]', "nsmc"),
        ("a.json", b'{"text": "x"}\n', "jsonl"),
        ("wiki_00", b'\n<doc id="1" url="u" title="t">\n', "wiki"),
        ("x.txt", "\ufeff본문".encode(), "text"),
    ],
)
def test_corpus_formats_detected_in_one_place(name: str, head: bytes, expected: str) -> None:
    assert detect_format(Path(name), None, "corpus", head) == expected
    assert corpus.detect_format(Path(name), head) == expected
    assert detect_format(Path(name), "text", "corpus", head) == "text"  # --format wins


def test_corpus_read_by_symlink_name(tmp_path: Path) -> None:
    target = tmp_path / "dump.txt"
    target.write_text('{"text": "첫 문서"}\n{"text": "둘째"}\n', encoding="utf-8")
    link = tmp_path / "docs.jsonl"
    link.symlink_to(target)
    assert [d.lines for d in corpus.read_documents(link)] == [["첫 문서"], ["둘째"]]


def test_prepare_and_tokenizer_share_the_corpus_options() -> None:
    shared = {f.name: f for f in dataclasses.fields(CorpusOptions)}
    for cls in (PrepareCommand, TokenizerCommand):
        own = {f.name: f for f in dataclasses.fields(cls)}
        for name, f in shared.items():
            assert own[name].metadata == f.metadata, (cls.__name__, name)
    assert "file_is_document" not in {f.name for f in dataclasses.fields(TokenizerCommand)}
    cmd = PrepareCommand(["a"], "tok", "out", file_is_document=True, max_line_mb=1.0)
    assert cmd.read_options() == ReadOptions(file_is_document=True, max_line_bytes=1 << 20)


@pytest.mark.parametrize("cls", [PrepareCommand, TokenizerCommand])
def test_corpus_options_validated_once(cls: type) -> None:
    base = {"inputs": ["a"], "output": "o"} | ({"tokenizer": "t"} if cls is PrepareCommand else {})
    with pytest.raises(ConfigError, match="unknown format 'xml'"):
        cls(**base, format="xml")
    with pytest.raises(ConfigError, match="on_error must be 'skip' or 'fail'"):
        cls(**base, on_error="ignore")
    with pytest.raises(ConfigError, match="max_line_mb must be positive"):
        cls(**base, max_line_mb=0)


def test_corpus_cli_flags_unchanged() -> None:
    def flags(cls: type) -> set[str]:
        parser = argparse.ArgumentParser()
        add_dataclass_arguments(parser, cls)
        return {s for a in parser._actions for s in a.option_strings}

    corpus_flags = {
        "--format",
        "--text-field",
        "--strip-gutenberg",
        "--no-strip-gutenberg",
        "--on-error",
        "--max-line-mb",
    }
    assert corpus_flags <= flags(PrepareCommand)
    assert corpus_flags <= flags(TokenizerCommand)
    assert "--file-is-document" in flags(PrepareCommand)
    assert "--file-is-document" not in flags(TokenizerCommand)


def test_setup_cli_logging_moved_but_still_importable() -> None:
    from electra.system.log import setup_cli_logging

    assert corpus.setup_cli_logging is setup_cli_logging


def test_format_error_is_a_value_error() -> None:
    assert issubclass(FormatError, ValueError)  # the CLI reports it as a usage error


def test_format_reaches_custom_tagging_files(tmp_path: Path) -> None:
    rows = tmp_path / "ner.txt"  # JSON Lines, named .txt
    rows.write_text('{"tokens": ["서울", "가자"], "tags": ["B-LOC", "O"]}\n' * 4, encoding="utf-8")
    opts = DataOptions(
        train_file=str(rows), dev_file=str(rows), task_type="tagging", format="jsonl"
    )
    data = load_task_data("custom", opts)
    examples = data.splits.train + data.splits.test
    assert len(examples) == 4 and examples[0].tags == ["B-LOC", "O"]
    with pytest.raises(DatasetError, match=r"ner\.txt: --format csv is not a tagging format"):
        load_task_data("custom", dataclasses.replace(opts, format="csv"))
