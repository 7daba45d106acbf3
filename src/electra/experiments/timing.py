"""Timing this machine, to fit pre-training and fine-tuning to a time budget."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from electra.text.special import SpecialIds


def estimate_step_seconds(cfg, block_length: int, vocab_size: int, steps: int = 3) -> float:
    """Median seconds of a training step of ``cfg`` on random blocks (nothing written).

    Timed where and how the run will train: on ``run.device`` (a GPU when
    ``auto`` finds one) under ``run.precision``'s autocast, with the GPU
    synchronised around each step; a CPU timing would plan far too few steps
    for a GPU run.
    """
    import torch

    from electra.model.optim import adamw
    from electra.pretrain.config import resolve_model
    from electra.pretrain.objective import ElectraForPretraining
    from electra.system.precision import autocast_for, resolve_device

    device = resolve_device(cfg.run.device)
    model_cfg = resolve_model(cfg, vocab_size, "demo")
    special = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=vocab_size)
    model = ElectraForPretraining(model_cfg, cfg.objective, special).to(device).train()
    opt = adamw(model.parameters(), lr=1e-4)
    g = torch.Generator(device=device).manual_seed(0)
    ids = torch.randint(
        5, vocab_size, (cfg.optim.batch_size, block_length), generator=g, device=device
    )
    ids[:, 0], ids[:, -1] = 2, 3
    times = []
    for i in range(steps + 1):
        _sync(device)
        t = time.perf_counter()
        with autocast_for(cfg.run.precision, device):
            loss = model(ids, rng=g).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync(device)
        if i:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def estimate_finetune_seconds(
    model_dir: Path, length: int = 64, batch: int = 32, device: str = "auto"
) -> float:
    """Seconds per training example of a fine-tuning step of ``model_dir``'s encoder
    (batch x length random ids, nothing written).

    Timed where and how the fine-tuning will run: on ``device`` (``--device`` of
    ``electra finetune``, ``auto`` a GPU when there is one) with the precision it
    picks there, synchronised around each step; a CPU timing planned a GPU's
    fine-tuning for a machine a hundred times slower.
    """
    import torch

    from electra.finetune.run import default_bf16
    from electra.model.hf import load_encoder
    from electra.system.precision import autocast_for, resolve_device

    dev = resolve_device(device, option="--device")
    encoder, _ = load_encoder(model_dir)
    head = torch.nn.Linear(encoder.config.hidden_size, 2)
    model = torch.nn.ModuleDict({"encoder": encoder, "head": head}).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    precision = "bf16" if default_bf16(dev) else "fp32"
    ids = torch.randint(5, encoder.config.vocab_size, (batch, length), device=dev)
    labels = torch.randint(0, 2, (batch,), device=dev)
    times = []
    for i in range(3):
        _sync(dev)
        t = time.perf_counter()
        with autocast_for(precision, dev):
            logits = head(encoder(ids)[:, 0]).float()
        torch.nn.functional.cross_entropy(logits, labels).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync(dev)
        if i:
            times.append(time.perf_counter() - t)
    return statistics.median(times) / batch
