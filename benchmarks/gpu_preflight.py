"""Can this machine run the GPU check? Python, torch, CUDA and each module, by name.

The GPU machine is bare and offline: nothing can be installed there, so what
is missing or too old is said up front, in one line per module, and the steps
that need it are skipped (``gpu_plan.Step.needs``) instead of failing with a
traceback. Supported: Python >= 3.11, torch >= 2.4, transformers 4.40 to 5.x;
seqeval and kiwipiepy are optional (no step needs them). Importing this module
imports nothing outside the standard library; :func:`preflight` imports each
module in turn, catching whatever a missing or broken install raises.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from typing import Any

import gpu_plan

# import name: (what pip calls it, oldest supported, first unsupported or None)
SUPPORTED: dict[str, tuple[str, str, str | None]] = {
    "torch": ("torch", "2.4", None),
    "numpy": ("numpy", "1.24", None),
    "safetensors": ("safetensors", "0.4", None),
    "tokenizers": ("tokenizers", "0.15", None),
    "tqdm": ("tqdm", "4.60", None),
    "transformers": ("transformers", "4.40", "6"),
    "sklearn": ("scikit-learn", "1.3", None),
    "scipy": ("scipy", "1.10", None),
    "seqeval": ("seqeval", "1.2", None),
    "kiwipiepy": ("kiwipiepy", "0.17", None),
}
PYTHON_MIN = (3, 11)


def version_tuple(text: str) -> tuple[int, ...]:
    """``"2.11.0+cu128"`` -> (2, 11, 0): the leading dotted numbers of a version string."""
    m = re.match(r"\d+(\.\d+)*", text.strip())
    return tuple(int(x) for x in m.group(0).split(".")) if m else ()


def probe(name: str, load: bool = True) -> dict[str, Any]:
    """Whether ``name`` imports, and its version; any exception counts as missing.

    ``load=False`` (a module no step needs) only looks it up, without the seconds
    an import of, say, kiwipiepy takes."""
    if not load:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError) as exc:
            spec, why = None, f"{type(exc).__name__}: {exc}"
        else:
            why = "no module named " + repr(name)
        if spec is None:
            return {"present": False, "error": why}
        return {"present": True, "version": _dist_version(SUPPORTED[name][0])}
    try:
        module = importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - a broken install raises anything
        return {"present": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"present": True, "version": str(getattr(module, "__version__", "unknown"))}


def _dist_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def judge(name: str, found: dict[str, Any]) -> str | None:
    """Why ``name`` cannot be used (missing, too old, too new), or None when it can."""
    pip, low, high = SUPPORTED[name]
    if not found["present"]:
        return f"{pip} is not installed ({found['error']})"
    v = version_tuple(found["version"])
    if v and v < version_tuple(low):
        return f"{pip} {found['version']} is older than {low}, the oldest supported"
    if v and high and v >= version_tuple(high):
        return f"{pip} {found['version']} is newer than supported (below {high})"
    return None


def used_by(name: str, smoke: bool) -> list[str]:
    """The steps that need ``name``."""
    return [s.name for s in gpu_plan.steps(smoke) if name in s.needs]


def modules(smoke: bool) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """(per module: version and verdict, the unusable ones with why, the lines to print)."""
    found, unusable, lines = {}, {}, []
    if sys.version_info < PYTHON_MIN:
        unusable["python"] = f"Python {platform.python_version()} is older than 3.11"
        lines.append(f"UNSUPPORTED {unusable['python']}: every step is skipped")
    for name in SUPPORTED:
        steps = used_by(name, smoke)
        info = probe(name, load=bool(steps))
        why = judge(name, info)
        info["usable"] = why is None
        found[name] = info
        if why is None:
            continue
        unusable[name] = why
        if steps:
            lines.append(f"MISSING {why}: skipping {', '.join(steps)}")
        else:
            lines.append(f"note: {why}; no step needs it (it is optional)")
    return found, unusable, lines


def describe_gpu(device_pref: str) -> dict[str, Any]:
    """The device the check runs on (``auto``: CUDA when available), and the GPU if any."""
    import torch

    cuda = torch.cuda.is_available()
    pref = device_pref if device_pref not in ("", "auto") else ("cuda" if cuda else "cpu")
    out: dict[str, Any] = {"cuda_available": cuda, "torch_cuda": torch.version.cuda}
    if pref.startswith("cuda") and cuda:
        dev = torch.device(pref if ":" in pref else "cuda:0")
        props = torch.cuda.get_device_properties(dev)
        out.update(
            device=str(dev),
            name=props.name,
            capability=f"{props.major}.{props.minor}",
            memory_gib=round(props.total_memory / 2**30, 1),
            count=torch.cuda.device_count(),
            cudnn=torch.backends.cudnn.version(),
            driver=_driver_version(),
        )
    else:
        out["device"] = "cpu" if not pref.startswith("cuda") else pref
        out["name"] = f"cpu ({platform.processor() or platform.machine()})"
    return out


def _driver_version() -> str | None:
    """The NVIDIA driver, from ``nvidia-smi`` where it is installed."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        p = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=15,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip().splitlines()[0] if p.returncode == 0 and p.stdout.strip() else None


def machine() -> dict[str, Any]:
    """Python and the machine: known before any module is imported."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }


def preflight(device_pref: str, smoke: bool) -> dict[str, Any]:
    """Everything the reports say about this machine, and what the steps may not use."""
    found, unusable, lines = modules(smoke)
    env: dict[str, Any] = {**machine(), "modules": found, "unusable": unusable, "messages": lines}
    if "torch" in unusable:
        env["gpu"] = {"device": None, "name": "unknown (torch unusable)"}
        return env
    env["gpu"] = gpu = describe_gpu(device_pref)
    env["device"] = gpu["device"]
    if device_pref.startswith("cuda") and not gpu["cuda_available"]:
        env["unusable"]["cuda"] = (
            f"--device {device_pref}: torch {found['torch']['version']} sees no CUDA device "
            f"(built for CUDA {gpu['torch_cuda']})"
        )
        lines.append(f"MISSING {env['unusable']['cuda']}: every GPU step is skipped")
    elif not gpu["cuda_available"] and not smoke and device_pref in ("", "auto"):
        lines.append(
            f"WARNING no CUDA device (torch {found['torch']['version']}, built for CUDA "
            f"{gpu['torch_cuda']}): the check runs on the CPU at GPU sizes and will time out"
        )
    return env


def summary_line(env: dict[str, Any]) -> str:
    """``python 3.12; torch 2.11 (CUDA 12.8) on NVIDIA H200; transformers 5.17``."""
    mods = env["modules"]

    def v(name: str) -> str:
        return mods[name].get("version", "missing") if mods[name]["present"] else "missing"

    gpu = env.get("gpu", {})
    cuda = f" (CUDA {gpu['torch_cuda']})" if gpu.get("torch_cuda") else ""
    return (
        f"python {env['python']}; torch {v('torch')}{cuda} on {gpu.get('name')}; "
        f"transformers {v('transformers')}"
    )
