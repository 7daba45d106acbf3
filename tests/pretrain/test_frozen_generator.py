"""A generator trained, then frozen (``objective.generator_freeze_at``, Fast-ELECTRA's lever).

The checks: what a frozen step is charged by both counters and how a budget buys steps
with a freeze in the plan; that a frozen generator really stops changing (its copy of the
tied tables included) while the discriminator goes on learning; the temperature
curriculum; and that a run frozen part-way resumes exactly, exports, and is charged by
compare as the Trainer counts it.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import torch
from builders import step_losses, tiny_config

from electra.config import ConfigError
from electra.model import checkpoint as ckpt
from electra.model.config import generator_config, preset
from electra.model.optim import adamw, weight_decay_groups
from electra.pretrain.config import ObjectiveConfig
from electra.pretrain.flops import (
    FlopsPlan,
    executed_flops_plan,
    paper_flops_plan,
    paper_forward_flops_per_token,
    paper_train_flops_per_step,
)
from electra.pretrain.objective import (
    ElectraForPretraining,
    SampleRNG,
    SpecialIds,
    drop_from_optimizer,
    frozen_temperature,
)

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=1000)


def _batch(step: int, B: int = 8, L: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(5, SPECIAL.vocab_size, (B, L), generator=g)
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    return ids, torch.ones_like(ids)


def _model(sharing: str = "tied") -> ElectraForPretraining:
    torch.manual_seed(0)
    obj = ObjectiveConfig(embedding_sharing=sharing, generator_freeze_at=0.5)
    return ElectraForPretraining(preset("tiny"), obj, SPECIAL)


def _step(model: ElectraForPretraining, opt: torch.optim.Optimizer, step: int):
    ids, mask = _batch(step)
    out = model(ids, mask, rng=SampleRNG(SampleRNG.seeds_for(0, range(step * 8, step * 8 + 8))))
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return out


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


# -- what a frozen step costs ---------------------------------------------------------------


def test_a_frozen_step_is_charged_the_generators_forward_once() -> None:
    """Paper count: training is 2 x forward, so freezing takes one generator forward off
    the step; executed count (3 x forward): two. The discriminator's share is untouched."""
    disc = preset("small")
    gen = generator_config(disc, 0.25)
    tokens = 32 * 128
    full = paper_train_flops_per_step(disc, 32, 128, "rtd")
    frozen = paper_train_flops_per_step(disc, 32, 128, "rtd", generator_frozen=True)
    gen_fwd = paper_forward_flops_per_token(gen, 128, "mlm") * tokens
    assert full - frozen == pytest.approx(gen_fwd, rel=1e-12)
    mlm = paper_train_flops_per_step(disc, 32, 128, "mlm")
    assert paper_train_flops_per_step(disc, 32, 128, "mlm", generator_frozen=True) == mlm
    obj = ObjectiveConfig(generator_freeze_at=0.25)
    e = executed_flops_plan(disc, 32, 128, obj)
    assert e.frozen_step < e.per_step
    plain = executed_flops_plan(disc, 32, 128, ObjectiveConfig())
    assert plain.frozen_step is None and plain.per_step == e.per_step


@pytest.mark.parametrize("freeze_at", [0.1, 0.25, 0.5, 0.9])
def test_a_budget_buys_the_most_steps_whose_whole_schedule_fits(freeze_at: float) -> None:
    plan = FlopsPlan(per_step=10.0, frozen_step=7.0, freeze_at=freeze_at)
    for budget in (1_000.0, 12_345.0, 1e6):
        n = plan.steps_for(budget)
        assert plan.through(n, n) <= budget < plan.through(n + 1, n + 1)
        assert n > FlopsPlan(per_step=10.0).steps_for(budget)  # freezing buys steps
    k = plan.freeze_step(1000)
    assert k == round(freeze_at * 1000)
    assert plan.through(k, 1000) == 10.0 * k  # full price up to the freeze
    assert plan.through(k + 3, 1000) == 10.0 * k + 7.0 * 3
    moved = dataclasses.replace(plan, frozen_from=k + 5)  # frozen, then re-planned
    assert moved.freeze_step(10) == moved.freeze_step(5000) == k + 5
    assert moved.through(k + 5, 7) == 10.0 * (k + 5)
    never = FlopsPlan(per_step=10.0)
    assert never.freeze_step(1000) is None and never.through(55, 1000) == 550.0
    assert never.steps_for(1_234.0) == 123


def test_the_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="generator_freeze_at"):
        ObjectiveConfig(generator_freeze_at=1.0)
    with pytest.raises(ConfigError, match="trains none"):
        ObjectiveConfig(objective="mlm", generator_freeze_at=0.5)
    with pytest.raises(ConfigError, match="trains none"):
        ObjectiveConfig(objective="rtd-ngram", generator_freeze_at=0.5)
    with pytest.raises(ConfigError, match="frozen_temperature_end"):
        ObjectiveConfig(generator_freeze_at=0.5, frozen_temperature_end=0.0)
    with pytest.raises(ValueError, match="never freezes"):
        ElectraForPretraining(preset("tiny"), ObjectiveConfig(), SPECIAL).freeze_generator()


def test_the_temperature_moves_linearly_from_the_freeze_to_the_last_step() -> None:
    obj = ObjectiveConfig(
        generator_freeze_at=0.5, frozen_temperature_start=2.0, frozen_temperature_end=0.5
    )
    assert frozen_temperature(obj, 0, 50, 100) == obj.temperature == 1.0
    assert frozen_temperature(obj, 49, 50, 100) == 1.0
    assert frozen_temperature(obj, 50, 50, 100) == 2.0
    assert frozen_temperature(obj, 75, 50, 100) == pytest.approx(1.25)
    assert frozen_temperature(obj, 100, 50, 100) == pytest.approx(0.5)


# -- the model -------------------------------------------------------------------------------


@pytest.mark.parametrize("sharing", ["tied", "gdes"])
def test_a_frozen_generator_stops_changing_and_the_discriminator_goes_on(sharing: str) -> None:
    model = _model(sharing)
    model.train()
    opt = adamw(weight_decay_groups(model, 0.01), lr=1e-3)
    for step in range(2):
        joint = _step(model, opt, step)
    assert joint.loss.item() > model.objective.disc_weight * joint.disc_loss.item()
    frozen = model.freeze_generator()
    drop_from_optimizer(opt, frozen)
    assert model.generator_frozen and not model.generator.training
    assert frozen and all(not p.requires_grad for p in model.generator.parameters())
    kept = {id(p) for g in opt.param_groups for p in g["params"]}
    assert not any(id(p) in kept for p in frozen) and all(p not in opt.state for p in frozen)
    assert {id(p) for p in model.discriminator.parameters()} <= kept  # it trains on
    gen0, disc0 = _snapshot(model.generator), _snapshot(model.discriminator)
    model.train()  # a frozen generator stays in eval mode
    assert not model.generator.training and model.discriminator.training
    for step in range(2, 5):
        out = _step(model, opt, step)
        # no generator term: the loss is the discriminator's alone
        assert out.loss.item() == pytest.approx(model.objective.disc_weight * out.disc_loss.item())
        assert out.mlm_loss is not None  # still measured (forward only)
    gen1, disc1 = _snapshot(model.generator), _snapshot(model.discriminator)
    assert all(torch.equal(gen0[k], gen1[k]) for k in gen0), "the frozen generator moved"
    assert any(not torch.equal(disc0[k], disc1[k]) for k in disc0), "the discriminator stopped"
    word = "electra.embeddings.word_embeddings.weight"
    if sharing == "tied":  # the discriminator trains the table the generator was copied from
        assert model.generator.electra.embeddings is not model.discriminator.electra.embeddings
        assert not torch.equal(gen1[word], disc1[word])
        own = model.generator.electra.embeddings.word_embeddings.weight
        assert model.generator.generator_lm_head.weight is own  # the head reads the copy
    else:  # gdes: the generator's tables froze; the discriminator moves its delta
        delta = "electra.embeddings.word_embeddings_delta"
        assert not torch.equal(disc0[delta], disc1[delta])


def test_the_frozen_generator_samples_at_the_temperature_it_is_given() -> None:
    """A very low temperature samples the argmax; the default samples the softmax."""
    model = _model().eval()
    model.freeze_generator()
    ids, mask = _batch(0)
    rng = lambda: SampleRNG(SampleRNG.seeds_for(0, range(8)))  # noqa: E731
    model.sampling_temperature = 1e-4
    cold = model(ids, mask, rng=rng(), keep_tensors=True)
    model.sampling_temperature = 1.0
    warm = model(ids, mask, rng=rng(), keep_tensors=True)
    with torch.no_grad():
        m = model._mask(ids, mask, rng())
        logits = model.generator(m.input_ids, None, None, m.positions)
    flat = cold.corrupted_ids.reshape(-1).index_select(0, m.positions)
    assert torch.equal(flat, logits.argmax(-1))
    assert not torch.equal(warm.corrupted_ids, cold.corrupted_ids)


# -- a run -----------------------------------------------------------------------------------


def _run(blocks: Path, run: Path, *extra: str):
    return tiny_config(
        blocks,
        run,
        "objective.generator_freeze_at=0.5",
        "objective.frozen_temperature_start=1.5",
        "optim.max_steps=8",
        "run.save_every=3",
        "run.log_every=1",
        "run.eval_every=0",
        *extra,
    )


def test_a_run_frozen_part_way_resumes_exactly_and_is_charged_its_plan(
    blocks: Path, tmp_path: Path
) -> None:
    """Frozen at step 4 of 8; the cut run loses its step-6 checkpoint (saved frozen) and
    resumes from it... then from step 3 (saved before the freeze): both end identical."""
    from electra.pretrain.trainer import Trainer

    ref, cut = tmp_path / "ref", tmp_path / "cut"
    summary = Trainer(_run(blocks, ref, "run.export=false")).fit()
    state, _, _ = ckpt.load(ckpt.latest_valid(ref / "checkpoints").path)
    step6, _, _ = ckpt.load(ref / "checkpoints" / "step-00000006")
    step3, _, _ = ckpt.load(ref / "checkpoints" / "step-00000003")
    assert bool(state["frozen_generator"]) and not bool(step3["frozen_generator"])
    _, train_state, _ = ckpt.load(ckpt.latest_valid(ref / "checkpoints").path)
    assert train_state["generator_frozen_at"] == 4  # what a resume counts from
    gen = "generator.electra.embeddings.word_embeddings.weight"
    assert gen in state and gen not in step3  # the frozen copy is its own table
    assert torch.equal(state[gen], step6[gen])  # and it did not move after the freeze
    assert not torch.equal(
        state["generator.generator_predictions.dense.weight"],
        step3["generator.generator_predictions.dense.weight"],
    )
    # charged: 4 joint steps, 4 frozen ones
    cfg = _run(blocks, ref)
    from electra.blocks.read import open_blocks

    train = open_blocks(blocks, "train")
    plan = paper_flops_plan(
        dataclasses.replace(preset("tiny"), vocab_size=train.vocab_size),
        cfg.optim.batch_size,
        train.block_length,
        cfg.objective,
    )
    assert plan.freeze_step(8) == 4
    assert summary["train_flops"] == pytest.approx(plan.through(8, 8))
    assert summary["train_flops"] < 8 * plan.per_step

    Trainer(_run(blocks, cut, "run.export=false")).fit()
    for keep in (6, 3):  # from a frozen checkpoint, then from one before the freeze
        for c in ckpt.step_dirs(cut / "checkpoints"):
            if c.step > keep:
                shutil.rmtree(c.path)
        assert Trainer(_run(blocks, cut, "run.export=false"), resume=True).fit()["step"] == 8
        assert step_losses(cut) == step_losses(ref)
        got, _, _ = ckpt.load(ckpt.latest_valid(cut / "checkpoints").path)
        assert got.keys() == state.keys() and all(torch.equal(got[k], state[k]) for k in state)


def test_a_frozen_run_exports_and_says_so_on_its_card(blocks: Path, tmp_path: Path) -> None:
    from electra.model.hf import load_generator
    from electra.pretrain.trainer import Trainer

    run = tmp_path / "run"
    Trainer(_run(blocks, run)).fit()
    card = (run / "hf" / "discriminator" / "README.md").read_text()
    assert "frozen" in card and "first 50%" in card
    state, _, _ = ckpt.load(ckpt.latest_valid(run / "checkpoints").path)
    exported = load_generator(run / "hf" / "generator")
    assert torch.equal(
        exported.electra.embeddings.word_embeddings.weight,
        state["generator.electra.embeddings.word_embeddings.weight"],
    )


def test_compare_charges_a_frozen_arm_as_the_trainer_counts_it(blocks: Path) -> None:
    """The same budget buys a frozen arm more steps than plain RTD, by both counters, and
    the whole schedule stays inside the budget."""
    from electra.experiments.arms import parse_arm
    from electra.experiments.compare import arm_overrides, step_plans
    from electra.experiments.options import CompareCommand
    from electra.pretrain.config import load_config

    cmd = CompareCommand(config="tiny", budget_flops=1e10)
    plain = step_plans(load_config(cmd.config, arm_overrides(cmd, parse_arm("rtd"))), blocks)
    lever = parse_arm("rtd:objective.generator_freeze_at=0.3")
    frozen = step_plans(load_config(cmd.config, arm_overrides(cmd, lever)), blocks)
    for counter in ("paper", "executed"):
        n = frozen[counter].steps_for(cmd.budget_flops)
        assert n > plain[counter].steps_for(cmd.budget_flops), counter
        assert frozen[counter].through(n, n) <= cmd.budget_flops
        assert frozen[counter].per_step == plain[counter].per_step


def test_several_processes_are_refused_clearly(blocks: Path, tmp_path: Path, monkeypatch) -> None:
    from electra.pretrain import trainer as trainer_module

    real = trainer_module.setup_distributed

    def two_ranks(device):
        env = real(device)
        return dataclasses.replace(env, world=2)

    monkeypatch.setattr(trainer_module, "setup_distributed", two_ranks)
    with pytest.raises(ConfigError, match="single-process"):
        trainer_module.Trainer(_run(blocks, tmp_path / "run")).fit()
