"""Model cards: the ``README.md`` of every exported Hugging Face directory.

The Hugging Face convention is a Markdown file with YAML metadata on top. A
user who finds one of our directories months later must learn from it alone
what it is (discriminator or generator, shape), what it saw (data, tokenizer,
steps, tokens, training FLOPs counted the paper's way), where it started
(random weights, or which checkpoint, by SHA-256 of its weights) and how it
scored when that is known. Everything comes from the run's resolved config,
its blocks' manifest and its summary: nothing is typed by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from electra.config import from_dict
from electra.model.config import ElectraConfig
from electra.pretrain.config import ObjectiveConfig
from electra.pretrain.flops import paper_flops_plan
from electra.pretrain.objectives import objective_named
from electra.system.files import atomic_write_bytes

_KINDS = {
    "discriminator": (
        "ElectraForPreTraining",
        "the ELECTRA discriminator (replaced-token detection head): the model to fine-tune",
    ),
    "generator": (
        "ElectraForMaskedLM",
        "the small ELECTRA generator (masked-language-model head), trained with the "
        "discriminator and usually discarded",
    ),
}
_SCORES = (
    ("val/gen_accuracy", "generator accuracy at masked positions"),
    ("val/disc_accuracy", "discriminator accuracy (all tokens)"),
    ("val/replaced_precision", "replaced-token precision"),
    ("val/replaced_recall", "replaced-token recall"),
    ("val/mlm_loss", "generator MLM loss"),
    ("val/disc_loss", "discriminator loss"),
)


def card_facts(config: dict[str, Any], step: int, summary: dict[str, Any] | None) -> dict[str, Any]:
    """What a card says, from a checkpoint's resolved config, its step and the run summary."""
    model = from_dict(
        ElectraConfig, {k: v for k, v in config["model"].items() if k != "preset"}, "config"
    )
    generator = (
        from_dict(ElectraConfig, config["generator"], "config") if config.get("generator") else None
    )
    optim, objective = config["optim"], config["objective"]
    length = int(config["data"]["block_length"])
    plan = paper_flops_plan(
        model,
        optim["batch_size"],
        length,
        from_dict(ObjectiveConfig, objective, "config"),
        generator=generator,
    )
    planned = (summary or {}).get("planned_steps") or optim["max_steps"]
    return {
        "model": model,
        "generator": generator,
        "objective": objective["objective"],
        "embedding_sharing": objective.get("embedding_sharing", "tied"),
        "generator_freeze_at": objective.get("generator_freeze_at", 0.0),
        "generator_shared_layers": objective.get("generator_shared_layers", 0),
        "mws_weight": objective.get("mws_weight", 0.0),
        "step": step,
        "tokens": step * optim["batch_size"] * length,
        "train_flops": plan.through(step, planned),
        "learning_rate": optim["learning_rate"],
        "warmup_steps": optim["warmup_steps"],
        "dropout": optim.get("dropout", True),
        "max_steps": optim["max_steps"],
        "batch_size": optim["batch_size"],
        "block_length": length,
        "blocks": config["data"]["blocks"],
        "manifest": _manifest(Path(config["data"]["blocks"])),
        "origin": config.get("origin"),
        "summary": summary or {},
    }


def _manifest(blocks: Path) -> dict[str, Any]:
    try:
        return json.loads((blocks / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}


def _front_matter(kind: str) -> str:
    tags = ["electra", "pretraining", "replaced-token-detection"]
    lines = ["---", "library_name: transformers", "tags:"] + [f"- {t}" for t in tags]
    if kind == "generator":
        lines.append("pipeline_tag: fill-mask")
    return "\n".join(lines + ["---", ""])


def _shape(c: ElectraConfig) -> str:
    return (
        f"{c.num_hidden_layers} layers, hidden {c.hidden_size}, FFN {c.intermediate_size}, "
        f"{c.num_attention_heads} heads, embeddings {c.embedding_size}, "
        f"vocabulary {c.vocab_size}, up to {c.max_position_embeddings} tokens"
    )


def _data_lines(facts: dict[str, Any]) -> list[str]:
    m = facts["manifest"]
    lines = [f"- blocks: `{facts['blocks']}` ({facts['block_length']} tokens per block)"]
    if m:
        train = m.get("splits", {}).get("train", {})
        sources = m.get("sources", [])
        names = ", ".join(f"`{Path(s['path']).name}`" for s in sources[:8])
        more = f" and {len(sources) - 8} more" if len(sources) > 8 else ""
        lines.append(
            f"- corpus: {len(sources)} files ({names}{more}), "
            f"{train.get('documents', 0):,} training documents, "
            f"{train.get('blocks', 0):,} training blocks"
        )
        tok = m.get("tokenizer", {})
        lines.append(
            f"- tokenizer: sha256 `{tok.get('sha256', '?')[:16]}` from `{tok.get('source')}`"
        )
    return lines


def _start_name(origin: dict[str, Any], role: str) -> str:
    """A starting model as the card names it: ``org/name@sha`` from the Hub, else its path."""
    source = origin.get(f"{role}_source") or {}
    if source.get("kind") == "hub":
        return f"{source['repo_id']}@{source['revision']}"
    return str(origin[role])


def _hub_file_lines(origin: dict[str, Any], role: str) -> list[str]:
    """One line per weight file of a Hub start, with its SHA-256 (to check a download)."""
    source = origin.get(f"{role}_source") or {}
    if source.get("kind") != "hub":
        return []
    return [f"  - `{name}` sha256 `{sha}`" for name, sha in source["files_sha256"].items()]


def _origin_lines(origin: dict[str, Any] | None) -> list[str]:
    if not origin:
        return ["Pre-trained from random initialisation."]
    lines = [
        "Continued pre-training of",
        f"- discriminator `{_start_name(origin, 'discriminator')}` "
        f"(`{origin['discriminator_weights']}` sha256 `{origin['discriminator_sha256']}`)",
        *_hub_file_lines(origin, "discriminator"),
    ]
    if origin.get("fresh_head"):
        lines.append("- with a fresh replaced-token head (the directory held an encoder only)")
    if origin.get("generator"):
        lines.append(
            f"- generator `{_start_name(origin, 'generator')}` "
            f"(`{origin['generator_weights']}` sha256 `{origin['generator_sha256']}`)"
        )
        lines.extend(_hub_file_lines(origin, "generator"))
    else:
        lines.append("- with a fresh generator (the starting directory had none)")
    lines.append("")
    lines.append(
        "Steps, tokens and FLOPs below count this continued run only, not the "
        "pre-training of the starting checkpoint."
    )
    return lines


def _score_lines(summary: dict[str, Any]) -> list[str]:
    lines = [f"| {label} | {summary[key]:.4f} |" for key, label in _SCORES if key in summary]
    if not lines:
        return ["No scores known (the run had no validation)."]
    return [
        "On the run's held-out validation blocks:",
        "",
        "| metric | value |",
        "|---|---|",
        *lines,
    ]


def model_card(kind: str, facts: dict[str, Any]) -> str:
    """The README.md text for an exported ``discriminator`` or ``generator`` directory."""
    arch, what = _KINDS[kind]
    kind_of = objective_named(facts["objective"])
    if not kind_of.has_discriminator:
        what = "a masked-language model trained as BERT is (the MLM baseline of this toolkit)"
    elif kind_of.replacements == "ngram":
        what += (
            ", trained without a generator: the replacements it learned to detect were sampled "
            "from the training blocks' counts of P(token | left and right neighbours) "
            "(rtd-ngram); a plain ElectraForPreTraining that `transformers` loads"
        )
    shape = facts["model"] if kind == "discriminator" else facts["generator"] or facts["model"]
    s = facts["summary"]
    minutes = f", {s['elapsed_s'] / 60:.1f} minutes" if "elapsed_s" in s else ""
    stopped = (
        f" (stopped by {s['stopped']})" if s.get("stopped", "max_steps") != "max_steps" else ""
    )
    body = [
        _front_matter(kind),
        f"# ELECTRA {kind} (`{shape.hf_architecture(arch)}`)",
        "",
        f"This is {what}. Shape: {_shape(shape)}.",
        "",
        "## Origin",
        "",
        *_origin_lines(facts["origin"]),
        "",
        "## Training",
        "",
        f"- objective: {facts['objective']}{_sharing(facts)}{_frozen(facts)}",
        f"- steps: {facts['step']:,} of {facts['batch_size']} blocks{minutes}{stopped}",
        f"- tokens: {facts['tokens']:,}",
        f"- training FLOPs: {facts['train_flops']:.3g} (counted as the ELECTRA paper does)",
        f"- peak learning rate {facts['learning_rate']:g}, {facts['warmup_steps']} warm-up steps,"
        f" linear decay to zero at step {facts['max_steps']:,}",
        *(
            []
            if facts.get("dropout", True)
            else ["- no dropout in pre-training (the config's rates apply when fine-tuning)"]
        ),
        "",
        "## Data",
        "",
        *_data_lines(facts),
        "",
        "## Scores",
        "",
        *_score_lines(s),
        "",
        "## Use",
        "",
        *_use_lines(arch, shape),
        "",
        "Made with the `electra` toolkit (`electra pretrain`, `electra export`).",
        "",
    ]
    return "\n".join(body)


def _use_lines(arch: str, shape: ElectraConfig) -> list[str]:
    """How to load the export: with transformers, or (local convolution) with electra only."""
    if shape.local_conv_kernel:
        return [
            f"This model has a local convolution (`local_conv_kernel = {shape.local_conv_kernel}`"
            "), which Hugging Face's ELECTRA does not have: `transformers` would load it "
            "without the convolution (its weights listed as UNEXPECTED) and compute something "
            "else. Load, fine-tune and export it with the `electra` toolkit:",
            "",
            "```bash",
            "electra finetune --model path/to/this/directory --task nsmc",
            "```",
        ]
    if shape.conv_kernel_size:
        arch = shape.hf_architecture(arch)
        head = (
            " The replaced-token detection head is not part of transformers' ConvBERT: "
            "its weights are listed as unused when it loads."
            if arch == "ConvBertModel"
            else ""
        )
        return [
            f"An ELECTRA with ConvBERT's mixed attention (`conv_kernel_size = "
            f"{shape.conv_kernel_size}`, `head_ratio = {shape.head_ratio}`), which "
            f"`transformers` loads as ConvBERT (`{arch}`; for a task, "
            f"`ConvBertForSequenceClassification` and the like).{head}",
            "",
            *_snippet(arch),
            "",
            padding_note(shape.conv_kernel_size),
        ]
    return _snippet(arch)


def padding_note(kernel: int) -> str:
    """What a ConvBERT card says about padded batches under transformers (``kernel``: K).

    Each clause is checked against transformers by tests/model/test_padding_invariance.py:
    in its first layer only the last K//2 real tokens of the shorter row differ, at the
    output the whole row does, and electra's model gives the row-alone outputs padded.
    """
    return (
        f"**Padded batches.** With `transformers`, `ConvBertModel` (and the `ConvBertFor*` "
        f"classes) mixes padding into the last {kernel // 2} tokens (K//2, K = "
        f"`conv_kernel_size` = {kernel}) of every shorter sequence in a padded batch: each "
        "layer's span convolution reads the hidden states at the pad positions, and the "
        "attention of the layers after carries the difference to the rest of the sequence, "
        "so a text's outputs depend on what else is in its batch. Predict one text at a time "
        "with `transformers`, or use electra's runtime (`electra predict`, with PyTorch or the "
        "ONNX export), which zeroes the padding before each convolution, for batch-invariant "
        "results. On an unpadded sequence the two agree to float precision (same weights)."
    )


def _snippet(arch: str) -> list[str]:
    return [
        "```python",
        f"from transformers import {arch}, AutoTokenizer",
        f'model = {arch}.from_pretrained("path/to/this/directory")',
        'tokenizer = AutoTokenizer.from_pretrained("path/to/this/directory")',
        "```",
    ]


def finetuned_card(architecture: str, info: dict[str, Any], conv_kernel_size: int = 0) -> str:
    """The README.md text of a fine-tuned model (``info``: its ``electra_task.json``;
    ``conv_kernel_size``: the encoder's, whose ConvBERT export behaves differently padded)."""
    scores = info.get("dev_scores") or {}
    score_lines = [
        f"| {k} | {v:.4f} |" for k, v in scores.items() if isinstance(v, int | float)
    ] or ["| (none recorded) | |"]
    labels = ", ".join(f"`{x}`" for x in info.get("labels", [])) or "none (regression or spans)"
    recipe = info.get("recipe", {})
    body = [
        "---",
        "library_name: transformers",
        "tags:",
        "- electra",
        f"- {info['task']}",
        "---",
        "",
        f"# ELECTRA fine-tuned on {info['task']} (`{architecture}`)",
        "",
        f"A {info['family']} model; labels: {labels}.",
        "",
        "## Origin",
        "",
        f"Fine-tuned from `{info.get('source_model', '?')}` (seed {info.get('seed')}, "
        f"best epoch {info.get('best_epoch')} selected on dev by {info.get('main_metric')}).",
        "",
        "## Training",
        "",
        *[f"- {k}: {v}" for k, v in recipe.items() if not isinstance(v, dict | list)],
        "",
        "## Data",
        "",
        *[f"- {k}: {v}" for k, v in (info.get("data") or {}).items() if v not in (None, "")],
        "",
        "## Scores (dev)",
        "",
        "| metric | value |",
        "|---|---|",
        *score_lines,
        "",
        "Test scores, when measured, are in the run's `results.json`. Made with the `electra`"
        " toolkit (`electra finetune`).",
        "",
    ]
    if conv_kernel_size:
        body[-1:-1] = ["", "## Use", "", padding_note(conv_kernel_size)]
    return "\n".join(body)


def write_model_card(directory: str | Path, kind: str, facts: dict[str, Any]) -> Path:
    """Write ``DIRECTORY/README.md`` atomically; returns its path."""
    return write_card_text(directory, model_card(kind, facts))


def write_card_text(directory: str | Path, text: str) -> Path:
    """Write ``text`` as ``DIRECTORY/README.md`` atomically; returns its path."""
    path = Path(directory) / "README.md"
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


def _frozen(facts: dict[str, Any]) -> str:
    """Said only when the generator was frozen part-way (cards of other runs are unchanged)."""
    share = facts.get("generator_freeze_at", 0.0)
    if not share:
        return ""
    return (
        f", the generator trained for the first {share:.0%} of the planned steps, then "
        "frozen (forward only; the discriminator's architecture is unchanged)"
    )


def _sharing(facts: dict[str, Any]) -> str:
    """Said only when not the paper's tied sharing (cards of tied runs are unchanged)."""
    layers = facts.get("generator_shared_layers", 0)
    shared = (
        f", the generator ran the discriminator's bottom {layers} layer(s) (TEAMS' sharing; "
        "the exported discriminator is a plain one)"
        if layers
        else ""
    )
    if facts.get("mws_weight", 0.0):
        shared += (
            f", with TEAMS' multi-word selection (weight {facts['mws_weight']:g}; its head "
            "was used in pre-training only and is not exported)"
        )
    if facts.get("embedding_sharing", "tied") == "tied":
        return shared
    return shared + (
        f", embedding sharing {facts['embedding_sharing']} (the discriminator's tables here "
        "are the merged shared table + its delta)"
    )
