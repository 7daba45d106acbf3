"""Shards whose bytes changed after ``prepare``: named on open when the size is wrong,
and by ``electra prepare --verify DIR`` (every sha256 against the manifest) always."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from electra.blocks.options import PrepareCommand
from electra.blocks.prepare import prepare
from electra.blocks.read import open_blocks, verify_blocks
from electra.cli import main
from electra.text.corpus import CorpusError


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, ko_law: Path, tiny_tokenizer: Path) -> Path:
    out = tmp_path_factory.mktemp("verify") / "blocks"
    return prepare(
        PrepareCommand(
            inputs=[str(ko_law)],
            tokenizer=str(tiny_tokenizer),
            output=str(out),
            max_length=64,
            validation_fraction=0.1,
            workers=1,
            shard_size=40,
            progress=False,
        )
    )


def _copy(small: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(small, copy)
    return copy


def test_verify_passes_whole_blocks_with_a_progress_bar(small: Path, capsys) -> None:
    shards = len(list(small.glob("*.npy")))
    assert shards >= 4 and list(small.glob("validation-*.npy"))
    assert main(["prepare", "--verify", str(small)]) == 0
    out, err = capsys.readouterr()
    assert f"{small}: ok, all {shards} shards match the sha256 in manifest.json" in out
    assert "verify" in err and "B/s" in err  # tqdm's bar, in bytes


def test_verify_names_every_bad_shard_and_fails(small: Path, tmp_path: Path, capsys) -> None:
    copy = _copy(small, tmp_path)
    flipped, cut = copy / "train-00001.npy", copy / "train-00002.npy"
    raw = bytearray(flipped.read_bytes())
    raw[500] ^= 0x01  # a valid id still: only the checksum can tell
    flipped.write_bytes(bytes(raw))
    cut.write_bytes(cut.read_bytes()[:-64])
    assert main(["prepare", "--verify", str(copy), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert f"bad: {flipped}: sha256 differs from manifest.json" in err
    assert f"bad: {cut}: truncated shard" in err
    assert f"{copy}: 2 of {len(list(copy.glob('*.npy')))} shards do not match" in err
    count, problems = verify_blocks(copy)
    assert len(problems) == 2 and count == len(list(copy.glob("*.npy")))


def test_a_shard_of_the_wrong_size_is_named_when_opened(small: Path, tmp_path: Path) -> None:
    copy = _copy(small, tmp_path)
    shard = copy / "train-00000.npy"
    size = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[:-1])
    with pytest.raises(CorpusError, match=rf"train-00000.npy: truncated shard \({size - 1:,} b"):
        open_blocks(copy)
    shard.write_bytes(shard.read_bytes() + b"\0\0")
    with pytest.raises(CorpusError, match=f"train-00000.npy: shard longer .*make {size:,}"):
        open_blocks(copy)


def test_verify_is_given_alone(small: Path, tmp_path: Path, capsys) -> None:
    assert main(["prepare", "x.txt", "--verify", str(small)]) == 2
    assert "give it alone" in capsys.readouterr().err
    assert main(["prepare", "x.txt"]) == 2
    assert "prepare needs --tokenizer, --output/-o (or --verify DIR)" in capsys.readouterr().err
    assert main(["prepare", "--verify", str(tmp_path)]) == 2
    assert "no manifest.json" in capsys.readouterr().err


def test_tokenizer_files_replaced_after_prepare_are_refused(small: Path, tmp_path: Path) -> None:
    """Pre-training checks the tokenizer files in the blocks directory (what the export copies
    into the model) against the manifest: the ones prepare wrote pass, others are named."""
    from builders import tiny_config

    from electra.pretrain.trainer import Trainer

    copy = tmp_path / "blocks"
    shutil.copytree(small, copy)
    open_blocks(copy, "train").check_tokenizer()  # as prepare wrote them
    import json

    body = json.loads((copy / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = body["model"]["vocab"]  # another vocabulary: two tokens' ids swapped
    a, b = list(vocab)[100:102]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (copy / "tokenizer.json").write_text(json.dumps(body, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(CorpusError, match=r"tokenizer\.json: not the tokenizer these blocks"):
        open_blocks(copy, "train").check_tokenizer()
    with pytest.raises(CorpusError, match="prepare the blocks again"):
        Trainer(tiny_config(copy, tmp_path / "run", "optim.max_steps=1")).fit()
