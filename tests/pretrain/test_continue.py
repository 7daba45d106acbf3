"""Continued pre-training from Hugging Face directories (``pretrain --init-from``).

A random ``transformers`` ELECTRA pair, saved offline with tokenizer files,
is continued through our CLI: the first step's losses must equal the same
step computed with the ``transformers`` modules on the same batch and
randomness, which holds only if every weight was carried over exactly and
the embeddings are shared as the official code shares them. Then the guards.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from electra.config import ConfigError
from electra.model.checkpoint import CheckpointError

transformers = pytest.importorskip("transformers")

BATCH = 4
SHAPE = dict(
    embedding_size=32,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    max_position_embeddings=128,
)
GEN_SHAPE = dict(SHAPE, hidden_size=32, num_attention_heads=2, intermediate_size=64)
NO_DROPOUT = ("model.hidden_dropout_prob=0.0", "model.attention_probs_dropout_prob=0.0")


def _perturbed(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Non-trivial LayerNorms and biases, so a weight left at its init would show."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    return model


def save_pair(
    root: Path, tok_dir: Path, vocab: int, shared: bool = True, **gen_changes
) -> tuple[Path, Path]:
    """A random ElectraForPreTraining + ElectraForMaskedLM pair as released checkpoints are."""
    torch.manual_seed(0)
    disc = _perturbed(
        transformers.ElectraForPreTraining(transformers.ElectraConfig(vocab_size=vocab, **SHAPE)),
        1,
    )
    gen_cfg = transformers.ElectraConfig(**{"vocab_size": vocab, **GEN_SHAPE, **gen_changes})
    gen = _perturbed(transformers.ElectraForMaskedLM(gen_cfg), 2)
    if shared:  # one embedding table, as the official code trains and releases them
        gen.electra.embeddings = disc.electra.embeddings
        gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
    tokenizer = transformers.ElectraTokenizerFast.from_pretrained(str(tok_dir))
    dirs = root / "discriminator", root / "generator"
    for model, d in zip((disc, gen), dirs, strict=True):
        model.save_pretrained(d)
        tokenizer.save_pretrained(d)
    return dirs


@pytest.fixture(scope="module")
def released(blocks: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The released pair, with the tokenizer of the session's Korean blocks."""
    vocab = json.loads((blocks / "manifest.json").read_text())["vocab_size"]
    return save_pair(tmp_path_factory.mktemp("released"), blocks.parent / "tok", vocab)


@pytest.fixture(scope="module")
def law_blocks(released, ko_law: Path, tmp_path_factory, cli) -> Path:
    """Domain blocks (the Korean constitution) prepared with the checkpoint's directory."""
    out = tmp_path_factory.mktemp("law") / "blocks"
    args = ["prepare", str(ko_law), "--tokenizer", str(released[0]), "-o", str(out)]
    r = cli(*args, "--max-length", "64", "--workers", "1", "--validation-fraction", "0.2")
    assert r.returncode == 0, r.stderr
    return out


CPU = "run.device='cpu'"  # exactness against a CPU reference: never the GPU of a GPU machine


def continue_sets(*sets: str) -> tuple[str, ...]:
    """The ``--set`` overrides of a continued run on the command line (CPU, fp32, no dropout)."""
    return (
        CPU,
        f"optim.batch_size={BATCH}",
        "optim.warmup_steps=1",
        'run.precision="fp32"',
        "run.log_every=1",
        "run.eval_every=2",
        "run.eval_batches=1",
        "run.tensorboard=false",
        "run.progress=false",
        *NO_DROPOUT,
        *sets,
    )


def continue_run(cli, out: Path, blocks: Path, *init: str, sets: tuple[str, ...] = ()):
    sets = continue_sets(*sets)
    args = ["pretrain", "--config", "continue", *init, "--data", str(blocks), "-o", str(out)]
    r = cli(*args, "--set", *sets)
    assert r.returncode == 0, r.stderr
    return r


def first_step(run: Path) -> dict[str, float]:
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return next(r for r in records if r["step"] == 1 and "loss" in r)


def reference_first_step(disc_dir: Path, gen_dir: Path, blocks: Path) -> dict[str, float]:
    """The first RTD step computed with ``transformers`` modules (same batch and randomness)."""
    from electra.blocks.read import BlockLoader, open_blocks
    from electra.pretrain.objective import SampleRNG, mask_batch

    train = open_blocks(blocks, "train")
    loader = BlockLoader(train, BATCH, seed=0, rank=0, world_size=1, position=0)
    batch = next(loader)
    loader.close()
    ids, mask, types = batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]
    disc = transformers.ElectraForPreTraining.from_pretrained(disc_dir).eval()
    gen = transformers.ElectraForMaskedLM.from_pretrained(gen_dir).eval()
    gen.electra.embeddings = disc.electra.embeddings  # the official code's sharing
    gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
    rng = SampleRNG(SampleRNG.seeds_for(0, range(BATCH)))
    m = mask_batch(ids, mask, train.special, 0.15, rng, style="electra", mask_token_prob=0.85)
    with torch.no_grad():
        logits = gen(m.input_ids, attention_mask=mask, token_type_ids=types).logits
        logits = logits.reshape(-1, logits.shape[-1])[m.positions]
        mlm = F.cross_entropy(logits, m.labels)
        u = rng.uniform_rows(m.is_masked.sum(-1), len(m.positions))[:, None]  # the 4th draw
        cdf = logits.softmax(-1).cumsum(-1)  # inverse-CDF sampling, one uniform per position
        sampled = (cdf <= u * cdf[:, -1:]).sum(-1).clamp(max=logits.shape[-1] - 1)
        corrupted = ids.reshape(-1).index_copy(0, m.positions, sampled).reshape(ids.shape)
        replaced = (corrupted != ids).float()
        d = disc(corrupted, attention_mask=mask, token_type_ids=types).logits
        bce = F.binary_cross_entropy_with_logits(d, replaced, reduction="none")
        disc_loss = (bce * mask).sum() / mask.sum()
    return {
        "mlm_loss": mlm.item(),
        "disc_loss": disc_loss.item(),
        "loss": (mlm + 50 * disc_loss).item(),
    }


def assert_same_losses(ours: dict[str, float], ref: dict[str, float]) -> None:
    for k in ("mlm_loss", "disc_loss", "loss"):
        assert ours[k] == pytest.approx(ref[k], rel=1e-6), k  # fp32: measured <= 7e-8


def sha256(path: Path) -> str:
    from electra.model.checkpoint import sha256_file

    return sha256_file(path)


# -- the pair ------------------------------------------------------------------------------


@pytest.mark.slow
def test_pair_continues_exactly_and_exports(released, law_blocks, tmp_path: Path, cli) -> None:
    disc_dir, gen_dir = released
    run = tmp_path / "run"
    r = continue_run(
        cli,
        run,
        law_blocks,
        "--init-from",
        str(disc_dir),
        "--init-generator",
        str(gen_dir),
        sets=("optim.max_steps=2",),
    )
    assert "continuing from" in r.stderr and "fresh generator" not in r.stderr
    assert_same_losses(first_step(run), reference_first_step(disc_dir, gen_dir, law_blocks))

    # The run counts from zero and records where it started.
    summary = json.loads((run / "summary.json").read_text())
    assert summary["step"] == 2 and summary["tokens"] == 2 * BATCH * 64
    origin = summary["origin"]
    assert origin["discriminator_sha256"] == sha256(disc_dir / "model.safetensors")
    assert origin["generator_sha256"] == sha256(gen_dir / "model.safetensors")
    assert json.loads((run / "config.json").read_text())["generator"]["hidden_size"] == 32

    # The export loads back in transformers and is the trained model.
    from electra.pretrain.export import load_run_model

    ours, _, _ = load_run_model(run)
    hf_disc = transformers.ElectraForPreTraining.from_pretrained(run / "hf" / "discriminator")
    hf_gen = transformers.ElectraForMaskedLM.from_pretrained(run / "hf" / "generator")
    ids = torch.randint(5, 200, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(hf_disc.eval()(ids).logits, ours.discriminator.eval()(ids), atol=1e-5)
        assert torch.allclose(hf_gen.eval()(ids).logits, ours.generator.eval()(ids), atol=1e-5)
        trained = ours.discriminator.electra.embeddings.word_embeddings.weight
        start = transformers.ElectraForPreTraining.from_pretrained(disc_dir)
        assert not torch.equal(trained, start.electra.embeddings.word_embeddings.weight)

    # Model cards: what, origin (by checksum), steps, tokens, FLOPs, scores.
    card = (run / "hf" / "discriminator" / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers")
    assert origin["discriminator_sha256"] in card and origin["generator_sha256"] in card
    assert f"tokens: {2 * BATCH * 64:,}" in card and "training FLOPs" in card
    assert "generator accuracy at masked positions" in card
    assert "ElectraForMaskedLM" in (run / "hf" / "generator" / "README.md").read_text()


@pytest.mark.slow
def test_discriminator_alone_gets_a_fresh_generator(released, law_blocks, tmp_path, cli) -> None:
    disc_dir, _ = released
    run = tmp_path / "run"
    # Learning rate 0: the exported weights are the ones the first step ran with.
    r = continue_run(
        cli,
        run,
        law_blocks,
        "--init-from",
        str(disc_dir),
        sets=("optim.max_steps=1", "optim.learning_rate=0.0"),
    )
    assert "fresh generator (hidden 16, 1 heads" in r.stderr
    exported = load_file(str(run / "hf" / "discriminator" / "model.safetensors"))
    original = load_file(str(disc_dir / "model.safetensors"))
    assert exported.keys() <= original.keys()
    assert all(torch.equal(exported[k], original[k]) for k in exported)
    gen_cfg = json.loads((run / "hf" / "generator" / "config.json").read_text())
    assert (gen_cfg["hidden_size"], gen_cfg["embedding_size"]) == (16, 32)
    ref = reference_first_step(disc_dir, run / "hf" / "generator", law_blocks)
    assert_same_losses(first_step(run), ref)
    assert "with a fresh generator" in (run / "hf" / "discriminator" / "README.md").read_text()


def test_prepare_accepts_the_checkpoint_directory(released, law_blocks, blocks) -> None:
    """Blocks from the checkpoint's directory carry the same tokenizer hash as its source."""
    ours = json.loads((law_blocks / "manifest.json").read_text())["tokenizer"]
    theirs = json.loads((blocks / "manifest.json").read_text())["tokenizer"]
    assert ours["source"] == str(released[0]) and ours["sha256"] == theirs["sha256"]


# -- guards --------------------------------------------------------------------------------


def continue_config(blocks: Path, out: Path, disc: Path, gen: Path | None = None, *extra: str):
    from electra.pretrain.config import load_config

    sets = [
        CPU,
        f"data.blocks={json.dumps(str(blocks))}",
        f"run.output_dir={json.dumps(str(out))}",
        f"init.discriminator={json.dumps(str(disc))}",
        f"optim.batch_size={BATCH}",
        "optim.max_steps=1",
        "run.progress=false",
        "run.tensorboard=false",
        "run.eval_every=0",
        *extra,
    ]
    if gen is not None:
        sets.append(f"init.generator={json.dumps(str(gen))}")
    return load_config("continue", sets)


def refusal(cfg) -> str:
    """The error a continued run stops with, before any training step."""
    from electra.pretrain.trainer import Trainer

    with pytest.raises((ConfigError, CheckpointError)) as info:
        Trainer(cfg).fit()
    assert not (Path(cfg.run.output_dir) / "metrics.jsonl").exists()
    return str(info.value)


def copy_dir(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.slow
def test_blocks_of_another_tokenizer_refuse_to_train(released, law_blocks, tmp_path, cli) -> None:
    other = copy_dir(released[0], tmp_path / "other")
    tok = json.loads((other / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    a, b = (t for t, i in vocab.items() if i in (100, 101))
    vocab[a], vocab[b] = vocab[b], vocab[a]  # the same tokens, two ids swapped
    (other / "tokenizer.json").write_text(json.dumps(tok), encoding="utf-8")
    r = cli(
        "pretrain",
        "--config",
        "continue",
        "--init-from",
        str(other),
        "--data",
        str(law_blocks),
        "-o",
        str(tmp_path / "run"),
        "--set",
        CPU,
    )
    assert r.returncode == 2
    # Names the blocks' manifest, the tokenizer they were made with, and the checkpoint.
    assert str(law_blocks / "manifest.json") in r.stderr
    assert f"prepared with tokenizer {released[0]} " in r.stderr
    assert f"but {other} has another vocabulary" in r.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize("field,value", [("vocab_size", 999), ("embedding_size", 16)])
def test_generator_must_share_the_embedding_table(
    blocks, law_blocks, released, tmp_path, field: str, value: int
) -> None:
    vocab = json.loads((blocks / "manifest.json").read_text())["vocab_size"]
    _, gen = save_pair(
        tmp_path / "pair", blocks.parent / "tok", vocab, shared=False, **{field: value}
    )
    msg = refusal(continue_config(law_blocks, tmp_path / "run", released[0], gen))
    assert msg.startswith(f"{gen / 'config.json'}: {field} = {value}, but the discriminator's")
    assert str(released[0] / "config.json") in msg


def test_a_directory_that_is_not_electra(law_blocks, released, tmp_path) -> None:
    bert = tmp_path / "bert"
    cfg = transformers.BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    transformers.BertForMaskedLM(cfg).save_pretrained(bert)
    msg = refusal(continue_config(law_blocks, tmp_path / "run", bert))
    assert msg == f"{bert / 'config.json'}: model_type 'bert' is not 'electra' or 'convbert'"
    # A generator given where the discriminator belongs.
    msg = refusal(continue_config(law_blocks, tmp_path / "run", released[1]))
    assert msg.startswith(f"{released[1] / 'config.json'}: architectures is ElectraForMaskedLM")


def test_missing_weights_name_the_file_and_parameter(law_blocks, released, tmp_path) -> None:
    disc, gen = released
    no_file = copy_dir(disc, tmp_path / "no_file")
    (no_file / "model.safetensors").unlink()
    msg = refusal(continue_config(law_blocks, tmp_path / "run1", no_file))
    assert msg.startswith(f"{no_file}: no weights file")

    no_head = copy_dir(disc, tmp_path / "no_head")
    state = load_file(str(no_head / "model.safetensors"))
    del state["discriminator_predictions.dense.weight"]
    save_file(state, str(no_head / "model.safetensors"), metadata={"format": "pt"})
    msg = refusal(continue_config(law_blocks, tmp_path / "run2", no_head))  # a partial head
    assert msg == (
        f"{no_head / 'model.safetensors'}: missing parameter "
        "'discriminator_predictions.dense.weight'"
    )

    bad_gen = copy_dir(gen, tmp_path / "bad_gen")
    state = load_file(str(bad_gen / "model.safetensors"))
    key = "electra.encoder.layer.1.output.dense.weight"
    state[key] = state[key][:, :-1].contiguous()
    save_file(state, str(bad_gen / "model.safetensors"), metadata={"format": "pt"})
    msg = refusal(continue_config(law_blocks, tmp_path / "run3", disc, bad_gen))
    assert msg.startswith(f"{bad_gen / 'model.safetensors'}: parameter '{key}' has shape")


@pytest.mark.parametrize("sharing", ["tied", "gdes"])
def test_an_encoder_only_release_gets_a_fresh_head(
    law_blocks, released, tmp_path, capsys, sharing
) -> None:
    """ElectraModel (or ConvBertModel) releases hold no replaced-token head: the encoder is
    loaded exactly and a fresh head is trained on it, and the log says so."""
    from electra.model.hf import TOKENIZER_FILES
    from electra.pretrain.trainer import Trainer

    encoder = tmp_path / "encoder"
    release = transformers.ElectraForPreTraining.from_pretrained(released[0])
    release.electra.save_pretrained(encoder)  # bare keys, architectures ElectraModel
    for name in TOKENIZER_FILES:
        if (released[0] / name).is_file():
            shutil.copyfile(released[0] / name, encoder / name)
    run = tmp_path / "run"
    sets = ("optim.learning_rate=0.0", f'objective.embedding_sharing="{sharing}"')
    Trainer(continue_config(law_blocks, run, encoder, None, *sets)).fit()
    assert "without the replaced-token head" in capsys.readouterr().err
    exported = load_file(str(run / "hf" / "discriminator" / "model.safetensors"))
    original = load_file(str(released[0] / "model.safetensors"))
    head = [k for k in original if k.startswith("discriminator_predictions.")]
    body = [k for k in original if k not in head]
    assert head and body and set(exported) == set(original)
    assert all(torch.equal(exported[k], original[k]) for k in body)
    assert not any(torch.equal(exported[k], original[k]) for k in head if k.endswith("weight"))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["origin"]["fresh_head"] is True
    card = (run / "hf" / "discriminator" / "README.md").read_text()
    assert "with a fresh replaced-token head" in card


def test_a_hub_id_continues_and_is_recorded(
    law_blocks, released, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--init-from org/name``: the cached snapshot is read, and summary.json and the model
    card name the repo, its commit sha and the weights' sha256 (offline, hand-laid cache)."""
    from builders import offline_hub_cache, publish_to_hub_cache

    from electra.pretrain.trainer import Trainer
    from electra.system.files import sha256_file

    cache = offline_hub_cache(tmp_path / "hf-cache", monkeypatch)
    sha = "c" * 40
    snapshot = publish_to_hub_cache(cache, "org/released", released[0], sha, "v1.0")
    run = tmp_path / "run"
    Trainer(continue_config(law_blocks, run, "org/released@v1.0", None)).fit()  # type: ignore[arg-type]
    source = json.loads((run / "summary.json").read_text())["origin"]["discriminator_source"]
    weights = sha256_file(snapshot / "model.safetensors")
    assert source["repo_id"] == "org/released" and source["revision"] == sha
    assert source["requested_revision"] == "v1.0"
    assert source["files_sha256"] == {"model.safetensors": weights}
    card = (run / "hf" / "discriminator" / "README.md").read_text()
    assert f"`org/released@{sha}`" in card and weights in card


def test_shape_comes_from_the_checkpoint(law_blocks, released, tmp_path) -> None:
    msg = refusal(
        continue_config(
            law_blocks, tmp_path / "run", released[0], None, "model.num_hidden_layers=4"
        )
    )
    assert msg.startswith(f"model.num_hidden_layers = 4, but {released[0] / 'config.json'} has")
    msg = refusal(
        continue_config(
            law_blocks, tmp_path / "run", released[0], None, 'objective.objective="mlm"'
        )
    )
    assert "objective.objective = 'mlm'" in msg


def test_unshared_generator_embeddings_are_replaced_and_said(
    blocks, law_blocks, released, tmp_path, capsys
) -> None:
    from electra.pretrain.trainer import Trainer

    vocab = json.loads((blocks / "manifest.json").read_text())["vocab_size"]
    _, gen = save_pair(tmp_path / "pair", blocks.parent / "tok", vocab, shared=False)
    run = tmp_path / "run"
    Trainer(continue_config(law_blocks, run, released[0], gen, "optim.learning_rate=0.0")).fit()
    assert "differ from the discriminator's; both now use the discriminator's" in (
        capsys.readouterr().err
    )
    exported = load_file(str(run / "hf" / "generator" / "model.safetensors"))
    disc = load_file(str(released[0] / "model.safetensors"))
    key = "electra.embeddings.word_embeddings.weight"
    assert torch.equal(exported[key], disc[key])


def test_resume_continues_the_checkpoint_not_the_release(
    law_blocks, released, tmp_path, capsys
) -> None:
    from electra.pretrain.trainer import Trainer

    run = tmp_path / "run"
    Trainer(continue_config(law_blocks, run, released[0], released[1])).fit()
    capsys.readouterr()
    summary = Trainer(
        continue_config(law_blocks, run, released[0], released[1], "optim.max_steps=2"),
        resume=True,
    ).fit()
    err = capsys.readouterr().err
    assert "resuming from" in err and "continuing from" not in err
    assert summary["step"] == 2 and summary["origin"]["generator"] == str(released[1].resolve())


def test_continue_recipe() -> None:
    from electra.pretrain.config import load_config

    cfg = load_config("continue")
    assert cfg.model == {"preset": "small"}  # no shape of its own: it comes from --init-from
    assert cfg.optim.learning_rate < load_config("small").optim.learning_rate
    assert cfg.optim.warmup_steps < load_config("small").optim.warmup_steps


# -- vocabulary extension ------------------------------------------------------------------


@pytest.mark.slow
def test_extended_vocabulary_starts_from_the_mean_of_the_pieces(
    released, ko_law: Path, law_blocks, tmp_path: Path, cli
) -> None:
    from electra.text.tokenizer import load_tokenizer, vocab_list

    disc, gen = released
    out = tmp_path / "extended"
    args = ["extend-vocab", str(disc), "--generator", str(gen), "-o", str(out)]
    r = cli(*args, "--corpus", str(ko_law), "--add", "12", "--min-count", "3")
    assert r.returncode == 0, r.stderr
    added = (out / "added_tokens.txt").read_text(encoding="utf-8").split()
    assert len(added) == 12
    old_tok, new_tok = load_tokenizer(disc), load_tokenizer(out / "discriminator")
    n = old_tok.get_vocab_size()
    assert new_tok.get_vocab_size() == n + 12
    assert vocab_list(new_tok)[:n] == vocab_list(old_tok)  # old ids do not move
    for kind in ("discriminator", "generator"):
        before = load_file(str(released[kind == "generator"] / "model.safetensors"))
        after = load_file(str(out / kind / "model.safetensors"))
        key = "electra.embeddings.word_embeddings.weight"
        assert torch.equal(after[key][:n], before[key])
        for i, word in enumerate(added):
            pieces = old_tok.encode(word, add_special_tokens=False).ids
            assert len(pieces) >= 2 and new_tok.encode(word, add_special_tokens=False).ids == [
                n + i
            ]
            assert torch.allclose(after[key][n + i], before[key][pieces].mean(0))
        if kind == "generator":
            bias = "generator_lm_head.bias"
            assert torch.allclose(
                after[bias][n], before[bias][old_tok.encode(added[0]).ids[1:-1]].mean()
            )

    # transformers reads the extended directories.
    hf = transformers.ElectraForMaskedLM.from_pretrained(out / "generator")
    assert hf.config.vocab_size == n + 12 and hf.generator_lm_head.weight.shape[0] == n + 12
    hf_tok = transformers.AutoTokenizer.from_pretrained(out / "discriminator")
    assert hf_tok(added[0], add_special_tokens=False)["input_ids"] == [n]

    # Blocks of the old vocabulary refuse; blocks of the new one train and export.
    from electra.pretrain.trainer import Trainer

    ext_disc, ext_gen = out / "discriminator", out / "generator"
    assert "another vocabulary" in refusal(
        continue_config(law_blocks, tmp_path / "refused", ext_disc, ext_gen)
    )
    blocks = tmp_path / "blocks"
    r = cli(
        "prepare",
        str(ko_law),
        "--tokenizer",
        str(ext_disc),
        "-o",
        str(blocks),
        "--max-length",
        "64",
        "--workers",
        "1",
        "--validation-fraction",
        "0.2",
    )
    assert r.returncode == 0, r.stderr
    Trainer(continue_config(blocks, tmp_path / "run", ext_disc, ext_gen)).fit()
    exported = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "run/hf/discriminator")
    assert exported.config.vocab_size == n + 12


def test_extend_vocab_refuses_known_tokens_and_ambiguous_sources(released, tmp_path) -> None:
    from electra.pretrain.extend import extend_vocab
    from electra.pretrain.options import ExtendVocabCommand

    tokens = tmp_path / "tokens.txt"
    tokens.write_text("[MASK]\n", encoding="utf-8")
    cmd = ExtendVocabCommand(str(released[0]), str(tmp_path / "out"), tokens=str(tokens))
    with pytest.raises(ConfigError, match=r"token '\[MASK\]' is already in the vocabulary"):
        extend_vocab(cmd)
    cmd = ExtendVocabCommand(str(released[0]), str(tmp_path / "out"))
    with pytest.raises(ConfigError, match="either --tokens FILE or --corpus FILES"):
        extend_vocab(cmd)
    assert not (tmp_path / "out").exists()


def test_a_convbert_pair_continues_and_exports_as_convbert(released, law_blocks, tmp_path) -> None:
    """Our ConvBERT exports (the cpu recipe's) are released checkpoints like any other."""
    from electra.model.config import ElectraConfig
    from electra.model.encoder import ElectraDiscriminator, ElectraGenerator
    from electra.model.hf import TOKENIZER_FILES, export_discriminator, export_generator
    from electra.pretrain.export import load_run_model
    from electra.pretrain.trainer import Trainer

    vocab = json.loads((released[0] / "config.json").read_text())["vocab_size"]
    torch.manual_seed(0)
    disc = ElectraDiscriminator(ElectraConfig(vocab_size=vocab, conv_kernel_size=3, **SHAPE))
    gen_cfg = ElectraConfig(vocab_size=vocab, conv_kernel_size=3, **GEN_SHAPE)
    gen = ElectraGenerator(gen_cfg, embeddings=disc.electra.embeddings)
    dirs = tmp_path / "d", tmp_path / "g"
    export_discriminator(disc, dirs[0])
    export_generator(gen, dirs[1])
    for d in dirs:  # the released pair's tokenizer (what law_blocks were prepared with)
        for name in TOKENIZER_FILES:
            if (released[0] / name).is_file():
                shutil.copyfile(released[0] / name, d / name)
    run = tmp_path / "run"
    Trainer(continue_config(law_blocks, run, *dirs, "optim.max_steps=2")).fit()
    config = json.loads((run / "hf" / "discriminator" / "config.json").read_text())
    assert (config["model_type"], config["conv_kernel_size"]) == ("convbert", 3)
    ours, _, _ = load_run_model(run)
    hf = transformers.AutoModel.from_pretrained(run / "hf" / "discriminator").eval()
    ids = torch.randint(5, vocab, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = ours.discriminator.electra.eval()(ids)
        assert torch.allclose(hf(ids).last_hidden_state, want, atol=1e-5)
    assert "ConvBertModel" in (run / "hf" / "discriminator" / "README.md").read_text()


def test_continued_runs_pin_the_cpu(tmp_path) -> None:
    """They compare their first losses with a CPU reference: on a GPU machine too."""
    assert continue_config(tmp_path, tmp_path, tmp_path).run.device == "cpu"
    assert "run.device='cpu'" in continue_sets()
