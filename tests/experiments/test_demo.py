"""The main job in its CI-sized form (``--smoke``), and its clear error without data."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
from pathlib import Path

import pytest

from electra.cli import main
from electra.config import ConfigError
from electra.experiments.demo import demo
from electra.experiments.options import DemoCommand


@pytest.mark.slow
def test_demo_smoke_runs_every_stage_and_reuses_them(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    cmd = DemoCommand(data_dir=str(data_dir), output=str(out), smoke=True, progress=False)
    result = demo(cmd)
    assert result["pretrain"]["step"] == 20
    acc = result["nsmc"]["test"]["accuracy"]["median"]
    assert 0.0 <= acc <= 1.0
    for path in result["artefacts"].values():
        assert Path(path).exists(), path
    assert json.loads((out / "demo.json").read_text())["pretrain"]["step"] == 20
    printed = capsys.readouterr().out
    assert "[5/5] report" in printed and "NSMC test accuracy, side by side" in printed
    # side by side on the same test split: pre-trained, random start, TF-IDF, majority
    random_start = json.loads((out / "nsmc-random-start" / "results.json").read_text())
    pretrained = json.loads((out / "nsmc" / "results.json").read_text())
    assert random_start["model"]["hidden_size"] == pretrained["model"]["hidden_size"]
    assert random_start["recipe"] == pretrained["recipe"]
    assert random_start["floors"]["key"] == pretrained["floors"]["key"]  # the same split
    assert random_start["floors"]["tfidf"] == pretrained["floors"]["tfidf"]
    rows, few_rows = {}, {}
    for name in ("pre-trained ELECTRA", "random start", "TF-IDF + logistic", "majority class"):
        line = next(ln for ln in printed.splitlines() if name in ln and ln.endswith("%"))
        rows[name] = float(line.split()[-1].rstrip("%"))  # the last column: the most labels
        few_rows[name] = float(line.split()[-2].rstrip("%"))
    assert rows["pre-trained ELECTRA"] == pytest.approx(100 * acc, abs=0.01)
    rand = random_start["summary"]["test"]["accuracy"]["median"]
    assert rows["random start"] == pytest.approx(100 * rand, abs=0.01)
    floors = result["floors"]
    assert rows["majority class"] == pytest.approx(
        100 * floors["majority"]["test"]["accuracy"], abs=0.01
    )
    assert rows["TF-IDF + logistic"] == pytest.approx(
        100 * floors["tfidf"]["test"]["accuracy"], abs=0.01
    )
    assert "health: " in printed  # the pre-training verdict
    # the same four rows with fewer labels: their own runs and floors, on the same test split
    few = result["few_labels"]
    few_pre = json.loads((out / "nsmc-few" / "results.json").read_text())
    few_random = json.loads((out / "nsmc-few-random-start" / "results.json").read_text())
    assert few_pre["recipe"] == pretrained["recipe"] == few_random["recipe"]
    assert few_pre["model"]["path"] == pretrained["model"]["path"]
    assert few_random["model"]["path"] == random_start["model"]["path"]
    assert few_pre["floors"]["key"] == few_random["floors"]["key"]
    assert few_pre["task"]["splits"]["test"] == pretrained["task"]["splits"]["test"]
    assert few["train_examples"] == few_pre["task"]["splits"]["train"]["examples"]
    assert few_rows["pre-trained ELECTRA"] == pytest.approx(
        100 * few["nsmc"]["test"]["accuracy"]["median"], abs=0.01
    )
    assert few_rows["random start"] == pytest.approx(
        100 * few["nsmc_random_start"]["test"]["accuracy"]["median"], abs=0.01
    )
    assert few_rows["TF-IDF + logistic"] == pytest.approx(
        100 * few["floors"]["tfidf"]["test"]["accuracy"], abs=0.01
    )
    gain = next(ln for ln in printed.splitlines() if "over the random start:" in ln)
    last = float(gain.rsplit(",", 1)[-1].split()[0])  # the gain with the most labels
    assert last == pytest.approx(rows["pre-trained ELECTRA"] - rows["random start"], abs=0.011)
    stamp = (out / "pretrain" / "summary.json").stat().st_mtime
    demo(cmd)
    printed = capsys.readouterr().out
    assert printed.count("reusing") >= 4
    assert (out / "pretrain" / "summary.json").stat().st_mtime == stamp


def test_demo_without_data_says_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["demo", "--data-dir", str(tmp_path / "nowhere"), "-o", str(tmp_path / "o")])
    assert code == 2
    assert "Korean data not found" in capsys.readouterr().err


def test_finetuning_plan_fits_the_budget_and_is_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from electra.experiments import demo as demo_module

    calls = []

    def per_example(model_dir: Path, device: str) -> float:
        calls.append((model_dir, device))
        return 0.01  # 10 ms per training example, a third of that to evaluate one

    monkeypatch.setattr(demo_module, "estimate_finetune_seconds", per_example)
    plan = tmp_path / "plan.json"
    cmd = DemoCommand(finetune_minutes=5, epochs=3, nsmc_eval_examples=3000)
    planned = demo_module.plan_finetuning(cmd, tmp_path, plan)
    # 300 s - 4 evaluations x 3000 x 10/3 ms = 260 s, over 3 epochs of 10 ms each
    assert planned.nsmc_train_examples == 8666
    assert planned.epochs == 3 and cmd.nsmc_train_examples == 12000  # the input is not changed
    again = demo_module.plan_finetuning(cmd, tmp_path, plan)
    assert again.nsmc_train_examples == 8666 and len(calls) == 1  # reused, not re-timed
    assert calls == [(tmp_path, "auto")]  # timed where the fine-tuning runs: its --device
    # a fast machine is capped by the examples asked for; a slow one keeps a usable minimum
    plan.unlink()
    monkeypatch.setattr(demo_module, "estimate_finetune_seconds", lambda d, device: 1e-5)
    assert demo_module.plan_finetuning(cmd, tmp_path, plan).nsmc_train_examples == 12000
    plan.unlink()
    monkeypatch.setattr(demo_module, "estimate_finetune_seconds", lambda d, device: 1.0)
    assert demo_module.plan_finetuning(cmd, tmp_path, plan).nsmc_train_examples == 2000
    assert demo_module.plan_finetuning(DemoCommand(smoke=True), tmp_path, plan).smoke
    # another budget is planned anew, not read from the old plan
    monkeypatch.setattr(demo_module, "estimate_finetune_seconds", lambda d, device: 0.01)
    cmd10 = DemoCommand(finetune_minutes=10, epochs=3, nsmc_eval_examples=3000)
    assert demo_module.plan_finetuning(cmd10, tmp_path, plan).nsmc_train_examples == 12000


@pytest.mark.slow
def test_demo_stops_when_pre_training_was_interrupted(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from electra.pretrain.trainer import Trainer

    def interrupted(self: Trainer) -> dict:
        run = Path(self.cfg.run.output_dir)
        run.mkdir(parents=True, exist_ok=True)
        summary = {"step": 7, "stopped": "signal"}  # checkpointed, nothing exported
        (run / "summary.json").write_text(json.dumps(summary))
        return summary

    monkeypatch.setattr(Trainer, "fit", interrupted)
    cmd = DemoCommand(data_dir=str(data_dir), output=str(tmp_path), smoke=True, progress=False)
    with pytest.raises(SystemExit, match="interrupted at step 7.*run the demo again"):
        demo(cmd)
    assert not (tmp_path / "nsmc").exists()  # no fine-tuning of a model that was not exported


def test_pretraining_text_never_holds_a_scored_review(data_dir: Path, tmp_path: Path) -> None:
    """The demo pre-trains on NSMC reviews, minus every review of the dev and test splits."""
    from electra.experiments.demo import _check_same_corpus, korean_corpus
    from electra.finetune.tasks import DataOptions, load_task_data

    files = korean_corpus(data_dir, tmp_path / "corpus", "reviews")
    assert len(files) == 1
    text = files[0].read_text(encoding="utf-8")
    lines = set(text.splitlines())
    splits = load_task_data("nsmc", DataOptions(data_dir=str(data_dir))).splits
    scored = {" ".join(e.text.split()) for e in [*splits.dev, *splits.test]}
    assert len(scored) > 10000 and not scored & lines
    train = {" ".join(e.text.split()) for e in splits.train}
    assert len(train & lines) > 0.95 * len(train - scored)  # the training reviews stay
    assert text.count("\n\n") > 1000  # one film per document
    both = korean_corpus(data_dir, tmp_path / "corpus", "wiki+reviews")
    assert both[-1] == files[0] and all("kowiki" in str(p) for p in both[:-1])
    # reused from the same data directory only: another's reviews would leave stale blocks
    from electra.experiments.heldout import unscored_reviews

    other = tmp_path / "other-data"
    with pytest.raises(SystemExit, match=f"written from {data_dir.resolve()}, but this run"):
        unscored_reviews(other, files[0])
    # a vocabulary built from one corpus is never reused for another
    _check_same_corpus(tmp_path, "reviews")
    with pytest.raises(SystemExit, match=r"--corpus 'reviews' -> 'wiki\+reviews'"):
        _check_same_corpus(tmp_path, "wiki+reviews")


def test_a_stage_built_with_other_options_is_never_reused(tmp_path: Path) -> None:
    """Re-running the demo with another --minutes or fine-tuning flag must not silently
    reuse (or resume) a stage built with the old ones."""
    from electra.experiments.demo import check_stage_options

    stage = tmp_path / "pretrain"
    check_stage_options(stage, {"minutes": 10.0, "smoke": False})  # new: stamped
    assert json.loads((stage / "demo_options.json").read_text()) == {
        "minutes": 10.0,
        "smoke": False,
    }
    check_stage_options(stage, {"minutes": 10.0, "smoke": False})  # same options: reused
    with pytest.raises(SystemExit, match=r"--minutes 10\.0 -> 5\.0.*delete it"):
        check_stage_options(stage, {"minutes": 5.0, "smoke": False})
    tuned = tmp_path / "nsmc-random-start"
    check_stage_options(tuned, {"layer_decay": 1.0, "seeds": [1]})
    with pytest.raises(SystemExit, match=r"--layer-decay 1\.0 -> 0\.8"):
        check_stage_options(tuned, {"layer_decay": 0.8, "seeds": [1]})
    old = tmp_path / "nsmc"  # built by a demo from before the stamps: reused as it is
    old.mkdir()
    check_stage_options(old, {"epochs": 3})
    assert not (old / "demo_options.json").exists()


def test_a_side_by_side_job_logs_as_it_goes_and_shows_its_epochs(tmp_path: Path) -> None:
    from electra.experiments import demo as demo_module

    terminal = io.StringIO()
    log = tmp_path / "finetune.log"
    with (
        demo_module.JobLog(log, "nsmc-few", terminal) as f,
        contextlib.redirect_stdout(f),
        contextlib.redirect_stderr(f),
    ):
        print("tokenising 3,000 reviews")
        print("nsmc seed 1 epoch 1: train loss 0.51, dev accuracy 80.10", file=sys.stderr)
        assert "tokenising 3,000 reviews\n" in log.read_text()  # written before the job ends
        assert terminal.getvalue() == (
            "  [nsmc-few] nsmc seed 1 epoch 1: train loss 0.51, dev accuracy 80.10\n"
        )
    assert "epoch 1" in log.read_text()


def test_recipe_overrides_reach_the_pretraining_and_key_its_stage(tmp_path: Path) -> None:
    """``--set`` changes the recipe, never what the demo fixes (run folder, steps), and a
    pre-training built with other overrides (or none) is refused, not reused."""
    from electra.experiments.demo import check_stage_options, pretrain_config, pretrain_stage

    cmd = DemoCommand(
        output=str(tmp_path),
        smoke=True,
        set=["optim.dropout=false", "optim.learning_rate=1e-4", "run.output_dir='elsewhere'"],
    )
    cfg = pretrain_config(cmd, tmp_path / "blocks", tmp_path / "pretrain")
    assert cfg.optim.dropout is False and cfg.optim.learning_rate == 1e-4
    assert cfg.run.output_dir == str(tmp_path / "pretrain") and cfg.optim.max_steps == 20
    plain = pretrain_config(DemoCommand(smoke=True), tmp_path / "blocks", tmp_path / "p")
    assert plain.optim.dropout is True

    run_dir = tmp_path / "pretrain"
    check_stage_options(run_dir, {"minutes": 10.0, "smoke": True, "set": list(cmd.set)})
    with pytest.raises(SystemExit, match=r"--set \['optim.dropout=false'.*-> None"):
        pretrain_stage(DemoCommand(output=str(tmp_path), smoke=True), tmp_path, run_dir)
    with pytest.raises(SystemExit, match=r"--set .* -> \['optim.dropout=true'\]"):
        pretrain_stage(dataclasses.replace(cmd, set=["optim.dropout=true"]), tmp_path, run_dir)
    # a mistyped override is refused before any stage runs (nothing stamped, nothing built)
    typo = DemoCommand(output=str(tmp_path / "typo"), set=["optim.dropuot=false"])
    with pytest.raises(ConfigError, match="unknown key 'dropuot'"):
        demo(typo)
    assert not (tmp_path / "typo").exists()
