"""Held-out text: the tasks' unlabelled text minus every example they score.

The demo and ``electra compare`` pre-train on NSMC reviews and SST-2 sentences
outside the dev and test splits they score, so no scored text is ever in the
vocabulary or the pre-training corpus.
"""

from __future__ import annotations

import json
from pathlib import Path

from electra.system.files import atomic_write_json, atomic_write_text


def _normalise(text: str) -> str:
    return " ".join(text.split())


def _scored_texts(splits) -> set[str]:
    """The texts fine-tuning scores (every dev and test example), whitespace collapsed."""
    return set(_texts([*splits.dev, *splits.test]))


def _texts(examples: list) -> list[str]:
    """Every text of ``examples`` (a pair gives two), whitespace collapsed."""
    return [_normalise(t) for e in examples for t in (e.text, e.text_pair) if t]


def _written_from(path: Path, data_dir: Path) -> bool:
    """Whether ``path`` (a text file derived from ``data_dir``) is already written.

    A sidecar ``PATH.source.json`` records the data directory it was written
    from; one written from another directory stops the run, naming both, since
    the vocabulary and blocks built on it would be stale too. A file from before
    these records is reused as it is.
    """
    stamp = path.with_name(path.name + ".source.json")
    here = str(data_dir.resolve())
    if path.is_file() and stamp.is_file():
        was = json.loads(stamp.read_text()).get("data_dir")
        if was != here:
            raise SystemExit(
                f"{path} was written from {was}, but this run reads {here}; delete "
                f"{path.parent.parent} or use another --output"
            )
    if path.is_file():
        return True
    atomic_write_json(stamp, {"data_dir": here})
    return False


def unscored_reviews(data_dir: Path, path: Path) -> Path:
    """Every raw NSMC review whose text is not in the fine-tuning's dev or test split.

    Written to ``path`` as plain text, one review per line and one film per
    document (a blank line between films), so short reviews pack into full
    blocks. Neutral (5-8) and surplus reviews stay in: text without labels is
    what domain pre-training is for; the reviews the demo scores (the whole
    balanced dev and test splits, compared after collapsing whitespace) never
    reach the vocabulary or the pre-training. Reused when already written from
    the same ``data_dir``.
    """
    if _written_from(path, data_dir):
        return path
    from electra.finetune.readers import read_json_array
    from electra.finetune.tasks import DataOptions, load_task_data

    held_out = _scored_texts(load_task_data("nsmc", DataOptions(data_dir=str(data_dir))).splits)
    films = []
    for f in sorted((data_dir / "nsmc/raw_subset").glob("*.json")):
        _, rows = read_json_array(f)
        texts = [_normalise(str(r.get("review") or "")) for _, r in rows]
        if kept := [t for t in texts if t and t not in held_out]:
            films.append("\n".join(kept) + "\n")
    atomic_write_text(path, "\n".join(films))
    return path


TEXTS_PER_DOCUMENT = 200  # many documents, so the validation split gets its share (~1%)


def unscored_task_text(task: str, data_dir: Path, path: Path) -> Path | None:
    """The training split's texts of ``task`` (both sides of a pair) not in its dev or test split.

    The unlabelled in-domain text of a task other than NSMC (e.g. SST-2's
    movie-review sentences and phrases) for a pre-training corpus: one text per
    line, documents of 200 texts (``prepare`` assigns whole documents to
    validation: one document would put all or nothing there); the texts the
    fine-tuning scores (dev and test, compared after collapsing whitespace)
    left out. None for a task whose examples are not texts (tagging, QA).
    Reused when already written from the same ``data_dir``.
    """
    if _written_from(path, data_dir):
        return path
    from electra.finetune.common import TextExample
    from electra.finetune.tasks import DataOptions, load_task_data

    splits = load_task_data(task, DataOptions(data_dir=str(data_dir))).splits
    if not all(isinstance(e, TextExample) for e in splits.train):
        return None
    held_out = _scored_texts(splits)
    kept = list(dict.fromkeys(t for t in _texts(splits.train) if t not in held_out))  # in order
    n = TEXTS_PER_DOCUMENT
    docs = ["".join(f"{t}\n" for t in kept[i : i + n]) for i in range(0, len(kept), n)]
    atomic_write_text(path, "\n".join(docs))
    return path
