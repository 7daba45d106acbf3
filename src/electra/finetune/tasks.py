"""Task registry and the datasets behind each task.

Built-in tasks read the layout of ``shared/data`` (``--data-dir``, or the
environment variable ``ELECTRA_DATA_DIR``, default ``<repo>/../shared/data``).
Which file is train, dev and test, per task (``split_seed`` 42 by default;
every seeded split is stratified by label for classification, grouped by
article for QA so no paragraph leaks between splits, and grouped by the first
text for sentence pairs that share one, e.g. KLUE-NLI's three hypotheses per
premise, so no premise leaks):

* **GLUE** (SST-2, CoLA, MRPC, STS-B, RTE, WNLI): the official dev set has
  labels and the test set does not, so model selection uses a seeded 10%
  slice of train as *dev* and the official dev set is reported as *test* (the
  paper reports GLUE dev). MRPC's canonical GLUE train (3,668 pairs) is
  rebuilt from ``msr_paraphrase_train.txt`` minus ``dev_ids.tsv`` when both are
  present (the staged ``train.tsv`` misses one pair); the labelled MSRP test
  set can be used with ``--test-file glue/MRPC/msr_paraphrase_test.txt``.
  QNLI: only dev is staged, split 80/10/10 (with ``glue/QNLI/train.tsv``
  present, e.g. from the download helper, the GLUE policy applies).
* **KLUE** NLI, STS, NER: only dev files are staged; each is split 80/10/10
  (train/dev/test). KorQuAD 1.0 (dev only) and XQuAD-en (one file): the same,
  by article. When the official train file is there too (``--train-file``,
  or ``klue-*-v1.1_train.*`` / ``KorQuAD_v1.0_train.json`` next to the dev
  file, as the download helper puts them) train is train, dev is a 10% slice
  of it, and the official dev file is the test set.
* **KorNLI**: XNLI-ko dev and test are staged; without ``--train-file``
  (``multinli.train.ko.tsv``) the dev set is split 80/20 into train and dev,
  and the XNLI test set is the test set.
* **KorSTS**, **WNUT-17**: official train/dev/test.
* **NSMC**: from the official ``nsmc/ratings_train.txt``/``ratings_test.txt``
  when present (dev = 10% of train), else built from the raw review files
  (``nsmc/raw_subset``): rating 1-4 negative, 9-10 positive, 5-8 dropped,
  de-duplicated, then balanced like the official corpus (a seeded random
  subset of the majority class, as large as the minority class; ``balance``
  False / ``--no-balance`` keeps every review, 75% positive), split 60/20/20
  stratified, so every split is 50/50 (within one review).
* **custom**: ``--train-file`` (+ optional ``--dev-file``, ``--test-file``) in
  CSV/TSV/JSON Lines with ``--text-column``, ``--text-pair-column``,
  ``--label-column``; ``--task-type`` classification (default), regression,
  tagging (CoNLL or JSON Lines tokens/tags) or qa (SQuAD JSON / JSON Lines).
  Missing dev/test are split from train (10% each). Label sets are inferred
  from train (a dev/test label absent from train is an error) and saved with
  the model.
"""

from __future__ import annotations

import difflib
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from electra.finetune.common import (
    DatasetError,
    Splits,
    TextExample,
    where,
)
from electra.finetune.families import (
    CLASSIFICATION,
    QA,
    REGRESSION,
    TAGGING,
    Family,
    family_names,
    get_family,
)
from electra.finetune.readers import (
    NSMC_LABELS,
    read_conll,
    read_json_array,
    read_klue_ner,
    read_nsmc_ratings,
    read_nsmc_raw,
    read_squad,
    read_tsv,
    require_columns,
    text_examples,
)
from electra.system.paths import default_data_dir
from electra.text.formats import format_help


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> Path:
    """``data_dir`` if given, else the shared data directory (``ELECTRA_DATA_DIR``)."""
    return Path(data_dir) if data_dir else default_data_dir()


def _flag(default: Any, doc: str, *, path: bool = False) -> Any:
    """A :class:`DataFlags` field: its ``--help`` text, and whether it names a file."""
    return field(default=default, metadata={"doc": doc, "path": path})


@dataclass
class DataFlags:
    """The data options a command line sets: where the data is, how to read and split it.

    Declared once, here: :class:`DataOptions` adds the fixed split fractions,
    and ``electra finetune``'s :class:`~electra.finetune.options.FinetuneArgs`
    inherits these fields, so each is a flag (``--data-dir`` ...) with this doc.
    """

    data_dir: str = _flag(
        "",
        "Data directory in the shared/data layout (default: $ELECTRA_DATA_DIR or "
        "<repo>/../shared/data).",
        path=True,
    )
    train_file: str = _flag("", "Training file (custom task, or to replace a task's).", path=True)
    dev_file: str = _flag("", "Dev file (default: a seeded slice of train).", path=True)
    test_file: str = _flag("", "Test file.", path=True)
    task_type: str = _flag("", f"Family of a custom task: {', '.join(family_names())}.")
    text_column: str = _flag("", "Text column of a custom table (default: text).")
    text_pair_column: str = _flag("", "Second-text column for pairs.")
    label_column: str = _flag("", "Label column of a custom table (default: label).")
    format: str = _flag(
        "",
        "Format of the custom data files instead of the one their names give: "
        + format_help("table")
        + "; a .txt table is TSV or CSV, sniffed from its first lines.",
    )
    split_seed: int = _flag(42, "Seed of the train/dev/test splits made here.")
    balance: bool = _flag(
        True,
        "NSMC from raw reviews: down-sample the majority class to 50/50 like the official "
        "corpus (--no-balance keeps every review).",
    )

    def data_options(self) -> DataOptions:
        """These options as :class:`DataOptions`, file paths made absolute (as recorded).

        Absolute, not resolved: a symlink's name counts. A field of DataOptions
        that ``self`` lacks (the split fractions of a command's options) keeps its default.
        """
        mine = {f.name for f in fields(self)}
        values = {}
        for f in fields(DataOptions):
            if f.name in mine:
                value = getattr(self, f.name)
                values[f.name] = (
                    os.path.abspath(value) if f.metadata.get("path") and value else value
                )
        return DataOptions(**values)


@dataclass
class DataOptions(DataFlags):
    """Where the data is and how to split it (recorded with the model).

    The fields of :class:`DataFlags`, then the split fractions, which no flag sets.
    """

    dev_fraction: float = 0.1
    test_fraction: float = 0.1

    def __post_init__(self) -> None:
        for name in ("dev_fraction", "test_fraction"):
            v = getattr(self, name)
            if not 0 < v < 0.5:
                raise ValueError(f"{name} must be in (0, 0.5), got {v}")


@dataclass(frozen=True)
class TaskSpec:
    """A task: its family, metric, fixed labels (if any) and data loader.

    ``family`` is a registered :class:`~electra.finetune.families.Family` (a
    family's name is accepted and looked up); results files record its name.
    ``epochs``: the task's Table 7 epochs where they differ from its family's
    (10 for RTE and STS); ``main_metric`` "" is the family's.
    """

    name: str
    family: Family
    main_metric: str
    description: str
    loader: Callable[[TaskSpec, DataOptions], Splits]
    labels: tuple[str, ...] | None = None
    qa_style: str = "squad"
    glue: str | None = None
    reader: Callable[[Path], list[Any]] | None = None
    epochs: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "family", get_family(self.family))
        if not self.main_metric:
            object.__setattr__(self, "main_metric", self.family.main_metric)

    @property
    def default_epochs(self) -> int:
        """Table 7 epochs: the task's own, else its family's."""
        return self.epochs or self.family.default_epochs


@dataclass
class TaskData:
    spec: TaskSpec
    splits: Splits
    labels: list[str]
    options: DataOptions


# ---------------------------------------------------------------------------
# Seeded splits
# ---------------------------------------------------------------------------


def _allocate(n: int, fractions: Sequence[float]) -> list[int]:
    """Split ``n`` into parts proportional to ``fractions`` (largest remainder)."""
    raw = [n * f for f in fractions]
    counts = [int(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda k: -(raw[k] - counts[k]))
    for k in order[: n - sum(counts)]:
        counts[k] += 1
    return counts


def seeded_split(
    items: Sequence[Any],
    fractions: Sequence[float],
    seed: int,
    key: Callable[[Any], Any] | None = None,
    group: Callable[[Any], Any] | None = None,
) -> list[list[Any]]:
    """Split ``items`` into parts of the given fractions, reproducibly.

    ``key`` stratifies (each class is split in the same proportions);
    ``group`` keeps items of a group together (QA articles). Each part keeps
    the original order of its items.
    """
    if abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError(f"fractions must sum to 1, got {fractions}")
    rng = random.Random(seed)
    parts: list[list[int]] = [[] for _ in fractions]
    if group is not None:
        groups: dict[Any, list[int]] = {}
        for i, it in enumerate(items):
            groups.setdefault(group(it), []).append(i)
        names = list(groups)
        rng.shuffle(names)
        targets = _allocate(len(items), fractions)
        k = 0
        # Fill the later (smaller) parts first so they get whole groups near their size.
        for part in range(len(fractions) - 1, 0, -1):
            while k < len(names) and len(parts[part]) < targets[part]:
                parts[part].extend(groups[names[k]])
                k += 1
        for name in names[k:]:
            parts[0].extend(groups[name])
    else:
        strata: dict[Any, list[int]] = {}
        for i, it in enumerate(items):
            strata.setdefault(key(it) if key else None, []).append(i)
        for label in sorted(strata, key=repr):
            idx = strata[label]
            rng.shuffle(idx)
            start = 0
            for part, count in enumerate(_allocate(len(idx), fractions)):
                parts[part].extend(idx[start : start + count])
                start += count
    return [[items[i] for i in sorted(p)] for p in parts]


def balance_classes(items: Sequence[TextExample], seed: int) -> list[TextExample]:
    """Every class down-sampled to the size of the smallest, reproducibly.

    Each class keeps a seeded random subset of its examples (the smallest class
    keeps all); the result keeps the original order. This is how the official
    NSMC corpus is balanced (100k/100k), and it makes the majority-class floor 50%.
    """
    by_label: dict[Any, list[int]] = {}
    for i, e in enumerate(items):
        by_label.setdefault(e.label, []).append(i)
    if not by_label:
        return []
    size = min(len(v) for v in by_label.values())
    rng = random.Random(seed)
    keep: list[int] = []
    for label in sorted(by_label, key=repr):
        keep += rng.sample(by_label[label], size)
    return [items[i] for i in sorted(keep)]


def subsample(items: Sequence[Any], limit: int, seed: int) -> list[Any]:
    """At most ``limit`` items, a seeded random subset in the original order (0 = all)."""
    if not limit or limit >= len(items):
        return list(items)
    keep = sorted(random.Random(seed).sample(range(len(items)), limit))
    return [items[i] for i in keep]


# ---------------------------------------------------------------------------
# Generic split policy
# ---------------------------------------------------------------------------


@dataclass
class Layout:
    """Official files of a task (None: absent). ``pool``: a single file to split."""

    train: Path | None = None
    dev: Path | None = None
    test: Path | None = None
    pool: Path | None = None
    test_note: str = ""


def _read_official(
    opts: DataOptions, layout: Layout, reader: Callable[[Path], list[Any]], notes: dict[str, str]
) -> dict[str, list[Any] | None]:
    """train/dev/test from the user's files, else the task's official ones (None: absent)."""
    parts: dict[str, list[Any] | None] = {}
    for kind in ("train", "dev", "test"):
        user, official = getattr(opts, f"{kind}_file"), getattr(layout, kind)
        parts[kind] = None
        if user:
            notes[kind] = f"{user}"
            parts[kind] = reader(Path(user))
        elif official is not None and official.is_file():
            notes[kind] = str(official)
            parts[kind] = reader(official)
    if parts["test"] is not None and not opts.test_file and layout.test_note:
        notes["test"] += f" ({layout.test_note})"
    return parts


def _read_pool(
    spec: TaskSpec, layout: Layout, reader: Callable[[Path], list[Any]], parts: dict
) -> list[Any] | None:
    """The single file to split, when the task has one and a split is missing."""
    if layout.pool is None or (parts["train"] is not None and parts["test"] is not None):
        return None
    if not layout.pool.is_file():
        raise FileNotFoundError(
            f"{layout.pool}: data file of task {spec.name!r} not found "
            "(set --data-dir or ELECTRA_DATA_DIR, or run the download helper)"
        )
    return reader(layout.pool)


def pair_strata(
    pool: Sequence[Any], strata: dict[str, Callable[[Any], Any]]
) -> tuple[dict[str, Callable[[Any], Any]], str]:
    """The split keywords for ``pool``: grouped by the first text when sentence pairs
    share it (KLUE-NLI: three hypotheses per premise, one per label), so no premise is in
    two splits; else ``strata`` unchanged. Also the words the split notes add.

    Stratified by label, such a pool sends a test premise's other two labels to train,
    and a model (or floor) that remembers the premise is pushed to a wrong label.
    """
    firsts = [e.text for e in pool if getattr(e, "text_pair", None)]
    if len(set(firsts)) == len(firsts):
        return strata, ""
    repeated = len(firsts) - len(set(firsts))
    return {"group": lambda e: e.text}, f"; grouped by first text, {repeated:,} repeats"


def _split_pool(
    pool: list[Any], src: str, opts: DataOptions, parts: dict, notes: dict, strata: dict
) -> None:
    """Train, and whichever of dev and test is missing, as seeded slices of ``pool``."""
    missing = [kind for kind in ("dev", "test") if parts[kind] is None]
    if not missing:
        parts["train"], notes["train"] = pool, src
        return
    fraction = {"dev": opts.dev_fraction, "test": opts.test_fraction}
    f_train = 1.0
    for kind in missing:
        f_train -= fraction[kind]
    kinds, fractions = ["train", *missing], [f_train] + [fraction[k] for k in missing]
    strata, grouped = pair_strata(pool, strata)
    slices = seeded_split(pool, fractions, opts.split_seed, **strata)
    for kind, part, f in zip(kinds, slices, fractions, strict=True):
        parts[kind] = part
        notes[kind] = f"{src}: seeded {f:.0%} (split_seed {opts.split_seed}{grouped})"


def _train_without_file(
    spec: TaskSpec, opts: DataOptions, layout: Layout, pool: list[Any] | None, parts, notes
) -> None:
    """No training file: split the pool, else the dev set 80/20, else fail."""
    strata = spec.family.split_strata()
    how = f"split_seed {opts.split_seed}"
    if pool is not None:
        _split_pool(pool, str(layout.pool), opts, parts, notes, strata)
    elif parts["dev"] is not None:
        src = notes["dev"]
        strata, grouped = pair_strata(parts["dev"], strata)
        parts["train"], parts["dev"] = seeded_split(
            parts["dev"], [0.8, 0.2], opts.split_seed, **strata
        )
        notes["train"] = f"{src}: seeded 80% ({how}{grouped}; no training file)"
        notes["dev"] = f"{src}: seeded 20% ({how}{grouped})"
    else:
        raise DatasetError(
            f"task {spec.name!r}: no training data found; pass --train-file "
            f"(or --data-dir pointing at the shared data layout)"
        )


def _assemble(
    spec: TaskSpec,
    opts: DataOptions,
    layout: Layout,
    reader: Callable[[Path], list[Any]],
) -> Splits:
    """Read the files and fill missing splits with seeded splits (see the module doc)."""
    notes: dict[str, str] = {}
    parts = _read_official(opts, layout, reader, notes)
    pool = _read_pool(spec, layout, reader, parts)
    if parts["train"] is None:
        _train_without_file(spec, opts, layout, pool, parts, notes)
    else:
        if parts["test"] is None and pool is not None:
            parts["test"], notes["test"] = pool, f"{layout.pool}"
        if parts["dev"] is None:
            src, f_dev, seed = notes["train"], opts.dev_fraction, opts.split_seed
            parts["train"], parts["dev"] = seeded_split(
                parts["train"], [1 - f_dev, f_dev], seed, **spec.family.split_strata()
            )
            notes["train"] = f"{src}: seeded {1 - f_dev:.0%} (split_seed {seed})"
            notes["dev"] = f"{src}: seeded {f_dev:.0%} (split_seed {seed})"
    if parts["test"] is None:
        notes["test"] = "none (no test file; pass --test-file)"
    return Splits(parts["train"] or [], parts["dev"] or [], parts["test"] or [], notes)


# ---------------------------------------------------------------------------
# Readers per task
# ---------------------------------------------------------------------------


def _glue_reader(
    text: str,
    pair: str | None,
    label: str,
    labels: dict[str, str] | None,
    regression: bool = False,
    header: bool = True,
    columns: list[str] | None = None,
) -> Callable[[Path], list[TextExample]]:
    def read(path: Path) -> list[TextExample]:
        names, rows = read_tsv(path, header=header, columns=columns)
        require_columns(path, names, {"--text-column": text})
        if pair:
            require_columns(path, names, {"--text-pair-column": pair})
        require_columns(path, names, {"--label-column": label})
        return text_examples(path, rows, text, pair, label, regression, labels)

    return read


def _klue_json_reader(text: str, pair: str, regression: bool, labels: dict[str, str] | None):
    def read(path: Path) -> list[TextExample]:
        _, rows = read_json_array(path)
        flat = []
        for n, row in rows:
            row = dict(row)
            if regression:
                lab = row.get("labels")
                if not isinstance(lab, dict) or "label" not in lab:
                    raise DatasetError(f"{where(path, n, 'labels.label')}: missing value")
                row["label"] = lab["label"]
            else:
                if "gold_label" not in row:
                    raise DatasetError(f"{where(path, n, 'gold_label')}: missing value")
                row["label"] = row["gold_label"]
            flat.append((n, row))
        return text_examples(path, flat, text, pair, "label", regression, labels)

    return read


def _glue_files(name: str) -> dict[str, str]:
    return {"train": f"glue/{name}/train.tsv", "test": f"glue/{name}/dev.tsv"}


def _dev_only(folder: str, dev: str, train: str | None = None) -> dict[str, str]:
    files = {"pool": f"{folder}/{dev}"}
    return files if train is None else {**files, "train": f"{folder}/{train}"}


# Where every built-in task's files are, relative to the data directory: the one
# list of paths (the download helper, electra.finetune.download, writes there).
# Roles: train/dev/test (official splits) or pool (a dev-only file to split 80/10/10,
# unless the official train file is there too); nsmc and mrpc have a few more.
DATA_FILES: dict[str, dict[str, str]] = {
    "nsmc": {
        "train": "nsmc/ratings_train.txt",
        "test": "nsmc/ratings_test.txt",
        "raw": "nsmc/raw_subset",
    },
    "sst2": _glue_files("SST-2"),
    "cola": _glue_files("CoLA"),
    "mrpc": {
        **_glue_files("MRPC"),
        "msr_train": "glue/MRPC/msr_paraphrase_train.txt",
        "msr_test": "glue/MRPC/msr_paraphrase_test.txt",
        "dev_ids": "glue/MRPC/dev_ids.tsv",
    },
    "stsb": _glue_files("STS-B"),
    "rte": _glue_files("RTE"),
    "qnli": _dev_only("glue/QNLI", "dev.tsv", "train.tsv"),
    "wnli": _glue_files("WNLI"),
    "klue-nli": _dev_only("klue/nli", "klue-nli-v1.1_dev.json", "klue-nli-v1.1_train.json"),
    "klue-sts": _dev_only("klue/sts", "klue-sts-v1.1_dev.json", "klue-sts-v1.1_train.json"),
    "klue-ner": _dev_only("klue/ner", "klue-ner-v1.1_dev.tsv", "klue-ner-v1.1_train.tsv"),
    "kornli": {
        "train": "korean/kornli/multinli.train.ko.tsv",
        "dev": "korean/kornli/xnli.dev.ko.tsv",
        "test": "korean/kornli/xnli.test.ko.tsv",
    },
    "korsts": {split: f"korean/korsts/sts-{split}.tsv" for split in ("train", "dev", "test")},
    "wnut17": {
        "train": "ner/wnut17/wnut17train.conll",
        "dev": "ner/wnut17/emerging.dev.conll",
        "test": "ner/wnut17/emerging.test.annotated",
    },
    "korquad": _dev_only("qa/korquad", "KorQuAD_v1.0_dev.json", "KorQuAD_v1.0_train.json"),
    "xquad-en": _dev_only("qa/xquad", "xquad.en.json"),
    "squad": {"train": "qa/squad/train-v1.1.json", "test": "qa/squad/dev-v1.1.json"},
}
GLUE_TEST_NOTE = "official GLUE dev set, reported as test"
DEV_AS_TEST = "official dev set, reported as test"


def _data_layout(task: str, test_note: str = "") -> Callable[[Path], Layout]:
    """The layout of a task's :data:`DATA_FILES` under a data directory."""
    files = DATA_FILES[task]

    def layout(d: Path) -> Layout:
        path = {role: d / rel for role, rel in files.items()}
        if "pool" not in path:
            return Layout(path.get("train"), path.get("dev"), path.get("test"), None, test_note)
        # a dev-only set (split 80/10/10), unless its official train file is there too:
        # then train is train and the official dev set is reported as test (as for GLUE)
        if "train" in path and path["train"].is_file():
            return Layout(train=path["train"], test=path["pool"], test_note=DEV_AS_TEST)
        return Layout(pool=path["pool"])

    return layout


def _builtin(
    layout: Callable[[Path], Layout], reader: Callable[[Path], list[Any]]
) -> Callable[[TaskSpec, DataOptions], Splits]:
    def load(spec: TaskSpec, opts: DataOptions) -> Splits:
        d = resolve_data_dir(opts.data_dir)
        lay = layout(d)
        official = [p for p in (lay.train, lay.dev, lay.test, lay.pool) if p is not None]
        if not opts.train_file and official and not any(p.is_file() for p in official):
            raise FileNotFoundError(
                f"task {spec.name!r}: none of its data files exist under {d} "
                f"(looked for {', '.join(str(p) for p in official)}); set --data-dir or "
                "ELECTRA_DATA_DIR, pass --train-file, or run the download helper"
            )
        return _assemble(spec, opts, lay, reader)

    load.reader = reader  # type: ignore[attr-defined]
    return load


def _mrpc_layout(d: Path) -> Layout:
    """GLUE MRPC; train rebuilt from msr_paraphrase_train.txt minus dev_ids.tsv when present."""
    files = {role: d / rel for role, rel in DATA_FILES["mrpc"].items()}
    canonical = files["msr_train"].is_file() and files["dev_ids"].is_file()
    return Layout(
        train=files["msr_train"] if canonical else files["train"],
        test=files["test"],
        test_note=GLUE_TEST_NOTE,
    )


def mrpc_dev_ids(path: Path) -> set[tuple[str, str]]:
    """The (#1 ID, #2 ID) pairs of GLUE's MRPC dev set (``dev_ids.tsv``)."""
    dev_ids = set()
    for line in path.read_text(encoding="utf-8-sig").split("\n"):
        if line.strip():
            a, b = line.strip().split("\t")
            dev_ids.add((a, b))
    return dev_ids


def _mrpc_train(path: Path) -> list[TextExample]:
    """MRPC rows; ``msr_paraphrase_train.txt`` loses the GLUE dev pairs (``dev_ids.tsv``)."""
    raw = path
    ids = path.parent / "dev_ids.tsv"
    reader = _glue_reader("#1 String", "#2 String", "Quality", MRPC_LABELS)
    if path.name == "msr_paraphrase_train.txt" and ids.is_file():
        dev_ids = mrpc_dev_ids(ids)
        names, rows = read_tsv(raw)
        keep = [(n, r) for n, r in rows if (r["#1 ID"], r["#2 ID"]) not in dev_ids]
        return text_examples(raw, keep, "#1 String", "#2 String", "Quality", False, MRPC_LABELS)
    return reader(path)


def _nsmc_read(p: Path) -> list[TextExample]:
    """A directory of raw review files, or an official ratings_*.txt."""
    if p.is_dir():
        return read_nsmc_raw(p)[0]
    return read_nsmc_ratings(p)


def _nsmc_loader(spec: TaskSpec, opts: DataOptions) -> Splits:
    d = resolve_data_dir(opts.data_dir)
    files = {role: d / rel for role, rel in DATA_FILES["nsmc"].items()}
    train_p = Path(opts.train_file) if opts.train_file else None
    if train_p is None and files["train"].is_file():
        train_p = files["train"]
    if train_p is not None:
        return _nsmc_official(spec, opts, train_p, files["test"])
    if not files["raw"].is_dir():
        raise FileNotFoundError(
            f"{files['raw']}: NSMC raw review files not found, and no {files['train']}; set "
            "--data-dir or ELECTRA_DATA_DIR, pass --train-file ratings_train.txt, or run the "
            "download helper"
        )
    return _nsmc_from_raw(spec, opts, files["raw"])


def _nsmc_official(spec: TaskSpec, opts: DataOptions, train_p: Path, test_p: Path) -> Splits:
    """NSMC from ratings_train.txt (dev: a seeded 10% of it) and ratings_test.txt."""
    seed = opts.split_seed
    train = _nsmc_read(train_p)
    notes = {"train": str(train_p)}
    test_p = Path(opts.test_file) if opts.test_file else test_p
    test = _nsmc_read(test_p) if test_p.is_file() or test_p.is_dir() else []
    notes["test"] = str(test_p) if test else "none (no ratings_test.txt; pass --test-file)"
    if opts.dev_file:
        dev = _nsmc_read(Path(opts.dev_file))
        notes["dev"] = opts.dev_file
    else:
        train, dev = seeded_split(train, [0.9, 0.1], seed, **spec.family.split_strata())
        notes["train"] += f": seeded 90% (split_seed {seed})"
        notes["dev"] = f"{train_p}: seeded 10% (split_seed {seed})"
    return Splits(train, dev, test, notes)


def _nsmc_from_raw(spec: TaskSpec, opts: DataOptions, raw: Path) -> Splits:
    """NSMC built from the raw review files, balanced unless ``--no-balance``, split 60/20/20."""
    seed = opts.split_seed
    examples, stats = read_nsmc_raw(raw)
    built = (
        f"{raw}: NSMC rule (1-4 negative, 9-10 positive, 5-8 dropped), de-duplicated "
        f"({stats['kept']} of {stats['reviews']} reviews kept; dropped "
        f"{stats['neutral_5_8']} neutral, {stats['duplicate_id'] + stats['duplicate_text']} "
        f"duplicates, {stats['conflicting_text']} with conflicting labels, {stats['empty']} empty)"
    )
    if opts.balance:
        kept = len(examples)
        examples = balance_classes(examples, seed)
        built += (
            f"; balanced 50/50 like the official corpus: a seeded random {len(examples)} of "
            f"{kept} (split_seed {seed}; --no-balance keeps all)"
        )
    else:
        built += "; unbalanced (--no-balance: every review kept)"
    slices = seeded_split(examples, [0.6, 0.2, 0.2], seed, **spec.family.split_strata())
    parts = dict(zip(("train", "dev", "test"), slices, strict=True))
    notes = {"source": built}
    for kind, share in (("train", 60), ("dev", 20), ("test", 20)):
        notes[kind] = f"seeded stratified {share}% (split_seed {seed})"
    for kind in ("dev", "test"):
        user = getattr(opts, f"{kind}_file")
        if user:
            parts[kind], notes[kind] = _nsmc_read(Path(user)), str(Path(user))
    return Splits(parts["train"], parts["dev"], parts["test"], notes)


def _custom_loader(spec: TaskSpec, opts: DataOptions) -> Splits:
    if not opts.train_file:
        raise ValueError(
            "task 'custom' needs --train-file (and optionally --dev-file, --test-file), "
            "with --text-column/--text-pair-column/--label-column for tables"
        )
    splits = _assemble(spec, opts, Layout(), spec.family.custom_reader(opts))
    if not opts.test_file:
        # carve a test split from train as well
        src = splits.notes["train"]
        f = (
            opts.test_fraction / (1 - opts.dev_fraction)
            if not opts.dev_file
            else opts.test_fraction
        )
        splits.train, splits.test = seeded_split(
            splits.train, [1 - f, f], opts.split_seed + 1, **spec.family.split_strata()
        )
        splits.notes["train"] = f"{src}, then seeded {1 - f:.0%} of that"
        splits.notes["test"] = f"{src}: seeded slice (split_seed {opts.split_seed + 1})"
    return splits


# ---------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------

BINARY = {"0": "negative", "1": "positive"}
COLA_LABELS = {"0": "unacceptable", "1": "acceptable"}
MRPC_LABELS = {"0": "not_equivalent", "1": "equivalent"}
WNLI_LABELS = {"0": "not_entailment", "1": "entailment"}
RTE_LABELS = {"entailment": "entailment", "not_entailment": "not_entailment"}
NLI3 = {"entailment": "entailment", "neutral": "neutral", "contradiction": "contradiction"}
WNUT_TAGS = ("O",) + tuple(
    f"{p}-{t}"
    for t in ("corporation", "creative-work", "group", "location", "person", "product")
    for p in ("B", "I")
)
KLUE_NER_TAGS = ("O",) + tuple(
    f"{p}-{t}" for t in ("PS", "LC", "OG", "DT", "TI", "QT") for p in ("B", "I")
)


def _fixed(mapping: dict[str, str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(mapping.values()))


TASKS: dict[str, TaskSpec] = {}


def register(spec: TaskSpec) -> TaskSpec:
    """Add a task to the registry (also for users' own tasks in Python)."""
    if spec.reader is None and hasattr(spec.loader, "reader"):
        spec = replace(spec, reader=spec.loader.reader)
    TASKS[spec.name] = spec
    return spec


for _spec in [
    TaskSpec(
        "nsmc",
        CLASSIFICATION,
        "accuracy",
        "Naver movie review sentiment (Korean, binary)",
        _nsmc_loader,
        labels=NSMC_LABELS,
        reader=_nsmc_read,
    ),
    TaskSpec(
        "sst2",
        CLASSIFICATION,
        "accuracy",
        "GLUE SST-2 sentiment",
        _builtin(
            _data_layout("sst2", GLUE_TEST_NOTE), _glue_reader("sentence", None, "label", BINARY)
        ),
        labels=_fixed(BINARY),
        glue="sst2",
    ),
    TaskSpec(
        "cola",
        CLASSIFICATION,
        "mcc",
        "GLUE CoLA acceptability (Matthews correlation)",
        _builtin(
            _data_layout("cola", GLUE_TEST_NOTE),
            _glue_reader(
                "sentence",
                None,
                "label",
                COLA_LABELS,
                header=False,
                columns=["source", "label", "mark", "sentence"],
            ),
        ),
        labels=_fixed(COLA_LABELS),
        glue="cola",
    ),
    TaskSpec(
        "mrpc",
        CLASSIFICATION,
        "acc_and_f1",
        "GLUE MRPC paraphrase (accuracy and F1)",
        _builtin(_mrpc_layout, _mrpc_train),
        labels=_fixed(MRPC_LABELS),
        glue="mrpc",
    ),
    TaskSpec(
        "stsb",
        REGRESSION,
        "spearman",
        "GLUE STS-B similarity 0-5 (Spearman; Pearson reported)",
        _builtin(
            _data_layout("stsb", GLUE_TEST_NOTE),
            _glue_reader("sentence1", "sentence2", "score", None, True),
        ),
        glue="stsb",
        epochs=10,
    ),
    TaskSpec(
        "rte",
        CLASSIFICATION,
        "accuracy",
        "GLUE RTE entailment",
        _builtin(
            _data_layout("rte", GLUE_TEST_NOTE),
            _glue_reader("sentence1", "sentence2", "label", RTE_LABELS),
        ),
        labels=_fixed(RTE_LABELS),
        glue="rte",
        epochs=10,
    ),
    TaskSpec(
        "qnli",
        CLASSIFICATION,
        "accuracy",
        "GLUE QNLI (only dev staged: split 80/10/10)",
        _builtin(
            _data_layout("qnli"),
            _glue_reader("question", "sentence", "label", RTE_LABELS),
        ),
        labels=_fixed(RTE_LABELS),
        glue="qnli",
    ),
    TaskSpec(
        "wnli",
        CLASSIFICATION,
        "accuracy",
        "GLUE WNLI (excluded from the GLUE average, as in BERT/ELECTRA)",
        _builtin(
            _data_layout("wnli", GLUE_TEST_NOTE),
            _glue_reader("sentence1", "sentence2", "label", WNLI_LABELS),
        ),
        labels=_fixed(WNLI_LABELS),
        glue="wnli",
    ),
    TaskSpec(
        "klue-nli",
        CLASSIFICATION,
        "accuracy",
        "KLUE NLI (dev only: split 80/10/10)",
        _builtin(
            _data_layout("klue-nli"),
            _klue_json_reader("premise", "hypothesis", False, NLI3),
        ),
        labels=_fixed(NLI3),
    ),
    TaskSpec(
        "klue-sts",
        REGRESSION,
        "pearson",
        "KLUE STS 0-5 (dev only: split 80/10/10; Pearson as KLUE)",
        _builtin(
            _data_layout("klue-sts"),
            _klue_json_reader("sentence1", "sentence2", True, None),
        ),
        epochs=10,
    ),
    TaskSpec(
        "klue-ner",
        TAGGING,
        "f1",
        "KLUE NER, character-level BIO (dev only: split 80/10/10)",
        _builtin(
            _data_layout("klue-ner"),
            read_klue_ner,
        ),
        labels=KLUE_NER_TAGS,
    ),
    TaskSpec(
        "kornli",
        CLASSIFICATION,
        "accuracy",
        "KorNLI (XNLI-ko dev as dev, test as test; train via --train-file)",
        _builtin(
            _data_layout("kornli"),
            _glue_reader("sentence1", "sentence2", "gold_label", NLI3),
        ),
        labels=_fixed(NLI3),
    ),
    TaskSpec(
        "korsts",
        REGRESSION,
        "spearman",
        "KorSTS similarity 0-5 (official train/dev/test)",
        _builtin(
            _data_layout("korsts"),
            _glue_reader("sentence1", "sentence2", "score", None, True),
        ),
        epochs=10,
    ),
    TaskSpec(
        "wnut17",
        TAGGING,
        "f1",
        "WNUT-17 emerging entities, word-level BIO (official train/dev/test)",
        _builtin(
            _data_layout("wnut17"),
            read_conll,
        ),
        labels=WNUT_TAGS,
    ),
    TaskSpec(
        "korquad",
        QA,
        "f1",
        "KorQuAD 1.0 (dev only: split 80/10/10 by article; KorQuAD EM/F1)",
        _builtin(
            _data_layout("korquad"),
            read_squad,
        ),
        qa_style="korquad",
    ),
    TaskSpec(
        "xquad-en",
        QA,
        "f1",
        "XQuAD English (SQuAD v1.1 dev subset; split 80/10/10 by article)",
        _builtin(_data_layout("xquad-en"), read_squad),
    ),
    TaskSpec(
        "squad",
        QA,
        "f1",
        "SQuAD v1.1 (qa/squad/train-v1.1.json, dev-v1.1.json as test; or --train-file)",
        _builtin(
            _data_layout("squad", "official SQuAD dev set, reported as test"),
            read_squad,
        ),
    ),
    TaskSpec(
        "custom",
        CLASSIFICATION,
        "",
        "your own CSV/TSV/JSONL/CoNLL/SQuAD files (--train-file, --task-type)",
        _custom_loader,
    ),
]:
    register(_spec)

ALIASES = {
    "sst-2": "sst2",
    "sts-b": "stsb",
    "klue_nli": "klue-nli",
    "klue_sts": "klue-sts",
    "klue_ner": "klue-ner",
    "wnut-17": "wnut17",
    "wnut": "wnut17",
    "xquad": "xquad-en",
    "korquad1": "korquad",
}


def get_task(name: str) -> TaskSpec:
    """The task called ``name`` (case-insensitive, a few aliases); clear error otherwise."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in TASKS:
        close = difflib.get_close_matches(key, list(TASKS) + list(ALIASES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown task {name!r}{hint}; known tasks: {', '.join(sorted(TASKS))}")
    return TASKS[key]


# ---------------------------------------------------------------------------
# Labels
# ---------------------------------------------------------------------------


def infer_labels(spec: TaskSpec, train: Sequence[Any]) -> list[str]:
    """The label set: fixed for built-in tasks, else inferred from train."""
    if not spec.family.has_labels:
        return []
    if spec.labels is not None:
        return list(spec.labels)
    return spec.family.infer_labels(train)


def check_labels(
    spec: TaskSpec, splits: Splits, labels: Sequence[str], origin: str | None = None
) -> None:
    """Every dev/test label must be one the model can predict (i.e. seen in train)."""
    if origin is None:
        origin = "the task's label set" if spec.labels is not None else "train"
    for kind in ("train", "dev", "test"):
        spec.family.check_labels(getattr(splits, kind), labels, kind, origin)


def custom_task(family: str | Family) -> TaskSpec:
    """The ``custom`` task of one family (``--task-type``): its metric, reader and splits."""
    if isinstance(family, str) and family not in family_names():
        raise ValueError(f"--task-type must be one of {', '.join(family_names())}; got {family!r}")
    fam = get_family(family)
    return replace(TASKS["custom"], family=fam, main_metric=fam.main_metric)


def load_task_data(
    task: str | TaskSpec,
    options: DataOptions | None = None,
    labels: Sequence[str] | None = None,
) -> TaskData:
    """Read and split a task's data; ``labels`` (of a trained model) fixes the label set."""
    opts = options or DataOptions()
    spec = get_task(task) if isinstance(task, str) else task
    if spec.name == "custom":
        spec = custom_task(opts.task_type or CLASSIFICATION)
    elif opts.task_type and opts.task_type != spec.family.name:
        raise ValueError(
            f"--task-type {opts.task_type!r} does not fit task {spec.name!r} ({spec.family.name})"
        )
    splits = spec.loader(spec, opts)
    if not splits.train:
        raise DatasetError(f"task {spec.name!r}: the training split is empty")
    if not splits.dev:
        raise DatasetError(f"task {spec.name!r}: the dev split is empty (too few examples?)")
    label_list = list(labels) if labels is not None else infer_labels(spec, splits.train)
    check_labels(spec, splits, label_list)
    return TaskData(spec=spec, splits=splits, labels=label_list, options=opts)


def read_task_file(
    spec: TaskSpec, path: str | os.PathLike[str], options: DataOptions | None = None
) -> list[Any]:
    """Examples of one file in the task's format (for ``electra evaluate --test-file``)."""
    opts = options or DataOptions()
    p = Path(path)
    if spec.name == "custom" or spec.reader is None:
        return spec.family.custom_reader(opts)(p)
    return spec.reader(p)


# ---------------------------------------------------------------------------
# GLUE score
# ---------------------------------------------------------------------------

GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte")


def glue_task_score(task: str, metrics: dict[str, float], convention: str = "paper") -> float:
    """The number one GLUE task contributes to the average.

    ``paper`` (ELECTRA, section 3.1): Matthews correlation for CoLA, Spearman
    for STS-B, accuracy for every other task (MRPC and QQP included).
    ``glue`` (the GLUE leaderboard): MRPC and QQP average F1 and accuracy,
    STS-B averages Pearson and Spearman.
    """
    if convention not in ("paper", "glue"):
        raise ValueError(f"convention must be 'paper' or 'glue', got {convention!r}")
    if task == "cola":
        return metrics["mcc"]
    if task == "stsb":
        return metrics["spearman"] if convention == "paper" else metrics["corr"]
    if task in ("mrpc", "qqp") and convention == "glue":
        return (metrics["accuracy"] + metrics["f1"]) / 2
    return metrics["accuracy"]


def glue_average(
    scores: dict[str, dict[str, float]], convention: str = "paper", include_wnli: bool = False
) -> dict[str, Any]:
    """The GLUE score of per-task metrics (``{"cola": {"mcc": ...}, "sst2": {...}}``).

    The average is over the tasks given (the paper's score uses all eight:
    CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE); WNLI is left out unless
    ``include_wnli``, as BERT and ELECTRA do. Returns the average, the
    per-task numbers, and which of the eight are missing.
    """
    names = {ALIASES.get(k.lower(), k.lower()): v for k, v in scores.items()}
    per_task = {}
    for task, metrics in names.items():
        if task == "wnli" and not include_wnli:
            continue
        if task not in GLUE_TASKS and task != "wnli":
            raise ValueError(f"{task!r} is not a GLUE task ({', '.join(GLUE_TASKS)}, wnli)")
        try:
            per_task[task] = glue_task_score(task, metrics, convention)
        except KeyError as exc:
            raise ValueError(
                f"GLUE {task}: metric {exc.args[0]!r} missing from the scores"
            ) from None
    if not per_task:
        raise ValueError("no GLUE task scores to average")
    return {
        "average": sum(per_task.values()) / len(per_task),
        "per_task": per_task,
        "convention": convention,
        "missing": [t for t in GLUE_TASKS if t not in per_task],
    }


__all__ = [
    "DataFlags",
    "DataOptions",
    "TaskData",
    "TaskSpec",
    "TASKS",
    "check_labels",
    "custom_task",
    "get_task",
    "infer_labels",
    "load_task_data",
    "register",
    "resolve_data_dir",
    "seeded_split",
    "subsample",
    "balance_classes",
    "glue_average",
    "read_task_file",
]
