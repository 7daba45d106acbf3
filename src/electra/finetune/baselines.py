"""Floors beside every fine-tuning score: the majority class and a TF-IDF baseline.

A score means little alone: 0.83 accuracy is excellent on a balanced task and
worthless on one that is 83% positive. So every classification and regression
result is shown next to two floors, trained and scored on exactly the same
train/dev/test examples as the model:

* **majority** (classification): always predict the most frequent training
  label; **mean** (regression): always predict the training mean (a constant
  has no correlation, so Pearson and Spearman score 0; its MSE is the
  variance-like floor);
* **tfidf**: TF-IDF of character 1-4-grams (within word boundaries) and word
  1-2-grams, then scikit-learn's logistic regression (classification) or
  ridge regression (regression). The regularisation strength is chosen on the
  dev split by the task's main metric, as fine-tuning chooses its epoch there.
  A sentence pair is concatenated into one text ("TF-IDF of the joined pair"),
  so this floor cannot see whether the two texts match;
* **tfidf_pair** (sentence-pair tasks only: any training example has a second
  text): the classic pair baseline. One vectorizer (the same n-grams) is fitted
  on both sides' training texts; each example is the TF-IDF vectors ``a`` and
  ``b`` of its two texts and their elementwise interactions ``|a - b|`` and
  ``a * b``, side by side (sparse), into the same logistic (ridge) regression
  with its strength chosen on dev. ``a * b`` is non-zero exactly on the n-grams
  the two texts share, which a joined bag of n-grams cannot tell from n-grams
  that occur twice in one of them; on a held-out Korean question-pair set this
  floor scored 89.7 where the joined one scored 82.7.

``floors["descriptions"]`` names each floor in words (printouts use the same
words), so a number is never read against the wrong baseline.

Tagging gets one floor, **memorised**: each unit (word, or character for
character-level tasks) gets the tag it had most often in training, ``O`` when
never seen, with BIO repaired (an ``I-X`` that continues nothing becomes
``B-X``); the classic lookup baseline of NER shared tasks. (Always ``O``
scores an entity F1 of 0.)

Extractive QA gets one floor, **window**: the sliding-window baseline of
Richardson et al. (2013) as Rajpurkar et al. (2016) applied it to SQuAD. Every
span of ``L`` context words that repeats no question word is scored by the
question words found within ``W`` words on either side of it, each weighted by
its rarity in the context, log(1 + 1/count); the best span (the first on ties)
is the answer. Words match when they agree up to the last character of the
shorter one (at least two characters; one-character words must be equal), so
Korean particles and English endings still match ("서울의" / "서울에서").
``L`` and ``W`` are chosen on dev by F1, as TF-IDF chooses its strength there.
No training is involved: this floor asks how far word overlap alone gets.

Results are cached as ``CACHE/floors-KEY.json``, ``KEY`` a SHA-256 of the
format, family, labels, main metric, the pair features and every (text, pair,
label) of the three splits: a different split, subsample or label set can never
reuse another's floors, nor a cache written before the pair floor existed
(format 1) a newer one's.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from electra.finetune.classification import classification_metrics, regression_metrics
from electra.finetune.common import QAExample, TaggingExample, TextExample
from electra.finetune.families import Family, get_family
from electra.system.files import atomic_write_text

STRENGTHS = (0.5, 2.0, 8.0)  # logistic-regression C; ridge alpha is 1 / C
FORMAT = "electra-floors/2"  # 2: the pair-feature floor and the floors' descriptions
PAIR_FEATURES = ("a", "b", "|a-b|", "a*b")  # the blocks of tfidf_pair, in column order
NGRAMS = "char 1-4 + word 1-2 n-grams"


def baseline_text(e: TextExample) -> str:
    """The text the baseline reads: a pair is concatenated with a space."""
    return e.text if not e.text_pair else f"{e.text} {e.text_pair}"


def split_key(
    family: str | Family,
    labels: Sequence[str],
    main_metric: str,
    splits: dict[str, Sequence[TextExample]],
    qa_style: str = "squad",
) -> str:
    """SHA-256 (hex) naming exactly these examples, labels and settings."""
    qa = get_family(family).floor_constant == "window"
    body = {
        "format": FORMAT,
        "family": get_family(family).name,
        "labels": list(labels),
        "main_metric": main_metric,
        "strengths": STRENGTHS,
        "pair_features": PAIR_FEATURES,
        **({"qa_style": qa_style, "window": [WINDOW_LENGTHS, WINDOW_SIDES]} if qa else {}),
        "splits": {name: [_example_key(e) for e in part] for name, part in sorted(splits.items())},
    }
    raw = json.dumps(body, ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def _example_key(e: TextExample | TaggingExample | QAExample) -> list[Any]:
    if isinstance(e, TaggingExample):
        return [e.text, e.spans, e.tags]
    if isinstance(e, QAExample):
        return [e.id, e.question, e.context, [(a.text, a.start) for a in e.answers]]
    return [e.text, e.text_pair, e.label]


def _repair_bio(tags: list[str]) -> list[str]:
    """``I-X`` after anything but ``B-X``/``I-X`` becomes ``B-X`` (a span must start)."""
    out: list[str] = []
    for tag in tags:
        if tag.startswith("I-") and (not out or out[-1][2:] != tag[2:]):
            tag = "B-" + tag[2:]
        out.append(tag)
    return out


def memorised_tag_floor(
    train: Sequence[TaggingExample], scored: dict[str, Sequence[TaggingExample]]
) -> dict[str, Any]:
    """Scores of tagging each unit with its most frequent training tag (``O`` if unseen)."""
    from electra.finetune.tagging import seqeval_metrics

    counts: dict[str, Counter] = {}
    for e in train:
        for unit, tag in zip(e.units, e.tags or [], strict=False):
            counts.setdefault(unit, Counter())[tag] += 1
    lookup = {unit: c.most_common(1)[0][0] for unit, c in counts.items()}
    out: dict[str, Any] = {"predicts": f"the most frequent tag of each of {len(lookup)} units"}
    for name, part in scored.items():
        if part:
            pred = [_repair_bio([lookup.get(u, "O") for u in e.units]) for e in part]
            out[name] = seqeval_metrics([e.tags for e in part], pred)
    return out


_WORD = re.compile(r"\w+")
WINDOW_LENGTHS = (1, 2, 3, 4)  # L: words in an answer
WINDOW_SIDES = (3, 6, 12)  # W: words searched on either side of a span


def _same_word(a: str, b: str) -> bool:
    """Equal up to the last character of the shorter word (at least two characters)."""
    n = min(len(a), len(b))
    if n < 2:
        return a == b
    need = max(2, n - 1)
    return a[:need] == b[:need]


def _window_words(e: QAExample) -> tuple[list[tuple[int, int]], np.ndarray, np.ndarray]:
    """Context word offsets, each word's weight if it matches a question word (else 0),
    and whether it does."""
    found = [(m.start(), m.end(), m.group().lower()) for m in _WORD.finditer(e.context)]
    question = {m.group().lower() for m in _WORD.finditer(e.question)}
    counts = Counter(w for _, _, w in found)
    match = np.array([any(_same_word(w, q) for q in question) for _, _, w in found], bool)
    rarity = np.array([math.log1p(1 / counts[w]) for _, _, w in found])
    return [(a, b) for a, b, _ in found], rarity * match, match


def _window_answer(e: QAExample, words, weight, match, length: int, side: int) -> str:
    """The best span of ``length`` words (fewer in a shorter context; module docstring)."""
    n = len(words)
    if n == 0:
        return ""
    size = min(length, n)
    total = np.concatenate([[0.0], np.cumsum(weight)])
    repeats = np.concatenate([[0], np.cumsum(match)])
    start = np.arange(n - size + 1)
    end = start + size
    score = (total[start] - total[np.maximum(start - side, 0)]) + (
        total[np.minimum(end + side, n)] - total[end]
    )
    score[repeats[end] - repeats[start] > 0] = -1.0  # an answer repeats no question word
    i = int(np.argmax(score))
    return e.context[words[i][0] : words[i + size - 1][1]]


def window_floor(
    dev: Sequence[QAExample], scored: dict[str, Sequence[QAExample]], style: str
) -> dict[str, Any]:
    """Scores of the sliding-window QA baseline, ``L`` and ``W`` chosen on ``dev``."""
    from electra.finetune.qa import squad_scores

    def scores(part: Sequence[QAExample], length: int, side: int) -> dict[str, float]:
        preds = {e.id: _window_answer(e, *inputs[id(e)], length, side) for e in part}
        return squad_scores(preds, {e.id: [a.text for a in e.answers] for e in part}, style)

    # keyed by object: question ids may repeat across files (dev and test)
    inputs = {id(e): _window_words(e) for part in (dev, *scored.values()) for e in part}
    grid = [(n, w) for n in WINDOW_LENGTHS for w in WINDOW_SIDES]
    length, side = max(grid, key=lambda p: scores(dev, *p)["f1"]) if dev else (3, 6)
    out: dict[str, Any] = {
        "predicts": f"the span of {length} words with the most question words within "
        f"{side} words of it",
        "length": length,
        "side": side,
    }
    for name, part in scored.items():
        if part:
            out[name] = scores(part, length, side)
    return out


def _classes(family: Family) -> bool:
    """Whether the floor predicts a class (majority, logistic) or a value (mean, ridge)."""
    return family.floor_constant == "majority"


def _score(family: Family, y_true: Sequence[Any], y_pred: Sequence[Any], n: int) -> dict:
    if _classes(family):
        return classification_metrics(y_true, y_pred, n)
    return regression_metrics(y_true, y_pred)


def _targets(family: Family, labels: Sequence[str], examples: Sequence[TextExample]) -> list[Any]:
    if _classes(family):
        index = {lab: i for i, lab in enumerate(labels)}
        return [index[str(e.label)] for e in examples]
    return [float(e.label) for e in examples]


def constant_floor(
    family: Family,
    labels: Sequence[str],
    train: Sequence[TextExample],
    scored: dict[str, Sequence[TextExample]],
) -> dict[str, Any]:
    """Scores of always predicting the training majority label (or the training mean)."""
    y_train = _targets(family, labels, train)
    if _classes(family):
        value: Any = Counter(y_train).most_common(1)[0][0]
        described = labels[value]
    else:
        value = float(np.mean(y_train))
        described = value
    out: dict[str, Any] = {"predicts": described}
    for name, part in scored.items():
        if part:
            with warnings.catch_warnings():  # MCC of a constant is 0; sklearn warns about it
                warnings.simplefilter("ignore", UserWarning)
                y_true = _targets(family, labels, part)
                out[name] = _score(family, y_true, [value] * len(part), len(labels))
    return out


def _vectorizer():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import FeatureUnion

    return FeatureUnion(
        [
            (
                "char",
                TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 4), sublinear_tf=True),
            ),
            (
                "word",
                TfidfVectorizer(
                    analyzer="word",
                    ngram_range=(1, 2),
                    sublinear_tf=True,
                    token_pattern=r"(?u)\b\w+\b",
                ),
            ),
        ]
    )


def _estimator(family: Family, strength: float):
    from sklearn.linear_model import LogisticRegression, Ridge

    if _classes(family):
        return LogisticRegression(C=strength, max_iter=2000, random_state=0)
    return Ridge(alpha=1.0 / strength, random_state=0)


def is_pair_task(examples: Sequence[Any]) -> bool:
    """Whether these are sentence pairs (any example has a second text).

    Read from the data rather than the task registry, so a custom task with
    ``--text-pair-column`` gets the pair floor as the built-in pair tasks do.
    """
    return any(isinstance(e, TextExample) and e.text_pair for e in examples)


def floor_descriptions(family: str | Family, pair: bool) -> dict[str, str]:
    """Each floor's name (its key in the floors) -> what it is, in the printouts' words."""
    family = get_family(family)
    const = family.floor_constant
    if const == "memorised":
        return {const: "the most frequent training tag of each unit (BIO repaired)"}
    if const == "window":
        return {const: "the span with the most rare question words near it (sliding window)"}
    if const is None:
        return {}
    model = "logistic regression" if _classes(family) else "ridge regression"
    out = {const: f"always the training {'majority class' if const == 'majority' else 'mean'}"}
    if not pair:
        return {**out, "tfidf": f"TF-IDF ({NGRAMS}) + {model}"}
    return {
        **out,
        "tfidf": f"TF-IDF of the joined pair ({NGRAMS}) + {model}",
        "tfidf_pair": f"TF-IDF pair features (a, b, |a-b|, a*b) + {model}",
    }


def pair_features(vec: Any, examples: Sequence[TextExample]) -> Any:
    """Sparse rows ``[a, b, |a - b|, a * b]``: the fitted ``vec``'s TF-IDF of each text.

    ``a * b`` is non-zero on exactly the n-grams both texts contain and ``|a - b|``
    large where one has what the other lacks: what a match looks like, for a linear model.
    """
    from scipy import sparse

    a = vec.transform([e.text for e in examples])
    b = vec.transform([e.text_pair or "" for e in examples])
    return sparse.hstack([a, b, abs(a - b), a.multiply(b)], format="csr")


def _fitted_floor(
    family: Family,
    labels: Sequence[str],
    main_metric: str,
    featurise: Any,
    train: Sequence[TextExample],
    dev: Sequence[TextExample],
    scored: dict[str, Sequence[TextExample]],
) -> dict[str, Any] | None:
    """Logistic/ridge regression on ``featurise(examples)``, strength chosen on ``dev``.

    Both TF-IDF floors share it, so they differ in their features only. ``None``
    when the training split has a single class (nothing to fit).
    """
    y_train = _targets(family, labels, train)
    if _classes(family) and len(set(y_train)) < 2:
        return None
    x_train, x_dev = featurise(train), featurise(dev)
    y_dev = _targets(family, labels, dev)
    best = None
    for strength in STRENGTHS:
        model = _estimator(family, strength).fit(x_train, y_train)
        value = _score(family, y_dev, model.predict(x_dev), len(labels))[main_metric]
        if best is None or value > best[0]:
            best = (value, strength, model)
    _, strength, model = best
    out: dict[str, Any] = {"strength": strength, "features": int(x_train.shape[1])}
    for name, part in scored.items():
        if part:
            pred = model.predict(featurise(part))
            out[name] = _score(family, _targets(family, labels, part), pred, len(labels))
    return out


def tfidf_floor(
    family: Family,
    labels: Sequence[str],
    main_metric: str,
    train: Sequence[TextExample],
    dev: Sequence[TextExample],
    scored: dict[str, Sequence[TextExample]],
) -> dict[str, Any] | None:
    """TF-IDF of each example's text (a pair joined) + logistic/ridge regression.

    Fitted on ``train``, strength chosen on ``dev``; ``None`` for a single class.
    """
    vec = _vectorizer().fit([baseline_text(e) for e in train])

    def featurise(part: Sequence[TextExample]) -> Any:
        return vec.transform([baseline_text(e) for e in part])

    return _fitted_floor(family, labels, main_metric, featurise, train, dev, scored)


def tfidf_pair_floor(
    family: Family,
    labels: Sequence[str],
    main_metric: str,
    train: Sequence[TextExample],
    dev: Sequence[TextExample],
    scored: dict[str, Sequence[TextExample]],
) -> dict[str, Any] | None:
    """TF-IDF pair features ``[a, b, |a-b|, a*b]`` + logistic/ridge regression.

    One vectorizer, fitted on both sides' training texts, so ``a`` and ``b``
    share their columns; strength chosen on ``dev``; ``None`` for a single class.
    """
    vec = _vectorizer().fit([t for e in train for t in (e.text, e.text_pair) if t])
    out = _fitted_floor(
        family, labels, main_metric, lambda part: pair_features(vec, part), train, dev, scored
    )
    return None if out is None else {"blocks": list(PAIR_FEATURES), **out}


def _build_floors(
    family: Family,
    labels: Sequence[str],
    main_metric: str,
    splits: dict[str, Sequence[Any]],
    qa_style: str,
) -> dict[str, Any]:
    """Every floor of the family on ``splits``, keyed by name, with their descriptions."""
    const = family.floor_constant
    train, dev = splits["train"], splits["dev"]
    scored = {"dev": dev, "test": splits["test"]}
    pair = is_pair_task(train)
    if const == "memorised":
        built = {const: memorised_tag_floor(train, scored), "tfidf": None}
    elif const == "window":
        built = {const: window_floor(dev, scored, qa_style), "tfidf": None}
    else:
        built = {
            const: constant_floor(family, labels, train, scored),
            "tfidf": tfidf_floor(family, labels, main_metric, train, dev, scored),
            "tfidf_model": (
                "TF-IDF char 1-4 + word 1-2 n-grams, "
                + ("logistic regression" if _classes(family) else "ridge regression")
            ),
        }
        if pair:
            args = (family, labels, main_metric, train, dev, scored)
            built["tfidf_pair"] = tfidf_pair_floor(*args)
    return {"pair": pair, **built, "descriptions": floor_descriptions(family, pair)}


def compute_floors(
    family: str | Family,
    labels: Sequence[str],
    main_metric: str,
    train: Sequence[TextExample],
    dev: Sequence[TextExample],
    test: Sequence[TextExample],
    cache_dir: Path | None,
    qa_style: str = "squad",
) -> dict[str, Any] | None:
    """Every floor on exactly these splits, read from or written to ``cache_dir``.

    Text classification and regression get the constant and TF-IDF floors, and
    the pair-feature floor when the examples are pairs; tagging has the
    memorised floor only, QA the sliding window (scored in ``qa_style``); ``None``
    for a family without floors. The result records the cache key, the number
    of examples each floor was trained and scored on, and ``descriptions``.
    """
    family = get_family(family)
    const = family.floor_constant
    if const is None:
        return None
    splits = {"train": train, "dev": dev, "test": test}
    key = split_key(family, labels, main_metric, splits, qa_style)
    path = cache_dir / f"floors-{key[:24]}.json" if cache_dir is not None else None
    if path is not None and path.is_file():
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached.get("key") == key and cached.get("format") == FORMAT:
            return {**cached, "cached": True}
    t0 = time.perf_counter()
    built = _build_floors(family, labels, main_metric, splits, qa_style)
    floors = {
        "format": FORMAT,
        "key": key,
        "examples": {name: len(part) for name, part in splits.items()},
        "constant": const,
        **built,
        "seconds": time.perf_counter() - t0,
    }
    if path is not None:
        # a unique temporary name (and the folder made): jobs side by side never clash
        atomic_write_text(path, json.dumps(floors, indent=1, ensure_ascii=False) + "\n")
    return {**floors, "cached": False}


FLOOR_NAMES = ("tfidf", "tfidf_pair")  # the fitted floors, after the constant one


def floor_scores(floors: dict[str, Any] | None, split: str, metric: str) -> dict[str, float]:
    """``{"majority"|"mean": x, "tfidf": y, "tfidf_pair": z}`` for one split and metric.

    Absent floors are left out: ``tfidf_pair`` exists for sentence-pair tasks only.
    """
    if not floors:
        return {}
    out = {}
    for name in (floors["constant"], *FLOOR_NAMES):
        part = (floors.get(name) or {}).get(split) or {}
        if metric in part:
            out[name] = part[metric]
    return out


def floor_columns(floors: dict[str, Any]) -> list[tuple[str, str, int]]:
    """``(name, column title, width)`` of each printed floor.

    A pair task's two TF-IDF floors are titled "joined" and "pair" so neither
    is read as the other; a single text's column keeps its old title.
    """
    const = floors["constant"]
    columns = [(const, const, 9)]
    if const not in ("majority", "mean"):
        return columns
    model = {"majority": "LR", "mean": "ridge"}[const]
    if "tfidf_pair" not in floors:
        return [*columns, ("tfidf", f"TF-IDF+{model}", 13)]
    titles = [("tfidf", f"joined TF-IDF+{model}"), ("tfidf_pair", f"pair TF-IDF+{model}")]
    return [*columns, *((name, title, len(title) + 2) for name, title in titles)]


def floor_lines(floors: dict[str, Any] | None, metrics: Sequence[str]) -> list[str]:
    """The printed floors table (scores x100), one row per split and metric.

    For a pair task each TF-IDF column is then spelled out under the table.
    """
    if not floors:
        return []
    columns = floor_columns(floors)
    header = " ".join(f"{title:>{w}}" for _, title, w in columns)
    lines = [
        f"floors on the same split ({floors['examples']['train']} train examples; x100):",
        f"  {'split':<6} {'metric':<14} {header}",
    ]
    for split in ("dev", "test"):
        for m in metrics:
            s = floor_scores(floors, split, m)
            if s:
                cells = [f"{100 * s[k]:{w}.2f}" if k in s else f"{'-':>{w}}" for k, _, w in columns]
                lines.append(f"  {split:<6} {m:<14} {' '.join(cells)}")
    if "tfidf_pair" in floors:
        described = floors.get("descriptions") or {}
        width = max(len(title) for _, title, _ in columns[1:])
        for name, title, _ in columns[1:]:
            lines.append(f"  {title + ':':<{width + 1}} {described.get(name, name)}")
    return lines
