"""Pre-training throughput: our RTD step against the step users build with ``transformers``.

The reference is what people write today: an ``ElectraForMaskedLM`` generator
and an ``ElectraForPreTraining`` discriminator sharing their embeddings, the
generator scoring every token (``labels=-100`` off the masked positions),
Gumbel sampling at the masked positions, ``L_MLM + 50 L_Disc``, AdamW.
Both steps use the same config, batch, sequence length and dtype, run in one
process, alternating, after warm-up; the median step time is reported with
tokens/s, the ratio, and MFU against the measured matmul peak of the same
dtype on this machine (FLOPs = the matmul FLOPs each step executes).

Our side is the step ``electra pretrain`` runs: the trainer's own
:func:`~electra.pretrain.trainer.forward_blocks` (host-side mask counts, the
per-block hashed noise of ``SampleRNG``, non-blocking copies of a pinned CPU
batch), its metrics, clipping and AdamW; not the data loader, logging or the
learning-rate schedule. The reference draws all its randomness from one
generator, as users write it. Both start each step from the same CPU batch.

    python benchmarks/pretrain_throughput.py                 # small, 32 x 128, bf16 and fp32
    python benchmarks/pretrain_throughput.py --dtype bf16 --steps 8
    python benchmarks/pretrain_throughput.py --preset base --batch 8 --seq 512 --device cuda
    python benchmarks/pretrain_throughput.py --conv-kernel-size 9   # ConvBERT, as the cpu recipe

With ``--conv-kernel-size K`` both sides are ConvBERT (mixed attention, ``--head-ratio``):
ours with ``model.conv_kernel_size``, the reference ``transformers``' ``ConvBertForMaskedLM``
generator and a ``ConvBertModel`` discriminator under ELECTRA's head (``transformers`` has
no ConvBERT pre-training class), so the cost of the span convolution is measured too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import nullcontext
from functools import partial
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from electra.model.config import generator_config, preset
from electra.model.optim import adamw
from electra.pretrain.config import ObjectiveConfig
from electra.pretrain.flops import executed_matmul_flops_per_step
from electra.pretrain.objective import ElectraForPretraining, SpecialIds, mask_batch
from electra.pretrain.trainer import forward_blocks

SPECIAL = SpecialIds(pad=0, cls=101, sep=102, mask=103, vocab_size=30522)


def sync(device: str) -> None:
    """Wait for queued GPU work (``cuda`` or ``cuda:N``); timings are wrong without it."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def peak_sizes(device: str) -> tuple[int, ...]:
    """Square matmul sizes to try: a large GPU reaches its peak only at 4096-8192."""
    if torch.device(device).type == "cuda":
        return (1024, 2048, 4096, 8192)
    return (512, 1024, 2048)


def matmul_peak(
    dtype: torch.dtype, device: str, sizes: tuple[int, ...] | None = None, repeats: int = 3
) -> float:
    """Best measured GFLOP/s of a square matmul in ``dtype`` (the MFU denominator).

    Several sizes, ``torch.mm`` and ``F.linear`` (the layout our layers use),
    ``repeats`` timed rounds of about ``ROUND_S`` seconds each after a warm-up
    call; the best round is kept, so a noisy neighbour lowers the peak less
    than one lucky round raises it. Sizes whose single call takes over a
    second (a CPU without bf16 instructions) end the search.
    """
    best = 0.0
    for size in sizes or peak_sizes(device):
        a = torch.randn(size, size, device=device).to(dtype)
        b = torch.randn(size, size, device=device).to(dtype)
        slow = False
        for fn in (torch.mm, F.linear):
            one = _seconds(fn, a, b, 1, device)  # warm-up, and the round's length
            slow = slow or one > 1.0
            reps = max(1, min(200, round(ROUND_S / max(one, 1e-6))))
            for _ in range(repeats):
                best = max(best, 2 * size**3 * reps / _seconds(fn, a, b, reps, device) / 1e9)
        del a, b
        if slow:
            break
    return best


ROUND_S = 0.2
_PEAKS: dict[tuple[torch.dtype, str], float] = {}


def cached_peak(dtype: torch.dtype, device: str) -> float:
    """:func:`matmul_peak`, measured once per dtype and device in this process."""
    if (dtype, device) not in _PEAKS:
        _PEAKS[dtype, device] = matmul_peak(dtype, device)
    return _PEAKS[dtype, device]


def _seconds(fn, a: torch.Tensor, b: torch.Tensor, reps: int, device: str) -> float:
    sync(device)
    t = time.perf_counter()
    for _ in range(reps):
        fn(a, b)
    sync(device)
    return time.perf_counter() - t


def make_batch(batch: int, seq: int, device: str) -> dict[str, torch.Tensor]:
    """Full blocks ([CLS] a [SEP] b [SEP]) on the CPU, pinned for a GPU as the loader does."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, SPECIAL.vocab_size, (batch, seq), generator=g)
    ids[:, 0] = SPECIAL.cls
    ids[:, seq // 2] = SPECIAL.sep
    ids[:, -1] = SPECIAL.sep
    out = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.zeros_like(ids),
    }
    if torch.device(device).type == "cuda":
        out = {k: v.pin_memory() for k, v in out.items()}
    return out


class ConvBertDiscriminator(torch.nn.Module):
    """``ConvBertModel`` under ELECTRA's discriminator head, called like ``ElectraForPreTraining``."""

    def __init__(self, config) -> None:
        import transformers

        super().__init__()
        self.convbert = transformers.ConvBertModel(config)
        self.head = transformers.models.electra.modeling_electra.ElectraDiscriminatorPredictions(
            config
        )

    def forward(self, input_ids, attention_mask, labels):
        hidden = self.convbert(input_ids, attention_mask=attention_mask).last_hidden_state
        logits = self.head(hidden)
        active = attention_mask.bool()
        loss = F.binary_cross_entropy_with_logits(logits[active].float(), labels[active])
        return SimpleNamespace(loss=loss, logits=logits)


def build_reference(disc_cfg, gen_size: float, device: str, attn: str):
    import transformers

    if disc_cfg.conv_kernel_size:
        return build_convbert_reference(disc_cfg, gen_size, device)

    def hf(c):
        return transformers.ElectraConfig(
            vocab_size=c.vocab_size,
            embedding_size=c.embedding_size,
            hidden_size=c.hidden_size,
            num_hidden_layers=c.num_hidden_layers,
            num_attention_heads=c.num_attention_heads,
            intermediate_size=c.intermediate_size,
            max_position_embeddings=c.max_position_embeddings,
            attn_implementation=attn,
        )

    gen = transformers.ElectraForMaskedLM(hf(generator_config(disc_cfg, gen_size)))
    disc = transformers.ElectraForPreTraining(hf(disc_cfg))
    gen.electra.embeddings = disc.electra.embeddings  # shared embeddings, as users do
    gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
    model = torch.nn.ModuleDict({"gen": gen, "disc": disc}).to(device).train()
    return model


def build_convbert_reference(disc_cfg, gen_size: float, device: str):
    """ConvBERT generator + discriminator from ``transformers``, embeddings shared."""
    import transformers

    from electra.model.hf import hf_config_dict

    def hf(c, arch):
        body = hf_config_dict(c, arch)
        body.pop("model_type"), body.pop("architectures")
        return transformers.ConvBertConfig(**body)

    gen = transformers.ConvBertForMaskedLM(hf(generator_config(disc_cfg, gen_size), "gen"))
    disc = ConvBertDiscriminator(hf(disc_cfg, "disc"))
    gen.convbert.embeddings = disc.convbert.embeddings
    gen.generator_lm_head.weight = disc.convbert.embeddings.word_embeddings.weight
    return torch.nn.ModuleDict({"gen": gen, "disc": disc}).to(device).train()


OURS_STEP = "electra.pretrain.trainer.forward_blocks (SampleRNG, per-block hashed noise), metrics, clip, AdamW"


def compile_mode(value: bool | str) -> str:
    """``--compile``'s meaning: ``none``, ``ours`` (our two encoders) or ``both`` sides."""
    if value in (False, None, "", "none"):
        return "none"
    if value in (True, "both"):
        return "both"
    if value == "ours":
        return "ours"
    raise ValueError(f"compile: {value!r} (none, ours or both)")


def encoder_of(part: torch.nn.Module) -> torch.nn.Module:
    """The encoder stack of one side's generator or discriminator.

    Ours and ``transformers``' ELECTRA keep the body under ``.electra``;
    ``transformers``' ConvBERT (and our wrapper of it) under ``.convbert``.
    """
    body = getattr(part, "electra", None) or getattr(part, "convbert", None)
    if body is None:
        raise AttributeError(f"{type(part).__name__} has neither .electra nor .convbert")
    return body.encoder


def compile_encoders(ours, ref, mode: str, backend: str = "inductor") -> list[torch.nn.Module]:
    """``torch.compile`` the encoders ``mode`` names (as ``run.compile`` does ours);
    returns the modules compiled. ``ours`` compiles two encoders, ``both`` four."""
    parts = []
    if mode in ("ours", "both"):
        parts += [ours.generator, ours.discriminator]
    if mode == "both":
        parts += [ref["gen"], ref["disc"]]
    encoders = [encoder_of(p) for p in parts]
    for enc in encoders:
        enc.compile(backend=backend)
    return encoders


def reference_step(model, batch, rng, autocast, device):
    """What users write: one generator for every draw, the generator scoring every token."""
    ids = batch["input_ids"].to(device, non_blocking=True)
    mask = batch["attention_mask"].to(device, non_blocking=True)
    m = mask_batch(ids, mask, SPECIAL, 0.15, rng)
    labels = torch.full_like(ids, -100)
    labels[m.is_masked] = ids[m.is_masked]
    with autocast:
        g = model["gen"](m.input_ids, attention_mask=mask, labels=labels)
        with torch.no_grad():
            logits = g.logits[m.is_masked].float()
            u = torch.rand(logits.shape, generator=rng, device=logits.device)
            sampled = (logits - torch.log(-torch.log(u + 1e-9) + 1e-9)).argmax(-1)
        corrupt = ids.clone()
        corrupt[m.is_masked] = sampled
        replaced = (corrupt != ids).float()
        d = model["disc"](corrupt, attention_mask=mask, labels=replaced)
        loss = g.loss + 50.0 * d.loss
    return loss


def ours_step(model, batch, first_index, autocast, device):
    """The trainer's forward on a CPU batch (``forward_blocks``: ``SampleRNG``'s per-block noise)."""
    with autocast:
        out = forward_blocks(
            model,
            batch,
            first_index,
            special=model.special,
            mask_prob=model.objective.mask_prob,
            seed=0,
            device=torch.device(device),
        )
    out.metrics()  # the trainer stacks the step's metrics on the device every step
    return out.loss


def timed(step_fn, model, opt, device) -> float:
    """Seconds of ``step_fn()``'s forward, backward, clipping and AdamW step, synchronised."""
    sync(device)
    t = time.perf_counter()
    loss = step_fn()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    sync(device)
    return time.perf_counter() - t


def step_times(args, cfg, autocast) -> tuple[float, float]:
    """Median seconds of our step and of the reference's, alternating, after warm-up."""
    device = args.device
    torch.manual_seed(0)
    ours = ElectraForPretraining(cfg, ObjectiveConfig(generator_size=args.gen_size), SPECIAL)
    ours = ours.to(device).train()
    ref = build_reference(cfg, args.gen_size, device, args.ref_attn)
    mode = compile_mode(getattr(args, "compile", False))
    compile_encoders(ours, ref, mode, getattr(args, "compile_backend", "inductor"))
    opt_o = adamw(ours.parameters(), lr=1e-4, eps=1e-6)  # what `electra pretrain` uses
    opt_r = torch.optim.AdamW(ref.parameters(), lr=1e-4, eps=1e-6)  # what users write
    batch = make_batch(args.batch, args.seq, device)
    rng_r = torch.Generator(device=device).manual_seed(0)
    times_o, times_r = [], []
    for i in range(args.warmup + args.steps):
        tr = timed(partial(reference_step, ref, batch, rng_r, autocast, device), ref, opt_r, device)
        first = i * args.batch  # the block stream advances as in training
        to = timed(partial(ours_step, ours, batch, first, autocast, device), ours, opt_o, device)
        if i >= args.warmup:
            times_r.append(tr)
            times_o.append(to)
    return statistics.median(times_o), statistics.median(times_r)


def run(args, dtype_name: str) -> dict:
    """One measurement: tokens/s of both steps, their ratio and MFU, as a dict."""
    device = args.device
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    autocast = (
        torch.autocast(device_type=torch.device(device).type, dtype=dtype)
        if dtype != torch.float32
        else nullcontext()
    )
    conv = getattr(args, "conv_kernel_size", 0)
    mixing = (
        {"conv_kernel_size": conv, "head_ratio": getattr(args, "head_ratio", 2)} if conv else {}
    )
    cfg = preset(args.preset, vocab_size=SPECIAL.vocab_size, **mixing)
    to, tr = step_times(args, cfg, autocast)
    tokens = args.batch * args.seq
    n_masked = round(0.15 * tokens)
    flops_ours = executed_matmul_flops_per_step(cfg, args.batch, args.seq, "rtd", args.gen_size)
    gen = generator_config(cfg, args.gen_size)
    # The reference also runs the generator head on every token.
    flops_ref = flops_ours + 3 * (tokens - n_masked) * (
        2 * gen.hidden_size * gen.embedding_size + 2 * gen.embedding_size * gen.vocab_size
    )
    peak = cached_peak(dtype, device) * 1e9
    return {
        "preset": args.preset,
        "dtype": dtype_name,
        "device": device,
        "threads": torch.get_num_threads(),
        "batch": args.batch,
        "seq": args.seq,
        "generator_size": args.gen_size,
        "conv_kernel_size": conv,
        "compiled": compile_mode(getattr(args, "compile", False)),
        "ours_step": OURS_STEP,
        "ours_tokens_per_s": tokens / to,
        "reference_tokens_per_s": tokens / tr,
        "ratio": tr / to,
        "ours_mfu": flops_ours / to / peak,
        "reference_mfu": flops_ref / tr / peak,
        "matmul_peak_gflops": peak / 1e9,
        "ours_step_s": to,
        "reference_step_s": tr,
    }


def use_allocator() -> str:
    """Re-run this script under the allocator `electra pretrain` would choose.

    tcmalloc when installed, else glibc's malloc tuned (see electra.system.allocator);
    ``--allocator default`` (or ``--no-tcmalloc``) keeps the untuned default.
    """
    import os
    import sys

    from electra.system import allocator

    for i, a in enumerate(sys.argv):
        if a == "--no-tcmalloc":
            os.environ.setdefault(allocator.ENV, "default")
        elif a.startswith("--allocator="):
            os.environ.setdefault(allocator.ENV, a.split("=", 1)[1])
        elif a == "--allocator" and i + 1 < len(sys.argv):
            os.environ.setdefault(allocator.ENV, sys.argv[i + 1])
    return allocator.reexec_for_speed(sys.argv)


def main() -> None:
    allocator = use_allocator()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--preset", default="small")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--gen-size", type=float, default=0.25)
    p.add_argument("--dtype", choices=["bf16", "fp32", "both"], default="both")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--ref-attn", default="sdpa", help="transformers attn_implementation")
    p.add_argument(
        "--conv-kernel-size", type=int, default=0, help="ConvBERT mixed attention (0: ELECTRA)"
    )
    p.add_argument("--head-ratio", type=int, default=2, help="with --conv-kernel-size")
    p.add_argument(
        "--compile",
        nargs="?",
        const="both",
        default="none",
        choices=["none", "ours", "both"],
        help="torch.compile the encoders: ours, or both sides' (plain --compile)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object per dtype")
    p.add_argument(
        "--allocator",
        choices=["auto", "tcmalloc", "glibc-tuned", "default"],
        default="auto",
        help="malloc to run under (default: what electra pretrain picks)",
    )
    p.add_argument("--no-tcmalloc", action="store_true", help="same as --allocator default")
    args = p.parse_args()
    for dt in ["bf16", "fp32"] if args.dtype == "both" else [args.dtype]:
        r = run(args, dt)
        r["allocator"] = allocator
        if args.json:
            print(json.dumps(r))
            continue
        print(
            f"{r['preset']} {r['dtype']} {r['device']} batch {r['batch']}x{r['seq']} "
            f"gen {r['generator_size']:.2f} conv {r['conv_kernel_size']}: ours {r['ours_tokens_per_s']:.0f} tok/s, "
            f"reference {r['reference_tokens_per_s']:.0f} tok/s, ratio {r['ratio']:.2f}x, "
            f"MFU ours {100 * r['ours_mfu']:.1f}% / reference {100 * r['reference_mfu']:.1f}% "
            f"(peak {r['matmul_peak_gflops']:.0f} GFLOP/s, {r['threads']} threads, "
            f"{r['allocator']} allocator)"
        )


if __name__ == "__main__":
    main()
