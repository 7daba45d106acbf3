"""A tokenizer that cannot read the corpus: the [UNK] rate, counted, recorded and refused.

Tried as a new user would: a tokenizer.json of only the special tokens (what
transformers 5 writes for ``BertTokenizerFast(vocab_file=...)``) went through
``prepare`` into blocks that were 96% [UNK], and pre-training on them reached a loss of 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import tiny_model, write_tokenizer_dir

from electra.blocks.options import PrepareCommand
from electra.blocks.prepare import prepare
from electra.blocks.read import open_blocks
from electra.config import ConfigError
from electra.pretrain.continued import check_tokenizer
from electra.pretrain.health import verdict
from electra.text.corpus import CorpusError
from electra.text.tokenizer import TokenizerError, load_tokenizer, save_tokenizer_files

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def korean(tmp_path_factory: pytest.TempPathFactory, ko_wiki: Path) -> Path:
    text = tmp_path_factory.mktemp("ko") / "ko.txt"
    text.write_text(ko_wiki.read_text(encoding="utf-8")[:60_000], encoding="utf-8")
    return text


def _prepare(text: Path, tokenizer: Path, out: Path, **kw) -> Path:
    return prepare(
        PrepareCommand(
            inputs=[str(text)],
            tokenizer=str(tokenizer),
            output=str(out),
            max_length=64,
            workers=1,
            progress=False,
            **kw,
        )
    )


def test_a_tokenizer_of_only_special_tokens_is_refused_naming_it(korean, tmp_path) -> None:
    tok = write_tokenizer_dir(tmp_path / "specials", SPECIALS, lowercase=False)
    with pytest.raises(
        CorpusError, match=r"specials: 100\.0% of the first [\d,]+ tokens are \[UNK\]"
    ):
        _prepare(korean, tok, tmp_path / "blocks")
    assert not (tmp_path / "blocks" / "manifest.json").exists()  # never looks complete
    out = _prepare(korean, tok, tmp_path / "blocks", max_unk_rate=1.0, overwrite=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["unk_rate"] == 1.0


def test_the_rate_is_counted_and_recorded(korean, tmp_path, tiny_tokenizer: Path) -> None:
    out = _prepare(korean, tiny_tokenizer, tmp_path / "blocks")
    manifest = json.loads((out / "manifest.json").read_text())
    train = manifest["splits"]["train"]
    assert train["encoded_tokens"] >= train["tokens"] > 0  # truncation only drops tokens
    assert 0.0 <= manifest["unk_rate"] < 0.05


def test_a_tokenizer_json_far_smaller_than_its_vocab_txt_is_refused(
    tmp_path: Path, tiny_tokenizer: Path
) -> None:
    real = load_tokenizer(tiny_tokenizer)
    broken = save_tokenizer_files(real, tmp_path / "hf")
    only_specials = save_tokenizer_files(
        load_tokenizer(write_tokenizer_dir(tmp_path / "sp", SPECIALS, lowercase=False)),
        tmp_path / "sp-out",
    )
    (broken / "tokenizer.json").write_text(
        (only_specials / "tokenizer.json").read_text(encoding="utf-8"), encoding="utf-8"
    )
    with pytest.raises(TokenizerError, match=r"tokenizer\.json: 5 tokens, but .*vocab\.txt"):
        load_tokenizer(broken)


def test_pretraining_refuses_blocks_with_a_vocabulary_far_smaller_than_the_model(
    korean, tmp_path
) -> None:
    tok = write_tokenizer_dir(tmp_path / "tok", [*SPECIALS, "가", "나"], lowercase=False)
    blocks = _prepare(korean, tok, tmp_path / "blocks", max_unk_rate=1.0)
    model = tiny_model(tmp_path / "model", tok, vocab_size=3000)
    with pytest.raises(ConfigError, match=r"7 tokens but .*config\.json has vocab_size = 3,000"):
        check_tokenizer(str(model), open_blocks(blocks, "train"), 3000)


def test_the_verdict_calls_a_perfect_generator_what_it_is() -> None:
    text = verdict({"val/gen_accuracy": 1.0, "val/unigram_accuracy": 0.96, "val/swap_auc": 0.5})
    assert text.startswith("degenerate blocks: masked tokens are trivially predictable")
    assert "[UNK]" in text
    assert not verdict({"val/gen_accuracy": 0.4, "val/unigram_accuracy": 0.05}).startswith(
        "degenerate"
    )
