"""A full disk during ``prepare``: every finished shard stays whole, no temporary is
left, the error names the shard, the directory and the sizes, and says the truth about
running again (``prepare`` does not resume: ``--overwrite`` builds the blocks again)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from builders import FullDisk

from electra.blocks.format import MANIFEST
from electra.blocks.options import PrepareCommand
from electra.blocks.prepare import prepare
from electra.blocks.read import open_blocks
from electra.system.diskspace import DiskFullError
from electra.system.files import sha256_file
from electra.text.corpus import CorpusError
from electra.text.tokenizer import TOKENIZER_FILES

L, SHARD = 64, 200


def cmd(inputs: Path, tokenizer: Path, out: Path, **kw) -> PrepareCommand:
    return PrepareCommand(
        inputs=[str(inputs)],
        tokenizer=str(tokenizer),
        output=str(out),
        max_length=L,
        validation_fraction=0.0,
        workers=1,
        shard_size=SHARD,
        progress=False,
        **kw,
    )


def test_a_full_disk_in_prepare_keeps_the_finished_shards_whole(
    tmp_path: Path, mixed_corpus: Path, tiny_tokenizer: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = prepare(cmd(mixed_corpus, tiny_tokenizer, tmp_path / "ref"))
    shards = json.loads((ref / MANIFEST).read_text())["splits"]["train"]["shards"]
    assert len(shards) >= 4
    tokenizer_bytes = sum((ref / name).stat().st_size for name in TOKENIZER_FILES)
    shard_bytes = (ref / shards[0]["file"]).stat().st_size  # uint16: 128 + 200 * 64 * 2
    out = tmp_path / "out"
    with monkeypatch.context() as patched:
        FullDisk(tokenizer_bytes + int(2.5 * shard_bytes)).install(patched)
        with pytest.raises(DiskFullError) as info:
            prepare(cmd(mixed_corpus, tiny_tokenizer, out))
    message = str(info.value)
    assert f"while writing shard train-00002.npy to {out}: it needs about 25.7 kB" in message
    assert "The 2 shards finished before it are whole" in message
    assert "prepare does not resume" in message and "--overwrite" in message
    assert sorted(p.name for p in out.glob("*.npy")) == ["train-00000.npy", "train-00001.npy"]
    for done in shards[:2]:  # byte for byte the shards of the run that had space
        assert sha256_file(out / done["file"]) == done["sha256"]
        assert np.load(out / done["file"]).shape == (SHARD, L)
    assert not list(out.glob(".*.tmp")) and not (out / MANIFEST).exists()
    with pytest.raises(CorpusError, match="incomplete prepare run .*--overwrite"):
        prepare(cmd(mixed_corpus, tiny_tokenizer, out))  # what the message says is true
    prepare(cmd(mixed_corpus, tiny_tokenizer, out, overwrite=True))
    again = json.loads((out / MANIFEST).read_text())["splits"]["train"]["shards"]
    assert again == shards and len(open_blocks(out)) == len(open_blocks(ref))


def test_a_full_disk_writing_the_manifest_says_so(
    tmp_path: Path, ko_law: Path, tiny_tokenizer: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from electra.blocks import shards as shards_mod

    write = shards_mod.write_manifest

    def full_manifest(out: Path, body: str) -> None:
        disk = FullDisk(10)
        with monkeypatch.context() as patched:
            disk.install(patched)
            write(out, body)

    monkeypatch.setattr("electra.blocks.prepare.write_manifest", full_manifest)
    out = tmp_path / "out"
    with pytest.raises(DiskFullError, match=f"writing manifest.json to {out}: .*Every shard"):
        prepare(cmd(ko_law, tiny_tokenizer, out))
    assert not (out / MANIFEST).exists() and not list(out.glob(".*.tmp"))
