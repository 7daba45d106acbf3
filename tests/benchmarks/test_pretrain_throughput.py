"""``benchmarks/pretrain_throughput.py``: it times the trainer's own step, and compiles
what it says it compiles (ConvBERT included)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import pretrain_throughput as bench  # noqa: E402

from electra.model.config import preset  # noqa: E402
from electra.pretrain.config import ObjectiveConfig  # noqa: E402
from electra.pretrain.objective import (  # noqa: E402
    ElectraForPretraining,
    SampleRNG,
    picks_per_row,
)


def _pair(conv: int = 0):
    mixing = {"conv_kernel_size": conv, "head_ratio": 2} if conv else {}
    cfg = preset("tiny", vocab_size=bench.SPECIAL.vocab_size, **mixing)
    torch.manual_seed(0)
    ours = ElectraForPretraining(cfg, ObjectiveConfig(generator_size=0.25), bench.SPECIAL)
    return ours, bench.build_reference(cfg, 0.25, "cpu", "sdpa")


@pytest.mark.parametrize("conv", [0, 9])
def test_compile_reaches_each_sides_encoders(conv: int, monkeypatch) -> None:
    """transformers' ConvBERT keeps its body under ``.convbert``: ``.electra`` raised
    AttributeError there, so the ConvBERT compile case never ran."""
    compiled: list[torch.nn.Module] = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: compiled.append(self))
    ours, ref = _pair(conv)
    assert bench.compile_encoders(ours, ref, "ours") == compiled
    assert compiled == [ours.generator.electra.encoder, ours.discriminator.electra.encoder]
    compiled.clear()
    bench.compile_encoders(ours, ref, "both")
    body = "convbert" if conv else "electra"
    theirs = [getattr(ref[k], body).encoder for k in ("gen", "disc")]
    assert compiled[2:] == theirs and len(compiled) == 4
    assert bench.compile_mode(True) == "both" and bench.compile_mode(False) == "none"


def test_our_side_is_the_trainers_step_with_its_per_block_randomness() -> None:
    """The benchmark's step masks and samples exactly as `electra pretrain` does
    (one seeded generator per block of the stream), not from one shared generator."""
    ours, _ = _pair()
    batch = bench.make_batch(4, 32, "cpu")
    seen: list[object] = []
    forward = ours.forward

    def spy(*args, **kwargs):
        seen.append(kwargs["rng"])
        return forward(*args, **kwargs)

    ours.forward = spy
    torch.manual_seed(1)
    loss = bench.ours_step(ours, batch, 8, torch.autocast("cpu", enabled=False), "cpu")
    rng = seen[0]
    assert isinstance(rng, SampleRNG)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert rng.picks == picks_per_row(ids, mask, bench.SPECIAL, 0.15)  # counted on the host
    torch.manual_seed(1)
    again = SampleRNG(SampleRNG.seeds_for(0, range(8, 12)), picks=rng.picks)
    want = forward(ids, mask, batch["token_type_ids"], rng=again, full=True).loss
    assert loss.item() == want.item()  # blocks 8..11 of the stream, seed 0: the trainer's draw
