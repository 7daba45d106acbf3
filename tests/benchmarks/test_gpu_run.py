"""The one-shot GPU check on the CPU: ``bash benchmarks/gpu_run.sh`` as the GPU machine runs it.

Same code path, tiny sizes (``--smoke``): the data staged by
``benchmarks/stage_gpu_data.py``, no ``../shared`` (``ELECTRA_DATA_DIR`` points
nowhere), seqeval and kiwipiepy hidden as on that machine. Then the same command
with a budget too small for its steps (each is stopped at its limit and the reports
are still written), a missing or unsupported module (named, its steps skipped), and
the report's verdicts (a missed target reads MISSED).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "benchmarks" / "gpu_run.sh"
sys.path.insert(0, str(REPO / "benchmarks"))

REPORTS = {"gpu_check.json", "gpu_check.md", "gpu_run.log"}
STATUSES = {"ok", "failed", "timed-out", "skipped"}


@pytest.fixture(scope="session")
def staged(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """``gpu_data/`` as ``stage_gpu_data.py`` builds it, in a scratch folder."""
    import stage_gpu_data

    out = tmp_path_factory.mktemp("staged") / "gpu_data"
    stage_gpu_data.stage(data_dir, out)
    return out


def hiding(tmp_path: Path, *modules: str) -> dict[str, str]:
    """Environment variables under which ``import M`` fails for each module, in every
    process the check starts (a ``sitecustomize`` sets ``sys.modules[M] = None``)."""
    d = tmp_path / "hide"
    d.mkdir(exist_ok=True)
    (d / "sitecustomize.py").write_text(
        f"import sys\nfor _m in {modules!r}:\n    sys.modules[_m] = None\n"
    )
    return {"PYTHONPATH": os.pathsep.join([str(d), os.environ.get("PYTHONPATH", "")])}


def gpu_run(tmp_path: Path, staged: Path, *args: str, hide: tuple[str, ...] = ()):
    """``bash benchmarks/gpu_run.sh --device cpu --smoke --data STAGED ARGS``; (process,
    seconds, OUT). ``../shared`` is made absent: ``ELECTRA_DATA_DIR`` points nowhere."""
    out = tmp_path / "out"
    env = {
        **os.environ,
        **hiding(tmp_path, *hide),
        "ELECTRA_DATA_DIR": str(tmp_path / "no-shared-data"),
        "PYTHON": sys.executable,
        "OMP_NUM_THREADS": "1",
    }
    cmd = ["bash", str(RUN), "--device", "cpu", "--smoke", "--out", str(out)]
    cmd += ["--data", str(staged), "--work", str(tmp_path / "work"), *args]
    t = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    return p, time.time() - t, out


@pytest.mark.slow
def test_the_one_command_on_the_cpu_checks_everything_and_writes_three_files(
    tmp_path: Path, staged: Path
) -> None:
    p, seconds, out = gpu_run(tmp_path, staged, hide=("seqeval", "kiwipiepy"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert {f.name for f in out.iterdir()} == REPORTS  # at most 8 files come back
    report = json.loads((out / "gpu_check.json").read_text())
    steps = report["steps"]
    assert report["complete"] and {r["status"] for r in steps.values()} == {"ok"}, {
        k: r.get("error") for k, r in steps.items() if r["status"] != "ok"
    }
    assert steps["data"]["source"] == "staged"
    assert steps["sigkill_resume_bf16"]["max_abs_loss_diff"] == 0.0
    assert steps["export_parity"]["max_abs_diff"] < 1e-4
    run = steps["torchrun_1proc"]  # a real group and DDP, as reported by the run itself
    assert (run["backend"], run["wrapper"]) == ("gloo", "DistributedDataParallel")
    throughput = [r for n, r in steps.items() if n.startswith("throughput_")]
    assert [r["compiled"] for r in throughput] == ["none", "none", "ours"]
    assert [r["conv_kernel_size"] for r in throughput] == [0, 9, 0]
    assert all("forward_blocks" in r["ours_step"] and r["ours_mfu"] > 0 for r in throughput)
    # seqeval and kiwipiepy absent, as on the GPU machine: said, and nothing needed them
    assert not report["versions"]["seqeval"] and "seqeval" in report["unusable"]
    assert any("kiwipiepy" in m and "no step needs it" in m for m in report["preflight_messages"])
    md = (out / "gpu_check.md").read_text()
    assert "| sigkill_resume_bf16 | ok |" in md and "| tiny ConvBERT 9 | 4x32 | none |" in md
    assert "[gpu_run] done" in (out / "gpu_run.log").read_text()
    print(f"gpu_run.sh --smoke on this CPU: {seconds:.0f} s")


def test_a_small_budget_stops_each_step_at_its_limit_and_still_reports(
    tmp_path: Path, staged: Path
) -> None:
    """40 s for steps that need minutes: each is killed at its share, the ones left without
    time are skipped, and the reports appear, within the budget."""
    p, seconds, out = gpu_run(tmp_path, staged, "--budget-seconds", "40")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert seconds < 40 + 5
    assert {f.name for f in out.iterdir()} == REPORTS
    report = json.loads((out / "gpu_check.json").read_text())
    steps = report["steps"]
    assert report["complete"] and {r["status"] for r in steps.values()} <= STATUSES
    timed_out = [r for r in steps.values() if r["status"] == "timed-out"]
    assert timed_out and all(r["error"].startswith("timed out after") for r in timed_out)
    assert all(r["seconds"] <= r["limit_s"] + 3 for r in steps.values())  # TERM, then KILL
    assert sum(r["seconds"] for r in steps.values()) <= 40
    # the last step gets what is left: nothing (skipped) or a sliver (killed at it); which
    # one depends on how fast this machine ran the others
    last = steps["throughput_tiny_4x32_compile"]
    assert last["status"] in {"skipped", "timed-out"}
    if last["status"] == "skipped":
        assert "time budget spent" in last["skipped"]
    md = (out / "gpu_check.md").read_text()
    assert "TIMED OUT" in md and "timed out after" in md


def test_staged_data_is_small_complete_and_checked(staged: Path, tmp_path: Path) -> None:
    import stage_gpu_data

    manifest = stage_gpu_data.verify(staged)
    total = sum(f.stat().st_size for f in staged.rglob("*") if f.is_file())
    assert total < 40 * 2**20 and manifest["total_bytes"] <= total
    paths = {e["path"] for e in manifest["files"]}
    assert {"blocks/manifest.json", "text/kowiki_slice.txt", "nsmc/README.md"} <= paths
    assert all(e["source_sha256"] == e["sha256"] for e in manifest["files"] if "nsmc/" in e["path"])
    # enough NSMC for the GPU size: 4,000 training reviews after balancing and the 60% split
    from electra.finetune.readers import read_nsmc_raw

    examples, _ = read_nsmc_raw(staged / "nsmc" / "raw_subset")
    negative = sum(e.label == "negative" for e in examples)
    assert 0.6 * 2 * negative >= 4000
    changed = tmp_path / "changed"
    shutil.copytree(staged, changed)
    (changed / "text" / "kowiki_slice.txt").write_text("other text")
    with pytest.raises(ValueError, match="kowiki_slice.txt.*stage_gpu_data.py"):
        stage_gpu_data.verify(changed)


def test_where_shared_data_is_and_nothing_is_staged_the_blocks_are_built(
    tmp_path: Path, data_dir: Path, monkeypatch
) -> None:
    import gpu_check

    monkeypatch.setattr(gpu_check, "STAGED", tmp_path / "gpu_data")  # nothing staged
    monkeypatch.setenv("ELECTRA_DATA_DIR", str(data_dir))
    ctx = gpu_check.Context(tmp_path / "work", "cpu", True, time.time() + 120)
    r = gpu_check.run_check(gpu_check.check_data, ctx)
    assert r["status"] == "ok" and r["source"] == "shared", r
    assert (Path(r["blocks"]) / "manifest.json").is_file() and r["data_dir"] == str(data_dir)
    assert ctx.data() == {
        **{k: r[k] for k in ("source", "root", "blocks", "data_dir")},
        "summary": r["summary"],
    }


def test_without_staged_or_shared_data_it_says_how_to_stage(tmp_path: Path, monkeypatch) -> None:
    import gpu_check

    monkeypatch.setattr(gpu_check, "STAGED", tmp_path / "gpu_data")
    monkeypatch.setenv("ELECTRA_DATA_DIR", str(tmp_path / "shared" / "data"))
    with pytest.raises(RuntimeError) as info:
        gpu_check.locate_data("")
    message = str(info.value)
    assert "python benchmarks/stage_gpu_data.py" in message and "gpu_data" in message
    assert str(tmp_path / "shared" / "data") in message


def test_a_missing_module_is_named_and_its_steps_skip_without_a_traceback(
    tmp_path: Path,
) -> None:
    """transformers absent (a subprocess, as on a bare machine): the preflight names it and
    the steps that compare with it are skipped; the others do not need it."""
    env = {**os.environ, **hiding(tmp_path, "transformers")}
    work = tmp_path / "work"

    def step(name: str) -> dict:
        cmd = [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--step", name]
        p = subprocess.run(
            [*cmd, "--work", str(work), "--device", "cpu", "--smoke"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 0 and "Traceback" not in p.stderr + p.stdout, p.stderr
        return json.loads((work / "steps" / f"{name}.json").read_text())

    pre = step("preflight")
    assert pre["status"] == "ok"  # torch is there; transformers is optional to it
    env_json = json.loads((work / "env.json").read_text())
    assert "transformers is not installed" in env_json["unusable"]["transformers"]
    line = next(m for m in env_json["messages"] if "transformers" in m)
    assert line.startswith("MISSING") and "export_parity" in line and "throughput_" in line
    for name in ("export_parity", "throughput_tiny_4x32"):
        r = step(name)
        assert r["status"] == "skipped" and "needs transformers" in r["skipped"]


@pytest.mark.parametrize(
    "name,version,why",
    [
        ("torch", "2.3.1", "torch 2.3.1 is older than 2.4"),
        ("transformers", "4.39.3", "transformers 4.39.3 is older than 4.40"),
        ("transformers", "6.0.0", "transformers 6.0.0 is newer than supported"),
    ],
)
def test_unsupported_versions_are_named(monkeypatch, name: str, version: str, why: str) -> None:
    import gpu_check
    import gpu_plan
    import gpu_preflight

    real = gpu_preflight.probe

    def probe(module: str, load: bool = True) -> dict:
        return {"present": True, "version": version} if module == name else real(module, load)

    monkeypatch.setattr(gpu_preflight, "probe", probe)
    _, unusable, lines = gpu_preflight.modules(smoke=True)
    assert why in unusable[name] and any(why in line for line in lines)
    for supported in ("2.4.0", "2.11.0+cu128", "4.40.0", "5.17.0"):
        assert gpu_preflight.judge("torch", {"present": True, "version": supported}) is None
    step = gpu_plan.step_named("throughput_tiny_4x32", smoke=True)
    assert why in gpu_check.blocked_by(step, {"unusable": unusable})


def test_a_missed_target_reads_missed_and_each_target_passes_or_misses(tmp_path: Path) -> None:
    import gpu_report

    work = tmp_path / "work"
    (work / "steps").mkdir(parents=True)
    small = {"status": "ok", "ok": True, "preset": "small", "batch": 128, "seq": 128}
    small |= {"conv_kernel_size": 0, "ratio": 1.2, "ours_mfu": 0.41, "compiled": "none"}
    small |= {"ours_tokens_per_s": 3e5, "reference_tokens_per_s": 2.5e5, "reference_mfu": 0.3}
    small |= {"matmul_peak_gflops": 7e5, "sequences_per_s": 2343.0, "summary": "2343 seq/s"}
    (work / "steps" / "throughput_small_128x128.json").write_text(json.dumps(small))
    (work / "status.tsv").write_text(
        "throughput_small_128x128\t0\t14\t50\n"
        "throughput_base_128x128\t124\t45\t45\n"
        "throughput_base_32x512\tbudget\t20\t7\n"
    )
    res = gpu_report.collect(work, smoke=False, compile_=True, budget_s=540, final=True)
    targets = {t["target"]: t["pass"] for t in res["steps"]["throughput_small_128x128"]["targets"]}
    assert targets == {"ratio >= 1.5x the reference": False, "MFU >= 35%": True}
    assert res["targets"]["missed"] == [
        "throughput_small_128x128: ratio >= 1.5x the reference (1.20x)"
    ]
    base = res["steps"]["throughput_base_128x128"]
    assert base["status"] == "timed-out" and base["error"].startswith("timed out after 45 s")
    assert res["steps"]["throughput_base_32x512"]["status"] == "skipped"
    assert res["steps"]["preflight"]["status"] == "not run"
    md = gpu_report.markdown(res)
    assert "| throughput_small_128x128 | MISSED |" in md
    assert "| throughput_small_128x128 | ratio >= 1.5x the reference | 1.20x | MISSED |" in md
    assert "| throughput_small_128x128 | MFU >= 35% | 41.0% | pass |" in md
    assert "| throughput_base_128x128 | TIMED OUT |" in md
    assert "1 met, 1 MISSED" in md
