"""Session fixtures of the pre-training tests: real Korean blocks and one tiny run.

Re-exported by ``conftest.py`` so every test module shares one copy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest


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
