"""Shared fixtures: the real data in ``shared/data`` and small tokenizers trained on it.

The data directory is found by :func:`electra.system.paths.default_data_dir`
(``ELECTRA_DATA_DIR`` or ``<checkout>/../shared/data``). CI has it, so a
missing directory fails the tests that need it with a clear message; nothing
is skipped.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from builders import KO_VOCAB, english_vocab, tiny_config, tiny_model, write_tokenizer_dir

from electra.system.paths import ENV_VAR, default_data_dir

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    d = default_data_dir()
    if not (d / "MANIFEST.md").is_file():
        pytest.fail(
            f"shared data not found at {d}: set {ENV_VAR} to the shared/data directory "
            "(the one holding MANIFEST.md)",
            pytrace=False,
        )
    return d


@pytest.fixture(scope="session")
def ko_wiki(data_dir: Path) -> Path:
    """Korean Wikipedia, WikiExtractor format (131 articles, 1 MB)."""
    return data_dir / "pretrain" / "ko" / "kowiki" / "AA" / "wiki_00"


@pytest.fixture(scope="session")
def ko_law(data_dir: Path) -> Path:
    """The Korean constitution, plain text with CRLF line ends."""
    return data_dir / "pretrain" / "ko" / "konlpy" / "kolaw" / "constitution.txt"


@pytest.fixture(scope="session")
def en_book(data_dir: Path) -> Path:
    """Frankenstein: Project Gutenberg header/footer, CRLF, a UTF-8 BOM."""
    return data_dir / "pretrain" / "en" / "gutenberg" / "84-0.txt"


@pytest.fixture(scope="session")
def nsmc_files(data_dir: Path) -> list[Path]:
    """The first 40 NSMC raw review files (JSON arrays)."""
    files = sorted((data_dir / "nsmc" / "raw_subset").glob("*.json"))[:40]
    assert len(files) == 40
    return files


@pytest.fixture(scope="session")
def mixed_corpus(tmp_path_factory, ko_wiki: Path, ko_law: Path, en_book: Path, nsmc_files):
    """A small real corpus of every kind, as a directory of links-free copies."""
    d = tmp_path_factory.mktemp("corpus")
    shutil.copyfile(ko_wiki, d / "kowiki_00")
    shutil.copyfile(ko_law, d / "constitution.txt")
    shutil.copyfile(en_book, d / "frankenstein.txt")
    (d / "nsmc").mkdir()
    for f in nsmc_files[:15]:
        shutil.copyfile(f, d / "nsmc" / f.name)
    return d


@pytest.fixture(scope="session")
def tiny_tokenizer(tmp_path_factory, mixed_corpus: Path) -> Path:
    """A 2,000-token cased vocabulary trained on the mixed corpus."""
    from electra.text.corpus import ReadOptions
    from electra.text.vocabulary import train_tokenizer

    out = tmp_path_factory.mktemp("tok")
    train_tokenizer(
        [mixed_corpus],
        out,
        vocab_size=2000,
        read_options=ReadOptions(strip_gutenberg=True),
    )
    return out


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m electra.cli ARGS`` with this checkout's sources first on the path."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "electra.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


@pytest.fixture(scope="session")
def cli():
    """Run ``python -m electra.cli`` in a subprocess (see :func:`run_cli`)."""
    return run_cli


# Fixtures of several folders: tiny models, real Korean blocks, one tiny run.


@pytest.fixture()
def one_thread() -> Iterator[None]:
    """Tiny models run fastest, and without contention on a shared CPU, on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def ko_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random model with the real KoELECTRA v1 vocabulary (32,200 tokens, cased)."""
    root = tmp_path_factory.mktemp("ko")
    tok = write_tokenizer_dir(root / "tok", KO_VOCAB, lowercase=False)
    return tiny_model(root / "model", tok, 32200)


@pytest.fixture(scope="session")
def en_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("en")
    return write_tokenizer_dir(root / "tok", english_vocab(), lowercase=True)


@pytest.fixture(scope="session")
def blocks(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """A 1000-token vocabulary and 64-token blocks from real Korean Wikipedia text."""
    from electra.blocks.options import PrepareCommand
    from electra.blocks.prepare import prepare
    from electra.text.vocabulary import train_tokenizer

    root = tmp_path_factory.mktemp("blocks")
    text = root / "ko.txt"
    raw = (data_dir / "pretrain/ko/kowiki/AA/wiki_00").read_text(encoding="utf-8")
    text.write_text(raw[:300_000], encoding="utf-8")
    train_tokenizer([text], root / "tok", vocab_size=1000, progress=False)
    out = root / "blocks"
    prepare(
        PrepareCommand(
            inputs=[str(text)],
            tokenizer=str(root / "tok"),
            output=str(out),
            max_length=64,
            validation_fraction=0.05,
            workers=1,
            progress=False,
        )
    )
    return out


@pytest.fixture(scope="session")
def tiny_run(blocks: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 30-step RTD run with validation, TensorBoard and exports."""
    from electra.pretrain.trainer import Trainer

    run = tmp_path_factory.mktemp("tiny_run") / "run"
    cfg = tiny_config(
        blocks, run, "optim.max_steps=30", "run.eval_every=10", "run.tensorboard=true"
    )
    Trainer(cfg).fit()
    return run


TOY_WORDS = ["red", "green", "blue", "cat", "dog", "fish"]


@pytest.fixture(scope="session")
def toy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny model over a six-word vocabulary and a 60-row CSV (is the first word a colour?)."""
    root = tmp_path_factory.mktemp("toy")
    tok = write_tokenizer_dir(
        root / "tok", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TOY_WORDS], True
    )
    rng = random.Random(0)
    rows = ["text,label"]
    for _ in range(60):
        words = rng.choices(TOY_WORDS, k=4)
        rows.append(f"{' '.join(words)},{int(words[0] in TOY_WORDS[:3])}")
    (root / "train.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return tiny_model(root / "model", tok, 5 + len(TOY_WORDS)), root / "train.csv"
