"""Extending a checkpoint's vocabulary with domain tokens, before continued pre-training.

A general vocabulary cuts domain words (``헌법재판소``, ``개정법률안``) into
several pieces. ``electra extend-vocab`` appends whole-word tokens to the
vocabulary of a discriminator (and its generator) directory and writes new
directories whose embedding rows for the new tokens are the mean of the rows
of the pieces the old tokenizer cut them into (the generator's output bias
likewise), so the model starts where it was for those words. Old ids do not
move: every existing row and every block made with the old vocabulary keeps
its meaning, but blocks must be prepared again with the new directory (their
tokenizer hash differs, and ``pretrain`` refuses the old ones).

Tokens come from a file (one per line) or are picked from a domain corpus: the
most frequent words the current tokenizer splits into two or more pieces,
ranked by the pieces they would save (count x (pieces - 1)).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch import Tensor

from electra.config import ConfigError
from electra.model.checkpoint import CheckpointError
from electra.model.hf import atomic_save_safetensors, read_config, read_state_dict, word_table_key
from electra.pretrain.options import ExtendVocabCommand
from electra.system.files import atomic_write_bytes, atomic_write_json
from electra.text.corpus import Corpus, ReadOptions
from electra.text.tokenizer import (
    build_tokenizer,
    load_tokenizer,
    save_tokenizer_files,
    tokenizer_settings,
    vocab_list,
)

LM_BIAS = "generator_lm_head.bias"
TIED_LM_WEIGHT = "generator_lm_head.weight"


def pieces_of(tok: Tokenizer, word: str) -> list[int]:
    """The ids the tokenizer cuts ``word`` into (no special tokens)."""
    return tok.encode(word, add_special_tokens=False).ids


def words_to_add(tok: Tokenizer, corpus: list[str], n: int, min_count: int) -> list[str]:
    """The ``n`` words of ``corpus`` whose own token would save the most pieces."""
    normalizer, pre = tok.normalizer, tok.pre_tokenizer
    counts: Counter[str] = Counter()
    for _, doc in Corpus(corpus, ReadOptions()).documents():
        for line in doc.lines:
            text = normalizer.normalize_str(line) if normalizer else line
            counts.update(w for w, _ in pre.pre_tokenize_str(text))
    vocab = tok.get_vocab(with_added_tokens=True)
    scored = []
    for word, count in counts.items():
        if count < min_count or word in vocab:
            continue
        saved = len(pieces_of(tok, word)) - 1
        if saved > 0:
            scored.append((count * saved, word))
    return [w for _, w in sorted(scored, key=lambda x: (-x[0], x[1]))[:n]]


def read_token_file(path: str) -> list[str]:
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [t.strip() for t in lines if t.strip()]


def extended_tokenizer(tok: Tokenizer, new: list[str]) -> tuple[Tokenizer, list[list[int]]]:
    """The tokenizer with ``new`` appended (old ids kept), and each new token's old pieces."""
    old = vocab_list(tok)
    known = set(old)
    dup = [t for t in new if t in known]
    if dup:
        raise ConfigError(f"token {dup[0]!r} is already in the vocabulary")
    if len(set(new)) != len(new):
        raise ConfigError("the tokens to add repeat")
    pieces = [pieces_of(tok, t) for t in new]
    settings = tokenizer_settings(tok)
    bigger = build_tokenizer(
        old + new,
        lowercase=settings["do_lower_case"],
        strip_accents=settings["strip_accents"],
        tokenize_chinese_chars=settings["tokenize_chinese_chars"],
    )
    return bigger, pieces


def mean_rows(table: Tensor, pieces: list[list[int]]) -> Tensor:
    """One new row per token: the mean of its pieces' rows (works for 1-d biases too)."""
    rows = [table[torch.tensor(p)].mean(0) for p in pieces]
    return torch.cat([table, torch.stack(rows).to(table.dtype)])


def extend_directory(
    src: Path, out: Path, tok: Tokenizer, pieces: list[list[int]], new_tok: Tokenizer
) -> Path:
    """Write ``src`` with its vocabulary extended into ``out`` (weights, config, tokenizer)."""
    config, raw = read_config(src)
    state = read_state_dict(src)
    key = word_table_key(state, str(src))
    size = tok.get_vocab_size(with_added_tokens=True)
    if state[key].shape[0] != size:
        raise CheckpointError(
            f"{src / 'config.json'}: vocab_size = {state[key].shape[0]} but its tokenizer has "
            f"{size} tokens; only a table of exactly the tokenizer's size can be extended"
        )
    state[key] = mean_rows(state[key], pieces)
    if LM_BIAS in state:
        state[LM_BIAS] = mean_rows(state[LM_BIAS], pieces)
    state.pop(TIED_LM_WEIGHT, None)  # tied to the word table: transformers re-ties it
    raw["vocab_size"] = size + len(pieces)
    out.mkdir(parents=True, exist_ok=True)
    atomic_save_safetensors(
        {k: v.contiguous() for k, v in state.items()},
        out / "model.safetensors",
        metadata={"format": "pt"},
    )
    atomic_write_json(out / "config.json", raw)
    save_tokenizer_files(new_tok, out)
    return out


def extend_vocab(cmd: ExtendVocabCommand) -> dict[str, Path]:
    """Extend the directories of ``cmd``; returns the written ones by kind."""
    if bool(cmd.tokens) == bool(cmd.corpus):
        raise ConfigError("give either --tokens FILE or --corpus FILES (one of them)")
    tok = load_tokenizer(cmd.discriminator)
    if cmd.tokens:
        new = read_token_file(cmd.tokens)
    else:
        new = words_to_add(tok, cmd.corpus, cmd.add, cmd.min_count)
    if not new:
        raise ConfigError("no token to add (all known, or none frequent enough: --min-count)")
    bigger, pieces = extended_tokenizer(tok, new)
    out = Path(cmd.output)
    done = {
        "discriminator": extend_directory(
            Path(cmd.discriminator), out / "discriminator", tok, pieces, bigger
        )
    }
    if cmd.generator:
        done["generator"] = extend_directory(
            Path(cmd.generator), out / "generator", tok, pieces, bigger
        )
    atomic_write_bytes(out / "added_tokens.txt", ("\n".join(new) + "\n").encode("utf-8"))
    return done


def extend_vocab_cli(cmd: ExtendVocabCommand) -> int:
    """Run ``electra extend-vocab`` (its ``--help`` is :class:`~electra.pretrain.options.ExtendVocabCommand`'s docstring)."""
    done = extend_vocab(cmd)
    added = (Path(cmd.output) / "added_tokens.txt").read_text(encoding="utf-8").split()
    print(f"added {len(added)} tokens (first: {' '.join(added[:10])})")
    for kind, d in done.items():
        print(f"{kind}: {d}")
    return 0
