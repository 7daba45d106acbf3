"""Fixtures of the fine-tuning tests only (the shared ones are in ``tests/conftest.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import tiny_model


@pytest.fixture(scope="session")
def en_model(tmp_path_factory: pytest.TempPathFactory, en_tokenizer_dir: Path) -> Path:
    vocab = (en_tokenizer_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")
    root = tmp_path_factory.mktemp("en-model")
    return tiny_model(root / "model", en_tokenizer_dir, len([v for v in vocab if v]))
