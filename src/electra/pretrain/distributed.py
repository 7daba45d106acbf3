"""Data-parallel setup: torchrun's environment, one process when it is absent.

The global batch is fixed by the config and split across ranks and
accumulation steps (:class:`~electra.pretrain.trainer.Trainer`); rank 0 alone
writes. ``run.deterministic`` makes CUDA runs repeatable bit for bit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from electra.system.precision import resolve_device


@dataclass
class Dist:
    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0


PROCESS_GROUP_ENV = "ELECTRA_PROCESS_GROUP"


def setup_distributed(device_pref: str) -> Dist:
    """Read torchrun's environment; one process when it is absent.

    The process group (NCCL on a GPU, gloo on the CPU) is created when there
    is more than one process, or for a single one under ``torchrun`` when
    ``ELECTRA_PROCESS_GROUP`` is ``always``: ``benchmarks/gpu_check.py`` sets it
    so that ``torchrun --nproc_per_node 1`` exercises the real group and the DDP
    wrapper on a one-GPU machine (a plain one-process run needs neither and pays
    for neither).
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device_pref, local, world)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    wanted = world > 1 or os.environ.get(PROCESS_GROUP_ENV) == "always"
    if wanted and not dist.is_initialized():  # torchrun's MASTER_ADDR/PORT: env:// init
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Dist(rank, world, local, device)


def set_deterministic() -> None:
    """Make CUDA runs repeatable bit for bit (``run.deterministic``).

    cuBLAS gets a fixed workspace (``CUBLAS_WORKSPACE_CONFIG``, read when the
    first handle is created, hence before any GPU work), PyTorch its
    deterministic kernels (warning, not failing, where an op has none; the
    warning names it), cuDNN no autotuning, and attention the math SDPA
    kernel: the flash and memory-efficient backward passes accumulate with
    atomics, in an order that changes between runs. Costs speed, mostly in
    attention; the CPU path is deterministic already.
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
        torch.backends.cuda.enable_cudnn_sdp(False)
    torch.backends.cuda.enable_math_sdp(True)


def all_reduce(x: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
    if dist.is_initialized():
        dist.all_reduce(x, op=op)
    return x


def gather_int(value: int, device: torch.device) -> list[int]:
    """``value`` from every rank, in rank order (``[value]`` without a process group).

    What the ranks must agree on before they train together (the checkpoint each
    one found) is compared with it, so that a disagreement stops every rank with
    the same message instead of leaving some waiting in a collective.
    """
    if not dist.is_initialized():
        return [value]
    mine = torch.tensor([value], dtype=torch.int64, device=device)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return [int(t.item()) for t in every]
