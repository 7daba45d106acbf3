"""What ``electra compare`` writes: the table, the words under it, the plot, the kept report."""

from __future__ import annotations

import json
from pathlib import Path

from electra.experiments.compare_report import keep_previous_report


def test_the_table_says_what_a_step_costs_by_each_counter() -> None:
    from builders import compare_result

    from electra.experiments.compare_report import markdown_table

    result = compare_result([0.77, 0.79], [0.78, 0.785])
    result["step_costs"] = {
        "rtd": {"paper": 1.31e11, "executed": 9.35e10, "seconds": 0.35},
        "mlm": {"paper": 9.23e10, "executed": 8.62e10, "seconds": 0.28},
    }
    table = markdown_table(result)
    assert "| arm | pre-training FLOPs (paper count) |" in table
    assert "| rtd | 1.31e+11 | 9.35e+10 | 0.350 |" in table
    assert (
        "A rtd step costs 1.42x by the paper's count, 1.08x executed, 1.25x on the clock" in table
    )
    result["counter"] = "executed"
    assert "(executed count)" in markdown_table(result)


def test_the_plot_draws_each_arm_against_log_flops_with_the_floors(tmp_path: Path) -> None:
    from builders import compare_result

    from electra.experiments.compare_report import figure, plot

    result = compare_result([0.77, 0.79], [0.78, 0.785], tasks=["nsmc", "sst2"])
    result["points"].insert(1, {**result["points"][0], "arm": "ppmi table only"})
    fig = figure(result)
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert ax.get_xscale() == "log"
        _, labels = ax.get_legend_handles_labels()
        assert labels.count("ELECTRA (RTD)") == labels.count("BERT (MLM)") == 1
        expected = {"random start (none)", "ppmi table only", "TF-IDF floor"}
        assert expected | {"majority 50.0 (below the axis)"} <= set(labels)
        floor_ys = {ln.get_ydata()[0] for ln in ax.get_lines() if ln.get_linestyle() == "--"}
        assert floor_ys == {80.0, 50.0}  # the TF-IDF and majority floors, horizontal
        # the majority floor, 25 points under every score, is left below the axis
        assert 50.0 < ax.get_ylim()[0] < 75.0
    rtd = next(c for c in fig.axes[0].containers if c.get_label() == "ELECTRA (RTD)")
    assert list(rtd.lines[0].get_ydata()) == [77.0, 79.0]  # medians; the 0-FLOPs start not on it
    plot(result, tmp_path / "compare.png")
    assert (tmp_path / "compare.png").read_bytes()[:4] == b"\x89PNG"
    # a mark not (yet) fine-tuned on one task is left off that panel only
    del result["points"][2]["scores"]["sst2"]  # rtd's first mark
    fig = figure(result)
    for ax, drawn in zip(fig.axes, ([77.0, 79.0], [79.0]), strict=True):
        rtd = next(c for c in ax.containers if c.get_label() == "ELECTRA (RTD)")
        assert list(rtd.lines[0].get_ydata()) == drawn


def test_a_tagging_task_beside_text_tasks_keeps_their_tfidf_floor_in_the_table() -> None:
    """KLUE-NER has no TF-IDF floor; NSMC's must still be printed beside its scores."""
    from builders import compare_result

    from electra.experiments.compare_report import markdown_table

    result = compare_result([0.78], [0.79], tasks=["nsmc", "klue-ner"])
    result["floors"]["klue-ner"] = {"tfidf": None, "constant": 0.05, "constant_name": "memorised"}
    table = markdown_table(result)
    assert "| TF-IDF floor | – | – | – | 80.0 | – | – |" in table
    assert "| majority class / memorised tags | – | – | – | 50.0 | 5.0 | 27.5 |" in table
    assert (
        "Fine-tuning: 4,000 training examples per task, 3 epochs (klue-ner: 10), Table 7's "
        "learning rate, layer decay 1.0, length-grouped batches" in table
    )
    result["floors"].pop("klue-ner")  # a task with no floors at all: "–" too, not no rows
    assert "| TF-IDF floor | – | – | – | 80.0 | – | – |" in markdown_table(result)


def test_the_table_has_passes_and_says_where_rtd_passes_mlm() -> None:
    from builders import compare_result

    from electra.experiments.compare_report import markdown_table

    table = markdown_table(compare_result([0.770, 0.805], [0.780, 0.790], passes=6.0))
    assert "| arm | pre-training FLOPs (paper count) | steps | passes | nsmc | mean |" in table
    rtd_last = [ln for ln in table.splitlines() if ln.startswith("| rtd |")][-1]
    assert "| 6 | 80.5 ± 0.4 |" in rtd_last
    assert "| none | 0 | 0 | – | 75.0 ± 0.4 |" in table
    assert "| TF-IDF floor | – | – | – | 80.0 | 80.0 |" in table
    assert "RTD passes MLM at 4.2e+14 FLOPs (80.5 vs 79.0) and stays ahead" in table
    assert "repetition may cap both arms" in table


def test_a_variant_arm_gets_its_own_line_row_and_cost() -> None:
    from builders import _seed_score, compare_result

    from electra.experiments.compare_report import figure, markdown_table

    result = compare_result([0.77, 0.79], [0.78, 0.785])
    lever = "rtd:objective.disc_mlm_weight=1"
    result["points"] += [
        {**p, "arm": lever, "scores": {"nsmc": _seed_score(0.80)}}
        for p in result["points"]
        if p["arm"] == "rtd"
    ]
    result["step_costs"] = {
        "rtd": {"paper": 1.31e11, "executed": 9.35e10},
        "mlm": {"paper": 9.23e10, "executed": 8.62e10},
        lever: {"paper": 1.33e11, "executed": 9.4e10},
    }
    table = markdown_table(result)
    assert f"| {lever} | " in table
    assert f"A {lever} step costs 1.44x by the paper's count" in table
    assert f"RTD below is **{lever}**, the best of the RTD arms" in table
    labels = figure(result).axes[0].get_legend_handles_labels()[1]
    assert "ELECTRA (RTD) + objective.disc_mlm_weight=1" in labels
    assert labels.count("ELECTRA (RTD)") == 1


def test_another_comparisons_report_is_kept_and_the_same_ones_replaced(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    out.mkdir()
    first = {"arms": ["rtd", "mlm"], "budget_flops": 2e14, "progress": True, "output": "a"}
    for name, body in [("compare.json", json.dumps({"command": first})), ("compare.md", "T1")]:
        (out / name).write_text(body)
    # The same comparison again, run another way (no progress bar, another path): replaced.
    rerun = dict(first, progress=False, output="b")
    assert keep_previous_report(out, rerun) is None
    assert (out / "compare.md").read_text() == "T1"
    # A lever added beside the same arms: the first report moves aside, whole.
    lever = dict(first, arms=["rtd", "mlm", "rtd:objective.mask_prob=0.25"])
    kept = keep_previous_report(out, lever)
    assert kept is not None and kept.parent == out / "reports"
    assert (kept / "compare.md").read_text() == "T1"
    assert json.loads((kept / "compare.json").read_text())["command"] == first
    assert not (out / "compare.md").exists() and not (out / "compare.json").exists()
