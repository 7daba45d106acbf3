"""Fine-tuning speed with plain shuffled batches against length-grouped ones, one process.

Both sides run the same ``electra finetune`` (one seed, one epoch, no floors) on
the same model, task and examples, alternating A B A B ... so that whatever
else the machine does falls on both. Reported per side: the training seconds of
the epoch (``results.json``'s ``train_seconds``, evaluation excluded), the
padded tokens the batches computed against the real tokens, and the dev
accuracy after the epoch (one seed: a sanity check, not a quality comparison;
``benchmarks/results/recipe_search.md`` has the 3-seed one).

    python benchmarks/finetune_batching.py --model runs/compare/none-XXXX/hf/discriminator
    python benchmarks/finetune_batching.py --model M --task sst2 --repeats 3 --threads 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from electra.finetune.run import FinetuneArgs, finetune
from electra.finetune.tasks import load_task_data
from electra.finetune.training import epoch_batches
from electra.text.tokenizer import load_tokenizer


def padding_ratio(model: str, task: str, examples: int, max_length: int, grouped: bool) -> float:
    """Padded tokens / real tokens of one epoch's batches of 32 (the tokenizer's lengths)."""
    data = load_task_data(task)
    tok = load_tokenizer(model)
    train = data.splits.train[:examples]
    lengths = [min(max_length, len(tok.encode(e.text).ids)) for e in train]
    batches = epoch_batches(lengths, 32, torch.Generator().manual_seed(1), grouped)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return padded / sum(lengths)


def one_epoch(args: argparse.Namespace, grouped: bool, out: Path) -> dict[str, float]:
    ft = FinetuneArgs(
        model=args.model,
        task=args.task,
        output=str(out),
        seeds=[1],
        epochs=1,
        max_train_examples=args.examples,
        max_eval_examples=args.eval_examples,
        max_length=args.max_length,
        layer_decay=1.0,
        group_by_length=grouped,
        floors=False,
        progress=False,
    )
    r = finetune(ft)
    h = r["seeds"][0]["history"][0]
    return {"train_seconds": h["train_seconds"], "dev_accuracy": h["dev"]["accuracy"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="An exported discriminator directory.")
    p.add_argument("--task", default="nsmc")
    p.add_argument("--examples", type=int, default=4000)
    p.add_argument("--eval-examples", type=int, default=1000)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rows: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for grouped in (False, True):
                rows[grouped].append(one_epoch(args, grouped, Path(tmp) / f"{grouped}-{i}"))
    print(
        f"{args.task}, {args.examples} examples, max length {args.max_length}, "
        f"{args.threads} threads, {args.repeats} epochs per side (alternating)\n"
    )
    print("| batches | train s per epoch (median) | each | padded / real tokens | dev acc |")
    print("|---|---|---|---|---|")
    result = {}
    for grouped, name in ((False, "shuffled"), (True, "grouped by length")):
        secs = [r["train_seconds"] for r in rows[grouped]]
        ratio = padding_ratio(args.model, args.task, args.examples, args.max_length, grouped)
        acc = [round(100 * r["dev_accuracy"], 1) for r in rows[grouped]]
        print(
            f"| {name} | {statistics.median(secs):.1f} | "
            f"{', '.join(f'{s:.1f}' for s in secs)} | {ratio:.2f} | {acc} |"
        )
        result[name] = {"train_seconds": secs, "padding_ratio": ratio, "dev_accuracy": acc}
    speedup = statistics.median(result["shuffled"]["train_seconds"]) / statistics.median(
        result["grouped by length"]["train_seconds"]
    )
    print(f"\nspeed-up: {speedup:.2f}x")
    out = Path("out")
    out.mkdir(exist_ok=True)
    (out / "finetune_batching.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
