"""Metrics against hand-computed values: classification, STS, seqeval spans, SQuAD, GLUE."""

from __future__ import annotations

import json
import math

import pytest

from electra.finetune.classification import classification_metrics, regression_metrics
from electra.finetune.qa import (
    exact_match,
    f1_score,
    normalize_korquad,
    normalize_squad,
    squad_scores,
)
from electra.finetune.run import glue_score_from_results, summarize
from electra.finetune.tagging import seqeval_metrics
from electra.finetune.tasks import glue_average


def test_binary_classification_by_hand() -> None:
    # TP=3 (idx 0,3,5) FP=1 (idx 4) FN=1 (idx 2) TN=1 (idx 1)
    m = classification_metrics([1, 0, 1, 1, 0, 1], [1, 0, 0, 1, 1, 1], 2)
    assert m["accuracy"] == pytest.approx(4 / 6)
    assert m["f1"] == pytest.approx(0.75)  # P = R = 3/4
    # MCC = (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (3-1)/sqrt(4*4*2*2)
    assert m["mcc"] == pytest.approx(0.25)
    assert m["acc_and_f1"] == pytest.approx((4 / 6 + 0.75) / 2)


def test_multiclass_macro_f1_by_hand() -> None:
    m = classification_metrics([0, 1, 2, 2], [0, 2, 2, 2], 3)
    # class 0: F1 1; class 1: F1 0; class 2: P 2/3 R 1 -> 0.8
    assert m["macro_f1"] == pytest.approx((1 + 0 + 0.8) / 3)
    assert m["accuracy"] == pytest.approx(0.75)
    assert "f1" not in m


def test_correlations_by_hand() -> None:
    # deviations (-1.5,-.5,.5,1.5) and (-1.5,.5,-.5,1.5): cov 4, variances 5 -> r = 0.8
    m = regression_metrics([1, 2, 3, 4], [1, 3, 2, 4])
    assert m["pearson"] == pytest.approx(0.8)
    assert m["spearman"] == pytest.approx(0.8)  # same ranks
    assert m["corr"] == pytest.approx(0.8)
    assert m["mse"] == pytest.approx(0.5)
    m = regression_metrics([1, 2, 3, 4], [1, 4, 9, 16])
    assert m["spearman"] == pytest.approx(1.0) and m["pearson"] < 1.0
    # a constant prediction has no correlation: 0, not NaN
    m = regression_metrics([1, 2, 3], [2, 2, 2])
    assert m["pearson"] == 0.0 and m["spearman"] == 0.0


def test_seqeval_entity_spans_by_hand() -> None:
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O"]]
    # gold entities: PER(0-1), LOC(3), ORG; predicted: PER(0-1), ORG(3), ORG -> 2 of 3 right
    m = seqeval_metrics(gold, pred)
    assert m["precision"] == pytest.approx(2 / 3)
    assert m["recall"] == pytest.approx(2 / 3)
    assert m["f1"] == pytest.approx(2 / 3)
    assert m["accuracy"] == pytest.approx(5 / 6)
    # a span with the wrong boundary is wrong: PER(0-1) vs PER(0)
    m = seqeval_metrics([["B-PER", "I-PER"]], [["B-PER", "O"]])
    assert m["f1"] == 0.0
    # CoNLL convention: an I- tag after O opens an entity
    m = seqeval_metrics([["O", "B-LOC", "I-LOC"]], [["O", "I-LOC", "I-LOC"]])
    assert m["f1"] == 1.0


def test_squad_normalisation_and_scores() -> None:
    assert normalize_squad("The  Quick, brown fox!") == "quick brown fox"
    assert normalize_squad("an apple a day") == "apple day"
    assert normalize_squad("Theater") == "theater"  # only whole-word articles go
    assert exact_match("the Eiffel Tower", "Eiffel Tower.") == 1.0
    assert exact_match("Eiffel", "Eiffel Tower") == 0.0
    # tokens [big, red, dog] vs [red, dog]: P 2/3, R 1 -> F1 0.8
    assert f1_score("the big red dog", "red dog") == pytest.approx(0.8)
    assert f1_score("cat", "dog") == 0.0
    golds = {"q1": ["Denver Broncos", "The Broncos"], "q2": ["1990"]}
    preds = {"q1": "broncos", "q2": "in 1990"}
    s = squad_scores(preds, golds)
    assert s["exact_match"] == pytest.approx(0.5)  # q1 matches "The Broncos"
    # q1 F1 = 1 (second gold), q2: [in, 1990] vs [1990]: P .5 R 1 -> 2/3
    assert s["f1"] == pytest.approx((1 + 2 / 3) / 2)
    assert squad_scores({}, {"q": ["x"]}) == {"exact_match": 0.0, "f1": 0.0}


def test_korquad_normalisation_is_character_level() -> None:
    assert normalize_korquad("《해리 포터》") == "해리 포터"
    assert normalize_korquad("'서울'(首都)") == "서울 首都"
    assert exact_match("'서울'", "서울", style="korquad") == 1.0
    # characters without spaces: pred 서울특별시 (5), gold 서울 (2), common 2 -> P .4 R 1
    assert f1_score("서울특별시", "서울", style="korquad") == pytest.approx(2 * 0.4 / 1.4)
    assert f1_score("서울 특별시", "서울특별시", style="korquad") == 1.0
    # the SQuAD word F1 of the same pair is 0: the styles differ
    assert f1_score("서울특별시", "서울") == 0.0
    with pytest.raises(ValueError, match="style"):
        squad_scores({"q": "a"}, {"q": ["a"]}, style="other")


def test_glue_average_as_the_paper_and_as_glue() -> None:
    scores = {
        "cola": {"mcc": 0.5, "accuracy": 0.8},
        "sst2": {"accuracy": 0.9},
        "mrpc": {"accuracy": 0.8, "f1": 0.9},
        "sts-b": {"pearson": 0.8, "spearman": 0.7, "corr": 0.75},
        "rte": {"accuracy": 0.6},
        "wnli": {"accuracy": 0.5},
    }
    paper = glue_average(scores)
    # CoLA MCC, STS Spearman, accuracy elsewhere; WNLI left out
    assert paper["per_task"] == {"cola": 0.5, "sst2": 0.9, "mrpc": 0.8, "stsb": 0.7, "rte": 0.6}
    assert paper["average"] == pytest.approx((0.5 + 0.9 + 0.8 + 0.7 + 0.6) / 5)
    assert paper["missing"] == ["qqp", "mnli", "qnli"]
    glue = glue_average(scores, convention="glue")
    assert glue["per_task"]["mrpc"] == pytest.approx(0.85)
    assert glue["per_task"]["stsb"] == pytest.approx(0.75)
    with_wnli = glue_average(scores, include_wnli=True)
    assert with_wnli["per_task"]["wnli"] == 0.5
    with pytest.raises(ValueError, match="not a GLUE task"):
        glue_average({"nsmc": {"accuracy": 0.9}})
    with pytest.raises(ValueError, match="mcc"):
        glue_average({"cola": {"accuracy": 0.9}})


def test_seed_summary_statistics() -> None:
    s = summarize([0.8, 0.9, 0.7, 0.85])
    assert s["median"] == pytest.approx(0.825)
    assert s["mean"] == pytest.approx(0.8125)
    assert s["std"] == pytest.approx(
        math.sqrt(((0.0125) ** 2 + 0.0875**2 + 0.1125**2 + 0.0375**2) / 3)
    )
    assert summarize([0.5])["std"] == 0.0


def test_glue_score_from_results_files(tmp_path) -> None:
    def results(task: str, **metrics: list[float]) -> str:
        summary = {m: summarize(v) for m, v in metrics.items()}
        path = tmp_path / f"{task}.json"
        path.write_text(json.dumps({"task": {"name": task}, "summary": {"test": summary}}))
        return str(path)

    paths = [
        results("cola", mcc=[0.5, 0.6, 0.4], accuracy=[0.8, 0.8, 0.8]),
        results("stsb", spearman=[0.7, 0.9, 0.8], pearson=[0.7, 0.7, 0.7], corr=[0.7, 0.8, 0.75]),
    ]
    g = glue_score_from_results(paths)
    assert g["per_task"] == {"cola": pytest.approx(0.5), "stsb": pytest.approx(0.8)}
    assert g["average"] == pytest.approx(0.65)
    assert glue_score_from_results(paths, stat="mean")["per_task"]["stsb"] == pytest.approx(0.8)
