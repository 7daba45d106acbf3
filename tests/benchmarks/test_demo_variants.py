"""benchmarks/demo_variants.py: a variant demo shares every stage but pre-training with its
base (its ``--set`` overrides are tests/experiments/test_demo.py's)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def variants():
    spec = importlib.util.spec_from_file_location(
        "demo_variants", ROOT / "benchmarks" / "demo_variants.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["demo_variants"] = module
    spec.loader.exec_module(module)
    return module


def test_a_variant_links_the_base_stages_but_not_its_pretraining(variants, tmp_path) -> None:
    base, out = tmp_path / "demo", tmp_path / "demo-x"
    for name in ("tokenizer", "pretrain", "nsmc", "nsmc-random-start"):
        (base / name).mkdir(parents=True)
        (base / name / "f.txt").write_text(name)
    (base / "finetune_plan.json").write_text("{}")
    variants.seed_variant(base, out)
    assert sorted(p.name for p in out.iterdir()) == [
        "finetune_plan.json",
        "nsmc-random-start",
        "tokenizer",
    ]
    assert (out / "tokenizer" / "f.txt").stat().st_ino == (
        base / "tokenizer" / "f.txt"
    ).stat().st_ino
    variants.seed_variant(base, out)  # again: nothing to do, no error
