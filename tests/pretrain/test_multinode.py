"""Several machines as docs/pretraining.md tells users to run them: two ``torchrun`` "nodes"
on this machine (``--nnodes 2``, c10d rendezvous on 127.0.0.1, gloo, one process each).

They must train as one process does with the same global batch (exactly as two processes on
one machine do), continue exactly when both
are killed and restarted with ``--resume``, and write one run, not two. Every launch runs in
its own process group with a timeout, so a rendezvous that hangs fails the test instead of
hanging the suite."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from builders import cli_env, step_losses, tiny_pretrain_args
from safetensors.torch import load_file

from electra.model import checkpoint as ckpt

pytestmark = pytest.mark.slow

TIMEOUT = 120  # seconds for any one launch, rendezvous included
STEPS = 24


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _args(blocks: Path, run: Path, *extra: str) -> list[str]:
    """``electra pretrain`` on the tiny config: global batch 8, no dropout (so that 2 ranks
    can match 1 up to the order of the gradient all-reduce), a checkpoint every 5 steps."""
    settings = [f"optim.max_steps={STEPS}", "optim.batch_size=8", "run.save_every=5"]
    settings += ["model.hidden_dropout_prob=0.0", "model.attention_probs_dropout_prob=0.0"]
    return ["-m", "electra.cli", *tiny_pretrain_args(blocks, run, *settings, *extra)]


def _env() -> dict[str, str]:
    e = cli_env()
    e["ELECTRA_NO_TCMALLOC"] = "1"
    return e


def _start_nodes(blocks: Path, runs: tuple[Path, Path], *extra: str) -> list[subprocess.Popen]:
    """Two torchrun agents, one per "machine", each its own process group."""
    port, rdzv_id = _free_port(), f"electra-test-{os.getpid()}-{time.monotonic_ns()}"
    procs = []
    for node, run in enumerate(runs):
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "2",
            "--nproc_per_node",
            "1",
            "--node_rank",
            str(node),  # ignored by c10d (ranks go in join order), as on real machines
            "--rdzv_backend",
            "c10d",
            "--rdzv_endpoint",
            f"127.0.0.1:{port}",
            "--rdzv_id",
            rdzv_id,
            "--rdzv_conf",
            "join_timeout=60",
            *_args(blocks, run, *extra),
        ]
        with open(run.parent / f"node{node}.log", "ab") as log:  # a resume appends
            procs.append(
                subprocess.Popen(
                    argv,
                    env=_env(),
                    start_new_session=True,
                    cwd=run.parent,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    return procs


def _kill(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)  # the agent and its worker, whole
    for p in procs:
        p.wait(timeout=30)


def _finish(procs: list[subprocess.Popen]) -> list[int]:
    """Exit statuses of both nodes; killed whole (and failed) after TIMEOUT."""
    deadline = time.monotonic() + TIMEOUT
    try:
        return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
    except subprocess.TimeoutExpired:
        _kill(procs)
        raise AssertionError(f"the two nodes did not finish within {TIMEOUT} s") from None


def _one_process(blocks: Path, run: Path, *extra: str) -> None:
    argv = [sys.executable, *_args(blocks, run, *extra)]
    subprocess.run(argv, env=_env(), check=True, timeout=TIMEOUT)


def _weights(run: Path) -> dict[str, torch.Tensor]:
    newest = ckpt.step_dirs(run / "checkpoints")[0]
    assert newest.step == STEPS
    return load_file(str(newest.path / "model.safetensors"))


def _wait_for_checkpoint(run: Path, procs: list[subprocess.Popen], step: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs), "a node exited before it was killed"
        found = ckpt.latest_valid(run / "checkpoints") if (run / "checkpoints").is_dir() else None
        if found is not None and found.step >= step:
            return
        time.sleep(0.05)
    _kill(procs)
    raise AssertionError(f"no checkpoint of step {step} within {TIMEOUT} s")


@pytest.fixture(scope="module")
def two_nodes(blocks: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted two-node run, both nodes on one (shared) run directory."""
    run = tmp_path_factory.mktemp("nodes") / "run"
    run.parent.mkdir(parents=True, exist_ok=True)
    assert _finish(_start_nodes(blocks, (run, run))) == [0, 0]
    return run


def test_two_nodes_train_as_one_process_and_write_one_run(
    blocks: Path, two_nodes: Path, tmp_path: Path
) -> None:
    """Losses as one process's, to test_train.py's 2-processes-=-1 tolerance (the gradient
    all-reduce and the half-size matmuls round differently, and the generator's samples
    follow its logits, so weights drift apart in the last digits); bit for bit the weights
    and losses of two processes on one machine, which is what two nodes must be."""
    one, local = tmp_path / "one", tmp_path / "local"
    _one_process(blocks, one)
    a, b = step_losses(one), step_losses(two_nodes)
    assert sorted(a) == sorted(b) == list(range(1, STEPS + 1))
    for s in a:
        assert b[s] == pytest.approx(a[s], rel=2e-4, abs=2e-4), f"step {s}"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    subprocess.run([*torchrun, *_args(blocks, local)], env=_env(), check=True, timeout=TIMEOUT)
    assert step_losses(local) == b
    wa, wb = _weights(local), _weights(two_nodes)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    # one writer: one metrics line per step, one set of step directories, no leftovers
    assert len((two_nodes / "metrics.jsonl").read_text().splitlines()) == STEPS
    steps = [c.step for c in ckpt.step_dirs(two_nodes / "checkpoints")]
    assert steps == [c.step for c in ckpt.step_dirs(one / "checkpoints")] and steps[0] == STEPS
    assert not list(two_nodes.glob("**/.tmp-*")) and not list(two_nodes.glob("**/.electra.lock"))


def test_both_nodes_killed_then_resumed_continue_exactly(
    blocks: Path, two_nodes: Path, tmp_path: Path
) -> None:
    run = tmp_path / "killed"
    procs = _start_nodes(blocks, (run, run))
    _wait_for_checkpoint(run, procs, 10)
    assert max(step_losses(run)) < STEPS, "the run ended before it was killed"
    _kill(procs)
    locks = list(run.glob("**/.electra.lock"))  # a SIGKILL leaves the holder's file behind
    assert len(locks) == 1 and locks[0].parent == run, "one lock, rank 0's"
    assert _finish(_start_nodes(blocks, (run, run), "--resume")) == [0, 0]
    want, got = step_losses(two_nodes), step_losses(run)
    assert sorted(got) == list(range(1, STEPS + 1))
    assert all(got[s] == want[s] for s in want), "the resumed run diverged"
    wa, wb = _weights(two_nodes), _weights(run)
    assert all(torch.equal(wa[k], wb[k]) for k in wa), "final weights differ"


def test_nodes_with_their_own_run_directories(blocks: Path, tmp_path: Path) -> None:
    """Real machines without a shared file system: only rank 0's directory is written, and
    a resume, where the other node would find no checkpoint, stops both with the reason."""
    runs = (tmp_path / "node0" / "run", tmp_path / "node1" / "run")
    for r in runs:
        r.parent.mkdir(parents=True)
    half = f"optim.max_steps={STEPS // 2}"
    assert _finish(_start_nodes(blocks, runs, half)) == [0, 0]
    written = [r for r in runs if r.exists() and any(r.iterdir())]
    assert len(written) == 1, "exactly one node (global rank 0) writes"
    assert [c.step for c in ckpt.step_dirs(written[0] / "checkpoints")][0] == STEPS // 2
    assert _finish(_start_nodes(blocks, runs, half, "--resume")) != [0, 0]
    logs = [(r.parent / f"node{n}.log").read_text() for n, r in enumerate(runs)]
    for log in logs:  # both nodes stop, each saying why
        assert "the ranks found different checkpoints to resume" in log, log[-2000:]
        assert "shared file system" in log
    assert [r for r in runs if r.exists() and any(r.iterdir())] == written
