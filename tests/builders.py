"""Plain helpers the tests build tiny things with: data paths, tokenizer directories,
tiny models, the ``tiny`` pre-training config, subprocess environments.

Fixtures live in the ``conftest.py`` files (``tests/conftest.py`` for those several
folders use); these are ordinary functions, imported by name (``from builders import ...``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import torch

from electra.experiments.options import CompareCommand
from electra.finetune.tasks import resolve_data_dir
from electra.model.config import preset
from electra.model.encoder import ElectraDiscriminator
from electra.model.hf import export_discriminator

DATA = resolve_data_dir(None)
KO_VOCAB = DATA / "extras" / "koelectra-v1-vocab" / "vocab.txt"
SRC = Path(__file__).resolve().parents[1] / "src"


def cli_env() -> dict[str, str]:
    """Environment for ``python -m electra.cli`` subprocesses: this checkout, one thread."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env["ELECTRA_DATA_DIR"] = str(DATA)
    env["OMP_NUM_THREADS"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    return env


def cli_argv(*args: str) -> list[str]:
    """``python -m electra.cli ARGS`` as an argv list (for ``subprocess``)."""
    return [sys.executable, "-m", "electra.cli", *args]


def tiny_pretrain_args(blocks: Path, run: Path, *extra: str) -> list[str]:
    """``pretrain`` ARGS of the tiny config on ``blocks`` into ``run``, on the CPU (exactness
    is tested there; never cuda:1 for a second rank), a loss logged every step, no eval, no
    export; ``extra`` overrides after these."""
    return [
        "pretrain",
        "--config",
        "tiny",
        "--data",
        str(blocks),
        "-o",
        str(run),
        "--set",
        "run.progress=false",
        "run.device='cpu'",
        "run.log_every=1",
        "run.eval_every=0",
        "run.export=false",
        *extra,
    ]


def write_tokenizer_dir(path: Path, vocab: list[str] | Path, lowercase: bool) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if isinstance(vocab, Path):
        shutil.copyfile(vocab, path / "vocab.txt")
    else:
        (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    (path / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": lowercase, "tokenizer_class": "ElectraTokenizer"}),
        encoding="utf-8",
    )
    return path


def tiny_model(
    out: Path, tokenizer_dir: Path, vocab_size: int, seed: int = 0, **overrides: object
) -> Path:
    """Random tiny discriminator (2 layers, hidden 64, embeddings 32 projected) as a HF dir."""
    torch.manual_seed(seed)
    cfg = preset("tiny", vocab_size=vocab_size, max_position_embeddings=256, **overrides)
    return export_discriminator(ElectraDiscriminator(cfg), out, tokenizer_dir=tokenizer_dir)


def english_vocab(size: int = 3000) -> list[str]:
    """A lower-cased WordPiece vocabulary trained on slices of the staged English data."""
    from tokenizers import BertWordPieceTokenizer

    texts: list[str] = []
    for name, col in (("SST-2", 0), ("RTE", 1), ("STS-B", 7)):
        lines = (DATA / "glue" / name / "train.tsv").read_text(encoding="utf-8").split("\n")[1:2000]
        texts += [ln.split("\t")[col] for ln in lines if ln.count("\t") >= col]
    wnut = (DATA / "ner" / "wnut17" / "wnut17train.conll").read_text(encoding="utf-8")
    texts.append(" ".join(ln.split("\t")[0] for ln in wnut.split("\n")[:20000]))
    tok = BertWordPieceTokenizer(lowercase=True)
    tok.train_from_iterator(texts, vocab_size=size, min_frequency=2, show_progress=False)
    vocab = tok.get_vocab()
    return [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def step_losses(run: Path) -> dict[int, float]:
    """A pre-training run's logged training loss by step (what exact-resume tests compare)."""
    return {r["step"]: r["loss"] for r in read_jsonl(run / "metrics.jsonl") if "loss" in r}


def tiny_config(blocks: Path, out: Path, *extra: str):
    """The built-in ``tiny`` config over ``blocks`` writing to ``out``, on the CPU."""
    from electra.pretrain.config import load_config

    overrides = [
        f"data.blocks={json.dumps(str(blocks))}",
        f"run.output_dir={json.dumps(str(out))}",
        "run.progress=false",
        "run.device='cpu'",  # a GPU machine runs the same tests (and torchrun ranks need no GPU)
        *extra,
    ]
    return load_config("tiny", overrides)


def offline_hub_cache(cache: Path, monkeypatch: Any) -> Path:
    """An empty Hugging Face cache at ``cache``, offline: the environment variables, and the
    ``huggingface_hub.constants`` they were read into at import time."""
    from huggingface_hub import constants

    cache.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def publish_to_hub_cache(cache: Path, repo_id: str, model_dir: Path, sha: str, *refs: str) -> Path:
    """Lay ``model_dir`` into ``cache`` as ``huggingface_hub`` does: snapshot ``sha`` of
    ``repo_id`` (``models--org--name/snapshots/SHA/``), each of ``refs`` a file holding it."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / sha
    shutil.copytree(model_dir, snapshot)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    for ref in refs:
        (repo / "refs" / ref).write_text(sha, encoding="utf-8")
    return snapshot


class FullDisk:
    """A disk with ``free`` bytes left: a write past them writes what fits, then raises
    ``OSError(ENOSPC)`` as the kernel would, inside the writer.

    :meth:`install` patches ``open`` in the toolkit's writing modules (every file they
    write goes through it: shards, ``torch.save`` of a checkpoint, the atomic
    JSON/text writes) and ``safetensors``' ``save_file`` where it is called (it writes
    from Rust; the stand-in writes the same bytes through the disk and raises the
    ``SafetensorError`` safetensors raises, ``os error 28``). ``free_bytes`` reports
    what is left. ``armed`` False: writes pass, counted nowhere.
    """

    MODULES = ("electra.model.checkpoint", "electra.blocks.shards", "electra.system.files")
    SAFETENSORS = ("electra.model.checkpoint", "electra.model.hf")

    def __init__(self, free: int, armed: bool = True) -> None:
        self.free, self.armed, self.hits = free, armed, 0

    def install(self, monkeypatch: Any) -> FullDisk:
        import builtins
        import importlib

        from electra.system import diskspace

        real_open = builtins.open

        def open_(file, mode="r", *args, **kwargs):
            f = real_open(file, mode, *args, **kwargs)
            return _Filling(f, self, str(file)) if set(mode) & set("wax+") else f

        for name in self.MODULES:
            monkeypatch.setattr(importlib.import_module(name), "open", open_, raising=False)
        for name in self.SAFETENSORS:
            monkeypatch.setattr(importlib.import_module(name), "save_file", self._save_file)
        monkeypatch.setattr(diskspace, "free_bytes", lambda path: self.free)
        return self

    def take(self, n: int, path: str) -> int:
        """How many of ``n`` bytes fit; raises ENOSPC (after the caller writes them)."""
        if not self.armed or n <= self.free:
            self.free -= n if self.armed else 0
            return n
        fits, self.free = self.free, 0
        self.hits += 1
        return fits

    def _save_file(self, tensors, filename, metadata=None) -> None:
        from safetensors import SafetensorError
        from safetensors.torch import save

        data = save(tensors, metadata=metadata)
        fits = self.take(len(data), str(filename))
        with open(filename, "wb") as f:
            f.write(data[:fits])
        if fits < len(data):
            raise SafetensorError(
                "Error while serializing: I/O error: No space left on device (os error 28) "
                f'at path "{filename}"'
            )


class _Filling:
    """A file on a :class:`FullDisk`: its writes count against the space left."""

    def __init__(self, f: Any, disk: FullDisk, path: str) -> None:
        self._f, self._disk, self._path = f, disk, path

    def write(self, data: Any) -> int:
        import errno

        size = len(memoryview(data).cast("B")) if not isinstance(data, str) else len(data)
        fits = self._disk.take(size, self._path)
        if fits < size:
            self._f.write(
                data[:fits] if isinstance(data, str) else memoryview(data).cast("B")[:fits]
            )
            raise OSError(errno.ENOSPC, "No space left on device", self._path)
        return self._f.write(data)

    def __enter__(self) -> _Filling:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._f.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def _seed_score(median: float, lo: float | None = None, hi: float | None = None) -> dict[str, Any]:
    lo = median - 0.005 if lo is None else lo
    hi = median + 0.005 if hi is None else hi
    return {"metric": "accuracy", "median": median, "min": lo, "max": hi, "std": 0.004, "n": 3}


def compare_result(rtd: list[float], mlm: list[float], budget: float = 4.2e14, **kw: Any) -> dict:
    """A synthetic ``compare.json`` result: RTD and MLM medians on ``nsmc`` at budgets
    doubling up to ``budget``, the random start at 0.75, TF-IDF 0.80, majority 0.50.

    ``passes`` (those at the largest budget), ``rtd_score`` / ``mlm_score`` (a median's
    score dict) and ``tasks`` (each scored alike; default ``["nsmc"]``) may be given."""
    tasks = kw.get("tasks", ["nsmc"])
    n = len(rtd)
    flops = [budget / 2 ** (n - 1 - i) for i in range(n)]
    points = [
        {"arm": "none", "flops": 0.0, "steps": 0, "scores": {t: _seed_score(0.75) for t in tasks}}
    ]
    for arm, medians, per_step in (("rtd", rtd, 1.3e11), ("mlm", mlm, 0.9e11)):
        for f, m in zip(flops, medians, strict=True):
            steps = int(f // per_step)
            points.append(
                {
                    "arm": arm,
                    "flops": steps * per_step,
                    "steps": steps,
                    "passes": kw.get("passes", 1.0) * f / budget,
                    "scores": {t: kw.get(f"{arm}_score", _seed_score)(m) for t in tasks},
                }
            )
    floors = {t: {"tfidf": 0.80, "constant": 0.50, "constant_name": "majority"} for t in tasks}
    command = {**dataclasses.asdict(CompareCommand()), "seeds": [1, 2, 3]}
    return {"points": points, "floors": floors, "command": command}
