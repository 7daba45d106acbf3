"""Datasets: built-in loaders on the staged data, splits, custom files, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import DATA

from electra.finetune.common import DatasetError, TextExample
from electra.finetune.readers import nsmc_label, read_nsmc_ratings, read_nsmc_raw, read_squad
from electra.finetune.tasks import (
    DataOptions,
    balance_classes,
    get_task,
    load_task_data,
    seeded_split,
    subsample,
)


def test_nsmc_builder_rule_dedup_and_stratified_split() -> None:
    assert [nsmc_label(r) for r in (1, 4, 5, 8, 9, 10)] == [
        "negative",
        "negative",
        None,
        None,
        "positive",
        "positive",
    ]
    examples, stats = read_nsmc_raw(DATA / "nsmc" / "raw_subset")
    # MANIFEST: 88,777 reviews, 26,531 rated 5-8
    assert stats["reviews"] == 88777 and stats["neutral_5_8"] == 26531
    texts = [e.text for e in examples]
    assert len(texts) == len(set(texts))  # de-duplicated
    d = load_task_data("nsmc", DataOptions(balance=False))  # every review kept
    s = d.splits
    n = len(s.train) + len(s.dev) + len(s.test)
    assert n == len(examples)
    assert abs(len(s.train) / n - 0.6) < 0.001 and abs(len(s.test) / n - 0.2) < 0.001
    ratio = [
        sum(e.label == "positive" for e in part) / len(part) for part in (s.train, s.dev, s.test)
    ]
    assert max(ratio) - min(ratio) < 0.001  # stratified
    assert not {e.text for e in s.train} & {e.text for e in s.test}
    # seeded: the same seed gives the same split, another seed another one
    again = load_task_data("nsmc", DataOptions(balance=False))
    assert [e.guid for e in again.splits.test] == [e.guid for e in s.test]
    other = load_task_data("nsmc", DataOptions(split_seed=7, balance=False))
    assert [e.guid for e in other.splits.test] != [e.guid for e in s.test]
    assert "5-8 dropped" in s.notes["source"] and "unbalanced" in s.notes["source"]
    # the sizes before balancing: 60/20/20 of all 60,865 de-duplicated labelled reviews
    assert (len(s.train), len(s.dev), len(s.test)) == (36519, 12173, 12173)


def test_nsmc_is_balanced_by_default() -> None:
    examples, _ = read_nsmc_raw(DATA / "nsmc" / "raw_subset")
    minority = min(sum(e.label == lab for e in examples) for lab in ("negative", "positive"))
    s = load_task_data("nsmc").splits
    parts = (s.train, s.dev, s.test)
    assert sum(len(p) for p in parts) == 2 * minority  # the majority class cut to the minority
    for part in parts:
        pos = sum(e.label == "positive" for e in part)
        assert abs(pos - (len(part) - pos)) <= 1  # 50/50 within one review
    texts = [{e.text for e in p} for p in parts]
    assert not (texts[0] & texts[1] or texts[0] & texts[2] or texts[1] & texts[2])
    assert "balanced 50/50" in s.notes["source"]
    again = load_task_data("nsmc").splits
    assert [[e.guid for e in p] for p in (again.train, again.dev, again.test)] == [
        [e.guid for e in p] for p in parts
    ]
    other = load_task_data("nsmc", DataOptions(split_seed=7)).splits
    assert {e.guid for e in other.train} != {e.guid for e in s.train}


def test_balance_classes_keeps_the_minority_and_order() -> None:
    items = [TextExample(f"t{i}", label="a" if i % 4 else "b") for i in range(40)]
    out = balance_classes(items, seed=3)
    assert sum(e.label == "a" for e in out) == sum(e.label == "b" for e in out) == 10
    assert {e.text for e in items if e.label == "b"} <= {e.text for e in out}
    assert [int(e.text[1:]) for e in out] == sorted(int(e.text[1:]) for e in out)
    assert balance_classes(items, seed=3) == out and balance_classes(items, seed=4) != out


def test_nsmc_official_ratings_format(tmp_path: Path) -> None:
    d = tmp_path / "nsmc"
    d.mkdir()
    rows = ["id\tdocument\tlabel"] + [
        f"{i}\t{'좋아요 최고' if i % 2 else '별로 재미없음'} {i}\t{i % 2}" for i in range(40)
    ]
    rows.append("99\t\t0")  # the official files have a few empty documents: skipped
    (d / "ratings_train.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (d / "ratings_test.txt").write_text("\n".join(rows[:11]) + "\n", encoding="utf-8")
    assert len(read_nsmc_ratings(d / "ratings_train.txt")) == 40
    data = load_task_data("nsmc", DataOptions(data_dir=str(tmp_path)))
    s = data.splits
    assert (len(s.train), len(s.dev), len(s.test)) == (36, 4, 10)
    assert {e.label for e in s.test} == {"negative", "positive"}
    assert "ratings_test.txt" in s.notes["test"]


def test_glue_policy_official_dev_is_test() -> None:
    d = load_task_data("sst-2")
    assert len(d.splits.test) == 872 and len(d.splits.train) + len(d.splits.dev) == 67349
    assert "reported as test" in d.splits.notes["test"]
    cola = load_task_data("cola")  # no header; columns by position
    assert cola.labels == ["unacceptable", "acceptable"] and len(cola.splits.test) == 1043
    mrpc = load_task_data("mrpc")  # canonical GLUE train rebuilt from the raw MSRP file
    assert len(mrpc.splits.train) + len(mrpc.splits.dev) == 3668
    assert mrpc.splits.train[0].text_pair is not None
    stsb = load_task_data("stsb")
    assert isinstance(stsb.splits.test[0].label, float) and stsb.labels == []
    qnli = load_task_data("qnli")  # only dev staged: 80/10/10
    assert (len(qnli.splits.train), len(qnli.splits.dev), len(qnli.splits.test)) == (4371, 546, 546)


def test_dev_only_sets_are_split_and_documented() -> None:
    klue = load_task_data("klue-sts")
    assert (len(klue.splits.train), len(klue.splits.dev), len(klue.splits.test)) == (415, 52, 52)
    assert "seeded 80%" in klue.splits.notes["train"]
    kq = load_task_data("korquad")
    titles = [{e.title for e in part} for part in (kq.splits.train, kq.splits.dev, kq.splits.test)]
    assert not (titles[0] & titles[1] or titles[0] & titles[2] or titles[1] & titles[2])
    n = sum(len(p) for p in (kq.splits.train, kq.splits.dev, kq.splits.test))
    assert n == 5774
    kornli = load_task_data("kornli")  # no KorNLI train staged: XNLI dev split 80/20
    assert len(kornli.splits.test) == 5010 and "no training file" in kornli.splits.notes["train"]


def test_seeded_split_exact_stratification() -> None:
    items = [("a", i) for i in range(50)] + [("b", i) for i in range(10)]
    train, dev, test = seeded_split(items, [0.8, 0.1, 0.1], seed=3, key=lambda x: x[0])
    assert [sum(x[0] == "b" for x in p) for p in (train, dev, test)] == [8, 1, 1]
    assert [sum(x[0] == "a" for x in p) for p in (train, dev, test)] == [40, 5, 5]
    assert sorted(train + dev + test) == sorted(items)
    assert subsample(list(range(100)), 10, 1) == sorted(subsample(list(range(100)), 10, 1))
    assert subsample(list(range(5)), 0, 1) == list(range(5))


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_custom_csv_tsv_jsonl(tmp_path: Path) -> None:
    rows = [("great movie", "pos"), ("awful, really", "neg"), ('he said "meh"', "mid")] * 20
    csv_lines = ["review,stars"] + [f'"{t.replace(chr(34), chr(34) * 2)}",{lab}' for t, lab in rows]
    csv_path = _write(tmp_path / "train.csv", "\n".join(csv_lines) + "\n")
    opts = DataOptions(train_file=str(csv_path), text_column="review", label_column="stars")
    d = load_task_data("custom", opts)
    assert d.labels == ["mid", "neg", "pos"]  # inferred from train, sorted
    assert d.spec.family.name == "classification"
    n = len(d.splits.train) + len(d.splits.dev) + len(d.splits.test)
    assert n == 60 and len(d.splits.test) == 6 and len(d.splits.dev) == 6
    assert {e.text for e in d.splits.train} == {t for t, _ in rows}
    tsv = _write(
        tmp_path / "pairs.tsv",
        "a\tb\tscore\n" + "".join(f"x {i}\ty {i}\t{i % 5}.5\n" for i in range(30)),
    )
    d = load_task_data(
        "custom",
        DataOptions(
            train_file=str(tsv),
            task_type="regression",
            text_column="a",
            text_pair_column="b",
            label_column="score",
        ),
    )
    assert d.spec.main_metric == "spearman" and isinstance(d.splits.train[0].label, float)
    jl = _write(
        tmp_path / "t.jsonl",
        "".join(json.dumps({"text": f"t{i}", "label": i % 2}) + "\n" for i in range(30)),
    )
    d = load_task_data("custom", DataOptions(train_file=str(jl)))
    assert d.labels == ["0", "1"]


# ---------------------------------------------------------------------------
# Bad input: clear errors naming the file, the line and the field
# ---------------------------------------------------------------------------


def test_unknown_task_suggests() -> None:
    with pytest.raises(ValueError, match=r"unknown task 'nsmcc' \(did you mean 'nsmc'\?\)"):
        get_task("nsmcc")


def test_missing_column_names_file_line_and_field(tmp_path: Path) -> None:
    p = _write(tmp_path / "train.csv", "text,label\nhello,a\nbye,b\n")
    with pytest.raises(DatasetError, match=r"train\.csv, line 1, field 'review': no such column"):
        load_task_data("custom", DataOptions(train_file=str(p), text_column="review"))
    jl = _write(tmp_path / "t.jsonl", '{"text": "a", "label": "x"}\n{"text": "b"}\n')
    with pytest.raises(DatasetError, match=r"t\.jsonl, line 2, field 'label': missing value"):
        load_task_data("custom", DataOptions(train_file=str(jl)))


def test_dev_label_absent_from_train(tmp_path: Path) -> None:
    train = _write(tmp_path / "train.tsv", "text\tlabel\n" + "a\tx\nb\ty\n" * 10)
    dev = _write(tmp_path / "dev.tsv", "text\tlabel\nc\tx\nd\tz\n")
    with pytest.raises(
        DatasetError,
        match=r"dev\.tsv, line 3, field 'label': dev label 'z' does not occur in train",
    ):
        load_task_data("custom", DataOptions(train_file=str(train), dev_file=str(dev)))


def test_empty_and_header_only_files(tmp_path: Path) -> None:
    empty = _write(tmp_path / "empty.csv", "")
    with pytest.raises(DatasetError, match=r"empty\.csv: the file is empty"):
        load_task_data("custom", DataOptions(train_file=str(empty)))
    header = _write(tmp_path / "header.tsv", "text\tlabel\n")
    with pytest.raises(DatasetError, match=r"header\.tsv: no examples after the header"):
        load_task_data("custom", DataOptions(train_file=str(header)))


def test_bad_rows_name_the_line(tmp_path: Path) -> None:
    p = _write(tmp_path / "s.tsv", "a\tb\tscore\nx\ty\t1.0\nx\ty\tsix\n")
    with pytest.raises(DatasetError, match=r"s\.tsv, line 3, field 'score': 'six' is not a number"):
        load_task_data(
            "custom",
            DataOptions(
                train_file=str(p),
                task_type="regression",
                text_column="a",
                text_pair_column="b",
                label_column="score",
            ),
        )
    p = _write(tmp_path / "f.tsv", "text\tlabel\nx\ta\ny\tb\textra\n")
    with pytest.raises(DatasetError, match=r"f\.tsv, line 3: 3 tab-separated fields, expected 2"):
        load_task_data("custom", DataOptions(train_file=str(p)))
    p = _write(tmp_path / "e.tsv", "text\tlabel\nx\ta\n \tb\n")
    with pytest.raises(DatasetError, match=r"e\.tsv, line 3, field 'text': empty text"):
        load_task_data("custom", DataOptions(train_file=str(p)))


def test_qa_answer_not_in_context(tmp_path: Path) -> None:
    doc = {
        "version": "1.1",
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": "The cat sat on the mat.",
                        "qas": [
                            {
                                "id": "q1",
                                "question": "Who sat?",
                                "answers": [{"text": "The cat", "answer_start": 0}],
                            },
                            {
                                "id": "q2",
                                "question": "Where?",
                                "answers": [{"text": "the sofa", "answer_start": 15}],
                            },
                        ],
                    }
                ],
            }
        ],
    }
    p = tmp_path / "qa.json"
    p.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    line = next(i for i, ln in enumerate(p.read_text().split("\n"), 1) if '"q2"' in ln)
    with pytest.raises(
        DatasetError,
        match=rf"qa\.json, line {line}, field 'answers\[0\]': data\[0\]\.paragraphs\[0\]\.qas\[1\] "
        r"\(id q2\): answer 'the sofa' does not occur in its context",
    ):
        read_squad(p)
    # a right text at a wrong offset is moved to the nearest occurrence
    doc["data"][0]["paragraphs"][0]["qas"][1]["answers"][0] = {"text": "the mat", "answer_start": 3}
    p.write_text(json.dumps(doc), encoding="utf-8")
    ex = read_squad(p)[1]
    assert ex.answers[0].start == 15 and ex.context[15:22] == "the mat"


def test_missing_data_dir_is_clear(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="none of its data files exist"):
        load_task_data("rte", DataOptions(data_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="needs --train-file"):
        load_task_data("custom")


def test_balance_option_reaches_the_data_and_old_models_keep_their_split() -> None:
    from types import SimpleNamespace

    from electra.finetune.commands import _data_options_for
    from electra.finetune.run import FinetuneArgs

    assert FinetuneArgs(model="m").data_options().balance is True
    assert FinetuneArgs(model="m", balance=False).data_options().balance is False
    old = SimpleNamespace(info=SimpleNamespace(data={"split_seed": 42}, task="nsmc"))
    assert _data_options_for(old, SimpleNamespace()).balance is False  # saved before balancing
    new = SimpleNamespace(info=SimpleNamespace(data={"balance": True}, task="nsmc"))
    assert _data_options_for(new, SimpleNamespace()).balance is True


def test_sentence_pairs_that_share_a_premise_never_straddle_splits() -> None:
    from electra.finetune.common import TextExample
    from electra.finetune.tasks import pair_strata, seeded_split

    labels = ("entailment", "neutral", "contradiction")
    pool = [TextExample(f"premise {i}", f"h{i}{k}", k) for i in range(100) for k in labels]
    strata, note = pair_strata(pool, {"key": lambda e: e.label})
    assert note == "; grouped by first text, 200 repeats"
    train, dev, test = seeded_split(pool, [0.8, 0.1, 0.1], 42, **strata)
    assert {e.text for e in train}.isdisjoint({e.text for e in dev} | {e.text for e in test})
    unique = [TextExample(f"p{i}", "h", labels[i % 3]) for i in range(30)]
    assert pair_strata(unique, {"key": lambda e: e.label})[1] == ""  # stratified as before


def test_klue_nli_test_premises_are_not_in_train() -> None:
    from electra.finetune.tasks import load_task_data

    splits = load_task_data("klue-nli").splits
    train = {e.text for e in splits.train}
    assert not any(e.text in train for e in splits.test)
    assert not any(e.text in train for e in splits.dev)
