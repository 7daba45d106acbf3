"""``electra export``: a pre-training run to Hugging Face, or a model directory to ONNX.

What is exported depends on what ``SOURCE`` is:

* a pre-training run (its ``checkpoints/`` or one ``step-N``): Hugging Face
  ``discriminator/`` and ``generator/`` directories (default ``RUN/hf``);
* a model directory (``config.json``) with ``--onnx``: an ONNX directory
  (:mod:`electra.export.onnx`): the task head of a fine-tuned model
  (classification, regression, tagging, QA), or the bare encoder of any other
  ELECTRA directory; ``--quantize int8`` (CPU) or ``fp16`` (GPU) adds a
  smaller copy;
* a model directory without ``--onnx``: a Hugging Face copy whose
  ``tokenizer_config.json`` records the fine-tuning max length (for models
  saved before that was recorded).

Its options are in :mod:`electra.export.options` (torch-free, for ``--help``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from electra.export.onnx import check_model_dir, export_onnx
from electra.export.options import ExportArgs
from electra.finetune.modeling import read_task_info, record_max_length
from electra.model import checkpoint as ckpt
from electra.model.hub import resolve_model_path
from electra.pretrain.export import export_run
from electra.system.diskspace import reporting_full_disk


def export_cli(args: ExportArgs) -> int:
    """Run ``electra export`` (its ``--help`` is :class:`~electra.export.options.ExportArgs`'s docstring)."""
    src = resolve_model_path(args.source).path  # a local path, or a Hub snapshot
    is_model = is_model_dir(src)
    if args.quantize != "none" and not args.onnx:
        raise ValueError("--quantize needs --onnx")
    if args.onnx:
        check_model_dir(src, is_model)
        if not args.output:
            raise ValueError("--onnx needs an output directory (-o OUT)")
        with reporting_full_disk(f"the ONNX export of {src}", args.output, _size(src), _AGAIN):
            manifest = export_onnx(src, args.output, quantize=args.quantize, opset=args.opset)
        _print_onnx(Path(args.output), manifest)
        return 0
    if is_model:
        if not args.output:
            raise ValueError(f"{src} is a model directory: give -o OUT (or --onnx)")
        with reporting_full_disk(f"a copy of {src}", args.output, _size(src), _AGAIN):
            print(f"model: {copy_model_dir(src, Path(args.output))}")
        return 0
    run = ckpt.resolve(src)
    out = Path(args.output) if args.output else run.parent.parent / "hf"
    for name, directory in export_run(run, out).items():
        print(f"{name}: {directory}")
    return 0


_AGAIN = "The model directory is unchanged; once space is free, run the same command again"


def _size(directory: Path) -> int:
    """The bytes of a model directory's files (what an export of it needs, near enough)."""
    return sum(f.stat().st_size for f in directory.iterdir() if f.is_file())


def is_model_dir(path: Path) -> bool:
    """A model's ``config.json`` (``model_type``/``architectures``), not a run's resolved config."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and ("model_type" in config or "architectures" in config)


def copy_model_dir(src: Path, out: Path) -> Path:
    """A copy of a fine-tuned model directory with the fine-tuning max length recorded."""
    if src.resolve() == out.resolve():
        raise ValueError(f"{out}: the output directory must differ from the model directory")
    info = read_task_info(src)
    shutil.copytree(src, out, dirs_exist_ok=True)
    record_max_length(out, info.settings.max_length)
    return out


def _print_onnx(out: Path, manifest: dict) -> None:
    what = manifest["family"] or "encoder"
    print(f"ONNX ({what}, opset {manifest['opset']}): {out}")
    for precision, entry in manifest["files"].items():
        diff = manifest["max_abs_diff_vs_pytorch"].get(precision)
        shown = f", max |diff| vs PyTorch {diff:.1e}" if diff is not None else ""
        print(f"  {precision:<5} {entry['file']:<18} {entry['bytes'] / 2**20:7.1f} MiB{shown}")
    print(f"  default: {manifest['default']}; manifest: {out / 'electra_onnx.json'}")
