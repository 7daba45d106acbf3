"""The steps of the one-shot GPU check, their order, share of the time budget and needs.

Read by ``benchmarks/gpu_run.sh`` (``python benchmarks/gpu_plan.py --list``
prints ``NAME WEIGHT`` lines), by ``gpu_check.py`` (which runs one step) and
by ``gpu_report.py`` (which writes the reports). Imports nothing outside the
standard library, so it works where torch is missing or broken.

Each step runs as its own process under ``timeout``: its limit is its
weight's share of the time still left (``gpu_run.sh`` computes it), so a
step that ends early leaves more to the ones after it, and a step that hangs
is killed at its limit without blocking the rest. Steps come in order of importance: the
correctness checks first, then throughput, ``torch.compile`` last (the
expensive and least predictable part).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

# Modules every step but the preflight imports (electra's own dependencies).
CORE = ("torch", "numpy", "safetensors", "tokenizers", "tqdm")


@dataclass(frozen=True)
class Step:
    """One step of the check: what it is called, its share of the budget, what it needs."""

    name: str
    weight: int
    needs: tuple[str, ...] = CORE
    doc: str = ""


@dataclass(frozen=True)
class Case:
    """One throughput measurement: preset, batch x seq, ConvBERT kernel (0: none), compile."""

    preset: str
    batch: int
    seq: int
    conv: int = 0
    compile: str = "none"  # "ours": our two encoders compiled, the reference eager
    backend: str = "inductor"  # torch.compile's backend

    @property
    def name(self) -> str:
        conv = f"_convbert{self.conv}" if self.conv else ""
        comp = "_compile" if self.compile != "none" else ""
        return f"throughput_{self.preset}_{self.batch}x{self.seq}{conv}{comp}"


def throughput_cases(smoke: bool, compile_: bool = True) -> list[Case]:
    """What to measure: eager first, then the two ``torch.compile`` cases (ours only).

    Compiling costs a minute or more per encoder on a GPU machine's CPU, so only
    the two cases with targets are compiled, and only our two encoders: the
    reference stays eager, as users run it (four encoders per case overran the
    budget). The smoke sizes are the GPU cases shrunk to a tiny model; its compile
    case uses the ``aot_eager`` backend: Dynamo's capture and AOTAutograd's forward
    and backward graphs as on the GPU, without Inductor's code generation (3.5 min
    on a 2-core CPU for the tiny model, against 12 s).
    """
    if smoke:
        eager = [Case("tiny", 4, 32), Case("tiny", 4, 32, conv=9)]
        compiled = [Case("tiny", 4, 32, compile="ours", backend="aot_eager")]
    else:
        eager = [
            Case("small", 128, 128),
            Case("base", 128, 128),
            Case("base", 32, 512),
            Case("small", 128, 128, conv=9),
        ]
        compiled = [Case("small", 128, 128, compile="ours"), Case("base", 128, 128, compile="ours")]
    return eager + (compiled if compile_ else [])


def steps(smoke: bool, compile_: bool = True) -> list[Step]:
    """Every step, in the order they run."""
    throughput = [
        Step(c.name, 10 if c.compile != "none" else 3, (*CORE, "transformers"))
        for c in throughput_cases(smoke, compile_)
    ]
    return [
        Step(
            "preflight", 3, (), "Python, torch, CUDA, transformers and the rest: present, supported"
        ),
        Step("data", 1, CORE, "staged gpu_data/ (or ../shared/data): blocks and NSMC"),
        Step(
            "sigkill_resume_bf16",
            8,
            (*CORE, "scipy"),
            "bf16 deterministic pre-training killed with SIGKILL and resumed: same losses",
        ),
        Step(
            "export_parity",
            4,  # 2 timed out at 16 s on the first H200 run (18 s: transformers' import)
            (*CORE, "transformers"),
            "the exported discriminator against transformers, fp32",
        ),
        Step(
            "finetune_nsmc",
            5,
            (*CORE, "sklearn", "scipy"),
            "NSMC fine-tuning of the exported discriminator, on the device and the CPU alike",
        ),
        Step(
            "torchrun_1proc",
            3,
            (*CORE, "scipy"),
            "torchrun, one process, a real process group (NCCL on a GPU) and DDP",
        ),
        *throughput,
    ]


def step_named(name: str, smoke: bool) -> Step:
    """The step called ``name`` (compile cases included)."""
    for s in steps(smoke, compile_=True):
        if s.name == name:
            return s
    raise KeyError(f"no step {name!r}; steps: {', '.join(s.name for s in steps(smoke))}")


def case_named(name: str, smoke: bool) -> Case:
    """The throughput case whose step is called ``name``."""
    for c in throughput_cases(smoke, compile_=True):
        if c.name == name:
            return c
    raise KeyError(name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--list", action="store_true", help="print NAME WEIGHT, one step a line")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--no-compile", action="store_true")
    args = p.parse_args(argv)
    for s in steps(args.smoke, not args.no_compile):
        print(s.name, s.weight)
    return 0


if __name__ == "__main__":
    sys.exit(main())
