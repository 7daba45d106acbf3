"""Jobs side by side in spawned processes (``electra.system.workers``)."""

from __future__ import annotations

import os

import pytest

from electra.system.workers import run_jobs


def _tagged_pid(tag: str) -> tuple[str, int]:
    return tag, os.getpid()


def _fail_on_y(tag: str) -> str:
    if tag == "y":
        raise ValueError(f"job {tag} failed")
    return tag


def test_results_keep_the_order_and_done_jobs_run_here() -> None:
    args = [("a",), ("b",), ("c",)]
    out = run_jobs(_tagged_pid, args, processes=2, done=lambda a: a == ("b",))
    assert [tag for tag, _ in out] == ["a", "b", "c"]
    pids = dict(out)
    assert pids["b"] == os.getpid()  # finished: only read back, in this process
    assert pids["a"] != os.getpid() and pids["c"] != os.getpid()


def test_one_pending_job_runs_here_without_processes() -> None:
    out = run_jobs(_tagged_pid, [("a",), ("b",)], processes=2, done=lambda a: a == ("a",))
    assert {pid for _, pid in out} == {os.getpid()}


def test_a_failure_is_raised_with_its_message() -> None:
    with pytest.raises(ValueError, match="job y failed"):
        run_jobs(_fail_on_y, [("x",), ("y",)], processes=2)
