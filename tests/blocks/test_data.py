"""``electra prepare`` and the block reader on real Korean, English and NSMC text."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

import electra.blocks.build as build_mod
import electra.blocks.shards as data_mod
from electra.blocks.build import BlockPlan, BuildParams, build_document_blocks, split_sentences
from electra.blocks.format import MANIFEST
from electra.blocks.options import PrepareCommand
from electra.blocks.prepare import prepare
from electra.blocks.read import BlockLoader, batch_indices, open_blocks, stream_slice, token_types
from electra.text.corpus import CorpusError
from electra.text.tokenizer import build_tokenizer, load_tokenizer, save_tokenizer_files

L = 64


def cmd(inputs, tokenizer, out, **kw) -> PrepareCommand:
    base = dict(
        inputs=[str(p) for p in inputs],
        tokenizer=str(tokenizer),
        output=str(out),
        max_length=L,
        validation_fraction=0.1,
        strip_gutenberg=True,
        workers=1,
        shard_size=1000,
        progress=False,
    )
    base.update(kw)
    return PrepareCommand(**base)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, mixed_corpus: Path, tiny_tokenizer: Path) -> Path:
    out = tmp_path_factory.mktemp("prepared")
    return prepare(cmd([mixed_corpus], tiny_tokenizer, out))


def all_blocks(directory: Path, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    blocks = open_blocks(directory, split)
    return blocks.get(np.arange(len(blocks)))


# ---------------------------------------------------------------------------
# Blocks
# ---------------------------------------------------------------------------


def test_block_invariants(prepared: Path) -> None:
    blocks = open_blocks(prepared)
    assert blocks.block_length == L and len(blocks) > 500
    sp = blocks.special
    assert (sp.pad, sp.cls, sp.sep, sp.mask, sp.vocab_size) == (0, 2, 3, 4, 2000)
    ids, types = blocks.get(np.arange(len(blocks)))
    assert ids.shape == types.shape == (len(blocks), L)
    assert ids.dtype == types.dtype == np.int64
    assert (ids[:, 0] == sp.cls).all()
    n_sep = (ids == sp.sep).sum(1)
    assert set(np.unique(n_sep)) == {1, 2}
    lengths = (ids != sp.pad).sum(1)
    for row, t, n in zip(ids, types, lengths, strict=True):
        assert (row[n:] == sp.pad).all() and (row[:n] != sp.pad).all()  # padding only at the end
        assert row[n - 1] == sp.sep  # the block ends with [SEP]
        seps = np.flatnonzero(row == sp.sep)
        assert not np.isin(row[1 : seps[0]], [sp.cls, sp.mask]).any()
        assert (t[: seps[0] + 1] == 0).all() and (t[n:] == 0).all()
        if len(seps) == 2:
            assert seps[1] == n - 1 and seps[1] > seps[0] + 1  # B is not empty
            assert (t[seps[0] + 1 : n] == 1).all()
        else:
            assert (t == 0).all()
    # most blocks are full; some are short (random target, document ends); some single-segment
    assert (lengths == L).mean() > 0.5
    assert (lengths < L).any() and (n_sep == 1).any() and (n_sep == 2).mean() > 0.5


def test_manifest_describes_everything(prepared: Path, mixed_corpus: Path, tiny_tokenizer) -> None:
    m = json.loads((prepared / MANIFEST).read_text())
    assert m["format"] == "electra-blocks" and m["format_version"] == 1
    assert (m["block_length"], m["vocab_size"], m["dtype"]) == (L, 2000, "uint16")
    assert m["special_ids"] == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert m["seed"] == 0 and m["options"]["validation_fraction"] == 0.1
    assert m["tokenizer"]["do_lower_case"] is False and len(m["tokenizer"]["sha256"]) == 64
    for split in ("train", "validation"):
        counts = m["splits"][split]
        assert counts["blocks"] == sum(s["blocks"] for s in counts["shards"]) > 0
        assert counts["documents"] > 0 and counts["tokens"] > 0
        for shard in counts["shards"]:
            digest = hashlib.sha256((prepared / shard["file"]).read_bytes()).hexdigest()
            assert digest == shard["sha256"]
    assert len(m["splits"]["train"]["shards"]) > 1  # shard_size 1000
    assert m["skipped_lines"] == 0
    files = sorted(p for p in mixed_corpus.rglob("*") if p.is_file())
    assert [s["path"] for s in m["sources"]] == [str(p) for p in files]
    for src, p in zip(m["sources"], files, strict=True):
        assert src["bytes"] == p.stat().st_size
        assert src["sha256"] == hashlib.sha256(p.read_bytes()).hexdigest()
    # the tokenizer travels with the blocks
    assert (prepared / "vocab.txt").read_bytes() == (tiny_tokenizer / "vocab.txt").read_bytes()
    tok = load_tokenizer(prepared)
    assert tok.get_vocab() == load_tokenizer(tiny_tokenizer).get_vocab()
    open_blocks(prepared).verify()


def test_blocks_hold_the_corpus_text(prepared: Path, ko_wiki: Path, mixed_corpus: Path) -> None:
    import re

    tok = load_tokenizer(prepared)
    ids, _ = all_blocks(prepared)
    segments = []
    for row in ids:
        seps = np.flatnonzero(row == 3)
        spans = [row[1 : seps[0]]] + ([row[seps[0] + 1 : seps[1]]] if len(seps) == 2 else [])
        segments += [tok.decode(s.tolist(), skip_special_tokens=False) for s in spans]
    # Korean comes back as the same syllables (never jamo), and only text of the corpus
    source = "".join(p.read_text(encoding="utf-8") for p in mixed_corpus.rglob("*") if p.is_file())
    hangul = re.compile("[\uac00-\ud7a3]")
    assert set(hangul.findall("".join(segments))) <= set(hangul.findall(source))
    assert not re.search("[\u1100-\u11ff]", "".join(segments))
    # the first block of the first Wikipedia article starts with its title, then its text
    wiki = "".join(ko_wiki.read_text(encoding="utf-8").split())
    start = next(s for s in segments if s.startswith("지미 카터"))
    pieces = [p for p in "".join(start.split()).split("[UNK]") if p]  # rare characters: UNK
    assert sum(map(len, pieces)) > 30
    assert all(p in wiki for p in pieces[:3])


def test_split_is_by_document(prepared: Path) -> None:
    m = json.loads((prepared / MANIFEST).read_text())
    tr, va = m["splits"]["train"], m["splits"]["validation"]
    documents = sum(s["documents"] for s in m["sources"])
    assert tr["documents"] + va["documents"] == documents
    assert 0.03 < va["documents"] / documents < 0.2  # validation_fraction 0.1
    # full blocks (several sentences) of one split never appear in the other
    train, val = all_blocks(prepared, "train")[0], all_blocks(prepared, "validation")[0]
    full_train = {r.tobytes() for r in train if r[-1] != 0}
    full_val = {r.tobytes() for r in val if r[-1] != 0}
    assert full_val and not full_train & full_val


def test_same_seed_same_shards_any_workers(prepared, tmp_path, mixed_corpus, tiny_tokenizer):
    again = prepare(cmd([mixed_corpus], tiny_tokenizer, tmp_path / "w2", workers=2))
    other = prepare(cmd([mixed_corpus], tiny_tokenizer, tmp_path / "s1", seed=1))
    m0 = json.loads((prepared / MANIFEST).read_text())
    m2 = json.loads((again / MANIFEST).read_text())
    m1 = json.loads((other / MANIFEST).read_text())
    assert m0["splits"] == m2["splits"]  # same shards (sha256), counts, documents
    for shard in m0["splits"]["train"]["shards"]:
        assert (prepared / shard["file"]).read_bytes() == (again / shard["file"]).read_bytes()
    assert (
        m1["splits"]["train"]["shards"][0]["sha256"] != m0["splits"]["train"]["shards"][0]["sha256"]
    )


def test_reuse_overwrite_and_conflicts(tmp_path: Path, ko_law: Path, tiny_tokenizer, caplog):
    out = tmp_path / "out"
    prepare(cmd([ko_law], tiny_tokenizer, out, validation_fraction=0.0))
    stamp = (out / MANIFEST).stat().st_mtime_ns
    with caplog.at_level("INFO", logger="electra"):
        prepare(cmd([ko_law], tiny_tokenizer, out, validation_fraction=0.0, workers=2))
    assert "reusing it" in caplog.text
    assert (out / MANIFEST).stat().st_mtime_ns == stamp
    with pytest.raises(CorpusError, match="other inputs or options; use --overwrite"):
        prepare(cmd([ko_law], tiny_tokenizer, out, validation_fraction=0.0, max_length=32))
    prepare(cmd([ko_law], tiny_tokenizer, out, max_length=32, overwrite=True))
    assert open_blocks(out).block_length == 32
    assert not list(out.glob(".*.tmp"))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(CorpusError, match="busy: is not empty and is not a prepared directory"):
        prepare(cmd([ko_law], tiny_tokenizer, busy))


def test_interrupted_run_leaves_no_complete_looking_output(
    tmp_path: Path, mixed_corpus: Path, tiny_tokenizer: Path, monkeypatch
) -> None:
    out = tmp_path / "out"
    real_finish = data_mod.ShardWriter._finish
    calls = {"n": 0}

    def interrupted(self):
        calls["n"] += 1
        if calls["n"] == 3:
            assert self._tmp.exists()  # the third shard is half written...
            raise KeyboardInterrupt  # ...when Ctrl-C arrives
        return real_finish(self)

    monkeypatch.setattr(data_mod.ShardWriter, "_finish", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare(cmd([mixed_corpus], tiny_tokenizer, out))
    monkeypatch.undo()
    assert not (out / MANIFEST).exists()
    shards = sorted(out.glob("*.npy"))
    assert len(shards) == 2
    for shard in shards:  # every file with a shard name is a whole shard
        assert np.load(shard).shape == (1000, L)
    assert not list(out.glob(".*.tmp"))
    with pytest.raises(CorpusError, match="no manifest.json; .*interrupted"):
        open_blocks(out)
    with pytest.raises(CorpusError, match="incomplete prepare run .*--overwrite"):
        prepare(cmd([mixed_corpus], tiny_tokenizer, out))
    prepare(cmd([mixed_corpus], tiny_tokenizer, out, overwrite=True))
    assert len(open_blocks(out)) > 0 and not list(out.glob(".*.tmp"))


def test_shard_write_failure_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    writer = data_mod.ShardWriter(tmp_path, "train", 4, 3, "uint16")
    writer.add(np.ones((6, 3), np.uint16))  # one full shard, and two rows of the next
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [".train-00001.npy.tmp", "train-00000.npy"]

    def boom(fd):
        raise OSError("disk full")

    monkeypatch.setattr(data_mod.os, "fsync", boom)
    with pytest.raises(OSError, match="disk full"):
        writer.close()
    assert [p.name for p in tmp_path.iterdir()] == ["train-00000.npy"]
    assert np.load(tmp_path / "train-00000.npy").shape == (4, 3)


def test_npy_header_is_standard(tmp_path: Path) -> None:
    writer = data_mod.ShardWriter(tmp_path, "validation", 10, 5, "uint32")
    rows = np.arange(35, dtype=np.uint32).reshape(7, 5) + 70_000
    writer.add(rows[:3])
    writer.add(rows[3:])
    (shard,) = writer.close()
    loaded = np.load(tmp_path / "validation-00000.npy", mmap_mode="r")
    assert loaded.dtype == np.uint32 and (loaded == rows).all()
    assert shard == {
        "file": "validation-00000.npy",
        "blocks": 7,
        "sha256": hashlib.sha256((tmp_path / "validation-00000.npy").read_bytes()).hexdigest(),
    }


def test_damaged_shards_are_detected(prepared: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(prepared, copy)
    shard = copy / "train-00001.npy"
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 0xFF
    shard.write_bytes(bytes(raw))
    with pytest.raises(CorpusError, match="train-00001.npy: sha256 differs"):
        open_blocks(copy).verify()
    shard.write_bytes(bytes(raw[:1000]))
    with pytest.raises(CorpusError, match="train-00001.npy: truncated shard"):
        open_blocks(copy)
    shard.unlink()
    with pytest.raises(
        CorpusError, match="train-00001.npy: shard listed in the manifest is missing"
    ):
        open_blocks(copy)
    with pytest.raises(CorpusError, match="no split 'test'"):
        open_blocks(prepared, "test")


def test_uint32_when_the_vocabulary_is_large(tmp_path: Path, ko_law: Path) -> None:
    from tokenizers import Tokenizer

    base = load_tokenizer_from_law(ko_law, tmp_path)
    vocab = [t for t, _ in sorted(base.get_vocab().items(), key=lambda kv: kv[1])]
    # the specials first, then 69,600 fillers: every real token has an id above 65535
    vocab = vocab[:5] + [f"zz{i}" for i in range(69_600)] + vocab[5:]
    big = build_tokenizer(vocab, lowercase=False)
    assert isinstance(big, Tokenizer)
    save_tokenizer_files(big, tmp_path / "bigtok")
    out = prepare(cmd([ko_law], tmp_path / "bigtok", tmp_path / "out", validation_fraction=0))
    blocks = open_blocks(out)
    assert blocks.manifest["dtype"] == "uint32" and blocks.vocab_size == 70_000
    ids, _ = blocks.get(np.arange(len(blocks)))
    text = ids[ids > 4]
    assert len(text) > 1000 and (text > 65_535).all()
    tok = load_tokenizer(out)
    row = ids[0]
    sep = np.flatnonzero(row == 3)[0]
    assert tok.decode(row[1:sep].tolist()).startswith("대한민국헌법")


def load_tokenizer_from_law(ko_law: Path, tmp_path: Path):
    from electra.text.vocabulary import train_tokenizer

    train_tokenizer([ko_law], tmp_path / "small", vocab_size=400)
    return load_tokenizer(tmp_path / "small")


def test_special_strings_in_text_are_plain_text(tmp_path: Path, tiny_tokenizer: Path) -> None:
    p = tmp_path / "c.txt"
    p.write_text("문장 [SEP] 하나 [CLS] [MASK] [PAD].\n\n다른 문서 [SEP].\n")
    out = prepare(cmd([p], tiny_tokenizer, tmp_path / "out", validation_fraction=0))
    ids, _ = all_blocks(out)
    for row in ids:
        n = int((row != 0).sum())
        assert (row == 3).sum() <= 2 and row[n - 1] == 3 and (row == 4).sum() == 0
        assert (row[1 : n - 1] != 2).all()


# ---------------------------------------------------------------------------
# The builder itself
# ---------------------------------------------------------------------------


def test_split_sentences_korean_and_english() -> None:
    assert split_sentences("첫 문장이다. 두 번째 문장! 세 번째? 3.14는 수.\n새 줄") == [
        "첫 문장이다.",
        "두 번째 문장!",
        "세 번째?",
        "3.14는 수.",
        "새 줄",
    ]
    assert split_sentences('He said "Stop." Then he left... Fine.') == [
        'He said "Stop."',
        "Then he left...",
        "Fine.",
    ]


def test_builder_follows_the_official_recipe() -> None:
    params = BuildParams(128, cls=2, sep=3, pad=0, validation_fraction=0, dtype="uint16")
    stats = dict.fromkeys(build_mod._STAT_KEYS, 0)
    plan = BlockPlan()
    rng = random.Random(0)
    total = 0
    for _ in range(1200):  # documents of 20-40 sentences of 5-40 tokens
        lengths = [rng.randint(5, 40) for _ in range(rng.randint(20, 40))]
        starts = list(np.cumsum([0, *lengths[:-1]]) + total)
        total += sum(lengths)
        build_document_blocks(starts, lengths, random.Random(rng.random()), params, plan, stats)
    tokens = np.arange(total, dtype=np.int64) % 1000 + 10
    blocks = plan.assemble(tokens, params)
    n = stats["blocks"]
    assert n == len(blocks) > 5000
    assert 0.03 < stats["random_target"] / n < 0.07  # 5% random target lengths
    single = (blocks == 3).sum(1) == 1
    assert 0.08 < single.mean() < 0.2  # 10% single segment (+ document ends)
    assert stats["single_segment"] == single.sum()
    assert stats["tokens"] == int(((blocks != 0).sum(1) - 2 - (~single)).sum())
    # every token placed once, in order within each segment
    body = blocks[(blocks >= 10)]
    assert len(body) == stats["tokens"]


def test_long_sentences_are_cut_not_lost() -> None:
    params = BuildParams(64, cls=2, sep=3, pad=0, validation_fraction=0, dtype="uint16")
    stats = dict.fromkeys(build_mod._STAT_KEYS, 0)
    plan = BlockPlan()
    build_document_blocks([0], [1000], random.Random(1), params, plan, stats)
    assert stats["tokens"] + stats["tokens_dropped"] == 1000
    assert stats["tokens_dropped"] < 1000 * 0.1


def test_token_types_from_sep_positions() -> None:
    ids = np.array([[2, 7, 3, 8, 9, 3, 0], [2, 7, 7, 3, 0, 0, 0]])
    assert token_types(ids, 3).tolist() == [[0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0, 0]]


# ---------------------------------------------------------------------------
# Order: positions, ranks, resume
# ---------------------------------------------------------------------------


def test_stream_is_a_permutation_per_epoch() -> None:
    n = 103
    s = stream_slice(n, seed=5, start=0, count=3 * n)
    for e in range(3):
        assert sorted(s[e * n : (e + 1) * n]) == list(range(n))
        expected = np.random.default_rng([5, e]).permutation(n)
        assert (s[e * n : (e + 1) * n] == expected).all()
    assert not (s[:n] == s[n : 2 * n]).all()
    assert (stream_slice(n, 5, 150, 60) == s[150:210]).all()  # across an epoch boundary


def test_ranks_split_the_global_batch() -> None:
    n, seed, b, world = 50, 3, 4, 3
    for position in (0, 12, 48, 96, 1000):
        full = batch_indices(n, seed, position, b * world)
        parts = [batch_indices(n, seed, position, b, r, world) for r in range(world)]
        assert (np.concatenate(parts) == full).all()
    with pytest.raises(ValueError, match="rank 3 is not in a world of size 3"):
        batch_indices(n, seed, 0, b, 3, world)


def test_loader_one_process_equals_two_ranks_and_resumes(prepared: Path) -> None:
    blocks = open_blocks(prepared)
    n = len(blocks)
    G = 8
    single = BlockLoader(blocks, G, seed=7)
    ranks = [BlockLoader(blocks, G // 2, seed=7, rank=r, world_size=2) for r in range(2)]
    steps = n // G + 3  # crosses an epoch boundary
    saved = None
    for step in range(steps):
        one = next(single)
        two = [next(r) for r in ranks]
        for key in ("input_ids", "token_type_ids", "attention_mask"):
            assert one[key].dtype == two[0][key].dtype
            assert (one[key] == np.concatenate([t[key].numpy() for t in two])).all()
        assert single.position == ranks[0].position == ranks[1].position == (step + 1) * G
        if step == 5:
            saved = single.position
            expected = [next(single) for _ in range(3)]
            break
    mask = one["attention_mask"].numpy()
    assert (mask == (one["input_ids"].numpy() != 0)).all()
    ids, types = blocks.get(batch_indices(n, 7, 0, G))
    resumed = BlockLoader(blocks, G, seed=7, position=saved, prefetch=0)
    for batch in expected:
        got = next(resumed)
        assert (got["input_ids"].numpy() == batch["input_ids"].numpy()).all()
    assert resumed.state_dict() == {
        "position": saved + 3 * G,
        "seed": 7,
        "per_rank_batch": G,
        "world_size": 1,
    }
    first = BlockLoader(blocks, G, seed=7, prefetch=0)
    b0 = next(first)
    assert (b0["input_ids"].numpy() == ids).all() and (b0["token_type_ids"].numpy() == types).all()
    for loader in (single, resumed, first, *ranks):
        loader.close()


def test_loader_position_across_epochs(prepared: Path) -> None:
    blocks = open_blocks(prepared, "validation")
    n = len(blocks)
    loader = BlockLoader(blocks, 5, seed=1, position=n - 2, prefetch=3)
    batch = next(loader)
    idx = np.concatenate(
        [
            np.random.default_rng([1, 0]).permutation(n)[-2:],
            np.random.default_rng([1, 1]).permutation(n)[:3],
        ]
    )
    assert (batch["input_ids"].numpy() == blocks.get(idx)[0]).all()
    loader.close()


def test_get_reads_the_right_rows_across_shards(prepared: Path) -> None:
    blocks = open_blocks(prepared)
    shards = [np.load(prepared / s["file"]) for s in blocks.manifest["splits"]["train"]["shards"]]
    everything = np.concatenate(shards).astype(np.int64)
    idx = np.array([len(blocks) - 1, 0, 999, 1000, 1001, 5, 999])
    assert (blocks.get(idx)[0] == everything[idx]).all()
    empty_ids, empty_types = blocks.get(np.array([], dtype=np.int64))
    assert empty_ids.shape == empty_types.shape == (0, L)
    with pytest.raises(IndexError, match=f"block index {len(blocks)} out of range"):
        blocks.get([len(blocks)])
    with pytest.raises(IndexError, match="block index -1 out of range"):
        blocks.get([-1])


# ---------------------------------------------------------------------------
# CLI and bad input end to end
# ---------------------------------------------------------------------------


def test_cli_prepare_and_bad_inputs(tmp_path: Path, cli, ko_law: Path, tiny_tokenizer) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xea\xb0\x80 ok line.\n\xff broken\nanother line.\n")
    out = tmp_path / "out"
    base = ["prepare", str(ko_law), str(bad), "--tokenizer", str(tiny_tokenizer), "-o", str(out),
            "--max-length", "48", "--no-progress"]  # fmt: skip
    r = cli(*base)
    assert r.returncode == 2
    assert "bad.txt:2: invalid UTF-8" in r.stderr and "--on-error skip" in r.stderr
    assert not (out / MANIFEST).exists()
    r = cli(*base, "--on-error", "skip", "--overwrite")
    assert r.returncode == 0, r.stderr
    assert "train blocks" in r.stdout and "1 bad lines skipped" in r.stdout
    m = json.loads((out / MANIFEST).read_text())
    assert m["skipped_lines"] == 1 and m["sources"][1]["skipped_lines"] == 1
    assert "bad.txt:2" in m["sources"][1]["problems"][0]
    r = cli("prepare", str(tmp_path / "nothing.txt"), "--tokenizer", str(tiny_tokenizer),
            "-o", str(tmp_path / "x"))  # fmt: skip
    assert r.returncode == 2 and "nothing.txt: no such file or directory" in r.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    r = cli("prepare", str(empty), "--tokenizer", str(tiny_tokenizer), "-o", str(tmp_path / "y"),
            "--no-progress")  # fmt: skip
    assert r.returncode == 2 and "empty corpus: no text in" in r.stderr and "empty.txt" in r.stderr
    r = cli("prepare", str(ko_law), "--tokenizer", str(tiny_tokenizer), "-o", str(tmp_path / "z"),
            "--format", "xml")  # fmt: skip
    assert r.returncode == 2 and "invalid choice: 'xml'" in r.stderr
    r = cli("prepare", str(ko_law), "--tokenizer", str(tmp_path / "no_tok"), "-o", str(out))
    assert r.returncode == 2 and "no_tok: no such tokenizer" in r.stderr


def test_command_validation() -> None:
    from electra.config import ConfigError

    with pytest.raises(ConfigError, match="unknown format 'xml'"):
        PrepareCommand(inputs=["a"], tokenizer="t", output="o", format="xml")
    with pytest.raises(ConfigError, match="validation_fraction"):
        PrepareCommand(inputs=["a"], tokenizer="t", output="o", validation_fraction=1.5)
    with pytest.raises(ConfigError, match="max_length"):
        PrepareCommand(inputs=["a"], tokenizer="t", output="o", max_length=4)


def test_blocks_pickle_for_dataloader_workers(prepared: Path) -> None:
    import pickle

    blocks = open_blocks(prepared)
    blocks.get([0, 1])  # opens a shard
    again = pickle.loads(pickle.dumps(blocks))
    idx = np.array([3, 1500, 7])
    assert (again.get(idx)[0] == blocks.get(idx)[0]).all()


def test_books_as_documents(tmp_path: Path, en_book: Path, tiny_tokenizer: Path) -> None:
    paragraphs = prepare(cmd([en_book], tiny_tokenizer, tmp_path / "p", validation_fraction=0))
    book = prepare(
        cmd([en_book], tiny_tokenizer, tmp_path / "b", validation_fraction=0, file_is_document=True)
    )
    mp = json.loads((paragraphs / MANIFEST).read_text())["splits"]["train"]
    mb = json.loads((book / MANIFEST).read_text())["splits"]["train"]
    assert mb["documents"] == 1 and mp["documents"] > 500
    fill = lambda m: m["tokens"] / (m["blocks"] * (L - 3))  # noqa: E731
    assert fill(mb) > fill(mp) + 0.05  # paragraphs alone make short blocks
    assert fill(mb) > 0.9


def test_accent_stripping_tokenizer_warns_on_korean(tmp_path: Path, ko_law: Path, caplog) -> None:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "##b"]
    save_tokenizer_files(build_tokenizer(vocab, lowercase=True), tmp_path / "tok")
    with caplog.at_level("WARNING", logger="electra"):
        prepare(
            cmd([ko_law], tmp_path / "tok", tmp_path / "out", validation_fraction=0, max_unk_rate=1)
        )
    assert "decomposes Hangul syllables into jamo" in caplog.text


def test_data_dir_from_environment(monkeypatch, tmp_path: Path) -> None:
    from electra.system.paths import ENV_VAR, REPO_ROOT, default_data_dir

    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert default_data_dir() == tmp_path
    monkeypatch.delenv(ENV_VAR)
    assert default_data_dir() in (
        REPO_ROOT.parent / "shared" / "data",
        Path.cwd().parent / "shared" / "data",
    )


def test_bytes_overwritten_in_a_shard_are_refused_naming_it(prepared: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(prepared, copy)
    shard = copy / "train-00000.npy"
    raw = bytearray(shard.read_bytes())
    raw[-4000:] = b"\xff" * 4000  # ids far beyond the vocabulary (as after a bad copy)
    shard.write_bytes(bytes(raw))
    blocks = open_blocks(copy)  # the size is right: opening cannot tell
    with pytest.raises(CorpusError, match=r"train-00000\.npy: token id \d+ is outside the vocab"):
        blocks.get(np.arange(len(blocks)))
