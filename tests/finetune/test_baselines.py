"""Floors beside every score: majority/mean and TF-IDF baselines on exactly the task's split."""

from __future__ import annotations

import json
import random
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


def _syllable_words(n: int, seed: int = 7) -> list[str]:
    """``n`` distinct two-syllable Hangul words (two rarely share a syllable)."""
    rng = random.Random(seed)
    out: set[str] = set()
    while len(out) < n:
        out.add("".join(chr(0xAC00 + rng.randrange(11172)) for _ in range(2)))
    return sorted(out)


SHARED_VOCAB = _syllable_words(12)


def word_pairs(n: int, seed: int, regression: bool = False) -> list[TextExample]:
    """Pairs of 2-5 words; the label is whether (or how many of) ``a``'s words ``b`` shares.

    Half share none. The texts' lengths vary, so a joined bag of words hardly says
    whether a word occurs on both sides; only comparing the sides does.
    """
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a = rng.sample(SHARED_VOCAB, rng.randint(2, 5))
        b = rng.sample([w for w in SHARED_VOCAB if w not in a], rng.randint(2, 5))
        shared = 0 if i % 2 else rng.randint(1, min(2, len(b))) if regression else 1
        for j, w in enumerate(rng.sample(a, shared)):
            b[j] = w
        rng.shuffle(b)
        label: str | float = float(shared) if regression else ("same" if shared else "different")
        out.append(TextExample(" ".join(a), text_pair=" ".join(b), label=label))
    return out


def test_pair_floor_sees_a_shared_word_that_the_joined_floor_cannot() -> None:
    from electra.finetune.baselines import is_pair_task, pair_features

    train, dev, test = word_pairs(600, 1), word_pairs(100, 2), word_pairs(200, 3)
    labels = ["different", "same"]
    f = compute_floors("classification", labels, "accuracy", train, dev, test, None)
    assert is_pair_task(train) and f["pair"] is True
    assert f["majority"]["test"]["accuracy"] == 0.5
    joined, pair = f["tfidf"]["test"]["accuracy"], f["tfidf_pair"]["test"]["accuracy"]
    assert pair >= 0.9 and joined <= 0.75, (pair, joined)  # measured: 0.97 and 0.675
    assert f["tfidf_pair"]["blocks"] == ["a", "b", "|a-b|", "a*b"]
    assert f["tfidf_pair"]["features"] == 4 * (f["tfidf_pair"]["features"] // 4)
    assert f["descriptions"] == {
        "majority": "always the training majority class",
        "tfidf": "TF-IDF of the joined pair (char 1-4 + word 1-2 n-grams) + logistic regression",
        "tfidf_pair": "TF-IDF pair features (a, b, |a-b|, a*b) + logistic regression",
    }
    again = compute_floors("classification", labels, "accuracy", train, dev, test, None)
    assert again["tfidf_pair"] == f["tfidf_pair"] and again["tfidf"] == f["tfidf"]  # seeded

    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(token_pattern=r"\w+").fit(["x y z", "x q"])
    rows = pair_features(vec, [TextExample("x y", text_pair="x z")]).toarray()[0]
    a, b, diff, prod = rows.reshape(4, -1)  # columns: q, x, y, z
    assert (prod > 0).tolist() == [False, True, False, False]  # only the shared word
    assert diff == pytest.approx(abs(a - b)) and prod == pytest.approx(a * b)


def test_pair_regression_gets_a_ridge_pair_floor_scored_by_correlation() -> None:
    train = word_pairs(600, 11, regression=True)
    dev, test = word_pairs(100, 12, regression=True), word_pairs(200, 13, regression=True)
    f = compute_floors("regression", [], "pearson", train, dev, test, None)
    assert f["constant"] == "mean" and f["mean"]["test"]["pearson"] == 0.0
    pair, joined = f["tfidf_pair"]["test"], f["tfidf"]["test"]
    assert {"pearson", "spearman", "mse"} <= set(pair)
    # measured: pair Pearson 0.986, MSE 0.019; joined 0.893, 0.155 (the joined text's
    # repeated words give the count of shared ones away in part)
    assert pair["pearson"] >= 0.95 and pair["pearson"] > joined["pearson"] + 0.05
    assert pair["mse"] < joined["mse"] / 3, (pair, joined)
    assert f["descriptions"]["tfidf_pair"].endswith("+ ridge regression")
    lines = floor_lines(f, ["pearson", "spearman"])
    assert "joined TF-IDF+ridge" in lines[1] and "pair TF-IDF+ridge" in lines[1]
    assert f"{100 * pair['pearson']:.2f}" in lines[-4]  # test pearson, before the legend


def test_single_text_tasks_get_no_pair_floor(tmp_path: Path) -> None:
    train, dev, test = reviews(40), reviews(10, 500), reviews(10, 900)
    f = compute_floors("classification", LABELS, "accuracy", train, dev, test, tmp_path)
    assert f["pair"] is False and "tfidf_pair" not in f
    assert set(f["descriptions"]) == {"majority", "tfidf"}
    assert "joined" not in f["descriptions"]["tfidf"]
    lines = floor_lines(f, ["accuracy"])
    assert lines[1].split() == ["split", "metric", "majority", "TF-IDF+LR"]  # as before
    assert not any("pair" in line or "joined" in line for line in lines)


def test_printout_names_each_pair_floor() -> None:
    train, dev, test = word_pairs(60, 1), word_pairs(20, 2), word_pairs(20, 3)
    f = compute_floors("classification", ["different", "same"], "accuracy", train, dev, test, None)
    lines = floor_lines(f, ["accuracy"])
    text = "\n".join(lines)
    assert lines[1].split()[2:] == ["majority", "joined", "TF-IDF+LR", "pair", "TF-IDF+LR"]
    assert "joined TF-IDF+LR: TF-IDF of the joined pair" in text
    assert "pair TF-IDF+LR:   TF-IDF pair features (a, b, |a-b|, a*b) + logistic regression" in text
    test_row = next(line for line in lines if line.split()[:2] == ["test", "accuracy"])
    cells = [float(c) for c in test_row.split()[2:]]
    assert cells == pytest.approx(
        [100 * f[k]["test"]["accuracy"] for k in ("majority", "tfidf", "tfidf_pair")], abs=0.006
    )


def test_cache_of_the_floors_before_pairs_is_not_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Format 1 (no pair floor) keyed its files differently: a pair task recomputes."""
    import electra.finetune.baselines as baselines

    train, dev, test = word_pairs(60, 1), word_pairs(20, 2), word_pairs(20, 3)
    labels = ["different", "same"]
    monkeypatch.setattr(baselines, "FORMAT", "electra-floors/1")
    old = compute_floors("classification", labels, "accuracy", train, dev, test, tmp_path)
    monkeypatch.undo()
    new = compute_floors("classification", labels, "accuracy", train, dev, test, tmp_path)
    assert new["cached"] is False and new["key"] != old["key"] and "tfidf_pair" in new
    assert len(list(tmp_path.glob("floors-*.json"))) == 2
    assert compute_floors("classification", labels, "accuracy", train, dev, test, tmp_path)[
        "cached"
    ]


def test_compare_table_names_the_joined_and_the_pair_floor() -> None:
    """``electra compare``'s table: a pair task's two TF-IDF floors, each named."""
    from electra.experiments.compare import _task_floors
    from electra.experiments.compare_report import markdown_table

    pair = compute_floors(
        "classification",
        ["different", "same"],
        "accuracy",
        word_pairs(60, 1),
        word_pairs(20, 2),
        word_pairs(20, 3),
        None,
    )
    single = compute_floors(
        "classification", LABELS, "accuracy", reviews(40), reviews(10, 500), reviews(10, 900), None
    )

    def results(floors: dict) -> dict:
        return {
            "floors": floors,
            "summary": {"test": {"accuracy": {}}},
            "task": {"main_metric": "accuracy"},
        }

    floors = {"kornli": _task_floors(results(pair)), "nsmc": _task_floors(results(single))}
    assert floors["kornli"]["tfidf_pair"] == pair["tfidf_pair"]["test"]["accuracy"]
    assert floors["nsmc"]["tfidf_pair"] is None
    score = {"metric": "accuracy", "median": 0.8, "std": 0.01}
    table = markdown_table(
        {
            "points": [
                {"arm": "rtd", "flops": 1e12, "steps": 5, "scores": dict.fromkeys(floors, score)}
            ],
            "floors": floors,
            "command": {"seeds": [1]},
        }
    )
    rows = {line.split(" | ")[0]: line for line in table.splitlines()}
    joined = rows["| TF-IDF floor (pairs: joined text)"]
    assert f"{100 * pair['tfidf']['test']['accuracy']:.1f}" in joined
    paired = rows["| TF-IDF pair-feature floor"]
    assert f"| {100 * pair['tfidf_pair']['test']['accuracy']:.1f} | – | – |" in paired
    assert "TF-IDF pair features (a, b, |a-b|, a*b)" in table
    alone = markdown_table(
        {
            "points": [{"arm": "rtd", "flops": 1e12, "steps": 5, "scores": {"nsmc": score}}],
            "floors": {"nsmc": floors["nsmc"]},
            "command": {"seeds": [1]},
        }
    )
    assert "| TF-IDF floor |" in alone and "pair" not in alone


def test_finetune_on_a_pair_task_prints_and_records_both_tfidf_floors(
    ko_model: Path,  # noqa: F811
    tmp_path: Path,
    one_thread: None,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "sts"
    args = "--task klue-sts --seeds 1 --epochs 1 --max-train-examples 80 --max-eval-examples 40"
    args += " --max-length 32 --batch-size 16 --no-progress --device cpu"
    assert main(["finetune", "--model", str(ko_model), "-o", str(out), *args.split()]) == 0
    floors = json.loads((out / "results.json").read_text(encoding="utf-8"))["floors"]
    assert floors["pair"] is True and floors["constant"] == "mean"
    assert floors["descriptions"]["tfidf_pair"] == (
        "TF-IDF pair features (a, b, |a-b|, a*b) + ridge regression"
    )
    assert floors["descriptions"]["tfidf"].startswith("TF-IDF of the joined pair")
    assert {"pearson", "spearman"} <= set(floors["tfidf_pair"]["test"])
    printed = capsys.readouterr().out
    assert "joined TF-IDF+ridge" in printed and "pair TF-IDF+ridge" in printed
    assert "TF-IDF pair features (a, b, |a-b|, a*b) + ridge regression" in printed
    assert f"{100 * floors['tfidf_pair']['test']['pearson']:.2f}" in printed
