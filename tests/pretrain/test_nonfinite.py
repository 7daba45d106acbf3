"""A NaN or an infinity in a step's loss or gradient never reaches the weights.

The step is skipped (weights, AdamW's moments and its step count untouched; the
batch and the step number used up), counted (``skipped_steps`` in the log, the
summary, TensorBoard and the checkpoint), nothing non-finite is checkpointed,
and ``max_nonfinite_in_a_row`` skipped steps in a row stop the run naming the
step and the last good checkpoint, from which ``--resume`` continues. The same
in fine-tuning. NaNs are planted by wrapping the trainer's forward pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from builders import tiny_config

from electra.cli import main
from electra.config import ConfigError
from electra.model import checkpoint as ckpt
from electra.model.optim import NonFiniteError, NonFiniteSteps, adamw, nonfinite, step_unless
from electra.pretrain.trainer import Trainer

# -- the pieces ------------------------------------------------------------------------------


def _snapshot(model: torch.nn.Module, opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    params = [p.detach().clone() for p in model.parameters()]
    state = [v.clone() for s in opt.state.values() for v in s.values()]
    return params + state


@pytest.mark.parametrize("fused", [True, False])
def test_a_skipped_step_changes_nothing_and_a_taken_one_steps(fused: bool) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = adamw(model.parameters(), lr=0.1, weight_decay=0.01)
    if not fused:
        opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.01)
    for bad in (False, True, True, False):
        before = _snapshot(model, opt)
        loss = model(torch.randn(2, 4)).sum() * (float("nan") if bad else 1.0)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        step_unless(opt, nonfinite(norm, loss))
        opt.zero_grad()
        after = _snapshot(model, opt)
        same = len(before) == len(after) and all(map(torch.equal, before, after))
        assert same == bad
    assert [float(s["step"]) for s in opt.state.values()] == [2.0, 2.0]  # two steps taken
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_skipped_steps_are_counted_and_a_streak_found_on_the_device() -> None:
    count = NonFiniteSteps(limit=3, device=torch.device("cpu"), skipped=5)
    for step, bad in enumerate([0, 1, 1, 0, 1, 1, 1, 1, 0], start=1):
        count.add(torch.tensor(float(bad)), step)
        if step == 6:
            assert count.read() == (5 + 4, 0)  # two in a row, then two: no streak of 3 yet
    assert count.read() == (5 + 6, 7) and count.streak() == "steps 5-7"
    off = NonFiniteSteps(limit=0, device=torch.device("cpu"))
    for step in range(1, 50):
        off.add(torch.tensor(1.0), step)
    assert off.read() == (49, 0)


def test_a_state_holding_a_nan_is_never_checkpointed(tmp_path: Path) -> None:
    model = {"w": torch.zeros(2, 2), "ids": torch.arange(3)}
    opt = {"state": {"w": {"step": torch.tensor(1.0), "exp_avg": torch.zeros(2, 2)}}}
    path = ckpt.save(tmp_path, 1, model, {"optimizer": opt}, {})
    assert ckpt.load(path)[0]["w"].sum() == 0
    opt["state"]["w"]["exp_avg"][0, 1] = float("inf")
    with pytest.raises(ckpt.NonFiniteStateError, match=r"step-00000002.*exp_avg"):
        ckpt.save(tmp_path, 2, model, {"optimizer": opt}, {})
    model["w"][0, 0] = float("nan")
    with pytest.raises(ckpt.NonFiniteStateError, match=r"model\.w"):
        ckpt.save(tmp_path, 3, model, {}, {})
    assert [c.step for c in ckpt.step_dirs(tmp_path)] == [1]
    assert not list(tmp_path.glob(".tmp-*"))


def test_the_limit_is_checked(blocks: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="max_nonfinite_in_a_row"):
        tiny_config(blocks, tmp_path, "run.max_nonfinite_in_a_row=-1")


# -- pre-training -----------------------------------------------------------------------------


def plant(monkeypatch: pytest.MonkeyPatch, bad: dict[int, str], watch: list | None = None):
    """Make the training forward of the (1-based) steps in ``bad`` non-finite: "loss"
    multiplies the loss by NaN (loss and gradient NaN), "grad" adds a term whose value
    is 0 but whose gradient is NaN. ``watch`` collects (step, weights before, after)."""
    step_fn, forward_fn = Trainer._train_step, Trainer._forward

    def train_step(self, step, scaler):
        self._planted = bad.get(step + 1)
        before = [p.detach().clone() for p in self.model.parameters()]
        out = step_fn(self, step, scaler)
        if watch is not None:
            watch.append((step + 1, before, [p.detach().clone() for p in self.model.parameters()]))
        return out

    def forward(self, batch, first_index, keep=False):
        out = forward_fn(self, batch, first_index, keep)
        how = getattr(self, "_planted", None) if self.model.training else None
        if how == "loss":
            out.loss = out.loss * float("nan")
        elif how == "grad":
            p = next(self.model.parameters())
            out.loss = out.loss + 0.0 * torch.sqrt(p - p.detach()).sum()
        return out

    monkeypatch.setattr(Trainer, "_train_step", train_step)
    monkeypatch.setattr(Trainer, "_forward", forward)


class From(dict):
    """``bad`` for :func:`plant`: every step from ``first`` on."""

    def __init__(self, first: int, how: str = "loss") -> None:
        super().__init__()
        self.first, self.how = first, how

    def get(self, step: int, default=None):
        return self.how if step >= self.first else default


def _records(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_nan_step_is_skipped_counted_and_the_checkpoint_after_it_is_finite(
    blocks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    watch: list = []
    plant(monkeypatch, {3: "loss", 4: "loss", 7: "grad"}, watch)
    run = tmp_path / "run"
    extra = ("optim.max_steps=12", "run.save_every=6", "run.log_every=3", "run.export=false")
    summary = Trainer(tiny_config(blocks, run, *extra, "run.tensorboard=true")).fit()
    assert summary["step"] == 12 and summary["skipped_steps"] == 3
    for step, before, after in watch:  # skipped: not one weight moved; taken: they did
        assert all(map(torch.equal, before, after)) == (step in (3, 4, 7))
        assert all(torch.isfinite(p).all() for p in after)
    train = [r for r in _records(run) if "lr" in r]
    assert [(r["step"], r["skipped_steps"]) for r in train] == [(3, 1), (6, 2), (9, 3), (12, 3)]
    assert all(torch.isfinite(torch.tensor([r["loss"], r["grad_norm"]])).all() for r in train)
    assert "step 3: 1 step(s) skipped" in capsys.readouterr().err
    model_state, state, _ = ckpt.load(run / "checkpoints" / "step-00000006")
    assert ckpt.nonfinite_entries(model_state, "m") == ckpt.nonfinite_entries(state, "s") == []
    assert state["skipped_steps"] == 2
    steps = {float(s["step"]) for s in state["optimizer"]["state"].values()}
    assert steps == {4.0}  # AdamW took 4 of the 6 steps: its bias correction never saw 3 and 4
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = EventAccumulator(str(run / "tensorboard")).Reload()
    assert [e.value for e in tb.Scalars("skipped_steps")] == [1, 2, 3, 3]


def test_fp16_skips_a_nan_step_like_an_overflow_and_lowers_the_scale(
    blocks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fp16's loss scaler and the NaN check agree: a step skipped for either leaves the
    weights alone, counts once in skipped_steps and halves the loss scale."""
    watch: list = []
    plant(monkeypatch, {3: "loss"}, watch)
    extra = ("run.precision='fp16'", "optim.max_steps=5", "run.export=false")
    trainer = Trainer(tiny_config(blocks, tmp_path / "run", *extra))
    summary = trainer.fit()
    skipped = {step for step, before, after in watch if all(map(torch.equal, before, after))}
    assert 3 in skipped and summary["skipped_steps"] == len(skipped)
    assert trainer.scaler.get_scale() == 2.0**16 / 2 ** len(skipped)


def test_too_many_in_a_row_stop_naming_the_step_and_checkpoint_and_resume_continues(
    blocks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    run = tmp_path / "run"
    args = ["pretrain", "--config", "tiny", "--data", str(blocks), "-o", str(run)]
    args += ["--optim.max_steps", "16", "--run.save_every", "4", "--run.log_every", "5"]
    args += ["--run.max_nonfinite_in_a_row", "3", "--no-run.progress", "--run.device", "cpu"]
    with monkeypatch.context() as patched:
        plant(patched, From(7))  # a loss spike for good from step 7
        assert main(args) == 1
    err = capsys.readouterr().err
    assert "stopped at step 10: 3 steps in a row (steps 7-9)" in err
    assert f"the last good checkpoint is {run / 'checkpoints' / 'step-00000008'} (step 8)" in err
    assert "--resume" in err and "run.max_nonfinite_in_a_row = 3" in err
    assert [c.step for c in ckpt.step_dirs(run / "checkpoints")] == [8, 4]  # none after the hit
    assert not (run / "summary.json").exists()
    assert main([*args, "--resume"]) == 0  # the spike gone: continues from step 8
    assert "resuming from" in capsys.readouterr().err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["step"] == 16 and summary["skipped_steps"] == 2  # steps 7 and 8
    assert [r["step"] for r in _records(run) if "lr" in r] == [5, 10, 15, 16]


def test_a_stop_before_any_checkpoint_says_so(
    blocks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plant(monkeypatch, From(1, "grad"))
    cfg = tiny_config(blocks, tmp_path / "run", "run.max_nonfinite_in_a_row=2", "run.log_every=2")
    with pytest.raises(NonFiniteError, match=r"step 2: 2 steps in a row \(steps 1-2\).*no check"):
        Trainer(cfg).fit()


# -- fine-tuning ------------------------------------------------------------------------------


def plant_finetune(monkeypatch: pytest.MonkeyPatch, bad) -> None:
    """NaN logits in the training forwards numbered (1-based) in ``bad``."""
    from electra.finetune import training

    forward_fn, calls = training.forward, [0]

    def forward(model, batch, device, bf16):
        logits = forward_fn(model, batch, device, bf16)
        if model.training:
            calls[0] += 1
            if calls[0] in bad:
                return logits * float("nan")
        return logits

    monkeypatch.setattr(training, "forward", forward)


def _finetune_args(model: Path, train: Path, out: Path, *extra: str) -> list[str]:
    args = ["finetune", "--model", str(model), "--task", "custom", "--task-type"]
    args += ["classification", "--train-file", str(train), "-o", str(out), "--epochs", "2"]
    args += ["--batch-size", "8", "--device", "cpu", "--no-bf16", "--no-floors", "--no-progress"]
    return [*args, *extra]


@pytest.mark.usefixtures("one_thread")
def test_finetuning_skips_and_counts_a_nan_step(
    toy: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    plant_finetune(monkeypatch, {2, 3, 9})
    assert main(_finetune_args(*toy, tmp_path / "out")) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    (seed,) = results["seeds"]
    assert seed["skipped_steps"] == 3 and seed["steps"] == 12  # 48 examples, 6 steps an epoch
    assert all(h["train_loss"] == h["train_loss"] for h in seed["history"])  # no NaN
    assert results["recipe"]["max_nonfinite_in_a_row"] == 20
    assert "2 steps skipped (NaN or infinite loss or gradient)" in capsys.readouterr().err
    from electra.finetune.modeling import load_finetuned

    weights = load_finetuned(tmp_path / "out" / "model").model.parameters()
    assert all(torch.isfinite(p).all() for p in weights)


@pytest.mark.usefixtures("one_thread")
def test_finetuning_stops_after_too_many_in_a_row(
    toy: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    plant_finetune(monkeypatch, set(range(3, 100)))
    args = _finetune_args(*toy, tmp_path / "out", "--max-nonfinite-in-a-row", "3")
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "seed 1, epoch 1, step 6: 3 steps in a row (steps 3-5)" in err
    assert "--max-nonfinite-in-a-row 3" in err


RANK_SCRIPT = """
import hashlib, json, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from builders import tiny_config
from electra.pretrain.trainer import Trainer

step_fn, forward_fn = Trainer._train_step, Trainer._forward

def train_step(self, step, scaler):
    self._now = step + 1
    return step_fn(self, step, scaler)

def forward(self, batch, first_index, keep=False):
    out = forward_fn(self, batch, first_index, keep)
    if self.model.training and self.env.rank == 1 and self._now == 3:
        out.loss = out.loss + float("nan")  # rank 1's loss only: its gradient stays finite
    return out

Trainer._train_step, Trainer._forward = train_step, forward
blocks, run = Path(sys.argv[1]), Path(sys.argv[2])
cfg = tiny_config(blocks, run, "optim.max_steps=6", "optim.batch_size=8", "run.export=false")
trainer = Trainer(cfg)
trainer.fit()
weights = b"".join(p.detach().numpy().tobytes() for p in trainer.model.parameters())
mine = {{"weights": hashlib.sha256(weights).hexdigest(), "skipped": trainer.nonfinite.read()[0]}}
(run / f"rank{{trainer.env.rank}}.json").write_text(json.dumps(mine))
# As `electra pretrain` does: a process group left to the interpreter's exit can abort a
# rank in gloo's teardown ("terminate called without an active exception"), seen under load.
import torch.distributed as dist
if dist.is_initialized():
    dist.destroy_process_group()
"""


@pytest.mark.slow
def test_every_rank_skips_the_step_one_rank_found_non_finite(blocks: Path, tmp_path: Path) -> None:
    """Rank 1 alone sees a NaN loss (its gradient finite): both ranks skip that step, so
    their weights stay identical."""
    import subprocess
    import sys

    from test_train import env

    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT.format(tests=str(Path(__file__).parents[1])))
    run = tmp_path / "run"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    subprocess.run([*torchrun, str(script), str(blocks), str(run)], env=env(), check=True)
    ranks = [json.loads((run / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1] and ranks[0]["skipped"] == 1
    assert json.loads((run / "summary.json").read_text())["skipped_steps"] == 1
