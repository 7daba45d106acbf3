"""What ``electra compare`` writes: ``compare.md``, ``compare.png`` and ``compare.json``.

``compare.md`` is a table of the median test score and its spread per arm, budget and
task, with each task's floors on the same split (TF-IDF + logistic regression, the
majority class; for a sentence pair the pair-feature floor beside the joined one), then
the result in words (:mod:`electra.experiments.crossover`), the fine-tuning recipe, the
rate each point kept with ``--finetune-lrs``, and what one step of each arm costs.
``compare.png`` draws score against pre-training FLOPs, one line per arm, the untrained
starts and the floors as horizontal lines. Rendering only: the comparison itself (data,
arms, fine-tuning) is :mod:`electra.experiments.compare`, which imports this module and
never the other way round. matplotlib is imported when a plot is drawn.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from electra.experiments.arms import objective_of
from electra.experiments.crossover import MLM, summary_sentences
from electra.finetune.tasks import TASKS
from electra.pretrain.objectives import OBJECTIVES
from electra.system.files import atomic_write_json, atomic_write_text

# The point of a recipe with init.token_embeddings = "ppmi": its table on random layers.
TABLE_ARM = "ppmi table only"
_COLOURS = {
    "rtd": "tab:red",
    "mlm": "tab:blue",
    "rtd-ngram": "tab:orange",
}  # plot colour of each arm (else matplotlib's)


def log(msg: str) -> None:
    """One progress line of ``electra compare`` (the comparison and its report alike)."""
    print(f"[compare] {msg}", flush=True)


def is_tagging(task: str) -> bool:
    """Whether ``task`` is a registered tagging task (fine-tuned for ``--tagging-epochs``)."""
    return task in TASKS and TASKS[task].family.name == "tagging"


def short_fine_tunings(result: dict[str, Any], tasks: list[str]) -> list[str]:
    """A warning per task where most seeds of every point chose their last epoch on dev: the
    score was still rising, so the column measures how fast a model starts on the task as
    much as how well it does it (KLUE-NER at 3 epochs: 33 of 33; recipe_search.md)."""
    out = []
    for t in tasks:
        scored = [p["scores"][t] for p in result["points"] if t in p.get("scores", {})]
        counts = [(s.get("last_epoch_best"), s.get("n", 0)) for s in scored]
        if not counts or any(last is None or 2 * last <= n for last, n in counts):
            continue
        last, n = sum(c[0] for c in counts), sum(c[1] for c in counts)
        flag = "--tagging-epochs" if is_tagging(t) else "--epochs"
        out.append(
            f"- **{t}: fine-tuning may stop short**: {last} of {n} fine-tunings chose their "
            f"last epoch on dev, and most seeds of every point did: the dev score had not "
            f"turned down yet, so more epochs ({flag}) may change these scores and the gaps "
            "(KLUE-NER from 3 to 10 epochs: +16 F1 for the random start, RTD's gap to MLM "
            "5.5 -> 2.3)."
        )
    return out


# Options that change how a comparison runs, not what it reports.
_HOW_IT_RAN = ("progress", "finetune_jobs", "output")
REPORT_FILES = ("compare.json", "compare.md", "compare.png")


def _what_it_reports(command: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in command.items() if k not in _HOW_IT_RAN}


def keep_previous_report(out: Path, command: dict[str, Any]) -> Path | None:
    """Move the report of another comparison in ``out`` aside before this one is written.

    Runs are reused across comparisons in one directory (a lever measured beside
    ``rtd`` and ``mlm`` reuses their arms), so the report of the earlier one (other
    arms, budget, tasks or seeds) would otherwise be overwritten and lost. It goes to
    ``out/reports/<its time>/``; the report of the same comparison, re-run, is replaced.
    """
    old = out / "compare.json"
    if not old.exists():
        return None
    try:
        previous = json.loads(old.read_text()).get("command", {})
    except (OSError, ValueError, AttributeError):
        previous = None  # unreadable: keep it rather than judge it
    if previous is not None and _what_it_reports(previous) == _what_it_reports(command):
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(old.stat().st_mtime))
    dest = out / "reports" / stamp
    dest.mkdir(parents=True, exist_ok=True)
    for name in REPORT_FILES:
        if (out / name).exists():
            (out / name).replace(dest / name)
    log(f"kept the previous comparison's report (other options) in {dest}")
    return dest


def write_report(out: Path, result: dict[str, Any]) -> str:
    """``compare.json``, ``compare.md`` and ``compare.png`` in ``out``, each written whole;
    an earlier comparison's report is kept (:func:`keep_previous_report`). Returns the table."""
    keep_previous_report(out, result["command"])
    atomic_write_json(out / "compare.json", result)
    table = markdown_table(result)
    atomic_write_text(out / "compare.md", table)
    plot(result, out / "compare.png")
    return table


def markdown_table(result: dict[str, Any]) -> str:
    """``compare.md``: medians ± std per arm, budget and task, the floors, then in words
    where RTD passes MLM on each task (:func:`electra.experiments.crossover.summary_sentences`)."""
    tasks = list(result["points"][0]["scores"])
    counter = result.get("counter", "paper")
    head = f"| arm | pre-training FLOPs ({counter} count) | steps | passes | "
    head += " | ".join(tasks) + " | mean |\n"
    head += "|---|---|---|---|" + "---|" * (len(tasks) + 1) + "\n"
    rows = []
    for p in result["points"]:
        cells = []
        medians = []
        for t in tasks:
            s = p["scores"][t]
            medians.append(s["median"])
            cells.append(f"{100 * s['median']:.1f} ± {100 * s.get('std', 0.0):.1f}")
        mean = statistics.mean(medians) if medians else float("nan")
        passes = f"{p['passes']:.2g}" if "passes" in p else "–"
        rows.append(
            f"| {p['arm']} | {p['flops']:.3g} | {p['steps']} | {passes} | "
            + " | ".join(cells)
            + f" | {100 * mean:.1f} |"
        )
    floors = result.get("floors") or {}
    rows += _floor_rows(floors, tasks)
    metric = {t: result["points"][0]["scores"][t]["metric"] for t in tasks}
    note = (
        "\nScores: test "
        + ", ".join(f"{t} {m}" for t, m in metric.items())
        + f", median ± std over {len(result['command']['seeds'])} fine-tuning seeds (x100). "
        "Passes: blocks seen / training blocks. "
        "Floors: trained and scored on the same split, no pre-training (TF-IDF char 1-4 + "
        "word 1-2 n-grams with logistic regression; always the training majority label). "
        + finetuning_note(result["command"], tasks)
    )
    if _has_pairs(floors, tasks):
        note += (
            " For sentence pairs the TF-IDF floor reads the joined pair; the pair floor is "
            "TF-IDF pair features (a, b, |a-b|, a*b) of the two texts + the same regression."
        )
    words = summary_sentences(result) + short_fine_tunings(result, tasks)
    said = "\n\nIn words (medians over seeds; spread: min-max over seeds):\n\n" if words else ""
    return (
        head
        + "\n".join(rows)
        + "\n"
        + note
        + "\n"
        + said
        + "\n".join(words)
        + ("\n" if words else "")
        + chosen_rates(result, tasks)
        + cost_table(result)
    )


def finetuning_note(command: dict[str, Any], tasks: list[str]) -> str:
    """One sentence on how every point was fine-tuned: examples, epochs (the tagging tasks'
    own where there are some), layer decay, batches."""
    if "epochs" not in command:  # a result written before compare recorded its command
        return ""
    n = command.get("max_train_examples", 0)
    epochs = f"{command.get('epochs')} epochs"
    tagging = [t for t in tasks if is_tagging(t)]
    if tagging and command.get("tagging_epochs"):
        epochs += f" ({', '.join(tagging)}: {command['tagging_epochs']})"
    batches = "length-grouped" if command.get("group_by_length") else "shuffled"
    lrs = list(dict.fromkeys(command.get("finetune_lrs") or []))
    rate = (
        f"the learning rate of {', '.join(f'{r:g}' for r in lrs)} with the best dev median, "
        "per point and task (below)"
        if lrs
        else "Table 7's learning rate"
    )
    return (
        f"Fine-tuning: {f'{n:,}' if n else 'all'} training examples per task, {epochs}, "
        f"{rate}, layer decay {command.get('layer_decay')}, {batches} "
        "batches, the best epoch on dev scored on test."
    )


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def chosen_rates(result: dict[str, Any], tasks: list[str]) -> str:
    """One line per point saying which fine-tuning rate each task kept, with every rate's dev
    median (empty when one rate was used)."""
    lines = []
    for p in result["points"]:
        cells = [
            f"{t} {s['lr']:g} (dev " + ", ".join(f"{r}: {_pct(v)}" for r, v in by.items()) + ")"
            for t in tasks
            if "lr" in (s := p["scores"][t]) and (by := s.get("dev_by_lr")) is not None
        ]
        if cells:
            lines.append(f"- {p['arm']} @ {p['flops']:.3g}: " + "; ".join(cells))
    if not lines:
        return ""
    return "\nFine-tuning rate kept (best dev median over seeds):\n\n" + "\n".join(lines) + "\n"


def cost_table(result: dict[str, Any]) -> str:
    """What one step of each arm costs by both counters and on the clock, and how much
    more RTD's costs than MLM's by each: the counter decides how many steps each arm gets
    (empty for a result from before compare recorded them)."""
    costs = result.get("step_costs") or {}
    if not costs:
        return ""
    lines = [
        "\nWhat one pre-training step costs (the budget is charged by the "
        f"{result.get('counter', 'paper')} count):\n",
        "| arm | paper FLOPs | executed matmul FLOPs | seconds here (median) |",
        "|---|---|---|---|",
    ]
    for arm, c in costs.items():
        sec = f"{c['seconds']:.3f}" if c.get("seconds") else "–"
        lines.append(f"| {arm} | {c['paper']:.3g} | {c['executed']:.3g} | {sec} |")
    reference = MLM if MLM in costs else next((a for a in costs if objective_of(a) == MLM), None)
    if reference:
        mlm = costs[reference]
        for arm in (a for a in costs if a != reference):
            c = costs[arm]
            ratios = [f"{c['paper'] / mlm['paper']:.2f}x by the paper's count"]
            ratios.append(f"{c['executed'] / mlm['executed']:.2f}x executed")
            if c.get("seconds") and mlm.get("seconds"):
                ratios.append(f"{c['seconds'] / mlm['seconds']:.2f}x on the clock")
            than = "an MLM step" if reference == MLM else f"a {reference} step"
            lines.append(f"\nA {arm} step costs {', '.join(ratios)} {than}.")
    lines.append(
        "(The paper's count charges every embedding lookup as a one-hot matmul, 2 x vocabulary"
        " x width per token and encoder; seconds depend on the machine and its load.)"
    )
    return "\n".join(lines) + "\n"


def _has_pairs(floors: dict[str, Any], tasks: list[str]) -> bool:
    """Whether any task has the pair-feature floor (a sentence-pair task)."""
    return any((floors.get(t) or {}).get("tfidf_pair") is not None for t in tasks)


def _floor_rows(floors: dict[str, Any], tasks: list[str]) -> list[str]:
    """Table rows of the TF-IDF and majority (or mean) floors, "–" where a task has none.

    A tagging task has no TF-IDF floor, but the tasks beside it do: their floors are
    still printed beside their scores (the row's mean then is "–", as it would not be
    the mean of the same tasks as the arms'). With a sentence-pair task among them the
    TF-IDF row says it joins the pair, and a pair-feature row follows.
    """
    known = [t for t in tasks if floors.get(t)]
    if not known:
        return []
    rows = []
    named = {"majority": "majority class", "mean": "training mean", "memorised": "memorised tags"}
    names = " / ".join(sorted({named[floors[t]["constant_name"]] for t in known}))
    pairs = _has_pairs(floors, tasks)
    joined = "TF-IDF floor (pairs: joined text)" if pairs else "TF-IDF floor"
    keys = [("tfidf", joined), ("constant", names)] + (
        [("tfidf_pair", "TF-IDF pair-feature floor")] if pairs else []
    )
    for key, label in keys:
        values = [(floors.get(t) or {}).get(key) for t in tasks]
        if all(v is None for v in values):
            continue
        cells = " | ".join("–" if v is None else f"{100 * v:.1f}" for v in values)
        mean = "–" if None in values else f"{100 * statistics.mean(values):.1f}"
        rows.append(f"| {label} | – | – | – | {cells} | {mean} |")
    return rows


def _plot_floors(ax: Any, floor: dict[str, Any]) -> None:
    """One task's floors as dashed lines, each labelled with which floor it is."""
    pair = floor.get("tfidf_pair") is not None
    names = {
        "tfidf": "TF-IDF floor (joined pair)" if pair else "TF-IDF floor",
        "tfidf_pair": "TF-IDF pair features (a, b, |a-b|, a*b)",
        "constant": floor.get("constant_name", ""),
    }
    colours = (("tfidf", "tab:green"), ("tfidf_pair", "tab:olive"), ("constant", "grey"))
    for key, colour in colours:
        if floor.get(key) is not None:
            ax.axhline(100 * floor[key], ls="--", color=colour, label=names[key], lw=1)


_BASELINE_STYLE = {"none": ("random start (none)", "black"), TABLE_ARM: (TABLE_ARM, "tab:purple")}


def _spread(points: list[dict[str, Any]], task: str) -> list[list[float]]:
    """Error bars of ``points`` on ``task``: median to min and max over the seeds (x100),
    or ± std for a result without them."""
    lo, hi = [], []
    for p in points:
        s = p["scores"][task]
        lo.append(100 * (s["median"] - s.get("min", s["median"] - s.get("std", 0.0))))
        hi.append(100 * (s.get("max", s["median"] + s.get("std", 0.0)) - s["median"]))
    return [lo, hi]


def _trained_arms(points: list[dict[str, Any]]) -> list[str]:
    """The pre-trained arms among ``points``, in their order (not the untrained starts)."""
    return list(dict.fromkeys(p["arm"] for p in points if p["arm"] not in _BASELINE_STYLE))


def _arm_style(arm: str) -> dict[str, Any]:
    """An arm's line: its objective's colour and title; a variant (``rtd:KEY=VALUE``)
    dash-dotted (the floors are dashed), labelled with its overrides."""
    objective = objective_of(arm)
    title = OBJECTIVES[objective].title
    variant = arm[len(objective) + 1 :]
    return {
        "marker": "o",
        "capsize": 3,
        "color": None if variant else _COLOURS.get(objective),
        "ls": "-." if variant else "-",  # floors are dashed
        "label": f"{title} + {variant.replace(':', ', ')}" if variant else title,
    }


def _zoom_past_constant_floor(ax: Any, result: dict[str, Any], task: str) -> None:
    """Where the majority (or memorised-tags) floor lies far below every score, leave it
    under the axis and say its value in the legend, so that the arms' differences (a
    point or two) stay visible instead of being squashed against a line 30 points down."""
    floor = (result.get("floors") or {}).get(task) or {}
    constant = floor.get("constant")
    scores = [100 * p["scores"][task]["median"] for p in result["points"] if task in p["scores"]]
    if constant is None or not scores or 100 * constant > min(scores) - 15:
        return
    lows = [*scores, *(100 * floor[k] for k in ("tfidf", "tfidf_pair") if floor.get(k))]
    ax.set_ylim(bottom=min(lows) - 3)
    for line in ax.get_lines():
        if line.get_label() == floor.get("constant_name", ""):
            line.set_label(f"{line.get_label()} {100 * constant:.1f} (below the axis)")


def figure(result: dict[str, Any]) -> Any:
    """Score against pre-training FLOPs (log axis), one panel per task: one line per arm
    (median over seeds, bars min to max), the untrained starts (0 FLOPs, so off a log axis)
    and the floors as horizontal lines. The matplotlib figure, for :func:`plot` to save."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(result["points"][0]["scores"])
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.8), dpi=100, squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        for arm in _trained_arms(result["points"]):
            pts = sorted(
                (p for p in result["points"] if p["arm"] == arm and task in p["scores"]),
                key=lambda p: p["flops"],
            )  # a point not fine-tuned on every task (yet) is drawn where it was
            x = [p["flops"] for p in pts]
            y = [100 * p["scores"][task]["median"] for p in pts]
            ax.errorbar(x, y, yerr=_spread(pts, task), **_arm_style(arm))
        for p in result["points"]:
            if p["arm"] in _BASELINE_STYLE and task in p["scores"]:
                name, colour = _BASELINE_STYLE[p["arm"]]
                ax.axhline(100 * p["scores"][task]["median"], ls=":", color=colour, label=name)
        _plot_floors(ax, (result.get("floors") or {}).get(task) or {})
        _zoom_past_constant_floor(ax, result, task)
        ax.set_xscale("log")
        ax.set_title(f"{task} ({result['points'][0]['scores'][task]['metric']})")
        ax.set_xlabel(f"pre-training FLOPs per arm ({result.get('counter', 'paper')} count, log)")
        ax.set_ylabel("test score (median over seeds)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot(result: dict[str, Any], path: Path) -> None:
    """Write :func:`figure` of ``result`` to ``path`` (PNG)."""
    import matplotlib.pyplot as plt

    fig = figure(result)
    fig.savefig(path)
    plt.close(fig)
