"""Pre-training health you can read: is the discriminator learning context yet?

The validation loss alone hides the failure that matters at small budgets: a
discriminator that predicts the base rate (about 13% of tokens replaced) has
a decent-looking loss and has learned nothing a fine-tuning run can use. So
validation also measures, on the same fixed blocks (``val/...`` in
``metrics.jsonl``, TensorBoard and ``electra report``):

* ``disc_auc``: ROC-AUC of the discriminator's logits for the generator's
  replacements (0.5: no better than chance; 1: perfect). A replaced token is
  often a rare or odd token, so token identity alone lifts this above 0.5;
* ``swap_auc``: the same on a *context-only probe*: in every row 15% of the
  ordinary tokens are swapped among themselves (a cyclic shift of the chosen
  positions), which keeps the row's unigram multiset, so token identity
  cannot help: only context can tell a moved token from one in place;
* ``token_cosine``: mean cosine between the final token vectors of the kept
  encoder (the discriminator; the MLM encoder for ``--objective mlm``) over
  all pairs of ordinary tokens of a batch ([CLS], [SEP], [PAD] excluded).
  A random encoder scores about 0.2; vectors collapsing onto one direction
  (above 0.8) fine-tune worse than a random start;
* ``unigram_accuracy``: the accuracy of always guessing the most frequent
  ordinary token of the training blocks, measured on the validation tokens:
  the floor for ``gen_accuracy`` (masked positions are drawn uniformly from
  those tokens, so the two are comparable).

AUCs are computed over the ordinary (non-special, non-pad) tokens of all
validation batches with scikit-learn; under several processes each rank's
value is averaged. The probe is skipped under FSDP (its extra discriminator
pass would bypass the sharded root). Its randomness comes from its own
generator, so validation never changes the training run.

:func:`verdict` turns these into one sentence; the thresholds are the
constants below.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from electra.pretrain.objective import PretrainOutput
from electra.text.special import SpecialIds

SWAP_FRACTION = 0.15  # share of ordinary tokens moved by the context probe
CONTEXT_BASE_AUC = 0.55  # swap AUC below this: context not learned (base rate)
CONTEXT_LEARNING_AUC = 0.65  # swap AUC at or above this: learning context
COLLAPSED_COSINE = 0.8  # mean token cosine above this: vectors collapsed
GENERATOR_MARGIN = 1.5  # generator accuracy under 1.5x the unigram floor: barely learning
# A generator this right, or a most frequent token this common, means degenerate blocks.
TRIVIAL_ACCURACY = 0.99
TRIVIAL_UNIGRAM = 0.9


def roc_auc(scores: np.ndarray | Tensor, labels: np.ndarray | Tensor) -> float:
    """ROC-AUC of ``scores`` for binary ``labels``; NaN when only one class is present."""
    from sklearn.metrics import roc_auc_score

    y = np.asarray(labels, dtype=np.int64).reshape(-1)
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if y.size == 0 or y.min() == y.max():
        return float("nan")
    return float(roc_auc_score(y, s))


def ordinary_tokens(input_ids: Tensor, attention_mask: Tensor, special: SpecialIds) -> Tensor:
    """(B, L) bool: real tokens that are not [CLS], [SEP], [MASK] or [PAD]."""
    never = torch.tensor(special.never_masked, device=input_ids.device)
    return attention_mask.bool() & ~torch.isin(input_ids, never)


def swap_within_rows(
    input_ids: Tensor,
    candidates: Tensor,
    generator: torch.Generator,
    fraction: float = SWAP_FRACTION,
) -> tuple[Tensor, Tensor]:
    """The context-only probe: (swapped ids, replaced labels).

    In every row, ``fraction`` of the candidate positions (at least two when
    the row has two) are chosen at random and their tokens shifted cyclically
    among themselves: a permutation within the row, so the row's multiset of
    tokens is unchanged. A position counts as replaced when its token changed
    (moving a token onto an equal one changes nothing).
    """
    swapped = input_ids.clone()
    for b in range(input_ids.shape[0]):
        pos = candidates[b].nonzero().squeeze(-1)
        if pos.numel() < 2:
            continue
        k = max(2, round(fraction * pos.numel()))
        order = torch.randperm(pos.numel(), generator=generator)[:k].to(pos.device)
        chosen = pos[order.sort().values]
        swapped[b, chosen] = input_ids[b, chosen.roll(1)]
    return swapped, swapped != input_ids


def mean_pairwise_cosine(vectors: Tensor) -> float:
    """Mean cosine over all pairs of distinct rows of (N, H) ``vectors`` (NaN if N < 2).

    Computed as ``(|sum u|^2 - N) / (N (N - 1))`` for unit vectors ``u``.
    """
    n = vectors.shape[0]
    if n < 2:
        return float("nan")
    u = torch.nn.functional.normalize(vectors.float(), dim=-1)
    s = u.sum(0)
    return float(((s @ s) - n) / (n * (n - 1)))


def most_frequent_token(blocks: Any, special: SpecialIds, max_blocks: int = 20000) -> int:
    """The most frequent ordinary token among the first ``max_blocks`` training blocks."""
    n = min(len(blocks), max_blocks)
    counts = np.zeros(special.vocab_size, dtype=np.int64)
    for start in range(0, n, 1024):
        ids, _ = blocks.get(np.arange(start, min(n, start + 1024)))
        counts += np.bincount(ids.reshape(-1), minlength=special.vocab_size)[: special.vocab_size]
    counts[list(special.never_masked)] = 0
    return int(counts.argmax())


class HealthProbe:
    """Accumulates the health metrics over validation batches (see the module doc)."""

    def __init__(
        self,
        model: nn.Module,
        special: SpecialIds,
        mode_token: int,
        seed: int,
        autocast: Callable[[], Any] = contextlib.nullcontext,
        probe: bool = True,
    ) -> None:
        self.model, self.special, self.mode_token = model, special, mode_token
        self.generator = torch.Generator().manual_seed(seed)
        self.autocast, self.probe = autocast, probe
        self.scores: dict[str, list[np.ndarray]] = {"disc": [], "swap": []}
        self.labels: dict[str, list[np.ndarray]] = {"disc": [], "swap": []}
        self.cosines: list[float] = []
        self.mode_hits = self.ordinary = 0
        self._hidden: Tensor | None = None

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Capture the kept encoder's final hidden states during the forward pass inside."""
        body = self.model.encoder_to_keep().electra

        def hook(_module: nn.Module, _inputs: Any, output: Tensor) -> None:
            self._hidden = output.detach()

        handle = body.register_forward_hook(hook)
        try:
            yield
        finally:
            handle.remove()

    @torch.no_grad()
    def add(self, ids: Tensor, types: Tensor, mask: Tensor, out: PretrainOutput) -> None:
        """One validation batch: its original ids and the model's output on it."""
        ordinary = ordinary_tokens(ids, mask, self.special)
        self.mode_hits += int((ids[ordinary] == self.mode_token).sum())
        self.ordinary += int(ordinary.sum())
        if self._hidden is not None:
            self.cosines.append(
                mean_pairwise_cosine(self._hidden[ordinary.to(self._hidden.device)])
            )
            self._hidden = None
        if out.disc_logits is None:
            return
        keep = ordinary.to(out.disc_logits.device)
        self._collect("disc", out.disc_logits[keep], out.replaced[keep])
        if self.probe:
            swapped, replaced = swap_within_rows(ids.cpu(), ordinary.cpu(), self.generator)
            dev = out.disc_logits.device
            with self.autocast():
                logits = self.model.discriminator(swapped.to(dev), mask.to(dev), types.to(dev))
            self._collect("swap", logits[keep], replaced.to(dev)[keep])

    def _collect(self, name: str, logits: Tensor, labels: Tensor) -> None:
        self.scores[name].append(logits.float().cpu().numpy())
        self.labels[name].append(labels.cpu().numpy())

    def result(self) -> dict[str, float]:
        """``disc_auc``, ``swap_auc``, ``token_cosine``, ``unigram_accuracy`` (those measured)."""
        out: dict[str, float] = {}
        for name in ("disc", "swap"):
            if self.scores[name]:
                auc = roc_auc(np.concatenate(self.scores[name]), np.concatenate(self.labels[name]))
                if not np.isnan(auc):
                    out[f"{name}_auc"] = auc
        cos = [c for c in self.cosines if not np.isnan(c)]
        if cos:
            out["token_cosine"] = float(np.mean(cos))
        if self.ordinary:
            out["unigram_accuracy"] = self.mode_hits / self.ordinary
        return out


def _trivial_data(gen: float | None, uni: float | None) -> str | None:
    """The verdict when the blocks are (nearly) one token: every other number is moot."""
    if not (gen is not None and gen >= TRIVIAL_ACCURACY) and not (
        uni is not None and uni >= TRIVIAL_UNIGRAM
    ):
        return None
    seen = f"generator accuracy {gen:.3f}" if gen is not None else "generator accuracy ?"
    if uni is not None:
        seen += f", {uni:.3f} for the most frequent token alone"
    return (
        f"degenerate blocks: masked tokens are trivially predictable ({seen}); the blocks "
        "are nearly all one token (often [UNK]: a tokenizer that cannot read the corpus; see "
        "unk_rate in the blocks' manifest.json); nothing useful was learned"
    )


def verdict(metrics: dict[str, Any]) -> str | None:
    """One plain sentence on the run's health from ``val/...`` metrics (None: nothing measured).

    Thresholds: in-row-swap AUC below :data:`CONTEXT_BASE_AUC` is the base
    rate, at or above :data:`CONTEXT_LEARNING_AUC` is learning context, in
    between is starting to; a mean token cosine above :data:`COLLAPSED_COSINE`
    is a collapse; a generator under :data:`GENERATOR_MARGIN` times the
    unigram floor is barely learning.
    """
    m = {k.removeprefix("val/"): v for k, v in metrics.items() if isinstance(v, int | float)}
    trivial = _trivial_data(m.get("gen_accuracy"), m.get("unigram_accuracy"))
    if trivial:
        return trivial
    notes = []
    cos = m.get("token_cosine")
    if cos is not None and cos > COLLAPSED_COSINE:
        notes.append(f"token vectors collapsed onto one direction (mean cosine {cos:.2f})")
    gen, uni = m.get("gen_accuracy"), m.get("unigram_accuracy")
    if gen is not None and uni:
        gen_note = f"generator accuracy {gen:.3f} against {uni:.3f} for the most frequent token"
        if gen <= uni:
            gen_note = "generator not above the unigram floor: " + gen_note
        elif gen < GENERATOR_MARGIN * uni:
            gen_note = "generator barely beats the unigram floor: " + gen_note
        notes.append(gen_note)
    swap = m.get("swap_auc")
    if swap is None:
        if not notes:
            return None
        return "; ".join(notes)
    auc = m.get("disc_auc")
    seen = f"in-row-swap AUC {swap:.2f}" + (f", replaced-token AUC {auc:.2f}" if auc else "")
    if swap < CONTEXT_BASE_AUC:
        head = f"discriminator still at the base rate: context not learned yet ({seen}); "
        if (metrics.get("token_embeddings") or {}).get("token_embeddings") == "ppmi":
            head += (
                "what fine-tuning gains over a random start comes from the count-based (PPMI) "
                "token table it started from, not from learned context"
            )
        else:
            head += "fine-tuning from this checkpoint is unlikely to beat a random start"
    elif swap < CONTEXT_LEARNING_AUC:
        head = f"starting to learn context ({seen}); train longer before fine-tuning"
    else:
        head = f"learning context: {seen}"
    return "; ".join([head, *notes])
