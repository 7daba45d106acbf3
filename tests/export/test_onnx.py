"""ONNX export, the torch-free runtime and ``electra predict --backend onnx`` on tiny models.

Each family's tiny model (random weights, real English vocabulary) is saved
the way ``electra finetune`` saves it, exported once per session, and
checked against PyTorch: raw outputs on a padded batch, and the records of
``electra predict`` with both backends.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import cli_argv, cli_env, read_jsonl

from electra.cli import main
from electra.finetune.modeling import TaskInfo, get_family, load_finetuned, save_finetuned
from electra.model.config import preset
from electra.model.encoder import ElectraDiscriminator, ElectraModel
from electra.model.hf import export_discriminator

pytest.importorskip("onnxruntime")
from electra.export.onnx import export_onnx  # noqa: E402
from electra.inference.runtime import OnnxModel, pad_batch  # noqa: E402

FAMILIES = {
    "classification": (["negative", "positive"], {"max_length": 16}),
    "regression": ([], {"max_length": 24}),
    "tagging": (["O", "B-loc", "I-loc"], {"max_length": 16}),
    "qa": ([], {"max_length": 40, "doc_stride": 12, "max_query_length": 8}),
}
LONG = "the film was long and slow and the story went nowhere but the actors tried hard " * 3


def vocab_size(tok_dir: Path) -> int:
    return len([t for t in (tok_dir / "vocab.txt").read_text(encoding="utf-8").split("\n") if t])


def tiny_task_model(root: Path, tok_dir: Path, family: str, name: str = "", **shape) -> Path:
    """A random tiny model with a task head, saved as ``electra finetune`` saves one."""
    labels, features = FAMILIES[family]
    torch.manual_seed(1)
    encoder = ElectraModel(
        preset("tiny", vocab_size=vocab_size(tok_dir), max_position_embeddings=64, **shape)
    )
    model = get_family(family).build_model(encoder, max(1, len(labels)))
    info = TaskInfo(task="custom", family=family, labels=labels, features=features)
    return save_finetuned(model, root / (name or family), info, tok_dir)


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory, en_tokenizer_dir: Path) -> dict:  # noqa: F811
    """family -> (model dir, ONNX dir with fp32 and int8); plus the bare encoder."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("onnx")
    out = {}
    for family in FAMILIES:
        model = tiny_task_model(root / "models", en_tokenizer_dir, family)
        export_onnx(model, root / "onnx" / family, quantize="int8")
        out[family] = (model, root / "onnx" / family)
    torch.manual_seed(2)
    cfg = preset("tiny", vocab_size=vocab_size(en_tokenizer_dir), max_position_embeddings=64)
    enc = export_discriminator(ElectraDiscriminator(cfg), root / "models" / "enc", en_tokenizer_dir)
    export_onnx(enc, root / "onnx" / "encoder")
    out["encoder"] = (enc, root / "onnx" / "encoder")
    # ConvBERT's mixed attention (its span convolutions mask the padding too).
    conv = tiny_task_model(
        root / "models", en_tokenizer_dir, "classification", "convbert", conv_kernel_size=3
    )
    export_onnx(conv, root / "onnx" / "convbert")
    out["convbert"] = (conv, root / "onnx" / "convbert")
    return out


def padded_features(model: OnnxModel) -> list[dict]:
    """Three texts of different lengths (one truncated): a batch with padding."""
    texts = ["a good movie", "the worst film i have seen this year , sadly", LONG]
    from electra.finetune.common import prepared_tokenizer

    tok = prepared_tokenizer(model.tokenizer, 16)
    encs = tok.encode_batch(texts)
    return [{"input_ids": e.ids, "token_type_ids": e.type_ids} for e in encs]


@pytest.mark.parametrize("family", [*FAMILIES, "encoder", "convbert"])
def test_fp32_matches_pytorch_on_a_padded_batch(exported: dict, family: str) -> None:
    model_dir, onnx_dir = exported[family]
    rt = OnnxModel.load(onnx_dir, precision="fp32")
    feats = padded_features(rt)
    got = rt.run(feats, batch_size=8)  # one batch: rows padded to the longest
    batch = pad_batch(feats, rt.pad_id)
    assert batch["attention_mask"].min() == 0  # really padded
    if family == "encoder":
        from electra.model.hf import load_encoder

        torch_model = load_encoder(model_dir)[0].eval()
    else:
        torch_model = load_finetuned(model_dir).model
    with torch.inference_mode():
        ref = torch_model(*(torch.from_numpy(batch[k]) for k in batch)).numpy()
    for i, f in enumerate(feats):
        pooled = family in ("classification", "regression", "convbert")
        want = ref[i] if pooled else ref[i, : len(f["input_ids"])]
        assert got[i].shape == want.shape
        np.testing.assert_allclose(got[i], want, atol=1e-4, rtol=0)


@pytest.fixture(scope="module")
def convbert_k9(tmp_path_factory: pytest.TempPathFactory, en_tokenizer_dir: Path) -> Path:  # noqa: F811
    """The ONNX export of a ConvBERT classifier with the cpu recipe's conv_kernel_size 9 and
    non-trivial weights (at init the padding's effect on the logits is below 1e-5)."""
    root = tmp_path_factory.mktemp("onnx_k9")
    torch.manual_seed(3)
    cfg = preset(
        "tiny",
        vocab_size=vocab_size(en_tokenizer_dir),
        max_position_embeddings=64,
        conv_kernel_size=9,
    )
    model = get_family("classification").build_model(ElectraModel(cfg), 2)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    labels, features = FAMILIES["classification"]
    info = TaskInfo(task="custom", family="classification", labels=labels, features=features)
    save_finetuned(model, root / "model", info, en_tokenizer_dir)
    export_onnx(root / "model", root / "onnx")
    return root / "onnx"


def test_a_text_gets_the_same_output_alone_and_in_a_padded_batch(convbert_k9: Path) -> None:
    """The exported graph keeps the encoder's masking of padding (ConvBERT's convolutions
    included): each text's logits alone equal its logits padded beside longer texts."""
    rt = OnnxModel.load(convbert_k9, precision="fp32")
    feats = padded_features(rt)
    together = rt.run(feats, batch_size=8)
    for f, got in zip(feats, together, strict=True):
        np.testing.assert_allclose(got, rt.run([f], batch_size=1)[0], atol=1e-5, rtol=0)


def test_manifest_and_side_files(exported: dict) -> None:
    _, onnx_dir = exported["classification"]
    m = json.loads((onnx_dir / "electra_onnx.json").read_text(encoding="utf-8"))
    assert m["opset"] == 17 and m["family"] == "classification" and m["default"] == "int8"
    assert m["inputs"]["input_ids"]["axes"] == ["batch", "sequence"]
    assert m["max_abs_diff_vs_pytorch"]["fp32"] < 1e-4
    for precision, entry in m["files"].items():
        assert (onnx_dir / entry["file"]).stat().st_size == entry["bytes"], precision
    assert m["files"]["int8"]["bytes"] < m["files"]["fp32"]["bytes"] / 2
    config = json.loads((onnx_dir / "config.json").read_text(encoding="utf-8"))
    assert config["id2label"] == {"0": "negative", "1": "positive"}
    tok_cfg = json.loads((onnx_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert tok_cfg["model_max_length"] == 16
    assert (onnx_dir / "vocab.txt").is_file() and (onnx_dir / "electra_task.json").is_file()


INPUTS = {
    "classification": ("in.txt", "a good movie\nthe worst film ever , sadly\n" + LONG + "\n"),
    "regression": ("in.txt", "a man plays\ta man is playing\nthe sky is blue\tgrass\n"),
    "tagging": ("in.txt", "we went to paris last week\nnew york is big\n" + LONG + "\n"),
    "qa": (
        "in.jsonl",
        json.dumps({"id": "q1", "question": "where did we go ?", "context": LONG + " paris"})
        + "\n"
        + json.dumps({"id": "q2", "question": "who tried ?", "context": "the actors tried"})
        + "\n",
    ),
}


def predict_records(model: Path, inp: Path, out: Path, *extra: str) -> list[dict]:
    code = main(["predict", "--model", str(model), "-i", str(inp), "-o", str(out)] + list(extra))
    assert code == 0
    return read_jsonl(out)


def assert_same_records(a: list[dict], b: list[dict], family: str) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        if family == "classification":
            assert x["label"] == y["label"]
            for k in x["probabilities"]:
                assert x["probabilities"][k] == pytest.approx(y["probabilities"][k], abs=1e-4)
        elif family == "regression":
            assert x["score"] == pytest.approx(y["score"], abs=1e-4)
        elif family == "tagging":
            assert x["tags"] == y["tags"] and x["entities"] == y["entities"]
        else:
            assert (x["answer"], x["start"], x["end"]) == (y["answer"], y["start"], y["end"])
            assert x["score"] == pytest.approx(y["score"], abs=1e-4)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_predict_onnx_equals_predict_torch(exported: dict, family: str, tmp_path: Path) -> None:
    model_dir, onnx_dir = exported[family]
    name, body = INPUTS[family]
    inp = tmp_path / name
    inp.write_text(body, encoding="utf-8")
    common = ["--no-progress", "--batch-size", "2"]
    ours = predict_records(model_dir, inp, tmp_path / "t.jsonl", *common, "--device", "cpu")
    onnx = predict_records(
        onnx_dir, inp, tmp_path / "o.jsonl", *common, "--backend", "onnx", "--precision", "fp32"
    )
    assert len(ours) == len([ln for ln in body.split("\n") if ln])
    assert_same_records(ours, onnx, family)
    # int8 predicts the same kind of record, close to fp32 on these random tiny models
    int8 = predict_records(onnx_dir, inp, tmp_path / "i.jsonl", "--backend", "onnx")
    assert len(int8) == len(onnx) and int8[0].keys() == onnx[0].keys()


def test_python_api_predict_and_truncation_count(exported: dict) -> None:
    _, onnx_dir = exported["classification"]
    rt = OnnxModel.load(onnx_dir, precision="fp32", threads=1)
    recs = rt.predict(["a good movie", LONG])
    assert [r["text"] for r in recs] == ["a good movie", LONG]
    assert rt.last_truncated == 1  # LONG is over 16 tokens
    assert rt.predict("a good movie") == recs[:1]
    tagged = OnnxModel.load(exported["tagging"][1]).predict("we went to paris")
    assert tagged[0]["tokens"] == ["we", "went", "to", "paris"] and len(tagged[0]["tags"]) == 4


def test_fp16_export_runs_close_to_fp32(exported: dict, tmp_path: Path) -> None:
    model_dir, onnx_dir = exported["classification"]
    manifest = export_onnx(model_dir, tmp_path / "fp16", quantize="fp16")
    assert manifest["default"] == "fp16" and manifest["max_abs_diff_vs_pytorch"]["fp16"] < 1e-2
    assert manifest["files"]["fp16"]["bytes"] < 0.7 * manifest["files"]["fp32"]["bytes"]
    texts = ["a good movie", LONG]
    half = OnnxModel.load(tmp_path / "fp16").predict(texts)
    full = OnnxModel.load(onnx_dir, precision="fp32").predict(texts)
    for h, f in zip(half, full, strict=True):
        for k, p in f["probabilities"].items():
            assert h["probabilities"][k] == pytest.approx(p, abs=1e-2)


BLOCK_TORCH = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this test")
sys.meta_path.insert(0, Block())
"""


def test_runtime_and_cli_work_where_torch_cannot_be_imported(
    exported: dict, tmp_path: Path
) -> None:
    _, onnx_dir = exported["classification"]
    inp = tmp_path / "in.txt"
    inp.write_text("a good movie\n\n" + LONG + "\n", encoding="utf-8")
    script = BLOCK_TORCH + (
        "try:\n    import torch\nexcept ImportError:\n    pass\nelse:\n    raise SystemExit(9)\n"
        "from electra.inference.runtime import OnnxModel\n"
        f"recs = OnnxModel.load({str(onnx_dir)!r}, precision='fp32').predict(['a good movie'])\n"
        "from electra.cli import main\n"
        f"code = main(['predict', '--backend', 'onnx', '--model', {str(onnx_dir)!r}, "
        f"'-i', {str(inp)!r}, '-o', {str(tmp_path / 'o.jsonl')!r}, '--precision', 'fp32'])\n"
        "assert not any(m == 'torch' or m.startswith('torch.') for m in sys.modules)\n"
        "import json; print(json.dumps({'code': code, 'recs': recs}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], env=cli_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] == 0
    lines = read_jsonl(tmp_path / "o.jsonl")
    assert len(lines) == 3 and lines[1]["error"] == "empty line"
    assert lines[0] == result["recs"][0]
    torch_rec = OnnxModel.load(onnx_dir, precision="fp32").predict(["a good movie"])[0]
    assert lines[0] == torch_rec


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        cli_argv(*args), env=cli_env(), capture_output=True, text=True, timeout=120
    )


def test_bad_inputs_have_clear_messages(exported: dict, tmp_path: Path) -> None:
    model_dir, onnx_dir = exported["classification"]
    enc_model, enc_onnx = exported["encoder"]
    good = tmp_path / "in.txt"
    good.write_text("a good movie\n", encoding="utf-8")
    # an encoder export has no task head
    p = run_cli("predict", "--backend", "onnx", "--model", str(enc_onnx), "-i", str(good))
    assert p.returncode == 2 and str(enc_onnx) in p.stderr and "task head" in p.stderr
    # a PyTorch directory given to the ONNX backend says how to export it
    p = run_cli("predict", "--backend", "onnx", "--model", str(model_dir), "-i", str(good))
    assert p.returncode == 2 and "electra export" in p.stderr and "--onnx" in p.stderr
    # a directory without a task head given to the PyTorch backend
    p = run_cli("predict", "--model", str(enc_model), "-i", str(good), "--device", "cpu")
    assert p.returncode == 2 and "task head" in p.stderr
    # --onnx on something that is not a model directory
    p = run_cli("export", str(tmp_path), "--onnx", "-o", str(tmp_path / "x"))
    assert p.returncode == 2 and "no model config.json" in p.stderr
    # bytes that are not UTF-8: the file and the line
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine line\nalso fine\nbroken \xff\xfe here\n")
    p = run_cli("predict", "--backend", "onnx", "--model", str(onnx_dir), "-i", str(bad))
    assert p.returncode == 2 and f"{bad}, line 3" in p.stderr and "UTF-8" in p.stderr


def test_empty_and_long_lines_are_reported_never_dropped(exported: dict, tmp_path: Path) -> None:
    _, onnx_dir = exported["classification"]
    inp = tmp_path / "in.txt"
    inp.write_text("first\n\n   \n" + LONG + "\nlast", encoding="utf-8")  # no final newline
    out = tmp_path / "out.jsonl"
    p = run_cli(
        "predict", "--backend", "onnx", "--model", str(onnx_dir), "-i", str(inp), "-o", str(out)
    )
    assert p.returncode == 0, p.stderr
    lines = read_jsonl(out)
    assert [r.get("error") for r in lines] == [None, "empty line", "empty line", None, None]
    assert [r.get("line") for r in lines[1:3]] == [2, 3]
    assert f"{inp}, line 2: empty line" in p.stderr and f"{inp}, line 3" in p.stderr
    assert "1 of 3 inputs are longer than the model's max length (16 tokens)" in p.stderr
    summary = json.loads(out.with_suffix(".results.json").read_text(encoding="utf-8"))
    assert summary["truncated"] == 1 and summary["lines"] == 5 and summary["examples"] == 3


def test_entity_chunks_match_seqeval() -> None:
    seqeval = pytest.importorskip("seqeval.metrics.sequence_labeling")
    from electra.finetune.features import chunks

    rng = np.random.default_rng(0)
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    for _ in range(300):
        seq = [tags[k] for k in rng.integers(0, len(tags), size=int(rng.integers(1, 12)))]
        assert chunks(seq) == seqeval.get_entities(seq), seq


def test_export_of_a_run_is_unchanged_and_onnx_of_a_run_explains(
    tiny_run: Path, tmp_path: Path
) -> None:
    """`electra export RUN` still writes Hugging Face directories; `--onnx RUN` says what to do."""
    out = tmp_path / "hf"
    assert main(["export", str(tiny_run), "-o", str(out)]) == 0
    assert (out / "discriminator" / "config.json").is_file()
    assert (out / "generator" / "config.json").is_file()
    p = run_cli("export", str(tiny_run), "--onnx", "-o", str(tmp_path / "x"))
    assert p.returncode == 2 and "hf/discriminator" in p.stderr
