"""Floors beside every score: majority/mean and TF-IDF baselines on exactly the task's split."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from builders import read_jsonl

from electra.cli import main
from electra.finetune.baselines import baseline_text, compute_floors, floor_lines, split_key
from electra.finetune.common import Answer, QAExample, TaggingExample, TextExample

LABELS = ["negative", "positive"]


def reviews(n: int, offset: int = 0, positive_share: float = 0.5) -> list[TextExample]:
    """Separable toy reviews: the label is in the words, a number makes each text unique."""
    out = []
    for i in range(offset, offset + n):
        pos = (i % 10) < round(positive_share * 10)
        word = "재미있어요 최고" if pos else "지루해요 최악"
        out.append(TextExample(f"{word} {i}", label="positive" if pos else "negative"))
    return out


def test_majority_rate_matches_the_test_labels_and_tfidf_learns(tmp_path: Path) -> None:
    train = reviews(60, positive_share=0.7)
    dev, test = reviews(20, 1000, 0.5), reviews(30, 2000, 0.4)
    f = compute_floors("classification", LABELS, "accuracy", train, dev, test, tmp_path)
    majority = Counter(e.label for e in train).most_common(1)[0][0]
    assert f["majority"]["predicts"] == majority == "positive"
    share = sum(e.label == majority for e in test) / len(test)
    assert f["majority"]["test"]["accuracy"] == pytest.approx(share)
    assert f["tfidf"]["test"]["accuracy"] == 1.0  # the words give the label away
    assert f["examples"] == {"train": 60, "dev": 20, "test": 30}
    lines = "\n".join(floor_lines(f, ["accuracy"]))
    assert "majority" in lines and "TF-IDF+LR" in lines and f"{100 * share:.2f}" in lines


def test_cache_is_keyed_by_the_exact_split(tmp_path: Path) -> None:
    train, dev, test = reviews(40), reviews(10, 500), reviews(10, 900)
    first = compute_floors("classification", LABELS, "accuracy", train, dev, test, tmp_path)
    assert first["cached"] is False and len(list(tmp_path.glob("floors-*.json"))) == 1
    again = compute_floors("classification", LABELS, "accuracy", train, dev, test, tmp_path)
    assert again["cached"] is True and again["key"] == first["key"]
    assert again["majority"] == first["majority"] and again["tfidf"] == first["tfidf"]
    key = split_key(
        "classification", LABELS, "accuracy", {"train": train, "dev": dev, "test": test}
    )
    assert key == first["key"]
    flipped = [*test[:-1], TextExample(test[-1].text, label="positive")]
    changed = [
        {"train": train, "dev": dev, "test": test[:-1]},  # one example fewer
        {"train": train, "dev": dev, "test": flipped},  # one label changed
        {"train": train[1:], "dev": dev, "test": test},
    ]
    keys = {split_key("classification", LABELS, "accuracy", c) for c in changed}
    assert len(keys) == 3 and first["key"] not in keys
    smaller = compute_floors("classification", LABELS, "accuracy", train, dev, test[3:8], tmp_path)
    assert smaller["cached"] is False and smaller["examples"]["test"] == 5


def test_regression_floors_mean_and_ridge() -> None:
    def scored(n: int, offset: int) -> list[TextExample]:
        return [
            TextExample(f"{'좋다 ' * (i % 5)}문장 {i}", text_pair="짝", label=float(i % 5))
            for i in range(offset, offset + n)
        ]

    train, dev, test = scored(50, 0), scored(15, 100), scored(20, 200)
    f = compute_floors("regression", [], "pearson", train, dev, test, None)
    mean = sum(e.label for e in train) / len(train)
    assert f["constant"] == "mean" and f["mean"]["predicts"] == pytest.approx(mean)
    assert f["mean"]["test"]["pearson"] == 0.0
    expected_mse = sum((e.label - mean) ** 2 for e in test) / len(test)
    assert f["mean"]["test"]["mse"] == pytest.approx(expected_mse)
    assert f["tfidf"]["test"]["pearson"] > 0.9 and f["tfidf"]["test"]["spearman"] > 0.9
    assert baseline_text(test[0]) == f"{test[0].text} 짝"  # a pair is concatenated


def born(i: int, name: str, city: str, year: int) -> QAExample:
    """A question whose answer is the two words after the question's last word."""
    context = (
        f"{name} Park was born in {city} in {year}. Later {name} Park moved away and "
        f"worked in many cities as a teacher for years."
    )
    start = context.index(f"in {city}")
    return QAExample(
        f"q{i}", f"Where was {name} Park born?", context, [Answer(f"in {city}", start)]
    )


def test_qa_window_floor_finds_spans_next_to_the_question_words(tmp_path: Path) -> None:
    from electra.finetune.baselines import _same_word

    assert _same_word("서울의", "서울에서") and _same_word("born", "borne")
    assert not _same_word("a", "an") and not _same_word("is", "it")
    cities = ["Busan", "Incheon", "Daegu", "Gwangju", "Ulsan", "Suwon"]
    dev = [born(i, f"Name{i}", c, 1980 + i) for i, c in enumerate(cities[:3])]
    test = [born(i, f"Name{i}", c, 1990 + i) for i, c in enumerate(cities[3:], 3)]
    f = compute_floors("qa", [], "f1", [], dev, test, tmp_path, qa_style="squad")
    assert f["constant"] == "window" and f["tfidf"] is None
    # "in CITY" follows "Kim Park was born"; any other span has fewer question words near it.
    assert (f["window"]["length"], f["window"]["test"]["exact_match"]) == (2, 1.0)
    assert f["examples"] == {"train": 0, "dev": 3, "test": 3}
    lines = floor_lines(f, ["exact_match", "f1"])
    assert "window" in lines[1] and "TF-IDF" not in lines[1] and "100.00" in lines[-1]
    again = compute_floors("qa", [], "f1", [], dev, test, tmp_path, qa_style="squad")
    assert again["cached"] and again["window"] == f["window"]
    korquad = compute_floors("qa", [], "f1", [], dev, test, tmp_path, qa_style="korquad")
    assert korquad["key"] != f["key"]  # the scoring style is part of the split's key


def test_qa_window_floor_weights_words_by_their_rarity() -> None:
    """A question word repeated all over the context counts less than a rare one."""
    from electra.finetune.baselines import _window_answer, _window_words

    context = "the the the cat zz yy the the the cat dog xx"
    example = QAExample("a", "the cat dog", context)
    words, weight, match = _window_words(example)
    # Within 3 words, "zz" has five question words around it (the x4, cat), "xx" three
    # (the, cat, dog); but "the" occurs 6 times and "dog" once, so "xx" wins.
    assert _window_answer(example, words, weight, match, 1, 3) == "xx"
    assert _window_answer(example, words, match.astype(float), match, 1, 3) == "zz"


def test_tagging_floor_memorises_each_units_most_frequent_tag(tmp_path: Path) -> None:
    from electra.finetune.baselines import _repair_bio

    def ex(words: str, tags: str) -> TaggingExample:
        return TaggingExample.from_words(words.split(), tags.split())

    train = [
        ex("Kim went to Seoul", "B-PS O O B-LC"),
        ex("Kim met Lee", "B-PS O B-PS"),
        ex("Seoul is big", "O O O"),  # Seoul: B-LC once, O once -> first seen wins ties
        ex("New York Seoul", "B-LC I-LC B-LC"),
    ]
    test = [ex("Lee saw York", "B-PS O B-LC"), ex("Park saw Kim", "B-PS O B-PS")]
    labels = ["O", "B-PS", "I-PS", "B-LC", "I-LC"]
    f = compute_floors("tagging", labels, "f1", train, train[:1], test, tmp_path)
    assert f["constant"] == "memorised" and f["tfidf"] is None
    # Lee -> B-PS (right), York -> I-LC repaired to B-LC (right), Kim -> B-PS (right),
    # Park unseen -> O (missed): 3 of 4 entities found, no false ones.
    test_scores = f["memorised"]["test"]
    assert test_scores["precision"] == 1.0
    assert test_scores["recall"] == pytest.approx(0.75)
    assert _repair_bio(["I-LC", "I-LC", "O", "B-PS", "I-LC"]) == [
        "B-LC",
        "I-LC",
        "O",
        "B-PS",
        "B-LC",
    ]
    lines = floor_lines(f, ["f1"])
    assert "memorised" in lines[1] and "TF-IDF" not in lines[1]  # no TF-IDF for tagging
    again = compute_floors("tagging", labels, "f1", train, train[:1], test, tmp_path)
    assert again["cached"] and again["memorised"] == f["memorised"]


def test_finetune_results_and_printout_carry_the_floors(
    ko_model: Path,  # noqa: F811
    tmp_path: Path,
    one_thread: None,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "nsmc"
    args = "--task nsmc --seeds 1 --epochs 1 --max-train-examples 80 --max-eval-examples 40"
    args += " --max-length 32 --batch-size 16 --no-progress --device cpu"
    assert main(["finetune", "--model", str(ko_model), "-o", str(out), *args.split()]) == 0
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    floors = res["floors"]
    splits = res["task"]["splits"]
    assert floors["examples"] == {k: splits[k]["examples"] for k in ("train", "dev", "test")}
    gold = [p["gold"] for p in read_jsonl(out / "test_predictions.jsonl")]
    share = gold.count(floors["majority"]["predicts"]) / len(gold)
    assert floors["majority"]["test"]["accuracy"] == pytest.approx(share)
    assert 0.0 <= floors["tfidf"]["test"]["accuracy"] <= 1.0
    printed = capsys.readouterr().out
    assert "floors on the same split" in printed and "TF-IDF+LR" in printed
    assert f"{100 * floors['tfidf']['test']['accuracy']:.2f}" in printed
    assert list((out / "floors").glob("floors-*.json"))  # cached under the output
