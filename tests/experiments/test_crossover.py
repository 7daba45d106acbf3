"""The comparison in words, on synthetic results: cross, no cross, tie, one budget, spread."""

from __future__ import annotations

from builders import compare_result as result

from electra.experiments.crossover import (
    crossover,
    paired_budgets,
    passes_clause,
    spread,
    summary_sentences,
)


def test_rtd_passing_mlm_is_said_with_its_budget_and_scores() -> None:
    r = result([0.770, 0.785, 0.791], [0.780, 0.786, 0.788])
    text = crossover(paired_budgets(r["points"]), "nsmc")
    assert text == "RTD passes MLM at 4.2e+14 FLOPs (79.1 vs 78.8) and stays ahead"
    # ahead at the middle budget, behind at the last: not "passes"
    r = result([0.770, 0.787, 0.780], [0.780, 0.786, 0.788])
    text = crossover(paired_budgets(r["points"]), "nsmc")
    assert text.startswith("RTD was ahead at 2.1e+14 FLOPs but trails MLM at 4.2e+14")
    # a crossing, a dip, a crossing again: the last crossing counts
    r = result([0.79, 0.77, 0.79, 0.80], [0.78, 0.78, 0.78, 0.78])
    assert "passes MLM at 2.1e+14 FLOPs (79.0 vs 78.0)" in crossover(
        paired_budgets(r["points"]), "nsmc"
    )


def test_no_crossover_says_so_and_how_the_gap_moved() -> None:
    r = result([0.760, 0.777, 0.787], [0.779, 0.792, 0.791])
    text = crossover(paired_budgets(r["points"]), "nsmc")
    assert text.startswith(
        "RTD does not pass MLM up to 4.2e+14 FLOPs, the largest budget (78.7 vs 79.1)"
    )
    assert "(78.7 vs 79.1)" in text and "the gap shrinks from 1.9 to 0.4 points" in text
    r = result([0.760, 0.770], [0.770, 0.790])
    assert "the gap does not shrink from 1.0 to 2.0" in crossover(
        paired_budgets(r["points"]), "nsmc"
    )


def test_a_tie_is_not_a_pass() -> None:
    r = result([0.770, 0.788], [0.780, 0.788])
    text = crossover(paired_budgets(r["points"]), "nsmc")
    assert text.startswith("RTD does not pass MLM") and text.endswith("from 1.0 to 0.0 points")
    one = result([0.788], [0.788])
    assert "RTD is level with MLM at 4.2e+14 FLOPs" in crossover(
        paired_budgets(one["points"]), "nsmc"
    )


def test_a_single_budget_and_a_lead_from_the_start() -> None:
    one = result([0.79], [0.78])
    text = crossover(paired_budgets(one["points"]), "nsmc")
    assert text == "RTD leads MLM at 4.2e+14 FLOPs (79.0 vs 78.0), the only budget"
    ahead = result([0.79, 0.80], [0.78, 0.78])
    assert crossover(paired_budgets(ahead["points"]), "nsmc").startswith(
        "RTD leads MLM at every budget, from 2.1e+14 FLOPs (79.0 vs 78.0)"
    )


def test_the_difference_is_weighed_against_the_seeds_spread() -> None:
    close = result([0.791], [0.788])  # ranges 78.6-79.6 and 78.3-79.3 overlap
    text = spread(paired_budgets(close["points"])[-1], "nsmc")
    assert text is not None and "(+0.3) is within the seeds' spread" in text
    assert "RTD 78.6-79.6, MLM 78.3-79.3" in text
    far = result([0.80], [0.78])  # 79.5-80.5 against 77.5-78.5
    assert "exceeds the seeds' spread" in spread(paired_budgets(far["points"])[-1], "nsmc")
    behind = result([0.78], [0.80])
    assert "(-2.0) exceeds" in spread(paired_budgets(behind["points"])[-1], "nsmc")
    old = result([0.80], [0.78], rtd_score=lambda m: {"metric": "accuracy", "median": m})
    assert spread(paired_budgets(old["points"])[-1], "nsmc") is None  # no min/max: not said


def test_every_task_gets_a_sentence_with_its_floors() -> None:
    r = result([0.770, 0.805], [0.780, 0.790])
    lines = summary_sentences(r)
    nsmc = next(line for line in lines if line.startswith("- **nsmc**"))
    assert "RTD passes MLM at 4.2e+14 FLOPs (80.5 vs 79.0)" in nsmc
    # TF-IDF is 80.0: RTD above it, MLM below; both above the random start and majority
    assert "(the random start, TF-IDF, the majority class) at 4.2e+14:" in nsmc
    assert "RTD is above every floor" in nsmc
    assert "MLM is above the random start, the majority class but not TF-IDF" in nsmc
    low = summary_sentences(result([0.74], [0.40]))[0]
    assert "RTD is above the majority class but not the random start or TF-IDF" in low
    assert "MLM is below every floor" in low


def test_passes_are_printed_and_repetition_warned_beyond_four() -> None:
    few = passes_clause(result([0.77, 0.78], [0.78, 0.79], passes=3.0))
    assert few == (
        "Passes over the pre-training blocks: RTD 1.5 / MLM 1.5 at 2.1e+14, "
        "RTD 3 / MLM 3 at 4.2e+14 FLOPs."
    )
    many = passes_clause(result([0.77, 0.78], [0.78, 0.79], passes=15.0))
    assert many is not None and "repetition may cap both arms" in many
    assert many in summary_sentences(result([0.77, 0.78], [0.78, 0.79], passes=15.0))[-1]
    sized = result([0.77], [0.78])
    sized["corpus"] = {"train_tokens": 3_300_000, "train_blocks": 26_000}
    assert passes_clause(sized).startswith(
        "Passes over the pre-training blocks (3,300,000 training"
    )
    r = result([0.77], [0.78])
    for p in r["points"]:
        p.pop("passes", None)
    assert passes_clause(r) is None  # a result from before passes were counted
    sized["corpus"]["block_length"] = 128  # what share of a step is text, not padding
    assert passes_clause(sized).startswith(
        "Passes over the pre-training blocks (26,000 training blocks of 128: 3,300,000 tokens "
        "of text, 99% of the positions a step is charged for)"
    )


def test_several_tasks_get_a_sentence_each_and_one_for_their_mean() -> None:
    lines = summary_sentences(result([0.770, 0.805], [0.780, 0.790], tasks=["nsmc", "sst2"]))
    assert [line.split("**")[1] for line in lines[:3]] == [
        "nsmc",
        "sst2",
        "mean of the tasks' medians",
    ]
    assert "RTD passes MLM at 4.2e+14 FLOPs (80.5 vs 79.0)" in lines[2]
    assert lines[3].startswith("- Passes over the pre-training blocks")


def test_the_best_of_several_rtd_arms_stands_for_rtd() -> None:
    from electra.experiments.crossover import best_rtd_arm, rtd_arms

    r = result([0.770, 0.780], [0.780, 0.786])
    ngram = [{**p, "arm": "rtd-ngram"} for p in r["points"] if p["arm"] == "rtd"]
    for p, score in zip(ngram, (0.775, 0.790), strict=True):
        p["scores"] = {t: {**s, "median": score} for t, s in p["scores"].items()}
    r["points"] += ngram
    assert rtd_arms(r["points"]) == ["rtd", "rtd-ngram"]
    assert best_rtd_arm(r["points"]) == "rtd-ngram"
    lines = summary_sentences(r)
    assert lines[0].startswith("- RTD below is **rtd-ngram**, the best of the RTD arms")
    assert "RTD passes MLM at 4.2e+14 FLOPs (79.0 vs 78.6)" in lines[1]
    assert best_rtd_arm(result([0.7], [0.8])["points"]) == "rtd"


def test_variants_of_mlm_are_mlm_arms_and_the_best_stands_for_mlm() -> None:
    from builders import _seed_score

    from electra.experiments.crossover import best_mlm_arm, mlm_arms, rtd_arms

    r = result([0.790], [0.780])
    lever = "mlm:optim.dropout=false"
    r["points"] += [
        {**p, "arm": lever, "scores": {"nsmc": _seed_score(0.795)}}
        for p in r["points"]
        if p["arm"] == "mlm"
    ]
    assert rtd_arms(r["points"]) == ["rtd"] and mlm_arms(r["points"]) == ["mlm", lever]
    assert best_mlm_arm(r["points"]) == lever
    lines = summary_sentences(r)
    assert lines[0].startswith(f"- MLM below is **{lever}**, the best of the MLM arms")
    assert "RTD trails MLM at 4.2e+14 FLOPs (79.0 vs 79.5)" in lines[1]  # against the best


def test_the_arms_are_paired_by_fine_tuning_seed_with_a_sign_test() -> None:
    """Seed by seed at the largest budget: who is ahead in how many seeds, each difference,
    and the one-sided sign test (3 of 3: p = 1/8); the mean of several tasks pairs each
    seed's mean; without per-seed scores (an old result) or with one seed, nothing is said."""
    from electra.experiments.crossover import paired_seeds

    r = result([0.80], [0.79], tasks=["nsmc", "sst2"])
    rtd, mlm = (p for p in r["points"] if p["arm"] != "none")
    rtd["scores"]["nsmc"]["by_seed"] = {"1": 0.815, "2": 0.833, "3": 0.809}
    mlm["scores"]["nsmc"]["by_seed"] = {"1": 0.804, "2": 0.809, "3": 0.813}
    pair = paired_budgets(r["points"])[-1]
    text = paired_seeds(pair, "nsmc")
    assert text is not None and "RTD is ahead in 2 of 3 seeds" in text
    assert "(RTD - MLM: +1.1, +2.4, -0.4; one-sided sign test p = 0.5)" in text
    assert paired_seeds(pair, "sst2") is None  # no per-seed scores: not said
    assert paired_seeds(pair, None) is None  # the mean needs every task's seeds

    rtd["scores"]["sst2"]["by_seed"] = {"1": 0.766, "2": 0.758, "3": 0.757}
    mlm["scores"]["sst2"]["by_seed"] = {"1": 0.748, "2": 0.767, "3": 0.728}
    mean = paired_seeds(pair, None)
    assert mean is not None and "RTD is ahead in 3 of 3 seeds" in mean
    assert "(RTD - MLM: +1.4, +0.8, +1.2; one-sided sign test p = 0.12)" in mean
    lines = summary_sentences(r)
    assert "p = 0.12" in next(line for line in lines if line.startswith("- **mean"))
    assert "p = 0.5" in next(line for line in lines if line.startswith("- **nsmc**"))

    mlm["scores"]["nsmc"]["by_seed"] = {"1": 0.83, "2": 0.84, "4": 0.80}  # seeds 1, 2 shared
    assert "MLM is ahead in 2 of 2 seeds" in paired_seeds(pair, "nsmc")
    mlm["scores"]["nsmc"]["by_seed"] = {"1": 0.83}
    assert paired_seeds(pair, "nsmc") is None
