"""The download helper, on local file:// URLs only (no network in tests)."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest
from builders import DATA

from electra.cli import main
from electra.finetune.download import (
    DATASETS,
    GROUPS,
    DownloadError,
    Source,
    build_mrpc,
    download,
)
from electra.finetune.tasks import DataOptions, load_task_data


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_downloads_check_and_log(tmp_path: Path) -> None:
    src = DATA / "ner" / "wnut17" / "emerging.dev.conll"
    good = Source("ner/wnut17/emerging.dev.conll", (src.as_uri(),), sha256=_sha(src))
    target = tmp_path / "data"
    lines: list[str] = []
    entries = download(["x"], target, registry={"x": [good]}, log=lines.append)
    out = target / good.dest
    assert out.read_bytes() == src.read_bytes()
    assert entries[0]["status"] == "downloaded" and entries[0]["url"] == src.as_uri()
    logged = json.loads((target / "DOWNLOADS.json").read_text())
    assert logged[0]["sha256"] == _sha(src)
    # present and matching: not fetched again
    assert download(["x"], target, registry={"x": [good]}, log=lines.append)[0]["status"] == (
        "present"
    )
    # a checksum mismatch on every URL fails and leaves nothing behind
    bad = Source("ner/other.conll", (src.as_uri(),), sha256="0" * 64)
    with pytest.raises(DownloadError, match="SHA-256"):
        download(["y"], target, registry={"y": [bad]}, log=lines.append)
    assert not (target / "ner" / "other.conll").exists()
    assert not list((target / "ner").glob(".*part"))
    # the first URL fails, the mirror works
    mirror = Source(
        "a/b.conll", ((tmp_path / "missing").as_uri(), src.as_uri()), size=src.stat().st_size
    )
    assert download(["z"], target, registry={"z": [mirror]}, log=lines.append)[0]["url"] == (
        src.as_uri()
    )
    with pytest.raises(ValueError, match="unknown dataset 'nope'"):
        download(["nope"], target, registry={"x": [good]})


def test_zip_member_and_mrpc_build(tmp_path: Path) -> None:
    mrpc = DATA / "glue" / "MRPC"
    archive = tmp_path / "MRPC.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(mrpc / "msr_paraphrase_train.txt", "MRPC/msr_paraphrase_train.txt")
    reg = {
        "mrpc": [
            Source(
                "glue/MRPC/msr_paraphrase_train.txt",
                (archive.as_uri(),),
                sha256=_sha(mrpc / "msr_paraphrase_train.txt"),
                zip_member="MRPC/msr_paraphrase_train.txt",
            ),
            Source("glue/MRPC/dev_ids.tsv", ((mrpc / "dev_ids.tsv").as_uri(),)),
        ]
    }
    data = tmp_path / "data"
    download(["mrpc"], data, registry=reg, log=lambda _: None)
    build_mrpc(data / "glue" / "MRPC")
    train = (data / "glue" / "MRPC" / "train.tsv").read_text().splitlines()
    dev = (data / "glue" / "MRPC" / "dev.tsv").read_text().splitlines()
    assert (len(train) - 1, len(dev) - 1) == (3668, 408)  # GLUE's canonical split
    d = load_task_data("mrpc", DataOptions(data_dir=str(data)))
    assert len(d.splits.train) + len(d.splits.dev) == 3668 and len(d.splits.test) == 408


def test_registry_matches_the_task_layout() -> None:
    for name, sources in DATASETS.items():
        for s in sources:
            assert all(u.startswith("https://") for u in s.urls), (name, s.urls)
            assert s.sha256 is None or len(s.sha256) == 64
            assert s.sha256 or s.min_size > 1000  # every file has some check
            staged = DATA / s.dest
            if staged.is_file() and s.sha256:  # our pinned checksums are the staged files'
                assert _sha(staged) == s.sha256, s.dest
    assert set(GROUPS["glue"]) <= set(DATASETS)
    assert main(["download", "--list-datasets"]) == 0
    assert main(["download", "nonexistent"]) == 2
