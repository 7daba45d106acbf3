"""Label alignment: words to subwords (WNUT-17), characters to subwords (KLUE-NER)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from builders import DATA, KO_VOCAB

from electra.finetune.common import FeatureSettings, TaggingExample
from electra.finetune.readers import read_conll, read_klue_ner
from electra.finetune.tagging import (
    IGNORE,
    TAGGING,
    align_labels,
    decode_units,
    entities,
    oracle_f1,
    token_units,
)
from electra.finetune.tasks import KLUE_NER_TAGS, WNUT_TAGS
from electra.text.tokenizer import load_tokenizer

KLUE_NER = DATA / "klue" / "ner" / "klue-ner-v1.1_dev.tsv"
WNUT_TRAIN = DATA / "ner" / "wnut17" / "wnut17train.conll"


def test_word_labels_go_to_the_first_subword(en_tokenizer_dir: Path) -> None:  # noqa: F811
    tok = load_tokenizer(en_tokenizer_dir)
    words = ["Empire", "Statebuildingxyz", "@paulwalk", "rocks"]
    tags = ["B-location", "I-location", "B-person", "O"]
    ex = TaggingExample.from_words(words, tags)
    enc = tok.encode(ex.text)
    covered = token_units(ex, enc.offsets, enc.special_tokens_mask)
    index = {t: i for i, t in enumerate(WNUT_TAGS)}
    labels = align_labels(covered, tags, index)
    # exactly one labelled token per word: its first subword
    firsts = {}
    for t, (units, lab) in enumerate(zip(covered, labels, strict=True)):
        if lab != IGNORE:
            assert len(units) == 1 and units[0] not in firsts
            firsts[units[0]] = t
            assert lab == index[tags[units[0]]]
    assert sorted(firsts) == [0, 1, 2, 3]
    for w, t in firsts.items():  # the labelled token is the first one covering the word
        assert t == min(i for i, u in enumerate(covered) if w in u)
    # the long word and "@paulwalk" are several tokens; the extra ones are ignored
    assert sum(1 for u in covered if u == [1]) > 1 and sum(1 for u in covered if u == [2]) > 1
    assert labels[0] == IGNORE and labels[-1] == IGNORE  # [CLS], [SEP]
    # decoding the gold token labels gives back the word tags
    token_tags = [WNUT_TAGS[k] if k != IGNORE else "O" for k in labels]
    assert decode_units(ex, covered, token_tags) == tags


def test_wnut_oracle_is_perfect(en_tokenizer_dir: Path) -> None:  # noqa: F811
    examples = read_conll(WNUT_TRAIN)
    assert len(examples) == 3394  # blank and tab-only lines both end a sentence
    assert examples[0].units[:3] == ["@paulwalk", "It", "'s"]
    tok = load_tokenizer(en_tokenizer_dir)
    feats = TAGGING.featurize(examples[:300], tok, FeatureSettings(max_length=128), WNUT_TAGS)
    assert oracle_f1(examples[:300], feats, WNUT_TAGS) == 1.0


def test_klue_ner_reader_matches_the_marked_up_sentence() -> None:
    examples = read_klue_ner(KLUE_NER)
    assert len(examples) == 5000
    header = re.compile(r"^## (klue-ner-\S+)\t(.*)$")
    markup = re.compile(r"<([^<>]+?):([A-Z]{2})>")
    heads = [
        m
        for line in KLUE_NER.read_text(encoding="utf-8").split("\n")[:3000]
        if (m := header.match(line))
    ]
    for ex, m in zip(examples, heads, strict=False):
        assert ex.guid == m.group(1)
        assert ex.text == markup.sub(r"\1", m.group(2))
        assert ex.level == "char" and len(ex.tags) == len(ex.text)
        # every marked entity is B-X then I-X over its characters (spaces included)
        plain = m.group(2)
        for mm in markup.finditer(plain):
            start = len(markup.sub(r"\1", plain[: mm.start()]))
            span = mm.group(1)
            want = [f"B-{mm.group(2)}"] + [f"I-{mm.group(2)}"] * (len(span) - 1)
            assert ex.tags[start : start + len(span)] == want
    first = examples[0]
    assert first.text.startswith("경찰은 또 성매매")
    assert first.tags[:4] == ["B-OG", "I-OG", "O", "O"]
    assert first.source.endswith("line 6")


def test_character_labels_align_to_subwords() -> None:
    tok = load_tokenizer(KO_VOCAB)
    ex = read_klue_ner(KLUE_NER)[0]  # 경찰은 또 ... 박씨의 ...
    enc = tok.encode(ex.text)
    covered = token_units(ex, enc.offsets, enc.special_tokens_mask)
    index = {t: i for i, t in enumerate(KLUE_NER_TAGS)}
    labels = align_labels(covered, ex.tags, index)
    for units, lab, (s, e) in zip(covered, labels, enc.offsets, strict=True):
        if not units:
            assert lab == IGNORE
            continue
        assert units == list(range(s, e))  # one unit per character
        assert lab == index[ex.tags[s]]  # a subword carries its first character's tag
    # spaces are covered by no subword
    spaces = {i for i, ch in enumerate(ex.text) if ch == " "}
    assert not spaces & {u for units in covered for u in units}
    # "경찰은" is one subword: the particle 은 inherits the entity (the alignment ceiling)
    assert enc.tokens[1] == "경찰은"
    oracle = decode_units(ex, covered, [KLUE_NER_TAGS[k] if k >= 0 else "O" for k in labels])
    assert oracle[:3] == ["B-OG", "I-OG", "I-OG"] and ex.tags[:3] == ["B-OG", "I-OG", "O"]


def test_decoding_units_by_hand() -> None:
    # "경찰은 박씨" as characters: 0 경 1 찰 2 은 3 ' ' 4 박 5 씨
    ex = TaggingExample.from_chars("경찰은 박씨", ["B-OG", "I-OG", "O", "O", "B-PS", "O"])
    covered = [[], [0, 1], [2], [4], [5], []]
    got = decode_units(ex, covered, ["O", "B-OG", "O", "B-PS", "O", "O"])
    assert got == ["B-OG", "I-OG", "O", "O", "B-PS", "O"]
    # one subword over 박씨 -> 씨 continues the entity
    assert decode_units(ex, [[], [0, 1, 2], [4, 5], []], ["O", "O", "B-PS", "O"]) == [
        "O",
        "O",
        "O",
        "O",
        "B-PS",
        "I-PS",
    ]
    # a space inside a predicted entity continues it (KLUE tags such spaces I-X)
    ex = TaggingExample.from_chars("오후 8시", None)
    got = decode_units(ex, [[], [0, 1], [3, 4], []], ["O", "B-TI", "I-TI", "O"])
    assert got == ["B-TI", "I-TI", "I-TI", "I-TI", "I-TI"]
    # ...but not between two separate entities
    got = decode_units(ex, [[], [0, 1], [3, 4], []], ["O", "B-TI", "B-TI", "O"])
    assert got[2] == "O"
    # words lost to truncation are O
    ex = TaggingExample.from_words(["a", "b", "c"], None)
    assert decode_units(ex, [[], [0], []], ["O", "B-person", "O"]) == ["B-person", "O", "O"]


def test_entities_have_character_spans() -> None:
    ex = TaggingExample.from_words(["I", "love", "New", "York", "City"], None)
    ents = entities(ex, ["O", "O", "B-location", "I-location", "I-location"])
    assert ents == [{"text": "New York City", "type": "location", "start": 7, "end": 20}]
    ex = TaggingExample.from_chars("오후 8시 박씨", None)
    ents = entities(ex, ["B-TI", "I-TI", "I-TI", "I-TI", "I-TI", "O", "B-PS", "O"])
    assert [e["text"] for e in ents] == ["오후 8시", "박"]
    assert ents[1]["start"] == 6 and ents[1]["end"] == 7


def test_klue_alignment_ceiling_is_measured() -> None:
    tok = load_tokenizer(KO_VOCAB)
    examples = read_klue_ner(KLUE_NER)[:300]
    feats = TAGGING.featurize(examples, tok, FeatureSettings(max_length=128), KLUE_NER_TAGS)
    ceiling = oracle_f1(examples, feats, KLUE_NER_TAGS)
    # subwords that glue a particle to a name cap what any model can score
    assert 0.5 < ceiling < 1.0


@pytest.mark.parametrize("bad", ["word\n", "word\tX-PER\n"])
def test_conll_errors_name_the_line(tmp_path: Path, bad: str) -> None:
    from electra.finetune.common import DatasetError

    p = tmp_path / "bad.conll"
    p.write_text("a\tO\nb\tB-person\n\n" + bad, encoding="utf-8")
    with pytest.raises(DatasetError, match=r"bad\.conll, line 4, field 'tag'"):
        read_conll(p)
