"""What a run records: ``metrics.jsonl``, TensorBoard and the closing line.

Rank 0 writes; a resumed run first drops the records it will redo, so the
file never holds a step twice.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from electra.system.files import atomic_write_text
from electra.system.tracking import Tracker, numeric


class StepWindow:
    """Metrics summed over the steps since the last log line (kept on the device).

    A skipped step (a NaN or infinite loss or gradient) counts in ``steps`` and
    ``tokens`` but not in the means: its values would turn them into NaN.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.sum: torch.Tensor | None = None
        self.taken: torch.Tensor | None = None  # steps not skipped (on the device)
        self.steps = 0
        self.tokens = 0
        self.start = time.time()
        self.paused = 0.0  # evaluation and checkpoint time, not training

    def add(self, values: torch.Tensor, tokens: int, skip: torch.Tensor | None = None) -> None:
        """One step's metric values; ``skip`` (0-d, 1: skipped) keeps them out of the means."""
        keep = torch.ones((), device=values.device) if skip is None else 1 - skip
        values = torch.where(keep > 0, values, torch.zeros_like(values))
        self.sum = values if self.sum is None else self.sum + values
        self.taken = keep if self.taken is None else self.taken + keep
        self.steps += 1
        self.tokens += tokens

    def seconds(self) -> float:
        """Wall time of the window's training; call after a host sync (e.g. ``tolist``)."""
        return time.time() - self.start - self.paused

    def mean(self) -> torch.Tensor:
        """The metrics averaged over the steps taken (zeros when every one was skipped)."""
        return self.sum / self.taken.clamp(min=1)

    def read(self) -> tuple[list[float], int]:
        """(the means, the number of steps taken), read to the host in one sync."""
        both = torch.cat([self.mean(), self.taken.reshape(1)]).tolist()
        return both[:-1], int(both[-1])


class MetricsLog:
    """``metrics.jsonl`` (+ TensorBoard, + a tracker) written by rank 0 only."""

    def __init__(
        self, out: Path, resume_step: int, tensorboard: bool, tracker: Tracker | None = None
    ) -> None:
        self.tracker = tracker or Tracker()
        self.path = out / "metrics.jsonl"
        if self.path.exists():  # drop records the resumed run will redo
            kept = [
                line
                for line in self.path.read_text(encoding="utf-8").splitlines()
                if line.strip() and _record_step(line) <= resume_step
            ]
            atomic_write_text(self.path, "".join(line + "\n" for line in kept))
        self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(out / "tensorboard"), purge_step=resume_step + 1)
            except ImportError:
                self.tb = None

    def write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, int | float):
                    self.tb.add_scalar(k, v, record["step"])
        self.tracker.log_metrics(numeric(record), record["step"])

    def close(self) -> None:
        self.file.close()
        if self.tb is not None:
            self.tb.close()
        self.tracker.close()


def _record_step(line: str) -> int:
    try:
        return int(json.loads(line).get("step", 0))
    except (json.JSONDecodeError, AttributeError, ValueError):
        return 1 << 62  # a torn last line: drop it


def one_line_summary(s: dict[str, Any]) -> str:
    losses = " ".join(
        f"{k}={s[k]:.4f}" for k in ("loss", "mlm_loss", "disc_loss", "val/loss") if k in s
    )
    return (
        f"done: {s['step']} steps, {s['tokens'] / 1e6:.2f}M tokens, "
        f"{s['train_flops']:.3g} FLOPs, {s['elapsed_s'] / 60:.1f} min, {losses}"
        + (f", {s['skipped_steps']} skipped (non-finite)" if s.get("skipped_steps") else "")
        + (
            f" -> {s['exported'].get('discriminator') or s['exported'].get('generator')}"
            if s.get("exported")
            else ""
        )
    )
