"""Gradient-disentangled embedding sharing (``objective.embedding_sharing = "gdes"``).

Under gdes the generator owns the word, position and token-type tables and
only its loss updates them; the discriminator reads ``stop_gradient(table) +
delta`` with a zero-initialised delta of its own. The checks: where each loss's
gradient goes, that "tied" (the default) is the code it was, that the export
merges the tables exactly into a plain ELECTRA, that a gdes run resumes
exactly, and that ``--init-from`` of a gdes export starts from that model.
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
from torch import Tensor

from electra.blocks.read import open_blocks
from electra.model import checkpoint as ckpt
from electra.model.config import preset
from electra.model.encoder import (
    EMBEDDING_TABLES,
    DisentangledEmbeddings,
    ElectraDiscriminator,
    ElectraEmbeddings,
)
from electra.model.hf import (
    export_discriminator,
    export_generator,
    load_discriminator,
    load_generator,
)
from electra.model.optim import adamw, weight_decay_groups
from electra.pretrain.config import ObjectiveConfig
from electra.pretrain.objective import ElectraForPretraining, SampleRNG, SpecialIds

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=1000)

# Main's first three (loss, mlm_loss, disc_loss) of :func:`_train` on the tied tiny model,
# computed with main's code before gdes existed (fp32, CPU; inverse-CDF sampling).
MAIN_TIED_LOSSES = [  # since 2026-12-04: masking noise from the counter hash (other positions)
    (41.607887268066406, 6.963098526000977, 0.6928958296775818),
    (40.8619270324707, 6.907503604888916, 0.6790884733200073),
    (40.15961837768555, 6.943373680114746, 0.6643248796463013),
]


def _batch(step: int, B: int = 8, L: int = 32) -> tuple[Tensor, Tensor]:
    """[CLS] A [SEP] B [SEP] blocks, one of them padded."""
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(5, SPECIAL.vocab_size, (B, L), generator=g)
    ids[:, 0] = SPECIAL.cls
    ids[:, L // 2] = SPECIAL.sep
    ids[:, -1] = SPECIAL.sep
    ids[1, 20:] = SPECIAL.pad
    ids[1, 19] = SPECIAL.sep
    return ids, (ids != SPECIAL.pad).long()


def _rng(step: int, B: int = 8) -> SampleRNG:
    return SampleRNG(SampleRNG.seeds_for(0, range(step * B, (step + 1) * B)))


def _model(sharing: str = "tied", **model_fields) -> ElectraForPretraining:
    torch.manual_seed(0)
    cfg = dataclasses.replace(preset("tiny"), **model_fields)
    return ElectraForPretraining(cfg, ObjectiveConfig(embedding_sharing=sharing), SPECIAL)


def _train(model: ElectraForPretraining, steps: int = 3) -> list[tuple[float, float, float]]:
    """``steps`` AdamW steps on fixed batches; the (loss, mlm_loss, disc_loss) of each."""
    opt = adamw(weight_decay_groups(model, 0.01), lr=1e-3)
    out = []
    for step in range(steps):
        ids, mask = _batch(step)
        torch.manual_seed(100 + step)  # dropout
        o = model(ids, mask, rng=_rng(step))
        o.loss.backward()
        opt.step()
        opt.zero_grad()
        out.append((o.loss.item(), o.mlm_loss.item(), o.disc_loss.item()))
    return out


def _main_embeddings_forward(self, input_ids, token_type_ids=None):
    """``ElectraEmbeddings.forward`` as main had it (the modules called, not the tables)."""
    L = input_ids.shape[1]
    x = self.word_embeddings(input_ids)
    x = x + self.position_embeddings.weight[:L]
    if token_type_ids is None:
        x = x + self.token_type_embeddings.weight[0]
    else:
        x = x + self.token_type_embeddings(token_type_ids)
    return self.dropout(self.LayerNorm(x))


# -- tied is unchanged ----------------------------------------------------------------------


def test_tied_is_bit_identical_to_main(monkeypatch: pytest.MonkeyPatch) -> None:
    tied = _model("tied")
    got = _train(tied)
    with monkeypatch.context() as m:
        m.setattr(ElectraEmbeddings, "forward", _main_embeddings_forward)
        ref = _model("tied")
        want = _train(ref)
    assert got == want
    for (name, a), (_, b) in zip(tied.state_dict().items(), ref.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    # And the numbers main's code printed (to float rounding on another CPU or build).
    for g, w in zip(got, MAIN_TIED_LOSSES, strict=True):
        assert g == pytest.approx(w, rel=1e-5)
    assert ObjectiveConfig().embedding_sharing == "tied"
    assert not any("delta" in k for k in tied.state_dict())


def test_gdes_starts_with_the_tied_model_outputs() -> None:
    tied, gdes = _model("tied"), _model("gdes")
    ids, mask = _batch(0)
    outs = []
    for m in (tied, gdes):
        torch.manual_seed(7)
        outs.append(m(ids, mask, rng=_rng(0), keep_tensors=True))
    assert torch.equal(outs[0].loss, outs[1].loss)
    assert torch.equal(outs[0].disc_logits, outs[1].disc_logits)
    keys = set(gdes.state_dict())
    assert "generator.electra.embeddings.word_embeddings.weight" in keys
    assert "discriminator.electra.embeddings.word_embeddings_delta" in keys
    assert "discriminator.electra.embeddings.word_embeddings.weight" not in keys


# -- where the gradients go -----------------------------------------------------------------


def _shared_and_deltas(model: ElectraForPretraining):
    shared = model.generator.electra.embeddings
    disc = model.discriminator.electra.embeddings
    assert isinstance(disc, DisentangledEmbeddings) and isinstance(shared, ElectraEmbeddings)
    tables = [getattr(shared, n).weight for n in EMBEDDING_TABLES]
    deltas = [getattr(disc, f"{n}_delta") for n in EMBEDDING_TABLES]
    return shared, disc, tables, deltas


def _reached(p: torch.nn.Parameter) -> bool:
    return p.grad is not None and bool(p.grad.abs().sum() > 0)


def _loss(model: ElectraForPretraining, name: str) -> Tensor:
    ids, mask = _batch(0)
    types = (torch.arange(ids.shape[1]) >= ids.shape[1] // 2).long().expand_as(ids)
    return getattr(model(ids, mask, types, rng=_rng(0)), name)


def test_generator_loss_reaches_the_shared_tables_not_the_deltas() -> None:
    model = _model("gdes")
    shared, disc, tables, deltas = _shared_and_deltas(model)
    _loss(model, "mlm_loss").backward()
    assert all(_reached(t) for t in tables)
    assert shared.LayerNorm.weight.grad is not None
    assert not any(_reached(d) for d in deltas)
    assert all(p.grad is None for p in model.discriminator.parameters())


def test_discriminator_loss_reaches_only_its_deltas() -> None:
    model = _model("gdes")
    shared, disc, tables, deltas = _shared_and_deltas(model)
    _loss(model, "disc_loss").backward()
    assert all(_reached(d) for d in deltas)
    assert _reached(disc.LayerNorm.weight)  # its own LayerNorm
    assert all(t.grad is None for t in tables)
    assert all(p.grad is None for p in model.generator.parameters())
    assert not deltas[0].grad[SPECIAL.pad].any()  # [PAD]'s row, as the table's, is fixed


def test_tied_discriminator_loss_does_reach_the_shared_table() -> None:
    """The contrast that makes the test above mean something."""
    model = _model("tied")
    _loss(model, "disc_loss").backward()
    assert _reached(model.generator.electra.embeddings.word_embeddings.weight)


def test_disc_mlm_head_reads_the_merged_table() -> None:
    torch.manual_seed(0)
    objective = ObjectiveConfig(embedding_sharing="gdes", disc_mlm_weight=1.0)
    model = ElectraForPretraining(preset("tiny"), objective, SPECIAL)
    shared, disc, tables, deltas = _shared_and_deltas(model)
    assert torch.equal(model.disc_mlm_head.weight, tables[0] + deltas[0])
    _loss(model, "disc_mlm_loss").backward()
    assert _reached(deltas[0]) and tables[0].grad is None


def test_mlm_ignores_embedding_sharing() -> None:
    torch.manual_seed(0)
    objective = ObjectiveConfig(objective="mlm", embedding_sharing="gdes")
    model = ElectraForPretraining(preset("tiny"), objective, SPECIAL)
    assert model.discriminator is None and not any("delta" in k for k in model.state_dict())


def test_deltas_are_fp32_and_weight_decayed_like_the_tables() -> None:
    model = _model("gdes")
    _, _, _, deltas = _shared_and_deltas(model)
    assert all(d.dtype == torch.float32 and not d.any() for d in deltas)
    decayed = {
        id(p) for g in weight_decay_groups(model, 0.01) if g["weight_decay"] for p in g["params"]
    }
    assert all(id(d) in decayed for d in deltas)


# -- export ---------------------------------------------------------------------------------


def _trained_gdes(embedding_size: int) -> ElectraForPretraining:
    model = _model("gdes", embedding_size=embedding_size)
    _train(model, steps=3)
    _, _, _, deltas = _shared_and_deltas(model)
    assert all(d.abs().sum() > 0 for d in deltas)  # the merge has something to merge
    return model.eval()


def _disc_logits(disc, ids, mask, types) -> Tensor:
    with torch.no_grad():
        return disc(ids, mask, types)


@pytest.mark.parametrize("embedding_size", [32, 64], ids=["projected", "unprojected"])
def test_export_merges_the_tables_exactly(tmp_path: Path, embedding_size: int) -> None:
    model = _trained_gdes(embedding_size)
    export_discriminator(model.discriminator, tmp_path / "disc")
    export_generator(model.generator, tmp_path / "gen")
    saved = load_file(str(tmp_path / "disc" / "model.safetensors"))
    assert set(saved) == set(ElectraDiscriminator(model.config).state_dict())
    _, disc_emb, tables, _ = _shared_and_deltas(model)
    for name, table in zip(EMBEDDING_TABLES, tables, strict=True):
        merged = saved[f"electra.embeddings.{name}.weight"]
        assert torch.equal(merged, (table + getattr(disc_emb, f"{name}_delta")).detach())

    plain = load_discriminator(tmp_path / "disc").eval()
    ids, mask = _batch(5)
    types = (torch.arange(ids.shape[1]) >= 16).long().expand_as(ids)
    ours = _disc_logits(model.discriminator, ids, mask, types)
    assert (_disc_logits(plain, ids, mask, types) - ours).abs().max() <= 1e-6
    # The generator exports its own (the shared) tables.
    gen = load_generator(tmp_path / "gen")
    for name, table in zip(EMBEDDING_TABLES, tables, strict=True):
        assert torch.equal(getattr(gen.electra.embeddings, name).weight, table.detach())


def test_export_loads_in_transformers(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    model = _trained_gdes(32)
    export_discriminator(model.discriminator, tmp_path / "disc")
    ids, mask = _batch(5)
    types = (torch.arange(ids.shape[1]) >= 16).long().expand_as(ids)
    ours = _disc_logits(model.discriminator, ids, mask, types)
    for cls in (transformers.ElectraForPreTraining, transformers.ElectraModel):
        _, info = cls.from_pretrained(tmp_path / "disc", output_loading_info=True)
        assert not info["missing_keys"], info
        # No delta or other extra key: only the head, which the bare ElectraModel lacks.
        assert all(k.startswith("discriminator_predictions.") for k in info["unexpected_keys"])
        assert cls is transformers.ElectraModel or not info["unexpected_keys"], info
    hf = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "disc").eval()
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask, token_type_ids=types).logits
    assert (theirs - ours).abs().max() <= 1e-5


# -- a whole run: resume and --init-from ---------------------------------------------------


def _gdes_run(blocks: Path, run: Path, *extra: str):
    return tiny_config(
        blocks,
        run,
        "objective.embedding_sharing='gdes'",
        "optim.max_steps=6",
        "run.save_every=3",
        "run.log_every=1",
        "run.eval_every=0",
        *extra,
    )


def test_gdes_run_resumes_identically(blocks: Path, tmp_path: Path) -> None:
    from electra.pretrain.trainer import Trainer

    ref, cut = tmp_path / "ref", tmp_path / "cut"
    Trainer(_gdes_run(blocks, ref, "run.export=false")).fit()
    Trainer(_gdes_run(blocks, cut, "run.export=false")).fit()
    shutil.rmtree(ckpt.step_dirs(cut / "checkpoints")[0].path)  # back to step 3
    summary = Trainer(_gdes_run(blocks, cut, "run.export=false"), resume=True).fit()
    assert summary["step"] == 6
    assert step_losses(cut) == step_losses(ref) and sorted(step_losses(ref)) == list(range(1, 7))
    want, _, _ = ckpt.load(ckpt.latest_valid(ref / "checkpoints").path)
    got, _, _ = ckpt.load(ckpt.latest_valid(cut / "checkpoints").path)
    assert "discriminator.electra.embeddings.word_embeddings_delta" in want
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want)


@pytest.mark.parametrize("sharing", ["tied", "gdes"])
def test_init_from_a_gdes_export(blocks: Path, tmp_path: Path, sharing: str) -> None:
    from electra.model.hf import read_weights
    from electra.pretrain.config import load_config
    from electra.pretrain.continued import load_discriminator_weights
    from electra.pretrain.trainer import Trainer

    src = tmp_path / "src"
    Trainer(_gdes_run(blocks, src)).fit()
    hf_disc = src / "hf" / "discriminator"
    exported = load_discriminator(hf_disc).eval()
    assert "embedding sharing gdes" in (hf_disc / "README.md").read_text()

    # The continued model's discriminator starts as the export, exactly.
    model = ElectraForPretraining(
        exported.config,
        ObjectiveConfig(embedding_sharing=sharing),
        open_blocks(blocks, "train").special,
    ).eval()
    state, source = read_weights(hf_disc)
    load_discriminator_weights(model, state, source)
    ids, mask = _batch(2)
    ids = ids.clamp(max=exported.config.vocab_size - 1)
    assert torch.equal(
        _disc_logits(model.discriminator, ids, mask, None),
        _disc_logits(exported, ids, mask, None),
    )

    run = tmp_path / "continued"
    cfg = load_config(
        "continue",
        [
            f"init.discriminator={json.dumps(str(hf_disc))}",
            f"init.generator={json.dumps(str(src / 'hf' / 'generator'))}",
            f"data.blocks={json.dumps(str(blocks))}",
            f"run.output_dir={json.dumps(str(run))}",
            f"objective.embedding_sharing='{sharing}'",
            "optim.max_steps=2",
            "optim.batch_size=8",
            "optim.warmup_steps=1",
            "run.device='cpu'",
            "run.precision='fp32'",
            "run.progress=false",
            "run.eval_every=0",
            "run.log_every=1",
        ],
    )
    assert Trainer(cfg).fit()["step"] == 2
    assert load_discriminator(run / "hf" / "discriminator").config == exported.config
