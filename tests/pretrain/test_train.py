"""The pre-training loop: recipe, exact resume after SIGKILL, SIGTERM, corrupted
checkpoints, torchrun data parallelism, exports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from builders import tiny_config, tiny_pretrain_args

from electra.config import ConfigError
from electra.model import checkpoint as ckpt
from electra.model.optim import linear_warmup_decay, weight_decay_groups
from electra.pretrain.config import load_config
from electra.pretrain.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]


def tiny(blocks: Path, out: Path, *extra: str):
    return tiny_config(blocks, out, *extra)


def losses(run: Path) -> dict[int, float]:
    out = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "loss" in r:
            out[r["step"]] = r["loss"]
    return out


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "electra.cli", *args]


def env(**extra: str) -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO / "src") + os.pathsep + e.get("PYTHONPATH", "")
    e["ELECTRA_NO_TCMALLOC"] = "1"
    e["OMP_NUM_THREADS"] = "1"
    e.update(extra)
    return e


# -- recipe ---------------------------------------------------------------------------------


def test_schedule_warms_up_then_decays_linearly() -> None:
    assert linear_warmup_decay(0, 10, 110) == pytest.approx(0.1)
    assert linear_warmup_decay(9, 10, 110) == pytest.approx(1.0)
    assert linear_warmup_decay(60, 10, 110) == pytest.approx(0.5)
    assert linear_warmup_decay(110, 10, 110) == 0.0


def test_no_weight_decay_on_layernorm_and_biases() -> None:
    from electra.model.config import preset
    from electra.model.encoder import ElectraDiscriminator

    m = ElectraDiscriminator(preset("tiny"))
    decay, no_decay = weight_decay_groups(m, 0.01)
    names = {id(p): n for n, p in m.named_parameters()}
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert all("LayerNorm" in names[id(p)] or p.ndim == 1 for p in no_decay["params"])
    assert any("word_embeddings" in names[id(p)] for p in decay["params"])
    assert not any(names[id(p)].endswith("bias") for p in decay["params"])


def test_config_rejects_unknown_keys_naming_the_file(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text("[optim]\nlearnig_rate = 1e-3\n")
    with pytest.raises(ConfigError, match=r"run\.toml.*learnig_rate.*learning_rate"):
        load_config(str(f))
    f.write_text('[model]\npreset = "small"\nhiden_size = 3\n')
    with pytest.raises(ConfigError, match="hiden_size"):
        load_config(str(f))


def test_builtin_configs_load() -> None:
    for name in ("small", "base", "large", "cpu", "tiny"):
        cfg = load_config(name)
        assert cfg.optim.adam_eps == 1e-6 and cfg.optim.adam_beta2 == 0.999
    assert load_config("large").objective.mask_prob == 0.25


# -- a whole tiny run -----------------------------------------------------------------------


def test_tiny_run_logs_checkpoints_and_exports(blocks: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    cfg = tiny(
        blocks,
        run,
        "optim.max_steps=20",
        "run.log_every=5",
        "run.eval_every=10",
        "run.tensorboard=true",
    )
    summary = Trainer(cfg).fit()
    assert summary["step"] == 20 and summary["stopped"] == "max_steps"
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "loss" in r]
    assert [r["step"] for r in train] == [5, 10, 15, 20]
    want = {
        "loss",
        "mlm_loss",
        "disc_loss",
        "gen_accuracy",
        "disc_accuracy",
        "replaced_precision",
        "replaced_recall",
        "lr",
        "grad_norm",
        "tokens_seen",
        "train_flops",
        "tokens_per_s",
    }
    assert want <= set(train[-1])
    assert train[-1]["train_flops"] == pytest.approx(4 * train[0]["train_flops"])
    assert any("val/loss" in r for r in records)
    assert list((run / "tensorboard").glob("events.*"))
    saved = ckpt.latest_valid(run / "checkpoints")
    assert saved is not None and saved.step == 20
    _, state, config = ckpt.load(saved.path)
    assert config["model"]["vocab_size"] == 1000 and state["position"] == 20 * 8
    from electra.model.hf import load_discriminator, load_generator

    disc = load_discriminator(run / "hf" / "discriminator")
    gen = load_generator(run / "hf" / "generator")
    assert (run / "hf" / "discriminator" / "vocab.txt").is_file()
    assert disc.config.hidden_size == 64 and gen.config.hidden_size == 32
    assert json.loads((run / "summary.json").read_text())["step"] == 20


def test_existing_run_needs_resume(blocks: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    Trainer(tiny(blocks, run, "optim.max_steps=3", "run.export=false")).fit()
    with pytest.raises(ConfigError, match="--resume"):
        Trainer(tiny(blocks, run, "optim.max_steps=6")).fit()


def test_mlm_objective_runs_in_the_same_harness(blocks: Path, tmp_path: Path) -> None:
    run = tmp_path / "mlm"
    summary = Trainer(tiny(blocks, run, "objective.objective='mlm'", "optim.max_steps=6")).fit()
    assert summary["step"] == 6
    assert (run / "hf" / "generator" / "config.json").is_file()
    assert not (run / "hf" / "discriminator").exists()


# -- never lose work ------------------------------------------------------------------------


def _wait_for_step(run: Path, step: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, "training exited early"
        if (run / "metrics.jsonl").exists() and max(losses(run), default=0) >= step:
            return
        time.sleep(0.05)
    raise AssertionError(f"step {step} not reached")


def _pretrain_args(blocks: Path, run: Path, *extra: str) -> list[str]:
    return cli(*tiny_pretrain_args(blocks, run, "optim.max_steps=40", *extra))


@pytest.mark.slow
def test_sigkill_then_resume_gives_identical_losses(blocks: Path, tmp_path: Path) -> None:
    ref, killed = tmp_path / "ref", tmp_path / "killed"
    subprocess.run(_pretrain_args(blocks, ref, "run.save_every=7"), env=env(), check=True)
    proc = subprocess.Popen(_pretrain_args(blocks, killed, "run.save_every=7"), env=env())
    _wait_for_step(killed, 24, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    last = ckpt.latest_valid(killed / "checkpoints")
    assert last is not None and last.step < 40
    subprocess.run(
        [*_pretrain_args(blocks, killed, "run.save_every=7"), "--resume"], env=env(), check=True
    )
    want, got = losses(ref), losses(killed)
    assert sorted(got) == list(range(1, 41))
    assert all(got[s] == want[s] for s in want), "resumed run diverged"


@pytest.mark.slow
def test_sigterm_writes_a_loadable_checkpoint(blocks: Path, tmp_path: Path) -> None:
    run = tmp_path / "term"
    proc = subprocess.Popen(
        _pretrain_args(blocks, run, "run.save_every=1000", "optim.max_steps=100000"), env=env()
    )
    _wait_for_step(run, 5, proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    last = ckpt.latest_valid(run / "checkpoints")
    assert last is not None and last.step >= 5
    model_state, state, _ = ckpt.load(last.path)
    assert (
        state["step"] == last.step
        and "discriminator.electra.encoder.layer.0.output.dense.weight" in model_state
    )


def test_truncated_checkpoint_is_detected_and_the_previous_used(
    blocks: Path, tmp_path: Path, capsys
) -> None:
    run = tmp_path / "trunc"
    Trainer(tiny(blocks, run, "optim.max_steps=6", "run.save_every=3", "run.export=false")).fit()
    newest = ckpt.step_dirs(run / "checkpoints")[0]
    assert newest.step == 6
    weights = newest.path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ckpt.CheckpointError, match="checksum mismatch"):
        ckpt.load(newest.path)
    with pytest.warns(UserWarning, match="step-00000006.*truncated or corrupted"):
        found = ckpt.latest_valid(run / "checkpoints")
    assert found is not None and found.step == 3
    capsys.readouterr()
    summary = Trainer(tiny(blocks, run, "optim.max_steps=8", "run.export=false"), resume=True).fit()
    assert summary["step"] == 8
    err = capsys.readouterr().err
    assert f"skipping checkpoint step-00000006: {weights}: checksum mismatch" in err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("engine", "objective"), [("ddp", "rtd"), ("fsdp", "rtd"), ("ddp", "rtd-ngram")]
)
def test_two_processes_match_one_and_only_rank0_writes(
    blocks: Path, tmp_path: Path, engine: str, objective: str
) -> None:
    """rtd-ngram too: its count table is built from the training blocks on every rank and
    must be the same table, or the ranks draw different replacements."""
    common = (
        f"objective.objective='{objective}'",
        "optim.max_steps=6",
        "optim.batch_size=8",
        "run.save_every=3",
        "model.hidden_dropout_prob=0.0",
        "model.attention_probs_dropout_prob=0.0",
        f"run.fsdp={'true' if engine == 'fsdp' else 'false'}",
        "init.token_embeddings='ppmi'",  # computed on rank 0, sent to the others
    )
    one, two = tmp_path / "one", tmp_path / "two"
    subprocess.run(_pretrain_args(blocks, one, *common), env=env(), check=True)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    args = _pretrain_args(blocks, two, *common)
    subprocess.run([*torchrun, "-m", "electra.cli", *args[3:]], env=env(), check=True)
    a, b = losses(one), losses(two)
    assert sorted(a) == sorted(b) == list(range(1, 7))
    for s in a:
        assert b[s] == pytest.approx(a[s], rel=2e-4, abs=2e-4)
    lines = (two / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 6  # one writer
    assert [c.step for c in ckpt.step_dirs(two / "checkpoints")] == [6, 3]
    assert not list(two.glob("**/.tmp-*"))


@pytest.mark.slow
def test_resume_under_another_world_size(blocks: Path, tmp_path: Path) -> None:
    run = tmp_path / "ws"
    subprocess.run(
        _pretrain_args(blocks, run, "optim.max_steps=4", "run.save_every=2"), env=env(), check=True
    )
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    args = _pretrain_args(blocks, run, "optim.max_steps=8", "run.save_every=2")
    subprocess.run([*torchrun, "-m", "electra.cli", *args[3:], "--resume"], env=env(), check=True)
    assert sorted(losses(run)) == list(range(1, 9))
    assert torch.isfinite(torch.tensor(list(losses(run).values()))).all()


@pytest.mark.slow
def test_pretraining_on_korean_text_learns_to_detect_replacements(
    blocks: Path, tmp_path: Path
) -> None:
    """A few hundred steps of a tiny model on real Korean Wikipedia text."""
    from sklearn.metrics import roc_auc_score

    from electra.blocks.read import open_blocks
    from electra.pretrain.export import load_run_model
    from electra.pretrain.objective import SampleRNG

    run = tmp_path / "ko"
    cfg = tiny(
        blocks,
        run,
        "optim.max_steps=300",
        "optim.batch_size=32",
        "optim.learning_rate=3e-3",
        "optim.warmup_steps=30",
        "run.log_every=1",
        "run.eval_every=0",
        "run.export=false",
    )
    Trainer(cfg).fit()
    disc = [json.loads(x)["disc_loss"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert sum(disc[-20:]) / 20 < 0.7 * disc[0]  # the discriminator loss falls
    model, _, _ = load_run_model(run)
    model.eval()
    b = open_blocks(blocks, "train")
    ids, types = (torch.from_numpy(a) for a in b.get(list(range(64))))
    mask = (ids != b.special.pad).long()
    with torch.no_grad():  # masking never seen in training
        out = model(
            ids, mask, types, rng=SampleRNG(SampleRNG.seeds_for(99, range(64))), keep_tensors=True
        )
    real = mask.bool()
    auc = roc_auc_score(out.replaced[real].numpy(), out.disc_logits[real].float().numpy())
    assert auc > 0.53, f"replaced-token detection at chance (AUC {auc:.3f})"


@pytest.mark.slow
def test_time_budget_stops_with_a_checkpoint(blocks: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    cfg = tiny(blocks, run, "optim.max_steps=50", "run.max_minutes=1e-9", "run.eval_every=0")
    summary = Trainer(cfg).fit()
    assert summary["stopped"] == "max_minutes" and summary["step"] == 1
    assert ckpt.latest_valid(run / "checkpoints") is not None
    assert json.loads((run / "summary.json").read_text())["step"] == 1


def test_fit_minutes_ends_the_schedule_when_the_time_is_up(blocks: Path, tmp_path: Path) -> None:
    """run.fit_minutes replaces max_steps half-way through warmup and after each
    validation by the steps that fit; the learning rate reaches zero at the last plan's
    last step, and --resume keeps the plan."""
    run = tmp_path / "run"
    fit = ("optim.max_steps=1000000", "optim.warmup_steps=40", "run.fit_minutes=0.1")
    cfg = tiny(blocks, run, *fit, "run.log_every=1", "run.eval_every=30", "run.export=false")
    summary = Trainer(cfg).fit()
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    fitted = [r for r in records if "planned_steps" in r]
    assert fitted[0]["step"] == 20  # first before warmup ends, with a timed validation
    assert "val/loss" in fitted[0]
    assert all(r["step"] % 30 == 0 for r in fitted[1:])  # then after each validation
    planned = fitted[-1]["planned_steps"]
    assert all(20 <= r["planned_steps"] < 1000000 for r in fitted)
    assert summary["stopped"] == "max_steps"
    assert summary["step"] == summary["planned_steps"] == planned
    lr = [r["lr"] for r in records if "lr" in r]
    peak = load_config("tiny").optim.learning_rate
    if planned > 40 and fitted[-1]["step"] < planned:  # (not: time up at a re-plan)
        # the last step's rate is the schedule's last, one step above zero
        assert lr[-1] == pytest.approx(peak * linear_warmup_decay(planned - 1, 40, planned))
        assert lr[-1] <= peak / (planned - 40) + 1e-12
    # resumed with a generous guard: the fitted plan is kept, not the 1,000,000 steps
    again = Trainer(tiny(blocks, run, *fit, "run.max_minutes=0.5"), resume=True).fit()
    assert again["step"] == planned and again["stopped"] == "max_steps"


def test_fit_minutes_clock_carries_over_a_resume(blocks: Path, tmp_path: Path) -> None:
    """A run stopped part-way resumes with the time it had spent already on the budget,
    so its re-plans do not grant it run.fit_minutes afresh."""
    run = tmp_path / "run"
    fit = ("optim.max_steps=1000000", "optim.warmup_steps=40", "run.fit_minutes=10")
    Trainer(tiny(blocks, run, *fit, "run.max_minutes=0.02", "run.export=false")).fit()
    saved = ckpt.latest_valid(run / "checkpoints")
    assert saved is not None
    _, state, _ = ckpt.load(saved.path)
    spent = state["fit_elapsed_s"]
    assert spent > 1.0  # the stopped session's 1.2 s of training, at least
    resumed = Trainer(tiny(blocks, run, *fit, "run.max_minutes=0.01"), resume=True)
    before = time.time()
    resumed.fit()
    assert resumed.t_fit0 <= before - spent + 0.5  # its clock started that much earlier


def test_time_based_checkpoints_never_evict_scheduled_ones(tmp_path) -> None:
    """compare fine-tunes the checkpoints at its budget marks: a slow machine's extra
    (time-based) saves must not prune them (seen: step 207 of 207/414/622 deleted)."""
    state = {"w": torch.zeros(2)}
    root = tmp_path / "checkpoints"
    for step in (207, 398, 414, 621, 622):  # 398 and 621 off schedule (every 207)
        ckpt.save(root, step, state, {"step": step}, {}, keep_last=4, scheduled_every=207)
    assert [c.step for c in ckpt.step_dirs(root)] == [622, 621, 414, 207]
    # without a schedule the newest keep_last stay, as before
    for step in (1, 2, 3, 4):
        ckpt.save(tmp_path / "plain", step, state, {}, {}, keep_last=2)
    assert [c.step for c in ckpt.step_dirs(tmp_path / "plain")] == [4, 3]
    # off-schedule saves beyond the newest go; scheduled ones up to keep_last stay
    for step in (10, 13, 17, 20, 21, 30, 33):
        ckpt.save(tmp_path / "mixed", step, state, {}, {}, keep_last=2, scheduled_every=10)
    assert [c.step for c in ckpt.step_dirs(tmp_path / "mixed")] == [33, 30, 20]


def test_pretraining_tests_pin_the_cpu(tmp_path) -> None:
    """On a GPU machine the exactness tests must still run where they were written for."""
    assert tiny_config(tmp_path, tmp_path).run.device == "cpu"
    assert "run.device='cpu'" in _pretrain_args(tmp_path, tmp_path)


def test_pretraining_without_dropout_exports_the_model_rates(blocks: Path, tmp_path: Path) -> None:
    """``optim.dropout = false`` trains exactly as a model whose rates are 0 (same losses,
    bit for bit), yet the exported config keeps the recipe's rates for fine-tuning."""
    common = ("optim.max_steps=4", "run.log_every=1", "run.eval_every=0")
    off = tmp_path / "off"
    Trainer(tiny(blocks, off, *common, "optim.dropout=false")).fit()
    zero = tmp_path / "zero"
    rates = ("model.hidden_dropout_prob=0.0", "model.attention_probs_dropout_prob=0.0")
    Trainer(tiny(blocks, zero, *common, *rates, "run.export=false")).fit()
    on = tmp_path / "on"
    Trainer(tiny(blocks, on, *common, "run.export=false")).fit()
    assert losses(off) == losses(zero) != losses(on)
    exported = json.loads((off / "hf" / "discriminator" / "config.json").read_text())
    assert exported["hidden_dropout_prob"] == 0.1
    assert exported["attention_probs_dropout_prob"] == 0.1
    card = (off / "hf" / "discriminator" / "README.md").read_text()
    assert "no dropout in pre-training (the config's rates apply when fine-tuning)" in card
