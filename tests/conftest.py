"""Shared fixtures: the real data in ``shared/data`` and small tokenizers trained on it.

The data directory is found by :func:`electra.system.paths.default_data_dir`
(``ELECTRA_DATA_DIR`` or ``<checkout>/../shared/data``). CI has it, so a
missing directory fails the tests that need it with a clear message; nothing
is skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


# The pre-training tests' session fixtures, re-exported so every test module shares one copy.
from pretrain_fixtures import blocks, tiny_run  # noqa: E402, F401
