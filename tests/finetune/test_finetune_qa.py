"""SQuAD-style featurisation: document stride windows, answer positions, n-best decoding."""

from __future__ import annotations

import numpy as np
from builders import DATA, KO_VOCAB

from electra.finetune.common import Answer, FeatureSettings, QAExample
from electra.finetune.qa import best_spans, featurize_qa, window_starts
from electra.finetune.readers import read_squad
from electra.text.tokenizer import load_tokenizer


def test_window_starts_cover_the_context() -> None:
    assert window_starts(10, 4, 3) == [0, 3, 6]  # last window 6..9 reaches the end
    assert window_starts(3, 4, 2) == [0]
    assert window_starts(9, 4, 8) == [0, 4, 8]  # a stride above the window is capped
    for n, w, s in [(100, 17, 5), (37, 10, 10), (1, 5, 1)]:
        starts = window_starts(n, w, s)
        covered = {t for st in starts for t in range(st, min(n, st + w))}
        assert covered == set(range(n))


def test_features_locate_the_answer_in_every_window() -> None:
    tok = load_tokenizer(KO_VOCAB)
    examples = read_squad(DATA / "qa" / "korquad" / "KorQuAD_v1.0_dev.json")[:40]
    settings = FeatureSettings(max_length=64, doc_stride=24, max_query_length=16)
    feats = featurize_qa(examples, tok, settings)
    assert len(feats) > 2 * len(examples)  # long contexts, many windows
    per_example: dict[int, list[dict]] = {}
    for f in feats:
        per_example.setdefault(f["example_index"], []).append(f)
        assert len(f["input_ids"]) <= 64
        assert f["input_ids"][0] == tok.token_to_id("[CLS]")
        assert f["input_ids"][-1] == tok.token_to_id("[SEP]")
        n_q = f["token_type_ids"].index(1)
        assert n_q <= 16 + 2 and all(t == 1 for t in f["token_type_ids"][n_q:])
    for i, fs in per_example.items():
        ex = examples[i]
        a = ex.answers[0]
        # every context character offset is a max-context token in exactly one window
        owners: dict[tuple[int, int], int] = {}
        for f in fs:
            for off, is_max in zip(f["offsets"], f["max_context"], strict=True):
                if off[0] >= 0 and is_max:
                    assert off not in owners
                    owners[off] = 1
        labelled = [f for f in fs if f["start_position"] > 0]
        assert labelled, ex.id  # the answer fits in some window
        for f in labelled:
            s, e = f["start_position"], f["end_position"]
            span = ex.context[f["offsets"][s][0] : f["offsets"][e][1]]
            assert a.text in span  # whole subwords around the answer
            assert len(span) - len(a.text) <= 4
        # gold logits decode to that span
        outs = []
        for f in fs:
            out = np.full((len(f["input_ids"]), 2), -10.0, dtype=np.float32)
            if f["start_position"] > 0:
                out[f["start_position"], 0] = out[f["end_position"], 1] = 10.0
            outs.append(out)
        best = best_spans(ex, fs, outs, n_best=20, max_answer_length=30)[0]
        assert a.text in best["text"] and best["text"] == ex.context[best["start"] : best["end"]]


def test_nbest_rules_by_hand() -> None:
    ex = QAExample("q", "who?", "alpha beta gamma delta", [Answer("beta", 6)])
    offsets = [(-1, -1), (-1, -1), (-1, -1), (0, 5), (6, 10), (11, 16), (17, 22), (-1, -1)]
    f = {"offsets": offsets, "max_context": [False] * 3 + [True] * 4 + [False]}
    out = np.zeros((8, 2), dtype=np.float32)
    out[1] = [9.0, 9.0]  # a question token: never an answer
    out[5, 0], out[4, 1] = 8.0, 7.0  # gamma..beta: end before start, invalid (15)
    out[4, 0] = 5.0  # beta..beta = 12 is the best valid span
    spans = best_spans(ex, [f], [out], n_best=5, max_answer_length=30)
    assert spans[0]["text"] == "beta" and spans[0]["logit"] == 12.0
    assert (spans[0]["start"], spans[0]["end"]) == (6, 10)
    assert abs(sum(s["probability"] for s in spans) - 1.0) < 1e-6
    assert spans[0]["probability"] > spans[1]["probability"]
    # the longest span is best until max_answer_length rules it out
    long = np.zeros((8, 2), dtype=np.float32)
    long[3, 0], long[6, 1] = 5.0, 5.0  # alpha..delta, 4 tokens
    assert best_spans(ex, [f], [long], 5, 30)[0]["text"] == "alpha beta gamma delta"
    assert best_spans(ex, [f], [long], 5, 3)[0]["text"] != "alpha beta gamma delta"
    # a token outside its maximal-context window cannot start an answer
    f2 = {"offsets": offsets, "max_context": [False] * 4 + [False, True, True, False]}
    assert best_spans(ex, [f2], [out], n_best=5, max_answer_length=30)[0]["start"] != 6
