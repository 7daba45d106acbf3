"""WordPiece training and loading on real Korean and English text; parity with transformers."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import pytest

from electra.config import ConfigError
from electra.text.corpus import Corpus, ReadOptions
from electra.text.tokenizer import (
    SPECIAL_TOKENS,
    TokenizerError,
    build_tokenizer,
    encoding_tokenizer,
    load_tokenizer,
    save_tokenizer_files,
    special_ids,
    tokenizer_settings,
)
from electra.text.vocabulary import train_tokenizer

transformers = pytest.importorskip("transformers")

HANGUL = re.compile("[\uac00-\ud7a3]")
JAMO = re.compile("[\u1100-\u11ff]")


def sample_lines(paths, n: int = 300, **kw) -> list[str]:
    out = []
    for _, doc in Corpus(paths, ReadOptions(**kw)).documents():
        out.extend(doc.lines)
        if len(out) >= n:
            break
    return out[:n]


@pytest.fixture(scope="module")
def texts(ko_wiki, ko_law, en_book, nsmc_files) -> dict[str, list[str]]:
    return {
        "ko": sample_lines([ko_wiki], 200) + sample_lines([ko_law], 50),
        "en": sample_lines([en_book], 200, strip_gutenberg=True),
        "nsmc": sample_lines(nsmc_files[20:30], 200),
    }


@pytest.fixture(scope="module")
def uncased_tokenizer(tmp_path_factory, mixed_corpus: Path) -> Path:
    """--lowercase on a corpus with Hangul: accent stripping is turned off."""
    out = tmp_path_factory.mktemp("uncased")
    report = train_tokenizer(
        [mixed_corpus], out, vocab_size=1500, lowercase=True,
        read_options=ReadOptions(strip_gutenberg=True),
    )  # fmt: skip
    assert report.strip_accents is False
    return out


def test_training_writes_a_complete_directory(tiny_tokenizer: Path) -> None:
    for name in [
        "vocab.txt",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "vocab_training.json",
    ]:
        assert (tiny_tokenizer / name).is_file(), name
    vocab = (tiny_tokenizer / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(vocab) == 2000
    assert vocab[:5] == list(SPECIAL_TOKENS)
    assert len(set(vocab)) == len(vocab)
    tok = load_tokenizer(tiny_tokenizer)
    ids = special_ids(tok)
    assert (ids.pad, ids.cls, ids.sep, ids.mask, ids.vocab_size) == (0, 2, 3, 4, 2000)
    config = json.loads((tiny_tokenizer / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "ElectraTokenizer"
    assert config["do_lower_case"] is False and config["strip_accents"] is False
    info = json.loads((tiny_tokenizer / "vocab_training.json").read_text())
    assert info["hangul_round_trip"] is True
    assert info["unk_rate"] < 0.05  # 2,000 tokens, 500 characters: rare Hanja are UNK


def test_vocabulary_round_trip(tiny_tokenizer: Path, tmp_path: Path, texts) -> None:
    tok = load_tokenizer(tiny_tokenizer)
    vocab_lines = (tiny_tokenizer / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert [t for t, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1])] == vocab_lines
    save_tokenizer_files(tok, tmp_path / "again")
    for name in ["vocab.txt", "tokenizer.json", "tokenizer_config.json"]:
        assert (tmp_path / "again" / name).read_bytes() == (tiny_tokenizer / name).read_bytes()
    # vocab.txt (+ config) alone gives the same ids as tokenizer.json
    only = tmp_path / "only_vocab"
    only.mkdir()
    shutil.copyfile(tiny_tokenizer / "vocab.txt", only / "vocab.txt")
    shutil.copyfile(tiny_tokenizer / "tokenizer_config.json", only / "tokenizer_config.json")
    for loaded in (load_tokenizer(only), load_tokenizer(only / "vocab.txt")):
        for lines in texts.values():
            assert [e.ids for e in loaded.encode_batch(lines)] == [
                e.ids for e in tok.encode_batch(lines)
            ]
    assert load_tokenizer(tiny_tokenizer / "tokenizer.json").to_str() == tok.to_str()


def test_korean_decodes_to_the_same_syllables(tiny_tokenizer: Path, uncased_tokenizer, texts):
    for directory in (tiny_tokenizer, uncased_tokenizer):
        tok = load_tokenizer(directory)
        assert not any(JAMO.search(t) for t in tok.get_vocab())
        unk = tok.token_to_id("[UNK]")
        checked = 0
        for line in texts["ko"] + texts["nsmc"]:
            enc = tok.encode(line, add_special_tokens=False)
            decoded = tok.decode(enc.ids)
            assert not JAMO.search(decoded)
            if unk in enc.ids or not HANGUL.search(line):
                continue
            expected = tok.normalizer.normalize_str(line)
            assert "".join(decoded.split()) == "".join(expected.split())
            assert HANGUL.findall(decoded) == HANGUL.findall(line)
            checked += 1
        assert checked > 50  # lines without a character outside the tiny vocabulary


@pytest.mark.parametrize("which", ["cased", "uncased"])
def test_ids_identical_to_transformers(which, tiny_tokenizer, uncased_tokenizer, texts) -> None:
    directory = tiny_tokenizer if which == "cased" else uncased_tokenizer
    ours = load_tokenizer(directory)
    extra = [
        "Café NAÏVE Ünïcode [MASK] text",
        "한국어 [SEP] 문장 ㄱㄴㄷ 漢字 テスト",
        "  ",
        "x" * 150,
    ]
    for cls in (
        transformers.ElectraTokenizerFast,
        transformers.BertTokenizerFast,
        transformers.AutoTokenizer,
    ):
        hf = cls.from_pretrained(str(directory))
        for lines in [*texts.values(), extra]:
            assert hf(lines)["input_ids"] == [e.ids for e in ours.encode_batch(lines)]
        pairs = list(zip(texts["ko"][:20], texts["en"][:20], strict=True))
        got = hf([a for a, _ in pairs], [b for _, b in pairs])
        enc = ours.encode_batch(pairs)
        assert got["input_ids"] == [e.ids for e in enc]
        assert got["token_type_ids"] == [e.type_ids for e in enc]


def test_uncased_english_strips_accents(tmp_path: Path, en_book: Path) -> None:
    train_tokenizer(
        [en_book], tmp_path, vocab_size=800, lowercase=True,
        read_options=ReadOptions(strip_gutenberg=True),
    )  # fmt: skip
    tok = load_tokenizer(tmp_path)
    assert tokenizer_settings(tok) == {
        "do_lower_case": True,
        "strip_accents": True,
        "tokenize_chinese_chars": True,
    }
    assert tok.normalizer.normalize_str("Café NAÏVE") == "cafe naive"
    hf = transformers.ElectraTokenizerFast.from_pretrained(str(tmp_path))
    assert hf("Café NAÏVE")["input_ids"] == tok.encode("Café NAÏVE").ids


def test_hangul_is_never_decomposed(tmp_path: Path, ko_law: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="electra"):
        report = train_tokenizer([ko_law], tmp_path / "a", vocab_size=600, lowercase=True)
    assert report.strip_accents is False
    assert "decompose syllables into jamo" in caplog.text
    with pytest.raises(ConfigError, match=r"decomposes Hangul syllables into jamo.*--no-strip"):
        train_tokenizer([ko_law], tmp_path / "b", vocab_size=600, strip_accents=True)
    assert not list((tmp_path / "b").glob(".training-text-*"))  # temporary text removed


def test_training_is_deterministic(tmp_path: Path, ko_wiki: Path, en_book: Path) -> None:
    for name in ("a", "b"):
        train_tokenizer([ko_wiki, en_book], tmp_path / name, vocab_size=3000)
    assert (tmp_path / "a" / "vocab.txt").read_bytes() == (
        tmp_path / "b" / "vocab.txt"
    ).read_bytes()


def test_limit_mb_trains_on_a_spread_sample(tmp_path: Path, data_dir: Path) -> None:
    nsmc = data_dir / "nsmc" / "raw_subset"  # 7.8 MB of review text in 20.9 MB of JSON
    report = train_tokenizer([nsmc], tmp_path, vocab_size=500, limit_mb=0.5)
    assert 0.45e6 < report.training_bytes < 0.55e6
    info = json.loads((tmp_path / "vocab_training.json").read_text())
    assert info["options"]["limit_mb"] == 0.5
    assert report.training_lines > 1000
    # the sample is spread over the whole input, not taken from its first files
    from electra.text.vocabulary import _iter_training_lines

    files = sorted(nsmc.glob("*.json"))
    kept = set(_iter_training_lines(Corpus(files, ReadOptions()), 500_000))
    head = {x for _, d in Corpus(files[:180], ReadOptions()).documents() for x in d.lines}
    tail = {x for _, d in Corpus(files[-180:], ReadOptions()).documents() for x in d.lines}
    assert kept & head and kept & tail


def test_morpheme_aware_vocabulary(tmp_path: Path, ko_wiki: Path) -> None:
    sample = tmp_path / "ko.txt"
    lines = sample_lines([ko_wiki], 400)
    sample.write_text("\n".join(lines) + "\n", encoding="utf-8")
    plain = train_tokenizer([sample], tmp_path / "plain", vocab_size=3000)
    morph = train_tokenizer([sample], tmp_path / "morph", vocab_size=3000, morpheme=True)
    assert morph.morpheme and morph.hangul_round_trip
    tok = load_tokenizer(tmp_path / "morph")
    vocab = tok.get_vocab()
    assert "\u2581" not in "".join(vocab)  # the marker never reaches the vocabulary
    assert {"##다", "##는", "##에서", "##으로"} <= set(vocab)
    # endings are split off where the analyser found a morpheme boundary
    assert tok.encode("태어났다", add_special_tokens=False).tokens[-1] == "##다"
    assert plain.vocab_size == 3000 and 2900 <= morph.vocab_size <= 3000
    hf = transformers.ElectraTokenizerFast.from_pretrained(str(tmp_path / "morph"))
    assert hf(lines[:50])["input_ids"] == [e.ids for e in tok.encode_batch(lines[:50])]


def test_any_vocab_txt_loads_with_ids_by_token(tmp_path: Path, data_dir: Path) -> None:
    # BERT's layout: [PAD]=0, [unused*], [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103
    bert = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    bert += ["the", "cafe", "##s", "a", "b", "c", "!", "."]
    (tmp_path / "vocab.txt").write_text("\n".join(bert) + "\n")
    tok = load_tokenizer(tmp_path / "vocab.txt")
    ids = special_ids(tok)
    assert (ids.pad, ids.cls, ids.sep, ids.mask) == (0, 101, 102, 103)
    assert tokenizer_settings(tok)["do_lower_case"] is True  # an uncased vocabulary
    assert tok.encode("The Cafés!").tokens == ["[CLS]", "the", "cafe", "##s", "!", "[SEP]"]
    # KoELECTRA's vocabulary (cased, no tokenizer_config.json)
    ko = load_tokenizer(data_dir / "extras" / "koelectra-v1-vocab" / "vocab.txt")
    assert tokenizer_settings(ko)["do_lower_case"] is False
    ko_ids = special_ids(ko)
    assert (ko_ids.pad, ko_ids.cls, ko_ids.sep, ko_ids.mask, ko_ids.vocab_size) == (
        0, 2, 3, 4, 32200,
    )  # fmt: skip
    assert ko.decode(ko.encode("한국어 문장입니다.").ids) == "한국어 문장입니다."


def test_missing_special_token_is_named(tmp_path: Path) -> None:
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n")
    with pytest.raises(TokenizerError, match=r"no \[MASK\] token"):
        special_ids(load_tokenizer(tmp_path))
    with pytest.raises(FileNotFoundError, match="nowhere: no such tokenizer"):
        load_tokenizer(tmp_path / "nowhere")
    (tmp_path / "dup").mkdir()
    (tmp_path / "dup" / "vocab.txt").write_text("[UNK]\na\na\n")
    with pytest.raises(TokenizerError, match=r"vocab.txt:3: token 'a' repeats line 2"):
        load_tokenizer(tmp_path / "dup")


def test_encoding_tokenizer_treats_special_strings_as_text(tiny_tokenizer: Path) -> None:
    tok = load_tokenizer(tiny_tokenizer)
    assert 3 in tok.encode("a [SEP] b", add_special_tokens=False).ids  # as transformers does
    plain = encoding_tokenizer(tok)
    ids = plain.encode("a [SEP] b [MASK]", add_special_tokens=False).ids
    assert not set(ids) & {0, 2, 3, 4}


def test_build_tokenizer_requires_unk() -> None:
    with pytest.raises(TokenizerError, match=r"no \[UNK\] token"):
        build_tokenizer(["[PAD]", "a"], lowercase=False)


def test_cli_tokenizer(tmp_path: Path, cli, ko_law: Path, en_book: Path) -> None:
    out = tmp_path / "tok"
    r = cli("tokenizer", str(ko_law), str(en_book), "--strip-gutenberg", "-o", str(out),
            "--vocab-size", "700", "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "700 tokens" in r.stdout and "Hangul round trip ok" in r.stdout
    assert (out / "vocab.txt").read_text().count("\n") == 700
    r = cli("tokenizer", str(tmp_path / "missing.txt"), "-o", str(out))
    assert r.returncode == 2 and "missing.txt: no such file" in r.stderr
    r = cli("tokenizer", str(ko_law), "-o", str(out), "--format", "csv")
    assert r.returncode == 2 and "invalid choice: 'csv'" in r.stderr


def test_alphabet_fits_small_vocabularies(tmp_path: Path, ko_wiki: Path, caplog) -> None:
    # ~1,800 distinct characters in one Wikipedia file; 1,000 tokens cannot hold them all
    small = train_tokenizer([ko_wiki], tmp_path / "small", vocab_size=1000)
    assert small.vocab_size == 1000
    assert 300 < small.alphabet_size < 500 and small.unk_rate < 0.1
    big = train_tokenizer([ko_wiki], tmp_path / "big", vocab_size=8000)
    assert big.character_coverage >= 0.9995 and big.unk_rate < 0.005
    with caplog.at_level(logging.WARNING, logger="electra"):
        forced = train_tokenizer([ko_wiki], tmp_path / "f", vocab_size=1000, limit_alphabet=10**5)
    assert "does not fit a vocabulary of 1000" in caplog.text
    tok = load_tokenizer(tmp_path / "f")
    assert forced.vocab_size == 1000 and tok.token_to_id("다") is not None
