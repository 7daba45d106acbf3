"""One step of the one-shot GPU check; ``benchmarks/gpu_run.sh`` runs them all.

    bash benchmarks/gpu_run.sh                                # on the GPU machine, < 9 min
    bash benchmarks/gpu_run.sh --device cpu --smoke --out DIR # CI size (tested)
    python benchmarks/gpu_check.py --step NAME --work WORK [--device D] [--smoke]

Each step (``gpu_plan.steps``) runs in its own process, under ``timeout``,
and leaves its record in ``WORK/steps/NAME.json``; ``gpu_report.py`` turns
the records into ``gpu_check.json`` and ``gpu_check.md``. The steps:

``preflight``
    Python, torch, CUDA, transformers and the rest (``gpu_preflight.py``):
    what is missing or unsupported is named, and the steps needing it skip.
``data``
    the staged ``gpu_data/`` (``python benchmarks/stage_gpu_data.py``, run
    beforehand where ``../shared/data`` is), else ``../shared/data`` itself.
``sigkill_resume_bf16``
    tiny pre-training in bf16 with ``run.deterministic``, killed with SIGKILL
    and resumed: the losses must be identical.
``export_parity``
    the exported discriminator against ``transformers`` on the device (fp32).
``finetune_nsmc``
    NSMC fine-tuning of that discriminator on the device and on the CPU (fp32, one seed):
    the device must reach the CPU's dev loss and accuracy (the tiny model does not learn
    NSMC in one epoch on either, so its accuracy alone would prove nothing).
``torchrun_1proc``
    ``torchrun`` with one process and ``ELECTRA_PROCESS_GROUP=always``: a real
    process group (NCCL on a GPU, gloo on a CPU) and the DDP wrapper; the
    backend reported is the one the run's ``summary.json`` says it used.
``throughput_*``
    our pre-training step (the trainer's own) against the one built from
    ``transformers`` (``pretrain_throughput.py``) in bf16, MFU against a matmul
    peak measured once in the run; ``torch.compile`` last, our encoders only.

Imports nothing heavy at the top: a step whose needs are missing is recorded
as skipped without importing them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SRC = REPO / "src"
STAGED = REPO / "gpu_data"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(SRC))

import gpu_plan  # noqa: E402

STAGE_COMMAND = "python benchmarks/stage_gpu_data.py"


class SkipStep(Exception):
    """A step that cannot run here (a missing prerequisite); recorded as skipped."""


@dataclass
class Context:
    """What every step needs: where to write, on what, how big, until when."""

    work: Path
    device: str
    smoke: bool
    deadline: float
    env: dict[str, Any] = field(default_factory=dict)
    data_arg: str = ""

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    def left_s(self) -> float:
        return self.deadline - time.time()

    def timeout(self, cap: float = 600.0) -> float:
        """A subprocess's timeout: ``cap``, never past this step's own deadline."""
        return max(1.0, min(cap, self.left_s()))

    def data(self) -> dict[str, Any]:
        """What the data step found (``WORK/data.json``); skip when it found nothing."""
        path = self.work / "data.json"
        if not path.is_file():
            raise SkipStep("no data: the data step found none (see its entry)")
        return json.loads(path.read_text())


# ---------------------------------------------------------------------------
# Running one step and recording it
# ---------------------------------------------------------------------------


def blocked_by(step: gpu_plan.Step, env: dict[str, Any]) -> str | None:
    """Why ``step`` cannot run with the modules the preflight found, or None."""
    unusable = env.get("unusable", {})
    for name in ("python", "cuda"):
        if name in unusable and step.needs:
            return f"needs {name}: {unusable[name]}"
    missing = [f"{m} ({unusable[m]})" for m in step.needs if m in unusable]
    return f"needs {', '.join(missing)}" if missing else None


def run_check(fn: Callable[[Context], dict[str, Any]], ctx: Context) -> dict[str, Any]:
    """``fn(ctx)`` with its time, status ok/failed/skipped, or its error; never raises."""
    t = time.time()
    try:
        record = fn(ctx)
        record.setdefault("ok", True)
        record["status"] = "ok" if record["ok"] else "failed"
    except SkipStep as exc:
        record = {"ok": None, "status": "skipped", "skipped": str(exc)}
    except (subprocess.TimeoutExpired, TimeoutError) as exc:  # the step's own deadline
        what = f"{type(exc).__name__}: {str(exc)[:300]}"
        record = {"ok": False, "status": "timed-out", "detail": what}
        record["error"] = f"timed out after {time.time() - t:.0f} s (its limit)"
    except Exception as exc:  # noqa: BLE001 - recorded, the next step still runs
        record = {"ok": False, "status": "failed", "error": f"{type(exc).__name__}: {exc}"}
        record["traceback"] = traceback.format_exc(limit=8)
    record["seconds"] = round(time.time() - t, 2)
    return record


def run_step(name: str, ctx: Context) -> dict[str, Any]:
    """The record of step ``name``: skipped when its needs are missing, else its result."""
    step = gpu_plan.step_named(name, ctx.smoke)
    why = blocked_by(step, ctx.env)
    if why:
        return {"ok": None, "status": "skipped", "skipped": why, "seconds": 0.0}
    return run_check(check_function(name, ctx.smoke), ctx)


def check_function(name: str, smoke: bool) -> Callable[[Context], dict[str, Any]]:
    """The function that runs step ``name``."""
    if name.startswith("throughput_"):
        return throughput_check(gpu_plan.case_named(name, smoke))
    return {
        "data": check_data,
        "sigkill_resume_bf16": check_resume,
        "export_parity": check_export_parity,
        "finetune_nsmc": check_finetune,
        "torchrun_1proc": check_torchrun,
    }[name]


def write_json(path: Path, value: dict[str, Any]) -> None:
    """``value`` to ``path`` atomically (a killed step leaves the old file or none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, indent=2, default=str) + "\n")
    tmp.replace(path)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("ELECTRA_NO_TCMALLOC", "1")
    return env


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "electra.cli", *args]


_CHILDREN: set[subprocess.Popen] = set()  # the running subprocesses, each its own group


def _run(cmd: list[str], timeout: float, env: dict[str, str] | None = None):
    """Run ``cmd`` in a process group of its own; at ``timeout`` the whole group is killed,
    so a torchrun worker is not left behind (holding the GPU) when its launcher is."""
    proc = subprocess.Popen(
        cmd,
        env=env or _env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _CHILDREN.add(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise
    finally:
        if proc.poll() is None:
            _kill_group(proc)
        _CHILDREN.discard(proc)
    p = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd[:6])} ...\n{p.stderr[-3000:]}")
    return p


def _stop_children(signum: int, _frame: Any) -> None:
    """On ``timeout``'s SIGTERM: kill every child group (they are outside this process's
    group, so the signal did not reach them), then end as the signal would."""
    for proc in list(_CHILDREN):
        _kill_group(proc)
    sys.exit(128 + signum)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``, every process of its group (it was started in a new session) and
    every descendant that left the group: torchrun starts each worker in a session of its
    own, so killing the launcher's group alone left the worker sleeping (seen: a test's
    torchrun step, its worker still waiting for the dead launcher's store minutes later)."""
    strays = _descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in strays:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` in the process tree, from ``/proc`` (empty where there
    is none: then the group kill is all there is)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)"
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------


def locate_data(arg: str) -> tuple[str, Path]:
    """("staged" or "shared", directory): ``--data``, else ``gpu_data/``, else shared/data."""
    from electra.system.paths import ENV_VAR, default_data_dir

    candidates = [Path(arg)] if arg else [STAGED, default_data_dir()]
    for d in candidates:
        if (d / "manifest.json").is_file() and (d / "blocks").is_dir():
            return "staged", d
        if (d / "MANIFEST.md").is_file():
            return "shared", d
    raise RuntimeError(
        f"no data for the check: neither a staged {candidates[0]} nor the shared data "
        f"({candidates[-1]}; {ENV_VAR} to move it) is there. On a machine that has "
        f"../shared/data, run `{STAGE_COMMAND}` first, then carry gpu_data/ with the checkout."
    )


def check_data(ctx: Context) -> dict[str, Any]:
    """Find the data; check a staged copy against its manifest, or stage the blocks from
    the shared data into the work folder (as ``stage_gpu_data.py`` would)."""
    import stage_gpu_data

    kind, root = locate_data(ctx.data_arg)
    if kind == "staged":
        manifest = stage_gpu_data.verify(root)
        blocks = root / "blocks"
        summary = f"staged {root} ({manifest['total_bytes'] / 2**20:.1f} MiB, checked)"
    else:
        blocks = ctx.work / "data" / "blocks"
        if not (blocks / "manifest.json").is_file():
            shutil.rmtree(ctx.work / "data", ignore_errors=True)
            stage_gpu_data.stage_blocks(root, ctx.work / "data")
        summary = f"shared {root} (blocks built in {blocks})"
    info = {"source": kind, "root": str(root), "blocks": str(blocks), "data_dir": str(root)}
    write_json(ctx.work / "data.json", {**info, "summary": summary})
    return {**info, "summary": summary}


# ---------------------------------------------------------------------------
# correctness: resume, export parity, fine-tuning, torchrun
# ---------------------------------------------------------------------------


def _pretrain_cmd(ctx: Context, run: Path, steps: int, *extra: str) -> list[str]:
    return _cli(
        "pretrain",
        "--config",
        "tiny",
        "--data",
        ctx.data()["blocks"],
        "-o",
        str(run),
        "--set",
        f"run.device='{ctx.device}'",
        "run.precision='bf16'",
        "run.deterministic=true",
        "run.progress=false",
        "run.log_every=1",
        "run.eval_every=0",
        f"optim.max_steps={steps}",
        f"run.save_every={max(1, steps // 4)}",
        *extra,
    )


def _losses(run: Path) -> dict[int, float]:
    out = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "loss" in r:
            out[r["step"]] = r["loss"]
    return out


def check_resume(ctx: Context) -> dict[str, Any]:
    """bf16 pre-training killed with SIGKILL and resumed: identical losses?"""
    from electra.model import checkpoint as ckpt

    steps = 12 if ctx.smoke else 200
    ref, killed = ctx.work / "runs" / "ref", ctx.work / "runs" / "killed"
    for d in (ref, killed):
        shutil.rmtree(d, ignore_errors=True)
    _run(_pretrain_cmd(ctx, ref, steps), timeout=ctx.timeout())
    proc = subprocess.Popen(
        _pretrain_cmd(ctx, killed, steps, "run.export=false"),
        env=_env(),
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _CHILDREN.add(proc)
    signalled = _kill_after(proc, killed, steps // 2, timeout=ctx.timeout(300))
    if not signalled:  # finished first: resume from a middle checkpoint instead
        for c in ckpt.step_dirs(killed / "checkpoints"):
            if c.step > steps // 2:
                shutil.rmtree(c.path)
    last = ckpt.latest_valid(killed / "checkpoints")
    _run([*_pretrain_cmd(ctx, killed, steps, "run.export=false"), "--resume"], ctx.timeout())
    want, got = _losses(ref), _losses(killed)
    diff = max((abs(want[s] - got.get(s, float("nan"))) for s in want), default=float("nan"))
    identical = sorted(got) == sorted(want) and all(got[s] == want[s] for s in want)
    return {
        "ok": identical,
        "steps": steps,
        "killed_by_sigkill": signalled,
        "resumed_from_step": last.step if last else None,
        "max_abs_loss_diff": diff,
        "summary": f"{'identical' if identical else 'DIFFERENT'} losses over {steps} steps "
        f"(resumed from step {last.step if last else '?'})",
    }


def _kill_after(proc: subprocess.Popen, run: Path, step: int, timeout: float) -> bool:
    """SIGKILL ``proc`` once its metrics reach ``step``; False if it ended before."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        try:
            if max(_losses(run), default=0) >= step:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return True
        except (OSError, json.JSONDecodeError):
            pass
        time.sleep(0.02)
    if proc.poll() is None:
        _kill_group(proc)
        raise TimeoutError(f"step {step} not reached in {timeout:.0f} s")
    if proc.returncode != 0:
        raise RuntimeError(f"pre-training exited with {proc.returncode}")
    return False


def _exported(ctx: Context) -> Path:
    """The discriminator the resume step's reference run exported; skip without it."""
    model = ctx.work / "runs" / "ref" / "hf" / "discriminator"
    if not (model / "config.json").is_file():
        raise SkipStep("no exported discriminator: sigkill_resume_bf16 did not finish its run")
    return model


def check_export_parity(ctx: Context) -> dict[str, Any]:
    """Our exported discriminator against ``transformers`` on the device, fp32."""
    model = _exported(ctx)
    import torch
    import transformers

    from electra.model.hf import load_discriminator

    dev = torch.device(ctx.device)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ours = load_discriminator(model).to(dev).eval()
        ref = transformers.ElectraForPreTraining.from_pretrained(str(model)).to(dev).eval()
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(5, ours.config.vocab_size, (4, 48), generator=g)
        mask = torch.ones_like(ids)
        mask[1, 30:] = 0
        ids, mask = ids.to(dev), mask.to(dev)
        with torch.no_grad():
            a = ours(ids, mask).float()
            b = ref(input_ids=ids, attention_mask=mask).logits.float()
        diff = float((a - b)[mask.bool()].abs().max())
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return {"ok": diff < 1e-4, "max_abs_diff": diff, "summary": f"max |diff| {diff:.2e}"}


def check_finetune(ctx: Context) -> dict[str, Any]:
    """NSMC fine-tuning of the exported discriminator on the device, and the same on the CPU.

    The check's model (the tiny config after a few hundred steps) does not learn NSMC in one
    epoch on any device: on a Zen 5 CPU it stayed at 50.0 (the majority) at learning rates
    3e-4 to 1e-2, and so did the first H200 run. Its accuracy alone therefore says nothing
    about the device; what does is parity: the same fine-tuning (same seed, fp32) on the CPU
    must end at the same dev loss and accuracy, within what dropout's other random stream on
    the device moves them.
    """
    model = _exported(ctx)
    n_train, n_eval = (200, 100) if ctx.smoke else (2000, 500)
    runs = {}
    devices = [ctx.device] + (["cpu"] if ctx.device != "cpu" else [])
    for device in devices:
        out = ctx.work / f"finetune-{device.replace(':', '')}"
        shutil.rmtree(out, ignore_errors=True)
        args = ["finetune", "--task", "nsmc", "--model", str(model), "-o", str(out)]
        args += ["--data-dir", ctx.data()["data_dir"], "--device", device, "--epochs", "1"]
        args += ["--max-length", "32" if ctx.smoke else "64", "--no-progress", "--no-bf16"]
        args += ["--max-train-examples", str(n_train), "--max-eval-examples", str(n_eval)]
        _run(_cli(*args), timeout=ctx.timeout(900))
        runs[device] = json.loads((out / "results.json").read_text())
    return finetune_parity(runs, ctx.device, n_train)


FINETUNE_LOSS_TOLERANCE = 0.02  # dev loss, device against CPU (dropout streams differ)
FINETUNE_ACCURACY_TOLERANCE = 0.03


def finetune_parity(runs: dict[str, dict], device: str, n_train: int) -> dict[str, Any]:
    """The device's fine-tuning result against the CPU's (``runs``: device -> results.json):
    ok when its losses are finite and its dev loss and test accuracy are the CPU's within
    the tolerances; the accuracy is reported beside the majority floor."""
    import math

    def seed(res: dict) -> dict:
        return res["seeds"][0]

    def accuracy(res: dict) -> float:
        return seed(res).get("test", seed(res)["dev"])["accuracy"]

    here = runs[device]
    majority = here.get("floors", {}).get("majority", {}).get("test", {}).get("accuracy")
    result: dict[str, Any] = {
        "accuracy": accuracy(here),
        "majority": majority,
        "train_examples": n_train,
        "dev_loss": seed(here)["dev_loss"],
    }
    finite = all(math.isfinite(seed(r)["dev_loss"]) for r in runs.values())
    ok = finite
    versus = ""
    if "cpu" in runs and device != "cpu":
        cpu = runs["cpu"]
        d_loss = abs(seed(here)["dev_loss"] - seed(cpu)["dev_loss"])
        d_acc = abs(accuracy(here) - accuracy(cpu))
        result.update(cpu_accuracy=accuracy(cpu), cpu_dev_loss=seed(cpu)["dev_loss"])
        result.update(dev_loss_diff=d_loss, accuracy_diff=d_acc)
        ok = ok and d_loss <= FINETUNE_LOSS_TOLERANCE and d_acc <= FINETUNE_ACCURACY_TOLERANCE
        versus = f"; the CPU: {accuracy(cpu)}, dev loss {d_loss:.4f} apart"
    result["ok"] = ok
    result["summary"] = (
        f"NSMC accuracy {accuracy(here)} (majority {majority}; {n_train} reviews, 1 epoch, "
        f"fp32){versus}" + ("" if finite else "; a loss is not finite")
    )
    return result


def check_torchrun(ctx: Context) -> dict[str, Any]:
    """One process under torchrun with a real process group and DDP; a few steps."""
    from electra.pretrain.distributed import PROCESS_GROUP_ENV

    run = ctx.work / "runs" / "torchrun"
    shutil.rmtree(run, ignore_errors=True)
    args = _pretrain_cmd(ctx, run, 4, "run.export=false")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1"]
    env = {**_env(), PROCESS_GROUP_ENV: "always"}
    _run([*cmd, "-m", "electra.cli", *args[3:]], timeout=ctx.timeout(), env=env)
    steps = sorted(_losses(run))
    used = json.loads((run / "summary.json").read_text()).get("distributed", {})
    want = "nccl" if ctx.cuda else "gloo"
    ok = steps == [1, 2, 3, 4] and used.get("backend") == want
    ok = ok and used.get("wrapper") == "DistributedDataParallel"
    return {
        "ok": ok,
        "backend": used.get("backend"),
        "wrapper": used.get("wrapper"),
        "world_size": used.get("world_size"),
        "summary": f"{used.get('backend')} process group of {used.get('world_size')}, "
        f"{used.get('wrapper')}, {len(steps)} steps" + ("" if ok else f" (wanted {want}, DDP)"),
    }


# ---------------------------------------------------------------------------
# throughput
# ---------------------------------------------------------------------------


def throughput_check(case: gpu_plan.Case) -> Callable[[Context], dict[str, Any]]:
    """The step measuring ``case`` with ``pretrain_throughput.run`` in bf16."""

    def check(ctx: Context) -> dict[str, Any]:
        import pretrain_throughput as bench
        import torch

        args = SimpleNamespace(
            preset=case.preset,
            batch=case.batch,
            seq=case.seq,
            gen_size=0.25,
            steps=2 if ctx.smoke else 10,
            warmup=1 if ctx.smoke else 3,
            device=ctx.device,
            ref_attn="sdpa",
            compile=case.compile,
            compile_backend=case.backend,
            conv_kernel_size=case.conv,
            head_ratio=2,
        )
        peaks = ctx.work / "matmul_peaks.json"
        _load_peaks(bench, peaks)
        if ctx.smoke and not ctx.cuda:  # an emulated bf16 CPU takes seconds per large matmul
            key = (torch.bfloat16, ctx.device)
            bench._PEAKS.setdefault(key, bench.matmul_peak(*key, sizes=(256, 512), repeats=1))
        r = bench.run(args, "bf16")
        _save_peaks(bench, peaks)
        r["sequences_per_s"] = r["ours_tokens_per_s"] / case.seq
        r["summary"] = (
            f"{r['sequences_per_s']:.0f} seq/s, {r['ratio']:.2f}x reference, "
            f"MFU {100 * r['ours_mfu']:.1f}% (reference {100 * r['reference_mfu']:.1f}%)"
        )
        return r

    return check


def _load_peaks(bench: Any, path: Path) -> None:
    """The matmul peaks measured by an earlier step of this run: measured once, not per step."""
    import torch

    if path.is_file():
        for key, gflops in json.loads(path.read_text()).items():
            dtype, device = key.split("@")
            bench._PEAKS[getattr(torch, dtype), device] = gflops


def _save_peaks(bench: Any, path: Path) -> None:
    write_json(path, {f"{str(d).split('.')[-1]}@{dev}": v for (d, dev), v in bench._PEAKS.items()})


# ---------------------------------------------------------------------------


def context(args: argparse.Namespace) -> Context:
    """The step's context; the device is the one the preflight resolved."""
    env_path = args.work / "env.json"
    env = json.loads(env_path.read_text()) if env_path.is_file() else {}
    device = env.get("device") or args.device
    if device in ("", "auto"):  # no preflight record: resolve it here
        try:
            import torch

            device = "cuda:0" if torch.cuda.is_available() else "cpu"
        except Exception:  # noqa: BLE001 - the step then skips (or fails) by its needs
            device = "cpu"
    return Context(args.work, device, args.smoke, args.deadline, env, args.data)


def preflight_step(args: argparse.Namespace) -> dict[str, Any]:
    """The preflight: ``WORK/env.json``, and its messages printed; never raises."""
    import gpu_preflight

    t = time.time()
    write_json(args.work / "env.json", {**gpu_preflight.machine(), "modules": {}})  # if killed
    env = gpu_preflight.preflight(args.device, args.smoke)
    write_json(args.work / "env.json", env)
    for line in env["messages"]:
        print(f"[preflight] {line}", flush=True)
    ok = not any(m in env["unusable"] for m in ("python", "torch", "cuda"))
    return {
        "ok": ok,
        "status": "ok" if ok else "failed",
        "summary": gpu_preflight.summary_line(env),
        "error": None if ok else "; ".join(env["messages"]),
        "seconds": round(time.time() - t, 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--step", required=True, help="a step of gpu_plan.steps")
    p.add_argument("--work", required=True, type=Path, help="where steps keep their files")
    p.add_argument("--device", default="auto", help="auto (CUDA when there), cuda, cpu")
    p.add_argument("--smoke", action="store_true", help="CI size (tiny model, seconds)")
    p.add_argument("--no-compile", action="store_true", help="(for gpu_run.sh; no effect)")
    p.add_argument("--data", default="", help="staged gpu_data/ or shared/data (default: find)")
    p.add_argument("--deadline", type=float, default=time.time() + 3600, help="epoch seconds")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop_children)
    if args.step == "preflight":
        record = preflight_step(args)
    else:
        ctx = context(args)
        if ctx.cuda and not {"torch", "cuda"} & set(ctx.env.get("unusable", {})):
            import torch

            torch.cuda.set_device(torch.device(ctx.device))
        record = run_step(args.step, ctx)
    write_json(args.work / "steps" / f"{args.step}.json", record)
    print(
        f"[gpu_check] {args.step}: {record['status']} ({record['seconds']} s) "
        f"{record.get('error') or record.get('skipped') or record.get('summary', '')}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
