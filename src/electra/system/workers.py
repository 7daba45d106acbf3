"""Jobs side by side in spawned processes, each on an equal share of the CPU threads.

Fine-tuning a small encoder uses a second thread poorly (its matrices are
small), so on a 2-core machine two one-thread fine-tunings side by side finish
sooner than the same two one after the other on two threads each (1.26x the
throughput in ``electra compare``; 4.3 against 6 minutes for ``make demo``'s
pair). ``electra compare --finetune-jobs`` and the demo's two NSMC
fine-tunings both run through :func:`run_jobs`.

Processes are spawned, not forked, so no OpenMP or torch state is copied half
initialised; a job is therefore a picklable module-level function (or a
``functools.partial`` of one) and its arguments.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any


def processes_used(pending: int, processes: int) -> int:
    """How many processes :func:`run_jobs` starts for ``pending`` jobs not done yet (0:
    none, every job runs in this process), so a caller can quiet their progress bars."""
    n = min(processes, pending)
    return n if n > 1 else 0


def run_jobs(
    job: Callable[..., Any],
    args: Sequence[tuple],
    processes: int,
    done: Callable[[tuple], bool] | None = None,
) -> list[Any]:
    """``job(*a)`` for each ``a`` in ``args``, results in the order of ``args``.

    The jobs not ``done`` yet get up to ``processes`` spawned processes, which
    share this process's torch threads equally; finished ones (and
    all of them when one process would do) run here, where a finished job only
    reads its results back. The first failure cancels the jobs not started,
    waits for those running (what they wrote is kept) and is raised. Ctrl-C or
    SIGTERM stops the workers at once instead of leaving them running for
    minutes.
    """
    import torch

    pending = [i for i, a in enumerate(args) if done is None or not done(a)]
    n = processes_used(len(pending), processes)
    if not n:
        return [job(*a) for a in args]
    threads = max(1, torch.get_num_threads() // n)
    pool = ProcessPoolExecutor(
        n,
        mp_context=multiprocessing.get_context("spawn"),  # no forked OpenMP/torch state
        initializer=_init_worker,
        initargs=(threads,),
    )
    interrupted = True
    try:
        with sigterm_exits():
            futures = {i: pool.submit(job, *args[i]) for i in pending}
            wait(futures.values(), return_when=FIRST_EXCEPTION)
            interrupted = False
        return [futures[i].result() if i in futures else job(*a) for i, a in enumerate(args)]
    except BrokenProcessPool:
        raise RuntimeError(
            "a worker process died (out of memory, or killed?); run again with "
            "--finetune-jobs 1 to see the error in this process (finished jobs are kept)"
        ) from None
    finally:
        if interrupted:  # Ctrl-C / SIGTERM: do not wait for jobs of many minutes
            for process in list((pool._processes or {}).values()):
                process.terminate()
        pool.shutdown(wait=not interrupted, cancel_futures=True)


def _init_worker(threads: int) -> None:
    """A worker: ``threads`` torch threads; Ctrl-C is the parent's to handle."""
    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(threads)


@contextlib.contextmanager
def sigterm_exits():
    """SIGTERM raises SystemExit here (so ``finally`` blocks run) instead of killing the
    process outright; the old handler is restored after."""

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    try:
        old = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
