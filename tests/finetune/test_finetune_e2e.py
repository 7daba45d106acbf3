"""End to end on a tiny model and slices of the real data: train, score, predict, reload.

One test per task family (classification, regression, tagging, QA), each
checking that the loss goes down, the scores are sane, the saved directory
reloads with identical predictions, and ``transformers`` loads it as the
right ``ElectraFor...`` class with the same outputs. Plus the KoELECTRA path
of the seed through the real command line, and clean CLI errors.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import KO_VOCAB, cli_argv, cli_env, read_jsonl, tiny_model, write_tokenizer_dir

from electra.cli import main
from electra.finetune.modeling import load_finetuned
from electra.inference.options import PredictArgs
from electra.inference.predict import predict

pytestmark = pytest.mark.slow  # end-to-end fine-tuning: left out of `make test-fast`

transformers = pytest.importorskip("transformers")

QUICK = ["--learning-rate", "1e-3", "--batch-size", "16", "--no-progress", "--device", "cpu"]


def run(command: str, *paths: Path | str) -> int:
    """``electra COMMAND`` in this process; ``{}`` in ``command`` are filled with ``paths``."""
    return main(command.format(*paths).split())


def quick(args: list[str]) -> list[str]:
    """QUICK less the flags ``args`` sets itself: a flag given twice is refused."""
    out: list[str] = []
    for i, a in enumerate(QUICK):
        flag = a if a.startswith("--") else QUICK[i - 1]
        if flag not in args:
            out.append(a)
    return out


def finetune(model: Path, out: Path, args: str) -> dict:
    """Fine-tune, check the results file is complete and that the loss went down."""
    given = args.split()
    code = main(["finetune", "--model", str(model), "-o", str(out), *quick(given), *given])
    assert code == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["complete"] is True
    for run in results["seeds"]:  # it trains: the loss goes down
        assert run["history"][-1]["train_loss"] < run["history"][0]["train_loss"]
    return results


def predict_twice(model: Path, inp: Path, tmp: Path, **kw: str) -> list[dict]:
    """Predict with two fresh loads of ``model``: the records must be identical."""
    outs = []
    for k in range(2):
        args = PredictArgs(
            model=str(model),
            input=str(inp),
            output=str(tmp / f"pred{k}.jsonl"),
            progress=False,
            **kw,
        )
        outs.append(read_jsonl(Path(predict(args)["output"])))
    assert outs[0] == outs[1]
    return outs[0]


def ours_vs_transformers(model_dir: Path, cls_name: str, texts: list, pair: bool = False) -> None:
    """Same logits from our loader and from ``transformers`` (fp32, eval mode)."""
    ft = load_finetuned(model_dir)
    ref = getattr(transformers, cls_name).from_pretrained(model_dir).eval()
    tok = ft.tokenizer
    encs = tok.encode_batch([tuple(t) for t in texts] if pair else texts)
    width = max(len(e.ids) for e in encs)
    ids = torch.zeros(len(encs), width, dtype=torch.long)
    types = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for i, e in enumerate(encs):
        ids[i, : len(e.ids)] = torch.tensor(e.ids)
        types[i, : len(e.ids)] = torch.tensor(e.type_ids)
        mask[i, : len(e.ids)] = 1
    with torch.no_grad():
        ours = ft.model(ids, mask, types)
        out = ref(input_ids=ids, attention_mask=mask, token_type_ids=types)
    if cls_name == "ElectraForQuestionAnswering":
        theirs = torch.stack([out.start_logits, out.end_logits], dim=-1)
        ours, theirs = ours[mask.bool()], theirs[mask.bool()]
    elif cls_name == "ElectraForTokenClassification":
        theirs = out.logits
        ours, theirs = ours[mask.bool()], theirs[mask.bool()]
    else:
        theirs = out.logits
    assert ours.shape == theirs.shape
    assert (ours - theirs).abs().max().item() <= 1e-5
    cfg = json.loads((model_dir / "config.json").read_text())
    assert cfg["architectures"] == [cls_name]
    if cls_name in ("ElectraForSequenceClassification", "ElectraForTokenClassification"):
        assert ref.config.num_labels == ours.shape[-1]
        if ft.info.labels:
            assert [ref.config.id2label[i] for i in range(len(ft.info.labels))] == ft.info.labels


def test_classification_nsmc(ko_model: Path, tmp_path: Path, one_thread: None) -> None:  # noqa: F811
    out = tmp_path / "nsmc"
    res = finetune(
        ko_model,
        out,
        "--task nsmc --seeds 1 2 --epochs 2 --max-train-examples 160 "
        "--max-eval-examples 64 --max-length 48",
    )
    # the results file records task, model, recipe, seeds and scores
    assert res["task"]["name"] == "nsmc" and res["task"]["labels"] == ["negative", "positive"]
    assert res["task"]["splits"]["train"]["examples"] == 160
    assert "5-8 dropped" in res["task"]["source"]
    assert res["model"]["num_hidden_layers"] == 2
    r = res["recipe"]
    recipe = (r["size"], r["layer_decay"], r["warmup_fraction"], r["weight_decay"])
    assert recipe == ("small", 0.8, 0.1, 0.0)
    assert r["learning_rate"] == 1e-3 and r["seeds"] == [1, 2] and r["main_metric"] == "accuracy"
    assert [s["seed"] for s in res["seeds"]] == [1, 2]
    acc = res["summary"]["test"]["accuracy"]
    assert acc["n"] == 2 and 0.0 <= acc["min"] <= acc["median"] <= acc["max"] <= 1.0
    tests = [s["test"]["accuracy"] for s in res["seeds"]]
    assert acc["mean"] == pytest.approx(sum(tests) / 2)
    assert acc["std"] == pytest.approx(float(np.std(tests, ddof=1)))
    for s in res["seeds"]:
        assert 1 <= s["best_epoch"] <= 2 and len(s["history"]) == 2
        best = max(s["history"], key=lambda h: h["dev"]["accuracy"])
        assert s["dev"] == best["dev"]  # selected on the dev metric
    assert {"torch", "python"} <= set(res["versions"]) and res["timings"]["total_seconds"] > 0

    # the model directory: HF files + electra_task.json, best seed chosen on dev
    model = out / "model"
    info = json.loads((model / "electra_task.json").read_text(encoding="utf-8"))
    assert info["task"] == "nsmc" and info["seed"] == res["best_seed"]
    assert info["features"]["max_length"] == 48 and info["source_model"] == str(ko_model.resolve())
    assert (model / "vocab.txt").is_file() and (model / "model.safetensors").is_file()
    preds = read_jsonl(out / "test_predictions.jsonl")  # the saved model's test predictions
    assert len(preds) == 64 and all(p["gold"] in ("negative", "positive") for p in preds)
    assert np.mean([p["label"] == p["gold"] for p in preds]) == pytest.approx(
        next(s for s in res["seeds"] if s["seed"] == res["best_seed"])["test"]["accuracy"]
    )

    # electra evaluate needs only --model, and reproduces the test score of that seed
    assert run("evaluate --model {} --max-eval-examples 64 --no-progress", model) == 0
    ev = json.loads((model / "eval-test.json").read_text(encoding="utf-8"))
    best = next(s for s in res["seeds"] if s["seed"] == res["best_seed"])
    assert ev["scores"] == best["test"] and ev["examples"] == 64

    # electra predict: JSON Lines with labels and probabilities; reloading gives the same
    inp = tmp_path / "reviews.txt"
    inp.write_text("정말 재미있어요 최고\n시간 낭비 최악의 영화\n\n그냥 그래요\n", encoding="utf-8")
    recs = predict_twice(model, inp, tmp_path)
    assert len(recs) == 4  # one line per input line: the empty one gets an error record
    assert recs[2] == {"line": 3, "error": "empty line", "text": ""}
    for rec in recs[:2] + recs[3:]:
        assert rec["label"] in ("negative", "positive")
        assert sum(rec["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
        assert rec["label"] == max(rec["probabilities"], key=rec["probabilities"].get)
    ours_vs_transformers(model, "ElectraForSequenceClassification", ["정말 재미있어요", "최악"])


def test_patience_stops_a_seed_whose_dev_score_stalls(
    ko_model: Path,  # noqa: F811
    tmp_path: Path,
    one_thread: None,  # noqa: F811
) -> None:
    """A learning rate too small to move the dev score: epoch 2 is no better than 1, so a
    patience of 1 ends the seed there, keeps epoch 1 and still scores it on test."""
    out = tmp_path / "stall"
    argv = "--task nsmc --epochs 4 --patience 1 --learning-rate 1e-12 --max-train-examples 64"
    code = main(
        ["finetune", "--model", str(ko_model), "-o", str(out), *argv.split()]
        + ["--max-eval-examples", "32", "--max-length", "32", "--no-progress"]
    )
    assert code == 0
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    (seed,) = res["seeds"]
    assert res["recipe"]["epochs"] == 4 and res["recipe"]["patience"] == 1
    assert [h["epoch"] for h in seed["history"]] == [1, 2]
    assert seed["best_epoch"] == 1 and seed["test"] is not None
    assert seed["steps"] == 2 * 2  # two epochs of 64 / 32 examples ran, not four


def test_regression_korsts_pairs_select_by_loss(
    ko_model: Path,  # noqa: F811
    tmp_path: Path,
    one_thread: None,  # noqa: F811
) -> None:
    out = tmp_path / "sts"
    res = finetune(
        ko_model,
        out,
        "--task korsts --epochs 3 --select-by loss --max-train-examples 160 "
        "--max-eval-examples 48 --max-length 64",
    )
    run = res["seeds"][0]
    best = min(run["history"], key=lambda h: h["dev_loss"])
    assert run["best_epoch"] == best["epoch"]  # selected on the dev loss
    assert res["recipe"]["epochs"] == 3 and res["task"]["main_metric"] == "spearman"
    for split in ("dev", "test"):
        for m in ("pearson", "spearman"):
            assert -1.0 <= res["summary"][split][m]["median"] <= 1.0
    inp = tmp_path / "pairs.tsv"
    inp.write_text("sentence1\tsentence2\n한 남자가 춤을 춘다.\t남자가 춤추고 있다.\n", "utf-8")
    (rec,) = predict_twice(
        out / "model", inp, tmp_path, text_column="sentence1", text_pair_column="sentence2"
    )
    assert isinstance(rec["score"], float) and rec["text_pair"] == "남자가 춤추고 있다."
    pairs = [("한 남자가 춤을 춘다.", "남자가 춤추고 있다."), ("고양이", "개")]
    ours_vs_transformers(out / "model", "ElectraForSequenceClassification", pairs, pair=True)
    cfg = json.loads((out / "model" / "config.json").read_text())
    assert cfg["problem_type"] == "regression" and cfg["num_labels"] == 1


@pytest.mark.parametrize("task", ["klue-ner", "wnut17"])
def test_tagging(
    task: str,
    ko_model: Path,  # noqa: F811
    en_model: Path,  # noqa: F811
    tmp_path: Path,
    one_thread: None,  # noqa: F811
) -> None:
    model_in = ko_model if task == "klue-ner" else en_model
    out = tmp_path / task
    res = finetune(
        model_in,
        out,
        f"--task {task} --epochs 2 --learning-rate 2e-3 --max-train-examples 160 "
        "--max-eval-examples 48 --max-length 64",
    )
    level = "char" if task == "klue-ner" else "word"
    assert res["task"]["tagging_level"] == level
    assert 0.5 < res["task"]["oracle_f1_dev"] <= 1.0
    for m in ("f1", "precision", "recall"):
        assert 0.0 <= res["summary"]["test"][m]["median"] <= 1.0
    text = "경찰은 서울에서 김철수 씨를 만났다." if level == "char" else "I love New York City"
    inp = tmp_path / "in.txt"
    inp.write_text(text + "\n", encoding="utf-8")
    (rec,) = predict_twice(out / "model", inp, tmp_path)
    assert rec["tokens"] == (list(text) if level == "char" else text.split())
    assert len(rec["tags"]) == len(rec["tokens"])
    for ent in rec["entities"]:
        assert text[ent["start"] : ent["end"]] == ent["text"]
    ours_vs_transformers(out / "model", "ElectraForTokenClassification", [text, text[:5]])


def test_qa_korquad(ko_model: Path, tmp_path: Path, one_thread: None) -> None:  # noqa: F811
    out = tmp_path / "qa"
    res = finetune(
        ko_model,
        out,
        "--task korquad --epochs 2 --max-length 96 --doc-stride 32 "
        "--max-query-length 24 --max-train-examples 64 --max-eval-examples 24",
    )
    splits = res["task"]["splits"]
    assert splits["train"]["features"] > splits["train"]["examples"]  # long contexts: windows
    assert res["recipe"]["doc_stride"] == 32 and res["task"]["main_metric"] == "f1"
    for m in ("exact_match", "f1"):
        assert 0.0 <= res["summary"]["test"][m]["median"] <= 1.0
    window = res["floors"]["window"]  # the sliding-window floor, on the same questions
    assert res["floors"]["examples"]["test"] == splits["test"]["examples"]
    assert window["length"] in (1, 2, 3, 4) and 0.0 < window["test"]["f1"] < 1.0
    model = out / "model"
    info = json.loads((model / "electra_task.json").read_text(encoding="utf-8"))
    assert info["qa_style"] == "korquad" and info["features"]["doc_stride"] == 32
    context = "임종석은 1989년 2월 15일 여의도 농민 폭력 시위를 주도한 혐의로 지명수배되었다."
    inp = tmp_path / "q.jsonl"
    question = {"id": "a1", "question": "임종석이 지명수배된 날은?", "context": context}
    inp.write_text(json.dumps(question, ensure_ascii=False) + "\n", encoding="utf-8")
    (rec,) = predict_twice(model, inp, tmp_path)
    assert rec["id"] == "a1" and context[rec["start"] : rec["end"]] == rec["answer"]
    assert 0.0 < rec["score"] <= 1.0
    ours_vs_transformers(
        model, "ElectraForQuestionAnswering", [("지명수배된 날은?", context)], pair=True
    )


def test_hf_directory_fine_tunes_through_the_cli(tmp_path: Path) -> None:
    """The seed's KoELECTRA path: a transformers-saved model, our CLI, no transformers code."""
    shape = dict(embedding_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=4)
    cfg = transformers.ElectraConfig(
        vocab_size=32200, intermediate_size=128, max_position_embeddings=128, **shape
    )
    torch.manual_seed(0)
    hf_dir = tmp_path / "koelectra-like"
    transformers.ElectraForPreTraining(cfg).save_pretrained(hf_dir)
    write_tokenizer_dir(hf_dir, KO_VOCAB, lowercase=False)
    out = tmp_path / "out"
    args = f"finetune --task nsmc --model {hf_dir} -o {out} --max-train-examples 96 "
    args += "--max-eval-examples 32 --epochs 1 --max-length 32 --learning-rate 1e-3 --no-progress"
    proc = subprocess.run(
        cli_argv(*args.split()), env=cli_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "nsmc: 1 seed" in proc.stdout and "accuracy" in proc.stdout
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert res["model"]["architectures"] == ["ElectraForPreTraining"]
    inp = tmp_path / "r.csv"
    inp.write_text("text,label\n재미있다,positive\n지루하다,negative\n", encoding="utf-8")
    code = run(
        "predict --model {} --input {} --label-column label -o {} --no-progress",
        out / "model",
        inp,
        tmp_path / "pred.jsonl",
    )
    assert code == 0
    recs = read_jsonl(tmp_path / "pred.jsonl")
    assert [r["gold"] for r in recs] == ["positive", "negative"]
    # and transformers (with its own tokenizer class) loads what we wrote
    tok = transformers.AutoTokenizer.from_pretrained(out / "model")
    ours = load_finetuned(out / "model").tokenizer
    assert tok("재미있다")["input_ids"] == ours.encode("재미있다").ids
    ours_vs_transformers(out / "model", "ElectraForSequenceClassification", ["재미있다"])


def test_custom_dataset_labels_saved_and_cli_errors(
    ko_model: Path,  # noqa: F811
    tmp_path: Path,
    one_thread: None,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = [("배송이 빨라요", "good"), ("포장이 엉망", "bad"), ("보통이에요", "so-so")] * 12
    train = tmp_path / "train.csv"
    train.write_text("review,verdict\n" + "".join(f"{t},{v}\n" for t, v in rows), "utf-8")
    out = tmp_path / "custom"
    finetune(
        ko_model,
        out,
        f"--train-file {train} --text-column review --label-column verdict "
        "--epochs 2 --max-length 32",
    )
    cfg = json.loads((out / "model" / "config.json").read_text(encoding="utf-8"))
    assert cfg["id2label"] == {"0": "bad", "1": "good", "2": "so-so"}
    info = json.loads((out / "model" / "electra_task.json").read_text(encoding="utf-8"))
    assert info["labels"] == ["bad", "good", "so-so"] and info["data"]["text_column"] == "review"
    capsys.readouterr()

    def fails(command: str, *paths: Path) -> str:
        assert run(command + " --no-progress", *paths) == 2
        return capsys.readouterr().err

    err = fails("finetune --task nsmcc --model {}", ko_model)
    assert "unknown task 'nsmcc' (did you mean 'nsmc'?)" in err
    x = tmp_path / "x"
    err = fails("finetune --model {} --train-file {} --text-column text -o {}", ko_model, train, x)
    assert "train.csv, line 1, field 'text': no such column" in err
    dev = tmp_path / "dev.csv"
    dev.write_text("review,verdict\n좋아요,good\n최고,great\n", encoding="utf-8")
    cols = "--text-column review --label-column verdict"
    err = fails(
        "finetune --model {} --train-file {} --dev-file {} -o {} " + cols, ko_model, train, dev, x
    )
    assert "dev.csv, line 3, field 'label': dev label 'great' does not occur in train" in err
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    err = fails("predict --model {} --input {}", out / "model", empty)
    assert "empty.txt: the file is empty" in err
    err = fails("evaluate --model {}", ko_model)
    assert "not a fine-tuned model" in err
    pred = "predict --model {} --input {} -o {} " + cols
    err = fails(pred, out / "model", dev, tmp_path / "p.jsonl")
    assert "dev.csv, line 3, field 'label': test label 'great' does not occur in the model's" in err
    # with known gold labels, predict scores them and writes a results file next to its output
    dev.write_text("review,verdict\n좋아요,good\n별로,bad\n", encoding="utf-8")
    assert run(pred + " --no-progress", out / "model", dev, tmp_path / "p.jsonl") == 0
    summary = json.loads((tmp_path / "p.results.json").read_text(encoding="utf-8"))
    assert summary["examples"] == 2 and 0 <= summary["scores"]["accuracy"] <= 1
    assert summary["task"] == "custom" and summary["labels"] == ["bad", "good", "so-so"]


def test_gradient_accumulation_matches_one_big_batch(
    ko_model: Path,  # noqa: F811
    tmp_path: Path,
    one_thread: None,  # noqa: F811
) -> None:
    """--micro-batch-size only changes memory: without dropout the run is the same."""
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = tiny_model(tmp_path / "nodrop", ko_model, 32200, **no_dropout)
    common = "--task klue-nli --epochs 2 --max-train-examples 64 --max-eval-examples 32 "
    common += "--max-length 48"
    full = finetune(model, tmp_path / "full", common)
    acc = finetune(model, tmp_path / "acc", common + " --micro-batch-size 5")
    assert acc["recipe"]["micro_batch_size"] == 5
    for a, b in zip(full["seeds"][0]["history"], acc["seeds"][0]["history"], strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-4)
        assert a["dev_loss"] == pytest.approx(b["dev_loss"], abs=1e-4)
