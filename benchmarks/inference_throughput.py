"""Inference speed, accuracy and size of an NSMC model: transformers, PyTorch, ONNX fp32 and int8.

Every backend goes from raw review text to a label (tokenisation included)
on the NSMC test reviews of the model's own split (rebuilt from the split
seed in ``electra_task.json`` with the current loader):

* ``transformers`` ``pipeline("text-classification")``, fp32, ``batch_size=32``,
  truncation to the model's max length (what users run today);
* ours, PyTorch fp32 and bf16 autocast (``electra predict``'s path: batches
  sorted by length);
* ours, ONNX Runtime fp32 and dynamic int8 (:mod:`electra.inference.runtime`).

Reported per backend: sentences per second at batch 32 over the reviews,
p50/p95 latency of one review at batch 1, accuracy over the same reviews, the
fraction of reviews given the same label as the first backend (the pipeline),
and the model file size on disk. All backends use the same number of threads.

    python benchmarks/inference_throughput.py --model finetuned/nsmc/model
    python benchmarks/inference_throughput.py --model M --examples 1000 --latency-examples 100

The ONNX directory is exported from ``--model`` (with int8) into
``out/bench-onnx/`` unless ``--onnx DIR`` names an existing export. Results go
to ``out/inference_throughput.json`` and a Markdown table on stdout.

The README's numbers used an ELECTRA-Small-shaped model (12 layers, hidden
256, embeddings 128, the KoELECTRA v1 vocabulary of 32,200 tokens) from
random initialisation (no pre-trained Small was available offline),
fine-tuned on NSMC at 64 tokens::

    python benchmarks/inference_throughput.py --make-init runs/bench/init
    electra finetune --task nsmc --model runs/bench/init -o runs/bench/nsmc --max-length 64 \
        --max-train-examples 10000 --max-eval-examples 2000 --epochs 2 \
        --learning-rate 5e-4 --layer-decay 1.0 --device cpu
    python benchmarks/inference_throughput.py --model runs/bench/nsmc/model
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from electra.finetune.common import TextExample
from electra.finetune.modeling import read_task_info
from electra.finetune.tasks import DataOptions, get_task, load_task_data, subsample
from electra.system.provenance import versions

BATCH = 32


def test_reviews(model_dir: Path, n: int) -> tuple[list[TextExample], dict[str, int]]:
    """The model's NSMC test split (``n`` of it, seeded) and its label counts."""
    info = read_task_info(model_dir)
    known = {k for k in DataOptions.__dataclass_fields__}
    opts = DataOptions(**{k: v for k, v in info.data.items() if k in known})
    data = load_task_data(get_task("nsmc"), opts, labels=info.labels)
    examples = subsample(data.splits.test, n, opts.split_seed) if n else data.splits.test
    counts: dict[str, int] = {}
    for e in examples:
        counts[str(e.label)] = counts.get(str(e.label), 0) + 1
    return examples, counts


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def latency(fn: Callable[[str], Any], texts: Sequence[str]) -> dict[str, float]:
    """p50 and p95 milliseconds of one text at batch 1 (after 5 warm-up calls)."""
    for t in texts[:5]:
        fn(t)
    ms = []
    for t in texts:
        start = time.perf_counter()
        fn(t)
        ms.append(1000 * (time.perf_counter() - start))
    q = statistics.quantiles(ms, n=20)
    return {"p50_ms": statistics.median(ms), "p95_ms": q[18]}


class Backend:
    """A way to turn texts into label indices (predict_batch) and one text (predict_one)."""

    name = ""
    size_bytes = 0

    def predict_all(self, texts: Sequence[str]) -> list[int]:
        raise NotImplementedError

    def predict_one(self, text: str) -> Any:
        raise NotImplementedError


class Pipeline(Backend):
    def __init__(self, model_dir: Path, labels: list[str]) -> None:
        import transformers

        self.name = "transformers pipeline fp32"
        self.pipe = transformers.pipeline("text-classification", model=str(model_dir), device="cpu")
        self.index = {lab: i for i, lab in enumerate(labels)}
        self.size_bytes = (model_dir / "model.safetensors").stat().st_size

    def predict_all(self, texts):
        out = self.pipe(list(texts), batch_size=BATCH, truncation=True)
        return [self.index[o["label"]] for o in out]

    def predict_one(self, text):
        return self.pipe(text, truncation=True)


class Ours(Backend):
    """Our PyTorch path (``electra predict --backend torch``) or the ONNX runtime."""

    def __init__(self, name: str, predictor: Any, size_bytes: int) -> None:
        self.name, self.predictor, self.size_bytes = name, predictor, size_bytes

    def predict_all(self, texts):
        examples = [TextExample(t) for t in texts]
        self.probabilities = np.stack(self.predictor.predict_examples(examples, BATCH))
        return [int(k) for k in self.probabilities.argmax(-1)]

    def predict_one(self, text):
        return self.predictor.predict_examples([TextExample(text)], 1)


def make_backends(model_dir: Path, onnx_dir: Path, threads: int, which: list[str]) -> list:
    from electra.inference.runtime import FILES, OnnxModel
    from electra.inference.torch_predictor import TorchPredictor

    info = read_task_info(model_dir)
    weights = (model_dir / "model.safetensors").stat().st_size
    makers = {
        "pipeline": lambda: Pipeline(model_dir, info.labels),
        "torch-fp32": lambda: Ours(
            "ours PyTorch fp32", TorchPredictor(str(model_dir), "cpu", False, False), weights
        ),
        "torch-bf16": lambda: Ours(
            "ours PyTorch bf16", TorchPredictor(str(model_dir), "cpu", True, False), weights
        ),
        "onnx-fp32": lambda: Ours(
            "ONNX Runtime fp32",
            OnnxModel.load(onnx_dir, precision="fp32", threads=threads),
            (onnx_dir / FILES["fp32"]).stat().st_size,
        ),
        "onnx-int8": lambda: Ours(
            "ONNX Runtime int8",
            OnnxModel.load(onnx_dir, precision="int8", threads=threads),
            (onnx_dir / FILES["int8"]).stat().st_size,
        ),
    }
    return [makers[w]() for w in which]


def measure(b: Backend, texts: list[str], gold: list[int], lat_texts: list[str]) -> dict:
    b.predict_all(texts[: 2 * BATCH])  # warm-up
    preds, seconds = timed(lambda: b.predict_all(texts))
    row = {
        "backend": b.name,
        "sentences_per_s": len(texts) / seconds,
        "accuracy": float(np.mean(np.asarray(preds) == np.asarray(gold))),
        "size_mib": b.size_bytes / 2**20,
        "predictions": preds,
    }
    row.update(latency(b.predict_one, lat_texts))
    print(
        f"{b.name}: {row['sentences_per_s']:.1f} sent/s, p50 {row['p50_ms']:.2f} ms, "
        f"acc {100 * row['accuracy']:.2f}",
        file=sys.stderr,
    )
    return row


def table(rows: list[dict], baseline: str) -> str:
    base = next((r for r in rows if r["backend"] == baseline), rows[0])["sentences_per_s"]
    lines = [
        "| backend | sent/s @32 | vs pipeline | p50 ms @1 | p95 ms @1 | accuracy "
        "| same label as pipeline | size MiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['sentences_per_s']:.0f} | {r['sentences_per_s'] / base:.2f}x "
            f"| {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {100 * r['accuracy']:.2f} "
            f"| {100 * r['agreement']:.2f}% | {r['size_mib']:.1f} |"
        )
    return "\n".join(lines)


def make_random_small(out: Path) -> Path:
    """A randomly initialised ELECTRA-Small discriminator with the KoELECTRA v1 vocabulary."""
    import shutil

    from electra.finetune.tasks import resolve_data_dir
    from electra.model.config import preset
    from electra.model.encoder import ElectraDiscriminator
    from electra.model.hf import export_discriminator

    tok = out.parent / f"{out.name}-tokenizer"
    tok.mkdir(parents=True, exist_ok=True)
    vocab = resolve_data_dir(None) / "extras" / "koelectra-v1-vocab" / "vocab.txt"
    shutil.copyfile(vocab, tok / "vocab.txt")
    config = {"do_lower_case": False, "tokenizer_class": "ElectraTokenizer"}
    (tok / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    torch.manual_seed(0)
    model = ElectraDiscriminator(preset("small", vocab_size=32200))
    return export_discriminator(model, out, tokenizer_dir=tok)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="fine-tuned NSMC model directory (PyTorch)")
    ap.add_argument("--make-init", default="", help="only write a random-init Small model here")
    ap.add_argument("--onnx", default="", help="existing ONNX export (default: export here)")
    ap.add_argument("--examples", type=int, default=0, help="test reviews (0: all)")
    ap.add_argument("--latency-examples", type=int, default=200)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument(
        "--backends",
        nargs="*",
        default=["pipeline", "torch-fp32", "torch-bf16", "onnx-fp32", "onnx-int8"],
    )
    ap.add_argument("--output", default="out/inference_throughput.json")
    args = ap.parse_args(argv)
    if args.make_init:
        print(f"random-init Small: {make_random_small(Path(args.make_init))}")
        return
    if not args.model:
        ap.error("--model is required (or --make-init DIR)")
    torch.set_num_threads(args.threads)
    model_dir = Path(args.model)
    onnx_dir = Path(args.onnx) if args.onnx else Path("out/bench-onnx")
    if not args.onnx:
        from electra.export.onnx import export_onnx

        export_onnx(model_dir, onnx_dir, quantize="int8")
    examples, counts = test_reviews(model_dir, args.examples)
    info = read_task_info(model_dir)
    index = {lab: i for i, lab in enumerate(info.labels)}
    texts = [e.text for e in examples]
    gold = [index[e.label] for e in examples]
    lat_texts = texts[: args.latency_examples]
    backends = make_backends(model_dir, onnx_dir, args.threads, args.backends)
    rows = [measure(b, texts, gold, lat_texts) for b in backends]
    fp32 = next((b for b in backends if b.name == "ours PyTorch fp32"), None)
    for b, row in zip(backends, rows, strict=True):
        if fp32 is not None and isinstance(b, Ours):  # probabilities against PyTorch fp32
            diff = np.abs(b.probabilities - fp32.probabilities)
            row["prob_diff_vs_torch_fp32"] = {"max": float(diff.max()), "mean": float(diff.mean())}
    reference = np.asarray(rows[0]["predictions"])
    for r in rows:
        r["agreement"] = float(np.mean(np.asarray(r.pop("predictions")) == reference))
    majority = max(counts.values()) / len(texts)
    result = {
        "model": str(model_dir.resolve()),
        "majority_class_accuracy": majority,
        "onnx": str(onnx_dir.resolve()),
        "reviews": len(texts),
        "label_counts": counts,
        "latency_reviews": len(lat_texts),
        "max_length": info.settings.max_length,
        "threads": args.threads,
        "machine": {
            "cpu": _cpu_name(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
        },
        "versions": versions(("electra", "torch", "onnxruntime", "transformers")),
        "rows": rows,
    }
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(
        f"{len(texts)} NSMC test reviews {counts} (majority class {100 * majority:.2f}%), "
        f"{args.threads} threads, {_cpu_name()}"
    )
    print(table(rows, "transformers pipeline fp32"))
    print(f"results: {out}")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


if __name__ == "__main__":
    main()
