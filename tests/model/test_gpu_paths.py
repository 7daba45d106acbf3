"""The CUDA code paths, checked on a CPU-only machine.

No GPU is available where these tests run, so CUDA is faked where only the
choice of device matters (``torch.cuda.is_available``, ``set_device``), and
host synchronisations are counted with a dispatch mode on CPU tensors: a
sync there is a sync on a GPU too.
"""

from __future__ import annotations

import contextlib
import os

import pytest
import torch
import torch.distributed as dist

from electra.config import ConfigError
from electra.pretrain import trainer as train
from electra.pretrain.config import load_config
from electra.pretrain.distributed import Dist, set_deterministic, setup_distributed
from electra.system import precision
from electra.system.precision import resolve_device


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> list[torch.device]:
    """CUDA 'available'; ``set_device`` records its argument and, like the real
    one, rejects a device without an index."""
    from torch.cuda._utils import _get_device_index

    calls: list[torch.device] = []

    def set_device(device) -> None:
        _get_device_index(device)  # ValueError for torch.device("cuda")
        calls.append(torch.device(device))

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    monkeypatch.setattr(dist, "init_process_group", lambda backend: calls.append(backend))
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    return calls


@pytest.mark.parametrize("pref", ["auto", "cuda"])
def test_one_process_on_cuda_gets_an_indexed_device(fake_cuda, pref: str) -> None:
    env = setup_distributed(pref)
    assert env.device == torch.device("cuda", 0) and fake_cuda == [torch.device("cuda", 0)]


def test_one_process_keeps_the_gpu_it_asked_for(fake_cuda) -> None:
    assert setup_distributed("cuda:3").device == torch.device("cuda", 3)


@pytest.mark.parametrize("pref", ["auto", "cuda", "cuda:0"])
def test_each_torchrun_rank_takes_its_local_gpu(
    fake_cuda, monkeypatch: pytest.MonkeyPatch, pref: str
) -> None:
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    env = setup_distributed(pref)
    assert env.device == torch.device("cuda", 1)
    assert fake_cuda == [torch.device("cuda", 1), "nccl"]


def test_one_process_gets_a_real_group_only_when_asked(
    fake_cuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPU check's torchrun step sets ELECTRA_PROCESS_GROUP=always: one process, a
    real NCCL group (and the DDP wrapper); a plain run creates none."""
    from electra.pretrain.distributed import PROCESS_GROUP_ENV

    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    setup_distributed("cuda")
    assert "nccl" not in fake_cuda
    monkeypatch.setenv(PROCESS_GROUP_ENV, "always")
    assert setup_distributed("cuda").world == 1
    assert fake_cuda[-1] == "nccl"
    setup_distributed("cpu")
    assert fake_cuda[-1] == "gloo"


def test_cuda_asked_for_without_a_gpu_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ConfigError, match="run.device = 'cuda:0': no CUDA device"):
        resolve_device("cuda:0")
    # fine-tuning resolves its --device with the same function, named in the error
    from electra.finetune import run
    from electra.system import precision

    assert run.resolve_device is precision.resolve_device
    with pytest.raises(ConfigError, match="--device = 'cuda': no CUDA device"):
        resolve_device("cuda", option="--device")


# -- fp16 -----------------------------------------------------------------------------------


def test_fused_mlm_loss_keeps_fp16_gradients_that_the_loss_scale_rescues() -> None:
    """(softmax - onehot) / N is mostly below fp16's range; the scaled gradient is not."""
    import torch.nn.functional as F

    from electra.pretrain.objective import mlm_loss_and_sample, saved_grad_dtype

    assert saved_grad_dtype(torch.float16) == torch.float32
    assert saved_grad_dtype(torch.bfloat16) == torch.bfloat16  # unchanged, fp32's range
    g = torch.Generator().manual_seed(0)
    n, v, scale = 2048, 4096, 65536.0
    labels = torch.randint(0, v, (n,), generator=g)
    logits = (torch.randn(n, v, generator=g) * 3).half().requires_grad_()
    loss, _, _ = mlm_loss_and_sample(logits, labels, torch.Generator().manual_seed(1), None)
    (loss * scale).backward()
    ref = logits.detach().float().requires_grad_()
    (F.cross_entropy(ref, labels) * scale).backward()
    got, want = logits.grad, ref.grad
    assert got.dtype == torch.float16
    representable = want.abs() > 1e-6  # in fp16 once scaled
    assert not ((got == 0) & representable).any(), "scaled gradients flushed to zero"
    torch.testing.assert_close(got.float(), want, rtol=1e-2, atol=1e-6)


def test_fp16_resume_restores_the_loss_scale(
    blocks, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint holds the GradScaler; resuming from it continues the same scale.

    The scale grows every step here (``growth_interval=1``), so a resumed run
    that restarted it at the default would end with another scale.
    """
    import functools
    import shutil

    from builders import tiny_config

    from electra.model import checkpoint as ckpt

    monkeypatch.setattr(
        torch.amp, "GradScaler", functools.partial(torch.amp.GradScaler, growth_interval=1)
    )
    extra = ("run.precision='fp16'", "optim.max_steps=4", "run.save_every=2", "run.export=false")
    run = tmp_path / "run"
    first = train.Trainer(tiny_config(blocks, run, *extra))
    first.fit()
    end = first.scaler.state_dict()
    assert end["scale"] != torch.amp.GradScaler("cpu").get_scale()
    _, state, _ = ckpt.load(ckpt.latest_valid(run / "checkpoints").path)
    assert state["grad_scaler"] == end
    shutil.rmtree(ckpt.step_dirs(run / "checkpoints")[0].path)  # back to step 2
    resumed = train.Trainer(tiny_config(blocks, run, *extra), resume=True)
    resumed.fit()
    assert resumed.scaler.state_dict() == end


# -- demo -----------------------------------------------------------------------------------


class _Reached(Exception):
    pass


def test_demo_plans_steps_from_a_step_on_the_runs_device(
    fake_cuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    from electra.experiments.timing import estimate_step_seconds
    from electra.pretrain.objective import ElectraForPretraining

    moved: list[torch.device] = []

    def to(self, device, *a, **k):
        moved.append(torch.device(device))
        raise _Reached  # no real GPU to go on with

    monkeypatch.setattr(ElectraForPretraining, "to", to)
    cfg = load_config("tiny", ["run.device='auto'"])
    with pytest.raises(_Reached):
        estimate_step_seconds(cfg, block_length=16, vocab_size=100)
    assert moved == [torch.device("cuda", 0)]


def test_demo_times_fine_tuning_on_the_device_it_will_use(
    fake_cuda,
    ko_model,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--device auto`` fine-tunes on the GPU: the plan must be timed there, not on the CPU."""
    from electra.experiments.timing import estimate_finetune_seconds

    moved: list[torch.device] = []

    def to(self, device, *a, **k):
        moved.append(torch.device(device))
        raise _Reached  # no real GPU to go on with

    monkeypatch.setattr(torch.nn.ModuleDict, "to", to)
    with pytest.raises(_Reached):
        estimate_finetune_seconds(ko_model, length=8, batch=2)
    assert moved == [torch.device("cuda", 0)]
    monkeypatch.undo()
    assert estimate_finetune_seconds(ko_model, length=8, batch=2, device="cpu") > 0


def test_demo_step_timing_uses_the_runs_precision(monkeypatch: pytest.MonkeyPatch) -> None:
    from electra.experiments.timing import estimate_step_seconds

    seen: list[tuple[str, torch.device]] = []
    real = precision.autocast_for

    def autocast_for(name: str, device: torch.device):
        seen.append((name, device))
        return real(name, device)

    monkeypatch.setattr(precision, "autocast_for", autocast_for)  # demo's import reads it here
    cfg = load_config("tiny", ["run.device='cpu'", "run.precision='bf16'"])
    assert estimate_step_seconds(cfg, block_length=16, vocab_size=100, steps=1) > 0
    assert seen and set(seen) == {("bf16", torch.device("cpu"))}


# -- host synchronisations ------------------------------------------------------------------


class SyncCounter:
    """Counts what would stall a GPU's queue, seen on CPU tensors.

    A dispatch mode sees reads of device values (``_local_scalar_dense``:
    ``.item()``, ``bool()``, ``int()``), ``nonzero`` and boolean-mask indexing
    (an output whose size is on the device) and ``lift_fresh`` (a tensor from
    Python data: a host-to-device copy); ``Tensor.tolist`` is patched, as it
    reads the data without dispatching.
    """

    # "aten.nonzero." (its overloads), not nonzero_static: its output size is given.
    WATCHED = ("aten._local_scalar_dense", "aten.nonzero.", "aten.lift_fresh", "aten.item")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        self.seen: list[str] = []
        seen = self.seen

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = str(func)
                bool_index = name.startswith(("aten.index.", "aten.index_put")) and any(
                    isinstance(i, torch.Tensor) and i.dtype == torch.bool
                    for i in (args[1] if len(args) > 1 and isinstance(args[1], list) else [])
                    if i is not None
                )
                if name.startswith(SyncCounter.WATCHED) or bool_index:
                    seen.append(name)
                return func(*args, **(kwargs or {}))

        self.mode = Mode()
        tolist = torch.Tensor.tolist

        def counted_tolist(t):
            if self.active:
                seen.append("Tensor.tolist")
            return tolist(t)

        self.active = False
        monkeypatch.setattr(torch.Tensor, "tolist", counted_tolist)

    def __enter__(self) -> SyncCounter:
        self.active = True
        self.mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.mode.__exit__(*exc)
        self.active = False


def _batch(pad_last: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Four blocks of 32 tokens ([CLS] ... [SEP]), the last ``pad_last`` of row 0 padding."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 100, (4, 32), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3
    if pad_last:
        ids[0, -pad_last - 1] = 3
        ids[0, -pad_last:] = 0
    return ids, (ids != 0).long(), torch.zeros_like(ids)


@pytest.mark.parametrize("objective", ["rtd", "mlm"])
@pytest.mark.parametrize("pad_last", [0, 5])
def test_one_micro_batch_does_not_sync_the_host(
    monkeypatch: pytest.MonkeyPatch, objective: str, pad_last: int
) -> None:
    """Forward, backward, clipping and the optimizer step of one micro-batch, as the
    trainer runs them: no sync at all (the number of masked positions, which varies per
    batch, is counted on the host from the CPU batch, so ``nonzero`` needs no answer from
    the device)."""
    from electra.model.config import preset
    from electra.model.optim import adamw
    from electra.pretrain.config import ObjectiveConfig
    from electra.pretrain.objective import (
        ElectraForPretraining,
        SampleRNG,
        SpecialIds,
        picks_per_row,
    )

    special = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=100)
    cfg = dataclasses_replace(preset("tiny"), vocab_size=100)
    model = ElectraForPretraining(cfg, ObjectiveConfig(objective=objective), special)
    opt = adamw(model.parameters(), lr=1e-3)
    ids, mask, types = _batch(pad_last)
    counter = SyncCounter(monkeypatch)
    for _ in range(2):  # the second step runs with optimizer state
        full = bool(mask.all())  # on the host copy, as the trainer does
        picks = picks_per_row(ids, mask, special, 0.15)
        rng = SampleRNG(SampleRNG.seeds_for(0, range(4)), picks=picks)
        with counter, torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(ids, mask, types, rng=rng, full=full)
        with counter:
            out.loss.backward()
            names, values = out.metrics()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
    assert counter.seen == []


def test_masked_positions_with_a_known_count_are_nonzeros_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``flat_positions``: nonzero_static, or the sort where a device has no kernel for it,
    gives exactly ``nonzero``'s indices."""
    from electra.pretrain.objective import flat_positions

    g = torch.Generator().manual_seed(0)
    is_masked = torch.rand(6, 40, generator=g) < 0.15
    want = is_masked.reshape(-1).nonzero().squeeze(-1)
    count = int(is_masked.sum())
    assert torch.equal(flat_positions(is_masked), want)
    assert torch.equal(flat_positions(is_masked, count), want)

    from electra.pretrain import objective

    calls = []

    def missing(*a, **k):
        calls.append(1)
        raise NotImplementedError("Could not run 'aten::nonzero_static' with the 'CUDA' backend")

    monkeypatch.setattr(torch, "nonzero_static", missing)
    monkeypatch.setattr(objective, "_NO_NONZERO_STATIC", set())
    assert torch.equal(flat_positions(is_masked, count), want)
    assert torch.equal(flat_positions(is_masked, count), want)
    assert calls == [1]  # the missing kernel is asked for once, not once per micro-batch


def dataclasses_replace(obj, **kw):
    import dataclasses

    return dataclasses.replace(obj, **kw)


def test_host_picks_match_the_objectives_choice() -> None:
    from electra.pretrain.objective import SpecialIds, choose_positions, picks_per_row

    special = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=100)
    ids, mask, _ = _batch(pad_last=7)
    chosen = choose_positions(ids, mask, special, 0.15, torch.Generator().manual_seed(0))
    assert picks_per_row(ids, mask, special, 0.15) == chosen.sum(-1).tolist()


# -- FSDP2 and deterministic mode -----------------------------------------------------------


def _trainer(*extra: str) -> train.Trainer:
    return train.Trainer(load_config("tiny", ["run.device='cpu'", *extra]))


def _tiny_model():
    from electra.model.config import preset
    from electra.pretrain.config import ObjectiveConfig
    from electra.pretrain.objective import ElectraForPretraining, SpecialIds

    special = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=100)
    cfg = dataclasses_replace(preset("tiny"), vocab_size=100)
    return ElectraForPretraining(cfg, ObjectiveConfig(), special)


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_fsdp_compiles_each_layer_then_shards_it_with_bf16_compute(
    monkeypatch: pytest.MonkeyPatch, precision: str
) -> None:
    import torch.distributed.fsdp as fsdp

    events: list[tuple] = []

    def fully_shard(module, **kw):
        events.append(("shard", module, kw.get("mp_policy")))
        return module

    monkeypatch.setattr(fsdp, "fully_shard", fully_shard)
    monkeypatch.setattr(torch.nn.Module, "compile", lambda m, *a, **k: events.append(("c", m)))
    model = _tiny_model()
    trainer = _trainer("run.fsdp=true", "run.compile=true", f"run.precision='{precision}'")
    assert trainer._wrap(model, Dist(0, 2, 0, torch.device("cpu"))) is model
    layers = [*model.generator.electra.encoder.layer, *model.discriminator.electra.encoder.layer]
    want = [e for layer in layers for e in (("c", layer), ("shard", layer))] + [("shard", model)]
    assert [e[:2] for e in events] == want  # no whole-encoder compile, layer before shard
    policies = {e[2] for e in events if e[0] == "shard"}
    if precision == "bf16":
        (p,) = policies
        assert p.param_dtype == torch.bfloat16 and p.reduce_dtype == torch.float32
    else:
        assert policies == {None}


def test_accumulation_skips_the_gradient_reduction_until_the_last_micro_batch() -> None:
    class FSDP2Like:
        def __init__(self) -> None:
            self.flags: list[bool] = []

        def set_requires_gradient_sync(self, on: bool) -> None:
            self.flags.append(on)

    trainer = _trainer()
    trainer.wrapped = FSDP2Like()
    for i in range(3):
        with trainer._grad_sync(i == 2):
            pass
    assert trainer.wrapped.flags == [False, False, True]

    class DDPLike:
        entered = 0

        def no_sync(self):
            DDPLike.entered += 1
            return contextlib.nullcontext()

    trainer.wrapped = DDPLike()
    for i in range(3):
        with trainer._grad_sync(i == 2):
            pass
    assert DDPLike.entered == 2


def test_deterministic_mode_sets_cublas_kernels_and_math_attention(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: dict[str, object] = {}
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setattr(
        torch,
        "use_deterministic_algorithms",
        lambda on, warn_only: calls.update(det=(on, warn_only)),
    )
    for name in ("flash", "mem_efficient", "cudnn", "math"):
        fn = f"enable_{name}_sdp"
        monkeypatch.setattr(torch.backends.cuda, fn, lambda on, n=name: calls.update({n: on}))
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    set_deterministic()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert calls == {
        "det": (True, True),
        "flash": False,
        "mem_efficient": False,
        "cudnn": False,
        "math": True,
    }
    assert not torch.backends.cudnn.benchmark and torch.backends.cudnn.deterministic
    assert load_config("tiny").run.deterministic is False  # opt-in: it costs speed


# -- fine-tuning ----------------------------------------------------------------------------


def test_fine_tuning_defaults_to_bf16_on_a_gpu_that_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from electra.finetune.run import default_bf16
    from electra.system import precision

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert default_bf16(torch.device("cpu")) is False  # emulated bf16 is far slower
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert default_bf16(torch.device("cpu")) is True
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert default_bf16(torch.device("cuda", 0)) is True
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert default_bf16(torch.device("cuda", 0)) is False  # pre-Ampere


def test_fine_tuning_steps_do_not_sync_the_host(
    ko_model,  # noqa: F811
    data_dir,
    tmp_path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four times the training steps, the same syncs: none per micro-batch (the running
    loss is read every ``LOSS_READ_EVERY`` steps and at the end of an epoch)."""
    from electra.finetune.run import FinetuneArgs, finetune

    counter = SyncCounter(monkeypatch)

    def syncs(n_train: int) -> int:
        args = FinetuneArgs(
            model=str(ko_model),
            task="nsmc",
            output=str(tmp_path / f"n{n_train}"),
            data_dir=str(data_dir),
            device="cpu",
            epochs=1,
            batch_size=8,
            max_length=24,
            max_train_examples=n_train,
            max_eval_examples=16,
            progress=False,
        )
        counter.seen.clear()
        with counter:
            finetune(args)
        # lift_fresh here is the collate building CPU tensors, copied without a sync
        return sum(1 for op in counter.seen if op != "aten.lift_fresh.default")

    few, many = syncs(16), syncs(64)  # 2 and 8 steps
    assert many - few <= 1, (few, many)


def test_block_loader_pins_batches_for_a_gpu(blocks, monkeypatch: pytest.MonkeyPatch) -> None:
    from electra.blocks.read import BlockLoader, open_blocks

    pinned: list[torch.Size] = []

    def pin_memory(t):  # the real one needs a CUDA driver
        pinned.append(t.shape)
        return t

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    train_blocks = open_blocks(blocks, "train")
    plain = next(BlockLoader(train_blocks, 4, seed=0, prefetch=0))
    assert pinned == []
    batch = next(BlockLoader(train_blocks, 4, seed=0, prefetch=0, pin_memory=True))
    assert len(pinned) == 3 and all(torch.equal(batch[k], plain[k]) for k in plain)
    # with prefetching the loader thread pins too (how far ahead it is depends on timing)
    pinned.clear()
    loader = BlockLoader(train_blocks, 4, seed=0, prefetch=1, pin_memory=True)
    batch = next(loader)
    loader.close()
    assert len(pinned) >= 3
    assert all(torch.equal(batch[k], plain[k]) for k in plain)
