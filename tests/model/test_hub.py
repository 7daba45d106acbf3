"""Models by their Hub ids (``org/name[@revision]``), offline, on a hand-laid cache.

The cache is laid out exactly as ``huggingface_hub`` lays it out
(``models--org--name/refs/REV`` holding a commit sha, ``snapshots/SHA/...``),
``HF_HUB_OFFLINE`` is on and ``HF_HUB_CACHE`` points at it, so nothing touches
the network. Shows: fine-tuning (then evaluate, predict, export) by Hub id,
``@revision`` picking its snapshot, a local directory winning over an id of the
same spelling, pickled-only repos refused, clear messages for a missing or
malformed id, and the provenance (repo id, commit sha, sha256) in the records.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from builders import offline_hub_cache, publish_to_hub_cache, tiny_model, write_tokenizer_dir

from electra.cli import main
from electra.model.hub import HubModelError, resolve_model_path, split_hub_id
from electra.pretrain.config import InitConfig
from electra.pretrain.continued import origin, resolve_init
from electra.pretrain.modelcard import _origin_lines
from electra.system.files import sha256_file

SHA_A = "a" * 40
SHA_B = "b" * 40
WORDS = ["good", "bad", "fine", "great", "awful", "movie", "film", "plot", "very", "not"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]


@pytest.fixture()
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hub cache, offline."""
    return offline_hub_cache(tmp_path / "hf-cache", monkeypatch)


def tiny_dir(path: Path, seed: int = 0) -> Path:
    """A tiny random discriminator with a ten-word lowercase vocabulary."""
    tok = write_tokenizer_dir(path.parent / f"{path.name}-tok", VOCAB, lowercase=True)
    return tiny_model(path, tok, len(VOCAB), seed=seed)


def test_hub_ids_and_paths_are_told_apart() -> None:
    assert split_hub_id("org/name") == ("org/name", "")
    assert split_hub_id("org/name@v1.0") == ("org/name", "v1.0")
    assert split_hub_id("org/name@refs/pr/3") == ("org/name", "refs/pr/3")
    for path in ("./org/name", "/abs/dir", "a/b/c", "name", "../x/y", "org/name@"):
        assert split_hub_id(path) is None


def test_finetune_evaluate_predict_export_by_hub_id(
    hub_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``electra finetune --model org/tiny`` trains from the cache and records where from."""
    snapshot = publish_to_hub_cache(hub_cache, "org/tiny", tiny_dir(tmp_path / "m"), SHA_A, "main")
    monkeypatch.chdir(tmp_path)
    torch.set_num_threads(1)
    rows = [("good movie", "pos"), ("bad film", "neg"), ("very great plot", "pos")] * 8
    train = tmp_path / "train.csv"
    train.write_text("text,label\n" + "".join(f"{t},{v}\n" for t, v in rows), "utf-8")
    out = tmp_path / "out"
    args = f"finetune --model org/tiny --train-file {train} --text-column text --label-column "
    args += f"label -o {out} --epochs 1 --max-length 16 --batch-size 8 --device cpu "
    args += "--no-progress --no-floors"
    assert main(args.split()) == 0
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    source = res["model"]["source"]
    assert source["kind"] == "hub" and source["repo_id"] == "org/tiny"
    assert source["revision"] == SHA_A and source["requested_revision"] == "main"
    weights = snapshot / "model.safetensors"
    assert source["files_sha256"] == {"model.safetensors": sha256_file(weights)}
    info = json.loads((out / "model" / "electra_task.json").read_text(encoding="utf-8"))
    assert info["source_model"] == f"org/tiny@{SHA_A}"
    # the fine-tuned model, published in turn: evaluate, predict and export take its id
    publish_to_hub_cache(hub_cache, "org/tuned", out / "model", SHA_B, "main")
    assert main(["evaluate", "--model", "org/tuned", "--split", "dev", "--no-progress"]) == 0
    scored = json.loads((tmp_path / "eval-dev.json").read_text(encoding="utf-8"))
    assert scored["model_source"]["revision"] == SHA_B  # written here, not into the cache
    inp = tmp_path / "in.txt"
    inp.write_text("good movie\nbad plot\n", encoding="utf-8")
    pred = ["predict", "--model", "org/tuned", "--input", str(inp), "--no-progress"]
    assert main([*pred, "-o", str(tmp_path / "p.jsonl")]) == 0
    assert main(["export", "org/tuned", "-o", str(tmp_path / "copy")]) == 0
    assert (tmp_path / "copy" / "model.safetensors").is_file()


def test_revision_picks_its_snapshot(hub_cache: Path, tmp_path: Path) -> None:
    publish_to_hub_cache(hub_cache, "org/tiny", tiny_dir(tmp_path / "a", seed=0), SHA_A, "main")
    publish_to_hub_cache(hub_cache, "org/tiny", tiny_dir(tmp_path / "b", seed=1), SHA_B, "v1.0")
    main_ = resolve_model_path("org/tiny")
    tagged = resolve_model_path("org/tiny@v1.0")
    pinned = resolve_model_path(f"org/tiny@{SHA_A}")
    assert main_.revision == SHA_A and main_.path.name == SHA_A
    assert tagged.revision == SHA_B and tagged.requested == "v1.0"
    assert pinned.path == main_.path
    assert tagged.files_sha256 != main_.files_sha256  # other weights, other checksums
    with pytest.raises(HubModelError, match="huggingface-cli download org/tiny --revision v9"):
        resolve_model_path("org/tiny@v9")


def test_local_directory_wins(hub_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    publish_to_hub_cache(hub_cache, "org/tiny", tiny_dir(tmp_path / "hub"), SHA_A, "main")
    monkeypatch.chdir(tmp_path)
    local = tiny_dir(tmp_path / "org" / "tiny", seed=3)
    resolved = resolve_model_path("org/tiny")
    assert not resolved.from_hub and resolved.path.resolve() == local.resolve()
    assert resolved.source() == {"kind": "local", "path": str(local.resolve())}


def test_pickled_only_repo_is_refused(hub_cache: Path, tmp_path: Path) -> None:
    model = tiny_dir(tmp_path / "m")
    snapshot = publish_to_hub_cache(hub_cache, "org/pickled", model, SHA_A, "main")
    (snapshot / "model.safetensors").unlink()
    (snapshot / "pytorch_model.bin").write_bytes(b"not to be unpickled")
    with pytest.raises(HubModelError, match="only pytorch_model.bin; only safetensors"):
        resolve_model_path("org/pickled")
    (snapshot / "pytorch_model.bin").unlink()  # a snapshot cached without its weights
    with pytest.raises(HubModelError, match="snapshots/a+ has no safetensors weights"):
        resolve_model_path("org/pickled")


def test_missing_and_malformed_ids_say_what_to_do(
    hub_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(HubModelError) as exc:
        resolve_model_path("org/absent")
    message = str(exc.value)
    assert "org/absent" in message and str(hub_cache) in message
    assert "huggingface-cli download org/absent" in message and "HF_HUB_OFFLINE" in message
    with pytest.raises(HubModelError, match="not a Hugging Face Hub id"):
        resolve_model_path("org/na me")
    with pytest.raises(HubModelError, match="not a Hugging Face Hub id"):
        resolve_model_path("org/name@")
    assert main(["finetune", "--task", "nsmc", "--model", "org/absent", "--no-progress"]) == 2
    assert "huggingface-cli download org/absent" in capsys.readouterr().err


def test_continued_pretraining_records_the_hub_source(hub_cache: Path, tmp_path: Path) -> None:
    """``--init-from org/tiny``: read from the snapshot, recorded as repo and commit."""
    snapshot = publish_to_hub_cache(hub_cache, "org/tiny", tiny_dir(tmp_path / "m"), SHA_A, "main")
    init, sources = resolve_init(InitConfig(discriminator="org/tiny"))
    assert Path(init.discriminator) == snapshot and init.generator == ""
    start = origin(init, "tok", sources)
    assert start["discriminator_source"]["repo_id"] == "org/tiny"
    assert start["discriminator_source"]["revision"] == SHA_A
    assert start["discriminator_sha256"] == sha256_file(snapshot / "model.safetensors")
    card = "\n".join(_origin_lines(start))
    assert f"`org/tiny@{SHA_A}`" in card and start["discriminator_sha256"] in card
