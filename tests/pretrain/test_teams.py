"""TEAMS' two levers: partial layer sharing (``objective.generator_shared_layers``) and
multi-word selection (``objective.mws_weight``).

The checks: the generator really runs the discriminator's bottom layers (the same
parameters, trained by both losses, stored once), the rest stays its own; the selection's
other candidates follow the generator's distribution without the original, and its loss
is the cross-entropy of picking the original; what a step is charged by both counters
(the shared layers run twice, on two inputs, so they are charged twice); the settings that
cannot be combined are refused; and a run with both resumes exactly, exports a generator
transformers' layout can load, and says so on its card.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
from builders import step_losses, tiny_config
from safetensors.torch import load_file

from electra.config import ConfigError
from electra.model import checkpoint as ckpt
from electra.model.config import preset
from electra.model.optim import weight_decay_groups
from electra.pretrain.config import ObjectiveConfig
from electra.pretrain.flops import (
    executed_flops_plan,
    paper_flops_plan,
    paper_forward_flops_per_token,
)
from electra.pretrain.objective import (
    ElectraForPretraining,
    SampleRNG,
    SpecialIds,
    draw_negatives,
    selection_loss,
)

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=1000)


def _model(shared: int = 1, top: int = 1, mws: float = 0.0) -> ElectraForPretraining:
    torch.manual_seed(0)
    obj = ObjectiveConfig(generator_shared_layers=shared, generator_top_layers=top, mws_weight=mws)
    return ElectraForPretraining(preset("tiny"), obj, SPECIAL)


def _forward(model: ElectraForPretraining):
    torch.manual_seed(1)  # the same dropout masks whatever the model's init drew
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, SPECIAL.vocab_size, (4, 32), generator=g)
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    return model(ids, torch.ones_like(ids), rng=SampleRNG(SampleRNG.seeds_for(0, range(4))))


def test_the_generator_runs_the_discriminators_bottom_layers_and_its_own_top() -> None:
    model = _model(shared=1, top=1)
    gen, disc = model.generator.electra, model.discriminator.electra
    assert gen.config.hidden_size == disc.config.hidden_size
    assert len(gen.encoder.layer) == 2
    assert gen.encoder.layer[0] is disc.encoder.layer[0]
    assert gen.encoder.layer[1] is not disc.encoder.layer[1]
    assert gen.embeddings is disc.embeddings
    if hasattr(disc, "embeddings_project"):
        assert gen.embeddings_project is disc.embeddings_project
    # stored once: the generator's names of the shared layer are aliases
    aliases = ckpt.alias_names(model)
    assert "generator.electra.encoder.layer.0.output.dense.weight" in aliases
    assert not any(k.startswith("generator.electra.encoder.layer.1.") for k in aliases)


def test_both_losses_train_the_shared_layers() -> None:
    model = _model()
    out = _forward(model)
    shared = model.discriminator.electra.encoder.layer[0].intermediate.dense.weight
    (g_mlm,) = torch.autograd.grad(out.mlm_loss, shared, retain_graph=True)
    (g_disc,) = torch.autograd.grad(out.disc_loss, shared)
    assert g_mlm.abs().sum() > 0 and g_disc.abs().sum() > 0
    # one parameter in the optimizer, not two
    groups = weight_decay_groups(model, 0.01)
    params = [p for group in groups for p in group["params"]]
    assert len(params) == len({id(p) for p in params})


def test_a_step_is_charged_the_shared_layers_twice() -> None:
    """They run on the masked input for the generator and on the corrupted one for the
    discriminator: sharing saves parameters, not FLOPs."""
    disc = preset("small")
    obj = ObjectiveConfig(generator_shared_layers=1, generator_top_layers=1)
    gen = obj.generator_shape(disc)
    assert (gen.hidden_size, gen.num_hidden_layers) == (disc.hidden_size, 2)
    plan = paper_flops_plan(disc, 32, 128, obj)
    per_token = paper_forward_flops_per_token(disc, 128, "disc") + paper_forward_flops_per_token(
        gen, 128, "mlm"
    )
    assert plan.per_step == pytest.approx(2 * per_token * 32 * 128)
    plain = ObjectiveConfig()
    for counter in (paper_flops_plan, executed_flops_plan):
        assert counter(disc, 32, 128, obj).per_step > counter(disc, 32, 128, plain).per_step
    mlm = ObjectiveConfig(objective="mlm")
    assert paper_flops_plan(disc, 32, 128, mlm).per_step < plan.per_step


def test_the_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="generator_shared_layers must be >= 0"):
        ObjectiveConfig(generator_shared_layers=-1)
    for nothing_to_share in ("mlm", "rtd-ngram"):  # ignored, and said so in the config
        cfg = ObjectiveConfig(objective=nothing_to_share, generator_shared_layers=1)
        assert cfg.generator_shared_layers == 0
    with pytest.raises(ConfigError, match="embedding_sharing = 'tied'"):
        ObjectiveConfig(generator_shared_layers=1, embedding_sharing="gdes")
    with pytest.raises(ConfigError, match="cannot be combined"):
        ObjectiveConfig(generator_shared_layers=1, generator_freeze_at=0.3)
    too_many = ObjectiveConfig(generator_shared_layers=preset("tiny").num_hidden_layers + 1)
    with pytest.raises(ConfigError, match="discriminator has"):
        ElectraForPretraining(preset("tiny"), too_many, SPECIAL)


# -- a run -----------------------------------------------------------------------------------


def _run(blocks: Path, run: Path, *extra: str):
    return tiny_config(
        blocks,
        run,
        "objective.generator_shared_layers=1",
        "objective.mws_weight=1",
        "optim.max_steps=6",
        "run.save_every=3",
        "run.log_every=1",
        "run.eval_every=0",
        *extra,
    )


def test_a_teams_run_resumes_exactly_and_is_charged_its_plan(blocks: Path, tmp_path: Path) -> None:
    from electra.blocks.read import open_blocks
    from electra.pretrain.trainer import Trainer

    ref, cut = tmp_path / "ref", tmp_path / "cut"
    summary = Trainer(_run(blocks, ref, "run.export=false")).fit()
    state, _, _ = ckpt.load(ckpt.latest_valid(ref / "checkpoints").path)
    assert "discriminator.electra.encoder.layer.0.output.dense.weight" in state
    assert "generator.electra.encoder.layer.0.output.dense.weight" not in state  # stored once
    assert "generator.electra.encoder.layer.1.output.dense.weight" in state
    assert "mws_predictions.dense.weight" in state
    records = [json.loads(x) for x in (ref / "metrics.jsonl").read_text().splitlines()]
    assert all(r["mws_loss"] > 0 for r in records if "loss" in r)

    cfg = _run(blocks, ref)
    train = open_blocks(blocks, "train")
    disc = dataclasses.replace(preset("tiny"), vocab_size=train.vocab_size)
    plan = paper_flops_plan(disc, cfg.optim.batch_size, train.block_length, cfg.objective)
    assert summary["train_flops"] == pytest.approx(6 * plan.per_step)

    Trainer(_run(blocks, cut, "run.export=false")).fit()
    for c in ckpt.step_dirs(cut / "checkpoints"):
        if c.step > 3:
            shutil.rmtree(c.path)
    assert Trainer(_run(blocks, cut, "run.export=false"), resume=True).fit()["step"] == 6
    assert step_losses(cut) == step_losses(ref)
    got, _, _ = ckpt.load(ckpt.latest_valid(cut / "checkpoints").path)
    assert got.keys() == state.keys() and all(torch.equal(got[k], state[k]) for k in state)


def test_a_teams_run_exports_and_says_so_on_its_card(blocks: Path, tmp_path: Path) -> None:
    from electra.model.hf import load_generator
    from electra.pretrain.trainer import Trainer

    run = tmp_path / "run"
    Trainer(_run(blocks, run)).fit()
    card = (run / "hf" / "discriminator" / "README.md").read_text()
    assert "bottom 1 layer(s)" in card and "multi-word selection" in card
    assert not any(
        "mws" in k for k in load_file(run / "hf" / "discriminator" / "model.safetensors")
    )
    state, _, _ = ckpt.load(ckpt.latest_valid(run / "checkpoints").path)
    exported = load_generator(run / "hf" / "generator").eval()
    assert len(exported.electra.encoder.layer) == 2
    transformers = pytest.importorskip("transformers")
    ref = transformers.AutoModelForMaskedLM.from_pretrained(run / "hf" / "generator").eval()
    ids = torch.randint(5, exported.config.vocab_size, (2, 16), generator=torch.Generator())
    with torch.no_grad():
        assert torch.allclose(ref(ids).logits, exported(ids), atol=1e-4)
    name = "electra.encoder.layer.0.intermediate.dense.weight"
    assert torch.equal(
        exported.state_dict()[name], state[f"discriminator.{name}"]
    )  # the generator's bottom layer is the discriminator's
    assert not torch.equal(
        exported.state_dict()["electra.encoder.layer.1.intermediate.dense.weight"],
        state["discriminator.electra.encoder.layer.1.intermediate.dense.weight"],
    )


# -- multi-word selection --------------------------------------------------------------------


def test_the_other_candidates_follow_the_generator_without_the_original() -> None:
    """Drawn in proportion to softmax(logits) with the original's share removed: the
    original and a token of zero probability never, the others at their renormalised
    shares (10,000 draws per row, within 4 standard errors)."""
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -float("inf")], [0.0, 0.0, 3.0, 0.0, 0.0]])
    labels = torch.tensor([0, 2])
    g = torch.Generator().manual_seed(0)
    n = 10_000
    drawn = draw_negatives(logits.repeat_interleave(n, 0), labels.repeat_interleave(n), 1, g)
    for row in range(2):
        got = torch.bincount(drawn[row * n : (row + 1) * n, 0], minlength=5).float() / n
        p = torch.softmax(logits[row], -1)
        p[labels[row]] = 0.0
        p /= p.sum()
        assert got[labels[row]] == 0 and got[p == 0].sum() == 0
        assert torch.all((got - p).abs() <= 4 * (p * (1 - p) / n).sqrt() + 1e-9), (got, p)


def test_a_row_sure_of_its_original_draws_from_the_rest() -> None:
    logits = torch.full((1, 6), -1e4)
    logits[0, 3] = 1e4  # every other token underflows to zero weight
    drawn = draw_negatives(logits, torch.tensor([3]), 200, torch.Generator().manual_seed(1))
    assert 3 not in drawn.tolist()[0] and len(set(drawn.tolist()[0])) == 5


def test_the_selection_loss_is_picking_the_original_among_the_candidates() -> None:
    torch.manual_seed(0)
    table, queries = torch.randn(50, 8), torch.randn(3, 8)
    labels, negatives = torch.tensor([1, 2, 3]), torch.tensor([[4, 5], [6, 7], [8, 9]])
    cands = torch.cat([labels[:, None], negatives], 1)
    scores = torch.stack([table[c] @ q for c, q in zip(cands, queries, strict=True)])
    want = torch.nn.functional.cross_entropy(scores, torch.zeros(3, dtype=torch.long))
    assert selection_loss(queries, table, labels, negatives) == pytest.approx(want.item())
    flipped = selection_loss(queries, table, labels, negatives.flip(1))
    assert flipped == pytest.approx(want.item())  # the order of the others says nothing


def test_the_selection_loss_trains_the_discriminator_and_its_own_head() -> None:
    model = _model(shared=0, mws=2.0)
    out = _forward(model)
    assert out.mws_loss is not None and out.mws_loss > 0
    body = model.discriminator.electra.encoder.layer[-1].output.dense.weight
    head = model.mws_predictions.dense.weight
    g_body, g_head = torch.autograd.grad(out.mws_loss, [body, head])
    assert g_body.abs().sum() > 0 and g_head.abs().sum() > 0
    plain = _forward(_model(shared=0))
    assert out.loss.item() == pytest.approx((plain.loss + 2.0 * out.mws_loss).item(), rel=1e-5)


def test_selection_is_charged_by_both_counters() -> None:
    disc = preset("small")
    plain, mws = ObjectiveConfig(), ObjectiveConfig(mws_weight=1.0, mws_candidates=5)
    for counter in (paper_flops_plan, executed_flops_plan):
        extra = counter(disc, 32, 128, mws).per_step - counter(disc, 32, 128, plain).per_step
        assert 0 < extra < 0.02 * counter(disc, 32, 128, plain).per_step  # a small head
    with pytest.raises(ConfigError, match="mws_candidates must be >= 2"):
        ObjectiveConfig(mws_weight=1.0, mws_candidates=1)
    with pytest.raises(ConfigError, match="trains none beside"):
        ObjectiveConfig(objective="rtd-ngram", mws_weight=1.0)
    with pytest.raises(ConfigError, match="tied"):
        ObjectiveConfig(mws_weight=1.0, embedding_sharing="gdes")
