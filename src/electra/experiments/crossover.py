"""What a comparison says, in words: where RTD overtakes MLM, against the seeds and the floors.

``electra compare`` writes a table of medians; a reader wants the answer to one question per
task: does replaced token detection pass masked language modelling at equal compute, from
which budget, and is the difference larger than the seeds' own spread? These functions
compute those sentences from a ``compare.json`` result (pure functions of its ``points`` and
``floors``, so they are tested on synthetic results):

* the crossover: the budget from which RTD's median stays above MLM's (every larger budget
  too), or that it does not up to the largest budget, with how the gap moved;
* the spread: at the largest budget, whether the two arms' min-max ranges over the seeds are
  disjoint (the difference exceeds the spread) or overlap (it does not);
* the pairing: at the largest budget, in how many fine-tuning seeds RTD is ahead of MLM
  (the same seed fixes the data order and the head's start for both), with a sign test;
* the floors: which of the random start, the PPMI table, TF-IDF and the majority class each
  arm is above at the largest budget;
* repetition: the passes over the training blocks per budget, with a warning beyond
  :data:`REPETITION_PASSES` (data-constrained scaling: up to about 4 passes are worth nearly
  as much as fresh text, beyond that less).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from electra.experiments.arms import objective_of

RTD, MLM = "rtd", "mlm"
REPETITION_PASSES = 4.0  # passes over the data beyond which repetition may cap both arms
BASELINES = {"none": "the random start", "ppmi table only": "the PPMI table"}


def rtd_arms(points: list[dict[str, Any]]) -> list[str]:
    """The replaced-token-detection arms among ``points`` (rtd, rtd-ngram and variants
    such as ``rtd:optim.dropout=false``): every pre-trained arm whose objective is not
    MLM, in the order they appear."""
    arms = [p["arm"] for p in points if p["arm"] not in BASELINES]
    return [a for a in dict.fromkeys(arms) if objective_of(a) != MLM]


def mlm_arms(points: list[dict[str, Any]]) -> list[str]:
    """The MLM arms among ``points`` (``mlm`` and its variants), in the order they appear."""
    return [a for a in dict.fromkeys(p["arm"] for p in points) if objective_of(a) == MLM]


def _best(points: list[dict[str, Any]], arms: list[str], default: str) -> str:
    """The arm of ``arms`` with the highest mean of its tasks' medians at its largest
    budget (``default`` when there is none; the only one when there is one)."""
    if len(arms) < 2:
        return arms[0] if arms else default

    def final(arm: str) -> float:
        return _median(max((p for p in points if p["arm"] == arm), key=lambda p: p["flops"]), None)

    return max(arms, key=final)


def best_rtd_arm(points: list[dict[str, Any]]) -> str:
    """The best of the RTD arms (:func:`_best`; :data:`RTD` when there is none)."""
    return _best(points, rtd_arms(points), RTD)


def best_mlm_arm(points: list[dict[str, Any]]) -> str:
    """The best of the MLM arms (:func:`_best`; :data:`MLM` when there is none): RTD at
    its best is set against MLM at its best, never against a weaker variant."""
    return _best(points, mlm_arms(points), MLM)


def paired_budgets(
    points: list[dict[str, Any]], rtd_arm: str = RTD, mlm_arm: str = MLM
) -> list[tuple[dict, dict]]:
    """(RTD point, MLM point) at each budget, smallest first; the arms are named.

    The arms' marks sit at the same fractions of one budget (each within one step of it),
    so the i-th mark of one arm is paired with the i-th of the other.
    """
    rtd = sorted((p for p in points if p["arm"] == rtd_arm), key=lambda p: p["flops"])
    mlm = sorted((p for p in points if p["arm"] == mlm_arm), key=lambda p: p["flops"])
    return list(zip(rtd, mlm, strict=False))


def _flops(pair: tuple[dict, dict]) -> str:
    return f"{max(p['flops'] for p in pair):.3g}"


def _median(p: dict[str, Any], task: str | None) -> float:
    """100 x the point's median on ``task`` (None: the mean of its tasks' medians)."""
    scores = p["scores"]
    if task is None:
        return 100 * statistics.mean(s["median"] for s in scores.values())
    return 100 * scores[task]["median"]


def crossover(pairs: list[tuple[dict, dict]], task: str | None) -> str:
    """Where RTD passes MLM on ``task`` (or the mean), in one clause."""
    gaps = [_median(r, task) - _median(m, task) for r, m in pairs]
    last = pairs[-1]
    scores = f"({_median(last[0], task):.1f} vs {_median(last[1], task):.1f})"
    if len(pairs) == 1:
        word = "leads" if gaps[0] > 0 else "trails" if gaps[0] < 0 else "is level with"
        return f"RTD {word} MLM at {_flops(last)} FLOPs {scores}, the only budget"
    if gaps[-1] > 0:
        first = len(gaps) - 1
        while first > 0 and gaps[first - 1] > 0:
            first -= 1
        at = pairs[first]
        there = f"({_median(at[0], task):.1f} vs {_median(at[1], task):.1f})"
        if first == 0:
            return f"RTD leads MLM at every budget, from {_flops(at)} FLOPs {there}"
        return f"RTD passes MLM at {_flops(at)} FLOPs {there} and stays ahead"
    trend = "shrinks" if abs(gaps[-1]) < abs(gaps[0]) else "does not shrink"
    ahead = [i for i, g in enumerate(gaps) if g > 0]
    head = (
        f"RTD was ahead at {_flops(pairs[ahead[-1]])} FLOPs but "
        if ahead
        else "RTD does not pass MLM up to "
    )
    if ahead:
        level = "is level with" if gaps[-1] == 0 else "trails"
        return f"{head}{level} MLM at {_flops(last)} FLOPs, the largest budget {scores}"
    return (
        f"{head}{_flops(last)} FLOPs, the largest budget {scores}; the gap {trend} from "
        f"{0.0 - gaps[0]:.1f} to {0.0 - gaps[-1]:.1f} points"  # MLM's lead (never "-0.0")
    )


def spread(pair: tuple[dict, dict], task: str) -> str | None:
    """Whether the arms' difference at ``pair`` exceeds the seeds' spread (min-max), or
    None when the results hold no min and max (one seed, or an old result)."""
    r, m = (p["scores"][task] for p in pair)
    if any(k not in s for s in (r, m) for k in ("min", "max")) or r.get("n", 2) < 2:
        return None
    ranges = f"RTD {100 * r['min']:.1f}-{100 * r['max']:.1f}, MLM {100 * m['min']:.1f}-{100 * m['max']:.1f}"
    gap = 100 * (r["median"] - m["median"])
    beyond = r["min"] > m["max"] or m["min"] > r["max"]
    verdict = "exceeds" if beyond else "is within"
    return f"at {_flops(pair)} the difference ({gap:+.1f}) {verdict} the seeds' spread ({ranges})"


def _seed_scores(p: dict[str, Any], task: str | None) -> dict[str, float]:
    """100 x each fine-tuning seed's score on ``task`` (None: its mean over the tasks, for
    the seeds every task has); empty for a result without per-seed scores."""
    scores = p["scores"]
    tasks = list(scores) if task is None else [task]
    by_task = [scores[t].get("by_seed") or {} for t in tasks]
    seeds = set.intersection(*(set(b) for b in by_task)) if by_task else set()
    ordered = sorted(seeds, key=lambda s: (len(s), s))  # "2" before "10"
    return {s: 100 * statistics.mean(b[s] for b in by_task) for s in ordered}


def paired_seeds(pair: tuple[dict, dict], task: str | None) -> str | None:
    """RTD against MLM seed by seed on ``task`` (None: the mean of the tasks), or None with
    fewer than two seeds in common.

    One fine-tuning seed fixes the data order and the head's start for both arms, so the
    per-seed difference removes that part of the noise which the min-max spread keeps. With
    3 seeds even 3 of 3 is what chance gives one time in 8 (the one-sided sign test said
    beside it), so this says how consistent a difference is, not that it is real.
    """
    r, m = (_seed_scores(p, task) for p in pair)
    common = [s for s in r if s in m]  # in seed order
    if len(common) < 2:
        return None
    diffs = [r[s] - m[s] for s in common]
    ahead, behind = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    leader, wins = ("RTD", ahead) if ahead >= behind else ("MLM", behind)
    n = ahead + behind  # ties say nothing either way
    chance = sum(math.comb(n, k) for k in range(wins, n + 1)) / 2**n if n else 1.0
    each = ", ".join(f"{d:+.1f}" for d in diffs)
    return (
        f"paired by fine-tuning seed, {leader} is ahead in {wins} of {len(common)} seeds "
        f"(RTD - MLM: {each}; one-sided sign test p = {chance:.2g})"
    )


def floors_clause(result: dict[str, Any], pair: tuple[dict, dict], task: str) -> str:
    """Which floors each arm is above (or not) on ``task`` at ``pair``'s budget."""
    floors: list[tuple[str, float]] = []
    for p in result["points"]:
        if p["arm"] in BASELINES and task in p.get("scores", {}):
            floors.append((BASELINES[p["arm"]], p["scores"][task]["median"]))
    f = (result.get("floors") or {}).get(task) or {}
    named = {"tfidf": "TF-IDF", "tfidf_pair": "the TF-IDF pair features"}
    named["constant"] = {"majority": "the majority class", "mean": "the training mean"}.get(
        f.get("constant_name", ""), "the constant floor"
    )
    floors += [(name, f[key]) for key, name in named.items() if f.get(key) is not None]
    if not floors:
        return "no floors to compare with"
    parts = []
    for arm, p in zip(("RTD", "MLM"), pair, strict=True):
        mine = p["scores"][task]["median"]
        above = [name for name, v in floors if mine > v]
        below = [name for name, v in floors if mine <= v]
        if not below:
            parts.append(f"{arm} is above every floor")
        elif not above:
            parts.append(f"{arm} is below every floor")
        else:
            parts.append(f"{arm} is above {', '.join(above)} but not {' or '.join(below)}")
    names = ", ".join(name for name, _ in floors)
    return f"against the floors ({names}) at {_flops(pair)}: {'; '.join(parts)}"


def passes_clause(result: dict[str, Any], rtd_arm: str = RTD, mlm_arm: str = MLM) -> str | None:
    """Passes over the training blocks at each budget, with a warning past
    :data:`REPETITION_PASSES` (None: the points carry no pass count)."""
    pairs = paired_budgets(result["points"], rtd_arm, mlm_arm)
    if not pairs or any("passes" not in p for pair in pairs for p in pair):
        return None
    each = ", ".join(
        f"RTD {pair[0]['passes']:.2g} / MLM {pair[1]['passes']:.2g} at {_flops(pair)}"
        for pair in pairs
    )
    text = f"Passes over the pre-training blocks{_corpus_words(result)}: {each} FLOPs"
    most = max(p["passes"] for pair in pairs for p in pair)
    if most > REPETITION_PASSES:
        text += f"; more than {REPETITION_PASSES:g} passes: repetition may cap both arms"
    return text + "."


def _corpus_words(result: dict[str, Any]) -> str:
    """What one pass is: the training blocks, and how much of them is text rather than
    padding (a step is charged for every position, padded or not)."""
    corpus = result.get("corpus") or {}
    tokens, blocks = corpus.get("train_tokens"), corpus.get("train_blocks")
    if not tokens:
        return ""
    if not blocks or not corpus.get("block_length"):
        return f" ({tokens:,} training tokens)"
    slots = blocks * corpus["block_length"]
    return (
        f" ({blocks:,} training blocks of {corpus['block_length']}: {tokens:,} tokens of text,"
        f" {tokens / slots:.0%} of the positions a step is charged for)"
    )


def summary_sentences(result: dict[str, Any]) -> list[str]:
    """One sentence per task (and one for the mean of several), then the passes.

    With several RTD arms (rtd, rtd-ngram) the best at its largest budget stands for RTD
    (:func:`best_rtd_arm`), and a first line says which it is.
    """
    arm, mlm = best_rtd_arm(result["points"]), best_mlm_arm(result["points"])
    pairs = paired_budgets(result["points"], arm, mlm)
    if not pairs:
        return []
    tasks = list(pairs[0][0]["scores"])
    lines = []
    for name, best, family in (
        ("RTD", arm, rtd_arms(result["points"])),
        ("MLM", mlm, mlm_arms(result["points"])),
    ):
        if len(family) > 1:
            lines.append(
                f"- {name} below is **{best}**, the best of the {name} arms "
                f"({', '.join(family)}) on the mean of the tasks' medians at the largest budget."
            )
    for task in tasks:
        metric = pairs[0][0]["scores"][task].get("metric", "")
        clauses = [crossover(pairs, task), spread(pairs[-1], task), paired_seeds(pairs[-1], task)]
        clauses.append(floors_clause(result, pairs[-1], task))
        body = "; ".join(c for c in clauses if c)
        lines.append(f"- **{task}** ({metric}, median over seeds): {body}.")
    if len(tasks) > 1:
        clauses = [crossover(pairs, None), paired_seeds(pairs[-1], None)]
        lines.append(f"- **mean of the tasks' medians**: {'; '.join(c for c in clauses if c)}.")
    if passes := passes_clause(result, arm, mlm):
        lines.append(f"- {passes}")
    return lines
