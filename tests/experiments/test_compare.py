"""``electra compare`` at a tiny budget: both arms spend the same FLOPs; table and plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from electra.config import ConfigError
from electra.experiments.compare import arm_run_dir, compare
from electra.experiments.options import CompareCommand

pytestmark = pytest.mark.slow  # end-to-end: left out of `make test-fast`


def test_compare_at_a_tiny_budget(blocks: Path, data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    cmd = CompareCommand(
        output=str(out),
        data_dir=str(data_dir),
        blocks=str(blocks),
        budget_flops=1.2e10,
        points=2,
        config="tiny",
        set=["run.eval_every=0", "run.tensorboard=false"],
        tasks=["nsmc", "sst2"],
        seeds=[1, 2],
        max_train_examples=48,
        max_eval_examples=32,
        epochs=1,
        max_length=32,
        progress=False,
    )
    result = compare(cmd)
    final = {p["arm"]: p for p in result["points"] if p["arm"] != "none"}  # last point per arm
    for arm in ("rtd", "mlm"):
        spent = final[arm]["flops"]
        assert 0.95 * cmd.budget_flops <= spent <= cmd.budget_flops
    assert abs(final["rtd"]["flops"] - final["mlm"]["flops"]) <= 0.05 * cmd.budget_flops
    # MLM steps are cheaper (no generator), so it gets more of them for the same budget.
    assert final["mlm"]["steps"] > final["rtd"]["steps"]
    assert {p["arm"] for p in result["points"]} == {"none", "rtd", "mlm"}
    assert len([p for p in result["points"] if p["arm"] == "rtd"]) == 2
    for p in result["points"]:
        for task in ("nsmc", "sst2"):
            s = p["scores"][task]
            assert s["metric"] == "accuracy" and 0.0 <= s["median"] <= 1.0
    table = (out / "compare.md").read_text()
    assert "| rtd |" in table and "| mlm |" in table and "| none |" in table
    # the floors of each task, computed once on the split every arm is scored on
    assert len(list((out / "floors").glob("floors-*.json"))) == 2
    for task in ("nsmc", "sst2"):
        f = result["floors"][task]
        assert 0.0 <= f["tfidf"] <= 1.0 and f["constant_name"] == "majority"
        done = next((out / "finetune").glob(f"none-*/{task}-*/results.json"))
        floors = json.loads(done.read_text())["floors"]
        assert f["constant"] == floors["majority"]["test"]["accuracy"]
        assert floors["examples"]["test"] == 32
        assert json.loads(done.read_text())["recipe"]["group_by_length"] is True
    tfidf_row = next(ln for ln in table.splitlines() if ln.startswith("| TF-IDF floor |"))
    assert f"{100 * result['floors']['nsmc']['tfidf']:.1f}" in tfidf_row
    assert "| majority class |" in table
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "compare.json").read_text())["flops_per_step"]["rtd"] > 0
    # A second run reuses every stage.
    again = compare(cmd)
    assert [p["scores"] for p in again["points"]] == [p["scores"] for p in result["points"]]


def test_fine_tuning_results_are_keyed_by_their_batching() -> None:
    """Grouped batches key apart; shuffled ones as before the option, so old results count."""
    from electra.experiments.compare import _fingerprint, finetune_settings
    from electra.finetune.run import finetune_options

    grouped, plain = CompareCommand(), CompareCommand(group_by_length=False)
    assert finetune_options(grouped)["group_by_length"] is True
    assert finetune_settings(grouped, "nsmc") != finetune_settings(plain, "nsmc")
    before = finetune_options(plain)
    del before["group_by_length"]
    assert finetune_settings(plain, "nsmc") == _fingerprint({"data": "balanced-floors/1", **before})


def test_arm_runs_are_keyed_by_their_recipe(blocks: Path, tmp_path: Path) -> None:
    base = CompareCommand(config="tiny", budget_flops=1e10)
    run = arm_run_dir(base, "rtd", blocks, tmp_path)
    assert run == arm_run_dir(
        CompareCommand(config="tiny", budget_flops=1e10), "rtd", blocks, tmp_path
    )
    assert run.name.startswith("rtd-")
    changed = [
        CompareCommand(config="tiny", budget_flops=1e10, set=["optim.learning_rate=1e-4"]),
        CompareCommand(config="tiny", budget_flops=2e10),
        CompareCommand(config="tiny", budget_flops=1e10, points=3),
        CompareCommand(config="tiny", budget_flops=1e10, set=["init.token_embeddings='ppmi'"]),
        CompareCommand(
            config="tiny", budget_flops=1e10, set=["objective.embedding_sharing='gdes'"]
        ),
        CompareCommand(config="tiny", budget_flops=1e10, set=["optim.dropout=false"]),
    ]
    others = {arm_run_dir(c, "rtd", blocks, tmp_path) for c in changed}
    # A field added later keys nothing at the value that behaves as before it existed, so
    # runs trained before it keep their names (and are reused and resumed).
    from electra.experiments.compare import ADDED_SINCE, _arm_key

    for (section, name), before in ADDED_SINCE.items():
        same = CompareCommand(
            config="tiny", budget_flops=1e10, set=[f"{section}.{name}={json.dumps(before)}"]
        )
        assert arm_run_dir(same, "rtd", blocks, tmp_path) == run
        assert name not in _arm_key(base, "rtd", blocks)[0][section]
    # A time limit changes no weight: the arm it stopped resumes without it.
    clock = ["run.max_minutes=5.0", "run.save_every_minutes=1.0"]
    assert (
        arm_run_dir(
            CompareCommand(config="tiny", budget_flops=1e10, set=clock), "rtd", blocks, tmp_path
        )
        == run
    )
    assert run not in others and len(others) == len(changed)
    assert arm_run_dir(base, "mlm", blocks, tmp_path).name.startswith("mlm-")


def test_a_variant_arm_is_keyed_by_the_recipe_its_overrides_make(
    blocks: Path, tmp_path: Path
) -> None:
    from electra.experiments.compare import check_arms

    base = CompareCommand(config="tiny", budget_flops=1e10)
    plain = arm_run_dir(base, "rtd", blocks, tmp_path)
    lever = arm_run_dir(base, "rtd:optim.dropout=false", blocks, tmp_path)
    assert lever != plain and lever.name.startswith("rtd-")
    # the same lever by --set for every arm: the same recipe, so the same run
    by_set = CompareCommand(config="tiny", budget_flops=1e10, set=["optim.dropout=false"])
    assert arm_run_dir(by_set, "rtd", blocks, tmp_path) == lever
    assert arm_run_dir(base, "rtd:optim.dropout=true", blocks, tmp_path) == plain  # no change
    assert arm_run_dir(base, "mlm:optim.dropout=false", blocks, tmp_path).name.startswith("mlm-")
    # a bad override fails before any arm trains, naming the arm's key
    arms = ["rtd", "mlm", "rtd:optim.not_a_field=1"]
    with pytest.raises(ConfigError, match="not_a_field"):
        check_arms(CompareCommand(config="tiny", arms=arms))
    with pytest.raises(ConfigError, match="optim.max_steps is set by compare"):
        check_arms(CompareCommand(config="tiny", arms=["rtd:optim.max_steps=5"]))
    names = [a.name for a in check_arms(CompareCommand(config="tiny", arms=arms[:2]))]
    assert names == ["rtd", "mlm"]


def test_the_same_blocks_by_another_path_find_the_same_arm(
    blocks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Relative, absolute or a copy: the blocks' content keys an arm, not the path; a run
    keyed by the path (as before) is still found by that path, and only by it."""
    import shutil

    from electra.experiments.compare import _fingerprint, _run_key

    cmd = CompareCommand(config="tiny", budget_flops=1e10)
    out = tmp_path / "out"
    copy = tmp_path / "copy" / "blocks"
    shutil.copytree(blocks, copy)
    monkeypatch.chdir(tmp_path)
    run = arm_run_dir(cmd, "rtd", blocks, out)
    assert arm_run_dir(cmd, "rtd", copy, out) == run
    assert arm_run_dir(cmd, "rtd", Path("copy/blocks"), out) == run
    old = out / f"rtd-{_fingerprint(_run_key(cmd, 'rtd', copy, by_path=True))}"
    assert old != run
    old.mkdir(parents=True)  # an arm trained before: keyed by the path it was named by
    assert arm_run_dir(cmd, "rtd", copy, out) == old
    assert arm_run_dir(cmd, "rtd", Path("copy/blocks"), out) == run


def test_small_budgets_cap_the_warmup_equally_for_every_arm(tmp_path: Path) -> None:
    """The `small` recipe warms up for 10,000 steps: an arm of 2,000 steps would end with
    its learning rate at a fifth of its peak; capped at 10%, every arm peaks at 10%."""
    from electra.experiments.compare import _arm_config, capped_warmup

    cmd = CompareCommand(config="small", budget_flops=1e15)
    blocks = tmp_path / "blocks"  # only named in the config, never opened here
    rtd = _arm_config(cmd, "rtd", blocks, tmp_path / "rtd", 2000, 1000, 2)
    mlm = _arm_config(cmd, "mlm", blocks, tmp_path / "mlm", 3100, 1550, 2)
    assert (rtd.optim.warmup_steps, rtd.optim.max_steps) == (200, 2000)
    assert (mlm.optim.warmup_steps, mlm.optim.max_steps) == (310, 3100)  # the same 10%
    # a long arm keeps the recipe's warm-up; a user's shorter one is kept too
    assert _arm_config(cmd, "rtd", blocks, tmp_path, 10**6, 10**5, 2).optim.warmup_steps == 10_000
    short = CompareCommand(config="small", budget_flops=1e15, set=["optim.warmup_steps=50"])
    assert _arm_config(short, "rtd", blocks, tmp_path, 2000, 1000, 2).optim.warmup_steps == 50
    assert capped_warmup(10_000, 5) == 1  # never zero


def test_blocks_rebuilt_at_the_same_path_key_new_runs(blocks: Path, tmp_path: Path) -> None:
    """Other content under the same path (a new vocabulary, a new corpus) trains anew:
    the arms, the untrained encoder and the table are keyed by the blocks' fingerprint."""
    import shutil

    from electra.experiments.compare import table_only_encoder, untrained_encoder

    here = tmp_path / "blocks"
    shutil.copytree(blocks, here)
    cmd = CompareCommand(config="tiny", budget_flops=1e10, set=["init.token_embeddings='ppmi'"])
    out = tmp_path / "out"
    old_run = arm_run_dir(cmd, "rtd", here, out)
    old_none = untrained_encoder(cmd, here, out)
    old_table = table_only_encoder(cmd, here, old_none, out)
    manifest = json.loads((here / "manifest.json").read_text())
    manifest["fingerprint"] = "0" * 64  # what a rebuild from other inputs writes: another one
    (here / "manifest.json").write_text(json.dumps(manifest))
    assert arm_run_dir(cmd, "rtd", here, out) != old_run
    new_none = untrained_encoder(cmd, here, out)
    assert new_none != old_none
    assert table_only_encoder(cmd, here, new_none, out) != old_table
    with pytest.raises(FileNotFoundError, match="manifest"):
        arm_run_dir(cmd, "rtd", tmp_path / "nothing", out)


def test_a_ppmi_recipe_adds_its_table_on_random_layers(blocks: Path, tmp_path: Path) -> None:
    """The control of a PPMI recipe: the untrained encoder with the table the arms start from."""
    from safetensors.torch import load_file

    from electra.experiments.compare import table_only_encoder, untrained_encoder

    ppmi = CompareCommand(config="tiny", set=["init.token_embeddings='ppmi'"])
    none = untrained_encoder(ppmi, blocks, tmp_path)
    table = table_only_encoder(ppmi, blocks, none, tmp_path)
    assert table is not None and (table / "config.json").is_file()
    a, b = load_file(str(none / "model.safetensors")), load_file(str(table / "model.safetensors"))
    key = "electra.embeddings.word_embeddings.weight"
    assert {k for k in a if not a[k].equal(b[k])} == {key}  # only the token table differs
    changed = (a[key] != b[key]).any(dim=1)
    assert changed.sum() > 0.5 * len(changed) and not changed[[0, 2, 3, 4]].any()  # specials
    assert table_only_encoder(ppmi, blocks, none, tmp_path) == table  # reused
    plain = CompareCommand(config="tiny")
    assert table_only_encoder(plain, blocks, none, tmp_path) is None


def test_an_interrupted_arm_stops_compare_with_how_to_resume(
    blocks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM mid-arm: the checkpoint is saved, but the later marks do not exist yet."""
    import electra.experiments.compare as compare_module
    from electra.experiments.compare import pretrain_arm

    class Interrupted:
        def __init__(self, cfg, resume: bool = False) -> None:
            self.cfg = cfg

        def fit(self) -> dict:
            return {"step": 3, "stopped": "signal"}

    monkeypatch.setattr(compare_module, "Trainer", Interrupted)
    cmd = CompareCommand(config="tiny", budget_flops=1.2e10, progress=False)
    with pytest.raises(SystemExit, match="rtd was interrupted at step 3.*again to resume"):
        pretrain_arm(cmd, "rtd", blocks, tmp_path)


def test_the_default_corpus_never_holds_a_scored_review(data_dir: Path, tmp_path: Path) -> None:
    """compare pre-trains on each task's text minus the texts its fine-tuning scores."""
    from electra.experiments.compare import default_corpus
    from electra.finetune.tasks import DataOptions, load_task_data

    files = default_corpus(data_dir, tmp_path, ["NSMC", "sst-2", "wnut17"])  # names as typed
    assert any("kowiki" in str(f) for f in files) and any("gutenberg" in str(f) for f in files)
    assert not any(f.is_dir() for f in files)  # the raw review directory is not read whole
    # WNUT-17 (tagging) adds nothing; NSMC's reviews and SST-2's texts, each without the scored
    assert [f.name for f in files[-2:]] == ["nsmc_reviews.txt", "sst2_text.txt"]
    for task, file, least in [("nsmc", files[-2], 10000), ("sst2", files[-1], 50000)]:
        text = file.read_text(encoding="utf-8")
        texts = set(text.splitlines()) - {""}
        splits = load_task_data(task, DataOptions(data_dir=str(data_dir))).splits
        scored = {" ".join(e.text.split()) for e in [*splits.dev, *splits.test]}
        assert len(scored) > {"nsmc": 10000, "sst2": 7000}[task] and not scored & texts, task
        assert len(texts) > least, task
        assert text.count("\n\n") > 100, task  # many documents: validation gets its share
        if task == "sst2":  # every unscored training text is there
            assert {" ".join(e.text.split()) for e in splits.train} - scored <= texts


def test_a_vocabulary_from_other_sources_is_trained_anew(
    ko_wiki: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compare reuses its vocabulary only if it was built from the same sources."""
    import electra.experiments.compare as compare_mod

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    text = ko_wiki.read_text(encoding="utf-8")[:200_000]
    a.write_text(text, encoding="utf-8")
    b.write_text(text[::-1], encoding="utf-8")
    sources = [a]
    monkeypatch.setattr(compare_mod, "default_corpus", lambda data_dir, out, tasks: list(sources))
    cmd = CompareCommand(vocab_size=600, corpus_mb=1.0, progress=False)
    out = tmp_path / "data"
    vocab = out / "tokenizer" / "vocab.txt"
    compare_mod.build_blocks(cmd, out, tmp_path)
    first = vocab.stat().st_mtime_ns
    compare_mod.build_blocks(cmd, out, tmp_path)  # the same sources: reused
    assert vocab.stat().st_mtime_ns == first
    sources[:] = [a, b]  # other sources: vocabulary and blocks built anew
    blocks = compare_mod.build_blocks(cmd, out, tmp_path)
    assert vocab.stat().st_mtime_ns != first
    manifest = json.loads((blocks / "manifest.json").read_text())
    assert str(b) in json.dumps(manifest)


def test_packed_blocks_are_built_beside_the_plain_ones_with_the_same_vocabulary(
    ko_wiki: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--pack-blocks: the same text in fewer, fuller blocks, in a directory of their own."""
    import electra.experiments.compare as compare_mod

    a = tmp_path / "a.txt"
    a.write_text(ko_wiki.read_text(encoding="utf-8")[:100_000], encoding="utf-8")
    monkeypatch.setattr(compare_mod, "default_corpus", lambda data_dir, out, tasks: [a])
    out = tmp_path / "data"
    plain = compare_mod.build_blocks(
        CompareCommand(vocab_size=600, corpus_mb=1.0, progress=False), out, tmp_path
    )
    vocab = (out / "tokenizer" / "vocab.txt").stat().st_mtime_ns
    cmd = CompareCommand(vocab_size=600, corpus_mb=1.0, progress=False, pack_blocks=True)
    packed = compare_mod.build_blocks(cmd, out, tmp_path)
    assert packed == out / "blocks-packed" and plain == out / "blocks"
    assert (out / "tokenizer" / "vocab.txt").stat().st_mtime_ns == vocab  # not retrained
    m0, m1 = (json.loads((d / "manifest.json").read_text()) for d in (plain, packed))
    assert m1["splits"]["train"]["tokens"] == m0["splits"]["train"]["tokens"]
    assert m1["splits"]["train"]["blocks"] < m0["splits"]["train"]["blocks"]
    assert compare_mod.blocks_id(packed) != compare_mod.blocks_id(plain)  # arms key apart


def test_fine_tunings_side_by_side_score_as_one_at_a_time(
    blocks: Path,
    data_dir: Path,
    tmp_path: Path,
    one_thread: None,  # noqa: F811  (both sides on one thread: the same numbers exactly)
) -> None:
    """``finetune_jobs=2`` runs the same jobs in two processes; every point gets its own scores."""
    import dataclasses

    from electra.experiments.compare import finetune_all, table_only_encoder, untrained_encoder

    cmd = CompareCommand(
        config="tiny",
        set=["init.token_embeddings='ppmi'"],
        tasks=["nsmc", "sst2"],
        seeds=[1],
        max_train_examples=48,
        max_eval_examples=32,
        epochs=1,
        max_length=32,
        progress=False,
    )
    none = untrained_encoder(cmd, blocks, tmp_path)
    models = {"none": none, "table": table_only_encoder(cmd, blocks, none, tmp_path)}

    def points() -> list[dict]:
        return [
            {"arm": a, "run": a, "steps": 0, "flops": 0.0, "model": str(m)}
            for a, m in models.items()
        ]

    alone, together = points(), points()
    floors = finetune_all(cmd, alone, tmp_path / "one", data_dir)
    two = dataclasses.replace(cmd, finetune_jobs=2)
    assert finetune_all(two, together, tmp_path / "two", data_dir) == floors
    assert [p["scores"] for p in together] == [p["scores"] for p in alone]
    scores = [s["median"] for p in together for s in p["scores"].values()]
    assert len(set(scores)) > 1  # a job's result given to another point would show
    for p in together:  # each point's scores are those of its own jobs' results
        for task, s in p["scores"].items():
            res = next((tmp_path / "two" / "finetune" / f"{p['run']}-0").glob(f"{task}-*"))
            summary = json.loads((res / "results.json").read_text())["summary"]["test"]
            assert summary["accuracy"]["median"] == s["median"]
    again = points()  # all done: read back without starting processes
    assert finetune_all(two, again, tmp_path / "two", data_dir) == floors
    assert [p["scores"] for p in again] == [p["scores"] for p in together]


PARENT = """
import os, sys, time
from pathlib import Path

from electra.experiments.compare import CompareCommand, _run_jobs


def job(cmd, label, model, task, where, *rest):
    where.mkdir(parents=True, exist_ok=True)
    (where / "pid").write_text(str(os.getpid()))
    time.sleep(300)  # a fine-tuning of many minutes


if __name__ == "__main__":
    out = Path(sys.argv[1])
    _run_jobs(CompareCommand(finetune_jobs=2), [("x", "m", "nsmc", out / str(i)) for i in (0, 1)], job)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_sigterm_stops_the_fine_tuning_workers_too(tmp_path: Path) -> None:
    """Stopping compare must not leave its worker processes fine-tuning for minutes."""
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)])
    pids = [tmp_path / str(i) / "pid" for i in (0, 1)]
    deadline = time.monotonic() + 180
    while not all(p.is_file() for p in pids) and time.monotonic() < deadline:
        assert proc.poll() is None
        time.sleep(0.2)
    workers = [int(p.read_text()) for p in pids]
    assert all(_alive(pid) for pid in workers)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) != 0
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in workers)


# -- stop and resume an arm for real; one FLOPs counter for every arm ------------------------


def _arm_command(out: Path) -> CompareCommand:
    """A tiny arm of three marks (a few seconds), every step logged."""
    return CompareCommand(
        output=str(out),
        config="tiny",
        budget_flops=1.2e10,
        points=3,
        set=["run.eval_every=0", "run.tensorboard=false", "run.log_every=1", "run.device='cpu'"],
        progress=False,
    )


@pytest.fixture(scope="module")
def finished_arms(blocks: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """Every arm compare trains, each run once to the tiny budget without a stop."""
    from electra.experiments.compare import ARMS, pretrain_arm

    out = tmp_path_factory.mktemp("arms")
    cmd = _arm_command(out)
    return cmd, out, {arm: pretrain_arm(cmd, arm, blocks, out) for arm in ARMS}


def _weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def _sigterm_at(monkeypatch: pytest.MonkeyPatch, at: int) -> None:
    """Deliver a real SIGTERM to this process while the Trainer takes step ``at``: the
    Trainer's own handler takes it, exactly as a `kill` from outside."""
    import os
    import signal

    from electra.pretrain.trainer import Trainer

    real = Trainer._train_step

    def stepping(self, step: int, scaler):  # noqa: ANN001
        if step == at:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self, step, scaler)

    monkeypatch.setattr(Trainer, "_train_step", stepping)


@pytest.mark.parametrize("arm", ["rtd", "mlm"])
def test_a_stopped_arm_resumes_to_the_same_weights_and_a_finished_one_is_reused(
    arm: str, blocks: Path, finished_arms: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM between two marks stops compare; the same call again resumes the arm and
    ends with the uninterrupted arm's weights, bit for bit, at every mark; a third call
    reuses the finished arm without building a Trainer or touching a file."""
    import electra.experiments.compare as compare_module
    from electra.experiments.compare import pretrain_arm

    _, _, arms = finished_arms
    want, _ = arms[arm]
    marks = [r["steps"] for r in want]
    at = (marks[0] + marks[1]) // 2  # past the first mark, before the second
    cmd = _arm_command(tmp_path)
    with monkeypatch.context() as m:
        _sigterm_at(m, at)
        with pytest.raises(SystemExit, match=f"{arm} was interrupted at step {at + 1}"):
            pretrain_arm(cmd, arm, blocks, tmp_path)
    run = arm_run_dir(cmd, arm, blocks, tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["stopped"], summary["step"]) == ("signal", at + 1)
    assert not (run / "hf").exists()  # no mark is exported before the arm is whole
    got, _ = pretrain_arm(cmd, arm, blocks, tmp_path)  # the same call: resumes
    assert [r["steps"] for r in got] == marks
    assert [(r["flops"], r["passes"]) for r in got] == [(r["flops"], r["passes"]) for r in want]
    for mine, ref in zip(got, want, strict=True):
        a, b = _weights(Path(mine["model"])), _weights(Path(ref["model"]))
        assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a), mine["steps"]
    steps = [json.loads(ln)["step"] for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == marks[-1] and len(set(steps)) == marks[-1]  # no step trained twice

    class NoTraining:
        def __init__(self, *a, **k) -> None:
            raise AssertionError("a finished arm was trained again")

    files = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
    monkeypatch.setattr(compare_module, "Trainer", NoTraining)
    again, _ = pretrain_arm(cmd, arm, blocks, tmp_path)
    assert again == got
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()} == files


def test_every_arm_is_charged_the_budget_by_the_one_counter(
    blocks: Path, finished_arms: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For each arm, the steps compare buys, the FLOPs of its marks and the Trainer's own
    count (``summary.json``, ``metrics.jsonl``) are one count, within one step of the budget."""
    import dataclasses

    import electra.experiments.compare as compare_module
    from electra.experiments.compare import ARMS, pretrain_arm
    from electra.pretrain.flops import paper_flops_plan

    cmd, out, arms = finished_arms
    assert set(arms) == set(ARMS) == {"rtd", "mlm", "rtd-ngram"}
    for arm, (records, costs) in arms.items():
        per_step = costs["paper"]
        steps = records[-1]["steps"]
        assert steps * per_step <= cmd.budget_flops < (steps + 1) * per_step, arm
        assert all(r["flops"] == r["paper_flops"] == r["steps"] * per_step for r in records)
        assert all(r["executed_flops"] == r["steps"] * costs["executed"] for r in records)
        assert costs["seconds"] > 0  # measured from the run's own log
        run = arm_run_dir(cmd, arm, blocks, out)
        assert json.loads((run / "summary.json").read_text())["train_flops"] == steps * per_step
        logged = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
        marks = {r["steps"]: r["flops"] for r in records}
        assert all(
            rec["train_flops"] == marks[rec["step"]] for rec in logged if rec["step"] in marks
        )
    paper = {arm: costs["paper"] for arm, (_, costs) in arms.items()}
    assert paper["mlm"] < paper["rtd"]  # RTD pays for its generator
    assert paper["rtd-ngram"] < paper["rtd"]  # a count table costs (almost) nothing

    # A per-step count other than the Trainer's is refused, not reported as equal compute.
    def dearer(*a, **k):
        plan = paper_flops_plan(*a, **k)
        return dataclasses.replace(plan, per_step=1.01 * plan.per_step)

    monkeypatch.setattr(compare_module, "paper_flops_plan", dearer)
    with pytest.raises(ConfigError, match="the counts differ"):
        pretrain_arm(cmd, "rtd", blocks, out)


def test_an_arm_whose_generator_freezes_is_charged_its_schedule(
    blocks: Path, tmp_path: Path
) -> None:
    """``rtd:objective.generator_freeze_at=0.5``: compare buys the steps whose whole
    schedule (joint steps, then cheaper frozen ones) fits the budget, more than plain RTD
    gets; its marks, the Trainer's log and its summary are that one count."""
    from electra.experiments.compare import pretrain_arm

    cmd = _arm_command(tmp_path)
    records, costs = pretrain_arm(cmd, "rtd:objective.generator_freeze_at=0.5", blocks, tmp_path)
    _, plain = pretrain_arm(cmd, "rtd", blocks, tmp_path)
    steps = records[-1]["steps"]
    assert costs["paper"] < plain["paper"] and costs["executed"] < plain["executed"]
    assert steps * costs["paper"] == pytest.approx(records[-1]["paper_flops"])
    assert records[-1]["paper_flops"] <= cmd.budget_flops
    assert steps > int(cmd.budget_flops // plain["paper"])  # the freeze bought steps
    first = records[0]  # a mark before the freeze is charged full steps
    assert first["paper_flops"] == pytest.approx(first["steps"] * plain["paper"])
    run = arm_run_dir(cmd, "rtd:objective.generator_freeze_at=0.5", blocks, tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["train_flops"] == records[-1]["paper_flops"]
    logged = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    marks = {r["steps"]: r["flops"] for r in records}
    assert all(rec["train_flops"] == marks[rec["step"]] for rec in logged if rec["step"] in marks)


def test_the_executed_counter_buys_each_arm_the_steps_of_its_real_matmuls(
    blocks: Path, finished_arms: tuple, tmp_path: Path
) -> None:
    """``--counter executed``: every arm's budget in the matmuls it runs; the generator's
    lookups (charged as dense matmuls by the paper's count) no longer cost RTD steps, so
    RTD loses fewer steps to MLM than under the paper's count. Its runs key apart."""
    import dataclasses

    from electra.experiments.compare import pretrain_arm

    cmd, _, paper_arms = finished_arms
    executed = dataclasses.replace(cmd, counter="executed")
    assert arm_run_dir(executed, "rtd", blocks, tmp_path) != arm_run_dir(
        cmd, "rtd", blocks, tmp_path
    )
    arms = {arm: pretrain_arm(executed, arm, blocks, tmp_path) for arm in ("rtd", "mlm")}
    for arm, (records, costs) in arms.items():
        steps = records[-1]["steps"]
        assert steps * costs["executed"] <= cmd.budget_flops < (steps + 1) * costs["executed"]
        assert records[-1]["flops"] == records[-1]["executed_flops"]
        assert costs["paper"] == paper_arms[arm][1]["paper"]  # the Trainer's count is checked
    rtd_costs = arms["rtd"][1]
    assert rtd_costs["executed"] < rtd_costs["paper"]
    ratio = {c: arms["rtd"][1][c] / arms["mlm"][1][c] for c in ("paper", "executed")}
    assert 1.0 < ratio["executed"] < ratio["paper"]
    steps = {arm: arms[arm][0][-1]["steps"] for arm in arms}
    paper_steps = {arm: paper_arms[arm][0][-1]["steps"] for arm in arms}
    assert steps["rtd"] / steps["mlm"] > paper_steps["rtd"] / paper_steps["mlm"]


def test_a_steps_seconds_come_from_the_clock_not_the_text_tokens_rate(tmp_path: Path) -> None:
    """tokens_per_s counts text, not padding: half-padded blocks must not double a step."""
    from electra.experiments.compare import measured_step_seconds

    records = [
        {"step": 10 * i, "loss": 1.0, "elapsed_s": 5.0 * i, "tokens_per_s": 4096 * 10 / 5 / 2}
        for i in range(1, 6)
    ]
    records.insert(3, {"step": 30, "val/loss": 1.0, "elapsed_s": 99.0})  # not a train record
    records.append({"step": 60, "loss": 1.0, "elapsed_s": 3.0})  # a resumed process's clock
    records.append({"step": 70, "loss": 1.0, "elapsed_s": 8.0})
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert measured_step_seconds(tmp_path) == pytest.approx(0.5)
    assert measured_step_seconds(tmp_path / "none") is None


def test_a_larger_budget_trains_anew_and_names_the_run_it_does_not_continue(
    blocks: Path, finished_arms: tuple
) -> None:
    """The learning rate decays to zero at a budget's end: an arm at 2B is not a
    continuation of the arm at B. compare keys it apart and names the other run."""
    import dataclasses

    from electra.experiments.compare import other_budgets

    cmd, out, _ = finished_arms
    larger = dataclasses.replace(cmd, budget_flops=2 * cmd.budget_flops)
    assert arm_run_dir(larger, "rtd", blocks, out) != arm_run_dir(cmd, "rtd", blocks, out)
    found = other_budgets(larger, "rtd", blocks, out)
    assert [(f["run"], f["budget_flops"], f["points"]) for f in found] == [
        (arm_run_dir(cmd, "rtd", blocks, out).name, cmd.budget_flops, cmd.points)
    ]
    assert other_budgets(cmd, "rtd", blocks, out) == []  # not itself
    other_recipe = dataclasses.replace(larger, set=[*cmd.set, "optim.learning_rate=1e-4"])
    assert other_budgets(other_recipe, "rtd", blocks, out) == []  # another recipe: not named


def test_a_lever_that_adds_work_is_charged_it(blocks: Path) -> None:
    """The corrective LM variant runs an MLM head on the discriminator: compare charges it
    by both counters (the Trainer's count is the same function), so at one budget it buys
    fewer steps than plain RTD instead of getting that head for free."""
    from electra.experiments.arms import parse_arm
    from electra.experiments.compare import arm_overrides, step_costs
    from electra.pretrain.config import load_config

    cmd = CompareCommand(config="tiny", budget_flops=1e10)
    plain = step_costs(load_config(cmd.config, arm_overrides(cmd, parse_arm("rtd"))), blocks)
    lever = parse_arm("rtd:objective.disc_mlm_weight=1")
    more = step_costs(load_config(cmd.config, arm_overrides(cmd, lever)), blocks)
    for counter in ("paper", "executed"):
        assert plain[counter] < more[counter] < 1.2 * plain[counter], counter


@pytest.mark.parametrize("bad", [{"epochs": 0}, {"tagging_epochs": 0}, {"finetune_jobs": 0}])
def test_fine_tuning_lengths_and_jobs_are_checked_before_anything_runs(
    bad: dict, tmp_path: Path
) -> None:
    from electra.experiments.compare import compare

    cmd = CompareCommand(config="tiny", output=str(tmp_path / "out"), **bad)
    with pytest.raises(ConfigError, match=next(iter(bad))):
        compare(cmd)
    assert not (tmp_path / "out").exists()


def test_the_table_warns_where_fine_tuning_stopped_short() -> None:
    """Most seeds of every point choosing their last epoch means the dev score was still
    rising (KLUE-NER at 3 epochs): compare.md says so, naming the flag; one point whose
    seeds peaked earlier, or a result from before the count existed, says nothing."""
    from builders import compare_result

    from electra.experiments.compare import _main_scores
    from electra.experiments.compare_report import markdown_table

    result = compare_result([0.55], [0.57], tasks=["nsmc", "klue-ner"])
    for p in result["points"]:
        p["scores"]["klue-ner"]["last_epoch_best"] = 3
        p["scores"]["nsmc"]["last_epoch_best"] = 1
    table = markdown_table(result)
    assert "**klue-ner: fine-tuning may stop short**: 9 of 9 fine-tunings" in table
    assert "(--tagging-epochs)" in table and "nsmc: fine-tuning may stop short" not in table
    result["points"][1]["scores"]["klue-ner"]["last_epoch_best"] = 1
    assert "may stop short" not in markdown_table(result)
    del result["points"][1]["scores"]["klue-ner"]["last_epoch_best"]
    assert "may stop short" not in markdown_table(result)

    results = {
        "task": {"main_metric": "f1"},
        "recipe": {"epochs": 10},
        "summary": {"test": {"f1": {"median": 0.55, "n": 3}}},
        "seeds": [{"best_epoch": 10}, {"best_epoch": 8}, {"best_epoch": 10}],
    }
    assert _main_scores(results) == {
        "metric": "f1",
        "median": 0.55,
        "n": 3,
        "dev_median": None,
        "last_epoch_best": 2,
    }
    for seed, s in enumerate(results["seeds"], start=1):  # each seed's test score, by seed
        s.update(seed=seed, test={"f1": 0.5 + seed / 100})
    assert _main_scores(results)["by_seed"] == {"1": 0.51, "2": 0.52, "3": 0.53}


def _fake_results(dev: float, test: float) -> dict:
    return {
        "task": {"main_metric": "accuracy"},
        "recipe": {"epochs": 3},
        "summary": {
            "dev": {"accuracy": {"median": dev, "n": 3}},
            "test": {"accuracy": {"median": test, "n": 3}},
        },
        "seeds": [],
    }


def test_each_point_keeps_the_rate_with_the_best_dev_median_and_reports_its_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``finetune_lrs`` every point is fine-tuned at each rate (the rate reaching the
    fine-tuning's args), and keeps per task the rate whose *dev* median is highest: its test
    score, never the best test score; compare.md names the rate and every rate's dev median.
    Without rates, the fine-tuning directories keep their names, so older results are reused."""
    import dataclasses

    import electra.experiments.compare as compare_module
    from electra.experiments.compare import finetune_all, finetune_dir
    from electra.experiments.compare_report import markdown_table

    # rate -> (dev, test) per arm: for "a" the best dev (1e-3) is not the best test (1e-4)
    table = {
        "a": {1e-4: (0.70, 0.90), 1e-3: (0.80, 0.75)},
        "b": {1e-4: (0.85, 0.81), 1e-3: (0.60, 0.95)},
    }
    seen = []

    def fake_finetune(args):
        seen.append((args.model, args.task, args.learning_rate))
        dev, test = table[args.model][args.learning_rate]
        return _fake_results(dev, test)

    monkeypatch.setattr(compare_module, "finetune", fake_finetune)
    cmd = CompareCommand(tasks=["nsmc"], finetune_lrs=[1e-4, 1e-3, 1e-4], progress=False)
    points = [{"arm": a, "run": a, "steps": 0, "flops": 0.0, "model": a} for a in table]
    finetune_all(cmd, points, tmp_path, tmp_path / "data")
    assert sorted(seen) == sorted((a, "nsmc", r) for a in table for r in (1e-4, 1e-3))
    a, b = (p["scores"]["nsmc"] for p in points)
    assert (a["lr"], a["median"]) == (1e-3, 0.75)
    assert (b["lr"], b["median"]) == (1e-4, 0.81)
    assert a["dev_by_lr"] == {"0.0001": 0.70, "0.001": 0.80}

    result = {
        "points": points,
        "floors": {},
        "command": dataclasses.asdict(cmd) | {"seeds": [1, 2, 3]},
    }
    md = markdown_table(result)
    assert "the learning rate of 0.0001, 0.001 with the best dev median" in md
    assert "- a @ 0: nsmc 0.001 (dev 0.0001: 70.0, 0.001: 80.0)" in md
    assert "Table 7's learning rate" not in md

    plain = dataclasses.replace(cmd, finetune_lrs=[])
    assert finetune_dir(plain, "nsmc", None) == finetune_dir(cmd, "nsmc", None)
    assert finetune_dir(cmd, "nsmc", 1e-3).endswith("-lr0.001")
    seen.clear()
    table["a"][None] = table["b"][None] = (0.5, 0.5)
    finetune_all(plain, points, tmp_path, tmp_path / "data")
    assert sorted(seen) == [("a", "nsmc", None), ("b", "nsmc", None)]
    assert "lr" not in points[0]["scores"]["nsmc"]
    assert "Table 7's learning rate" in markdown_table(
        {**result, "command": dataclasses.asdict(plain) | {"seeds": [1]}}
    )


def test_a_rate_is_chosen_by_dev_alone_and_the_first_wins_a_tie() -> None:
    from electra.experiments.compare import best_rate

    one = {"median": 0.5, "dev_median": 0.6}
    assert best_rate({None: one}) is one
    tie = best_rate(
        {3e-4: {"median": 0.1, "dev_median": 0.7}, 1e-4: {"median": 0.9, "dev_median": 0.7}}
    )
    assert tie["lr"] == 3e-4 and tie["median"] == 0.1
    no_dev = best_rate(
        {3e-4: {"median": 0.2, "dev_median": None}, 1e-4: {"median": 0.3, "dev_median": 0.1}}
    )
    assert no_dev["lr"] == 1e-4


def test_table7_rate_given_by_name_reuses_the_run_made_without_rates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adding ``--finetune-lrs`` to a finished study re-runs only the new rates: Table 7's
    rate (3e-4 for a 256-wide model) named explicitly lands in the directory the plain run
    wrote, so its results are reused; other widths and rates get their own directories. The
    pre-trained points are fine-tuned before the controls."""
    import electra.experiments.compare as compare_module
    from electra.experiments.compare import finetune_all, table7_rate

    seen = []

    def fake_finetune(args):
        seen.append((args.model, args.learning_rate, Path(args.output).name))
        return _fake_results(0.7, 0.7)

    monkeypatch.setattr(compare_module, "finetune", fake_finetune)
    models = {}
    for name, hidden in (("none", 256), ("rtd", 256), ("wide", 768)):
        models[name] = tmp_path / name
        models[name].mkdir()
        (models[name] / "config.json").write_text(json.dumps({"hidden_size": hidden}))
    assert table7_rate(str(models["rtd"])) == 3e-4
    assert table7_rate(str(models["wide"])) == 1e-4
    assert table7_rate(str(tmp_path / "absent")) is None

    points = [
        {"arm": a, "run": a, "steps": 0 if a == "none" else 10, "flops": 0.0, "model": str(m)}
        for a, m in models.items()
    ]
    cmd = CompareCommand(tasks=["nsmc"], finetune_lrs=[3e-4, 1e-3], progress=False)
    finetune_all(cmd, points, tmp_path, tmp_path / "data")
    plain = compare_module.finetune_dir(cmd, "nsmc", None)
    dirs = {(Path(m).name, lr): d for m, lr, d in seen}
    assert dirs[("rtd", 3e-4)] == dirs[("none", 3e-4)] == plain
    assert dirs[("rtd", 1e-3)] == f"{plain}-lr0.001"
    assert dirs[("wide", 3e-4)] == f"{plain}-lr0.0003"  # not Table 7's rate at 768 wide
    assert [Path(m).name for m, _, _ in seen][-2:] == ["none", "none"]  # controls last
