"""One process per output directory (``electra.system.locks``).

A second process on a locked directory refuses at once, naming the holder's
pid, host and start; a lock whose process died on this host (SIGKILL, a forked
child left behind) is taken over with a message; one written on another host
is refused with the command that removes it; the lock goes when the holder
ends, on an exception too. ``electra pretrain``, ``prepare`` and ``finetune``
take it on their output directory.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from builders import cli_env, tiny_config
from test_nonfinite import _finetune_args

from electra.cli import main
from electra.config import ConfigError
from electra.system.errors import RunError
from electra.system.locks import LOCK_NAME, DirectoryLock, DirectoryLocked

HOST = socket.gethostname()

HOLD = """
import os, sys, time
from electra.system.locks import DirectoryLock
lock = DirectoryLock(sys.argv[1], command="the holder")
lock.acquire()
child = os.fork() if "--fork" in sys.argv else None  # a worker that outlives its parent
ready = os.path.join(sys.argv[1], "child-ready")  # the child ran its at-fork hooks
if child == 0:
    open(ready, "w").close()
    time.sleep(120)
    os._exit(0)
while child and not os.path.exists(ready):  # on a loaded machine it may not have run yet
    time.sleep(0.01)
print("held", child or "", flush=True)
sys.stdin.read()  # until the test closes stdin (or kills this process)
lock.release()
"""


def hold(directory: Path, *extra: str) -> subprocess.Popen:
    """A process holding ``directory``'s lock (it says "held" once it does, and the pid
    of its forked child with ``--fork``: ``proc.child``)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(directory), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=cli_env(),
        text=True,
    )
    assert proc.stdout is not None
    said = proc.stdout.readline().split()
    assert said[0] == "held"
    proc.child = int(said[1]) if len(said) > 1 else None  # type: ignore[attr-defined]
    return proc


def dead_pid() -> int:
    """The pid of a process that has ended."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], stdout=-1)
    return int(proc.stdout)


def write_lock(directory: Path, pid: int, host: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_NAME
    holder = {"pid": pid, "host": host, "started": "2024-05-01T09:00:00+09:00", "command": "x"}
    path.write_text(json.dumps(holder))
    return path


def test_a_second_process_refuses_naming_pid_host_and_start(tmp_path: Path) -> None:
    holder = hold(tmp_path / "out")
    try:
        with pytest.raises(DirectoryLocked) as refused:
            DirectoryLock(tmp_path / "out").acquire()
        message = str(refused.value)
        assert f"in use by pid {holder.pid} on host {HOST}, started 20" in message
        assert "`the holder`" in message
        prepare = [sys.executable, "-m", "electra.cli", "prepare", "x.txt", "--tokenizer", "t"]
        other = subprocess.run(  # refused before it looks at its inputs
            [*prepare, "-o", str(tmp_path / "out")], env=cli_env(), capture_output=True, text=True
        )
        assert other.returncode == 1 and f"pid {holder.pid} on host {HOST}" in other.stderr
    finally:
        holder.communicate("")  # its stdin closed: it releases the lock and ends
    assert holder.returncode == 0 and not (tmp_path / "out" / LOCK_NAME).exists()
    with DirectoryLock(tmp_path / "out") as lock:  # free again
        assert lock.taken_over is None


def test_a_stale_lock_of_this_host_is_taken_over(tmp_path: Path, capsys) -> None:
    pid = dead_pid()
    path = write_lock(tmp_path, pid, HOST)
    with DirectoryLock(tmp_path) as lock:
        assert lock.taken_over is not None and lock.taken_over.pid == pid
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert f"took over the lock of pid {pid} on host {HOST}" in capsys.readouterr().err
    assert not path.exists()


def test_a_lock_from_another_host_is_refused_saying_how_to_remove_it(tmp_path: Path) -> None:
    path = write_lock(tmp_path, os.getpid(), "node-17.cluster")
    with pytest.raises(DirectoryLocked) as refused:
        DirectoryLock(tmp_path).acquire()
    message = str(refused.value)
    assert "pid" in message and "node-17.cluster" in message and f"rm {path}" in message
    assert json.loads(path.read_text())["host"] == "node-17.cluster"  # left as it was


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_killed_holder_leaves_the_lock_to_the_next_even_with_a_child_alive(
    tmp_path: Path,
) -> None:
    """SIGKILL leaves the file behind; the kernel drops the flock, and the forked
    child (a data loader, a worker pool) closed its copy, so the next run takes over."""
    holder = hold(tmp_path, "--fork")
    try:
        holder.kill()
        holder.wait()
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == holder.pid
        with DirectoryLock(tmp_path) as lock:
            assert lock.taken_over is not None and lock.taken_over.pid == holder.pid
        os.kill(holder.child, 0)  # type: ignore[attr-defined] # the child was alive throughout
    finally:
        os.kill(holder.child, signal.SIGKILL)  # type: ignore[attr-defined]


def test_the_lock_goes_on_an_exception(tmp_path: Path) -> None:
    with pytest.raises(ZeroDivisionError), DirectoryLock(tmp_path):
        1 / 0  # noqa: B018
    assert not (tmp_path / LOCK_NAME).exists()
    with DirectoryLock(tmp_path), pytest.raises(DirectoryLocked, match=f"pid {os.getpid()}"):
        DirectoryLock(tmp_path).acquire()  # held in this process too: refused
    assert issubclass(DirectoryLocked, RunError)


# -- the commands -----------------------------------------------------------------------------


def test_pretrain_refuses_a_run_directory_in_use_and_takes_over_after_a_kill(
    blocks: Path, tmp_path: Path, capsys
) -> None:
    run = tmp_path / "run"
    args = ["pretrain", "--config", "tiny", "--data", str(blocks), "-o", str(run)]
    args += ["--no-run.progress", "--run.device", "cpu", "--run.save_every", "100000"]
    first = subprocess.Popen(
        [sys.executable, "-m", "electra.cli", *args, "--optim.max_steps", "100000"],
        env=cli_env(),
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):  # until it holds the lock
            if (run / LOCK_NAME).is_file() and (run / LOCK_NAME).read_text().strip():
                break
            time.sleep(0.1)
        assert main([*args, "--optim.max_steps", "3"]) == 1
        err = capsys.readouterr().err
        assert f"{run}: in use by pid {first.pid} on host {HOST}, started" in err
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert main([*args, "--optim.max_steps", "3", "--resume", "--no-run.export"]) == 0
    assert f"took over the lock of pid {first.pid}" in capsys.readouterr().err
    assert not (run / LOCK_NAME).exists()  # released at the end
    with pytest.raises(ConfigError, match="--resume"):  # a refusal inside the lock ...
        from electra.pretrain.trainer import Trainer

        Trainer(tiny_config(blocks, run, "optim.max_steps=3")).fit()
    assert not (run / LOCK_NAME).exists()  # ... releases it too


def test_prepare_leaves_no_lock_and_reuses_its_output(blocks: Path, tmp_path: Path) -> None:
    assert not (blocks / LOCK_NAME).exists()
    tok, text = blocks.parent / "tok", blocks.parent / "ko.txt"  # what the fixture prepared
    out = tmp_path / "blocks"
    argv = ["prepare", str(text), "--tokenizer", str(tok), "-o", str(out), "--max-length", "64"]
    assert main([*argv, "--no-progress", "--workers", "1"]) == 0
    assert main([*argv, "--no-progress", "--workers", "1"]) == 0  # reused: the lock is no file
    assert not (out / LOCK_NAME).exists()
    with DirectoryLock(out):
        assert main([*argv, "--no-progress", "--workers", "1", "--overwrite"]) == 1


@pytest.mark.usefixtures("one_thread")
def test_finetune_refuses_an_output_directory_in_use(
    toy: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
    capsys,
) -> None:
    with DirectoryLock(tmp_path / "out", command="electra finetune ..."):
        assert main(_finetune_args(*toy, tmp_path / "out")) == 1
    assert f"in use by pid {os.getpid()}" in capsys.readouterr().err
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.slow
def test_torchrun_ranks_all_refuse_a_run_directory_in_use(blocks: Path, tmp_path: Path) -> None:
    """Rank 0 alone takes the lock; refused, it tells the other ranks, so none waits
    forever in a collective: the job ends with rank 0's message."""
    run = tmp_path / "run"
    holder = hold(run)
    try:
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
        args = ["-m", "electra.cli", "pretrain", "--config", "tiny", "--data", str(blocks)]
        args += ["-o", str(run), "--run.device", "cpu", "--no-run.progress"]
        job = subprocess.run(
            [*torchrun, *args], env=cli_env(), capture_output=True, text=True, timeout=300
        )
    finally:
        holder.communicate("")
    assert job.returncode != 0
    assert f"in use by pid {holder.pid} on host {HOST}" in job.stderr
    assert "rank 0 could not lock the run directory" in job.stderr  # rank 1's refusal
    assert not (run / "checkpoints").exists()
