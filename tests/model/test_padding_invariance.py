"""The same text gets the same output whatever else is in its batch (issue #32, item 7).

A short text is run alone and right-padded among longer ones (pads holding arbitrary ids
and token types): at its real positions the outputs must agree to float noise, for every
encoder option that mixes positions (attention, the local convolution, ConvBERT's span
convolutions), every fine-tuning head and in training (no gradient reaches the pads).
transformers' ConvBERT does not mask its convolutions; the last test pins down how it
differs, which is what the model cards of ConvBERT exports say.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from builders import write_tokenizer_dir
from torch import Tensor

from electra.finetune.families import get_family
from electra.finetune.modeling import TaskInfo, save_finetuned
from electra.model.config import ElectraConfig, preset
from electra.model.encoder import ElectraDiscriminator, ElectraGenerator, ElectraModel
from electra.model.hf import export_discriminator
from electra.pretrain.modelcard import padding_note

ATOL = 1e-5  # fp32
SHORT = 12  # the short text's length; the others are longer
PAD_NOISE = 3  # the id the pads hold here: never a real token below (those are >= 5)

# Every option of ElectraConfig that mixes positions, in the shapes the toolkit trains.
CONFIGS = {
    "electra": {},
    "electra_unprojected": dict(embedding_size=64),
    "local_conv": dict(local_conv_kernel=3),
    "convbert_cpu_recipe": dict(conv_kernel_size=9),  # the cpu recipe's (head_ratio 2)
    "convbert_k3_ratio1": dict(conv_kernel_size=3, head_ratio=1),
    "convbert_k5_one_head": dict(conv_kernel_size=5, head_ratio=8),
}


def config(**kw) -> ElectraConfig:
    return preset("tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **kw)


def perturbed(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Non-zero biases and non-unit LayerNorms: a zero bias would hide a mask put before
    the projection of the span convolution's values instead of after it."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def batch_with(short: Tensor, lengths: tuple[int, ...] = (40, 25)) -> dict[str, Tensor]:
    """``short`` (L,) as row 1, right-padded among random rows of ``lengths``; the pads hold
    PAD_NOISE and token type 1, so nothing about them can be what a lone row has."""
    g = torch.Generator().manual_seed(7)
    width = max(lengths)
    ids = torch.randint(5, 1000, (1 + len(lengths), width), generator=g)
    mask = torch.ones_like(ids)
    rows = [lengths[0], len(short), *lengths[1:]]
    for i, n in enumerate(rows):
        mask[i, n:] = 0
    ids[1, : len(short)] = short
    ids[mask == 0] = PAD_NOISE
    types = (mask == 0).long()
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def short_text() -> Tensor:
    return torch.randint(5, 1000, (SHORT,), generator=torch.Generator().manual_seed(3))


def alone_and_padded(model: torch.nn.Module) -> tuple[Tensor, Tensor]:
    """``model``'s output for the short text alone (1, ...) and as row 1 of a padded batch."""
    short = short_text()
    batch = batch_with(short)
    with torch.no_grad():
        alone = model(short[None], torch.ones(1, SHORT, dtype=torch.long))
        padded = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    return alone[0], padded[1]


def max_diff(a: Tensor, b: Tensor) -> float:
    return (a - b).abs().max().item()


@pytest.mark.parametrize("name", list(CONFIGS))
def test_encoder_and_pretraining_heads_do_not_see_the_padding(name: str) -> None:
    cfg = config(**CONFIGS[name])
    disc = perturbed(ElectraDiscriminator(cfg).eval())
    hidden, hidden_padded = alone_and_padded(disc.electra)
    assert max_diff(hidden, hidden_padded[:SHORT]) <= ATOL
    logits, logits_padded = alone_and_padded(disc)
    assert max_diff(logits, logits_padded[:SHORT]) <= ATOL
    gen = perturbed(ElectraGenerator(cfg).eval(), seed=1)
    mlm, mlm_padded = alone_and_padded(gen)
    assert max_diff(mlm, mlm_padded[:SHORT]) <= ATOL


@pytest.mark.parametrize("conv_kernel_size", [0, 9])
@pytest.mark.parametrize("family", ["classification", "regression", "tagging", "qa"])
def test_finetuning_heads_do_not_see_the_padding(family: str, conv_kernel_size: int) -> None:
    encoder = ElectraModel(config(conv_kernel_size=conv_kernel_size))
    model = perturbed(get_family(family).build_model(encoder, 3).eval())
    alone, padded = alone_and_padded(model)
    if not get_family(family).sequence_level:
        padded = padded[:SHORT]  # per-token logits: the real positions
    assert max_diff(alone, padded) <= ATOL


@pytest.mark.parametrize("name", ["electra", "local_conv", "convbert_cpu_recipe"])
def test_training_gets_no_gradient_from_the_padding(name: str) -> None:
    """In training (dropout 0 to compare) a loss on the real tokens does not reach the pads:
    the word row the pads hold gets exactly no gradient, and the loss is the lone row's."""
    disc = perturbed(ElectraDiscriminator(config(**CONFIGS[name])).train())
    short = short_text()
    batch = batch_with(short)
    real = batch["attention_mask"].bool()
    loss = disc(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])[real].sum()
    loss.backward()
    assert disc.electra.embeddings.word_embeddings.weight.grad[PAD_NOISE].abs().max() == 0
    with torch.no_grad():
        lone = [
            disc(batch["input_ids"][i : i + 1, :n]).sum()
            for i, n in enumerate(real.sum(1).tolist())
        ]
    assert abs(loss.item() - sum(lone).item()) <= 1e-3  # a sum of ~80 logits


def test_ours_in_a_padded_batch_is_transformers_alone_and_transformers_padded_is_not(
    tmp_path: Path,
) -> None:
    """What the ConvBERT model cards say (:func:`padding_note`), checked.

    transformers' ConvBertModel on the padded batch: in the first layer only the last K//2
    real tokens of the short row change (their span convolution reads the pads), at the
    output every token of the row does (attention carries it); ours padded equals
    transformers on the row alone.
    """
    transformers = pytest.importorskip("transformers")
    K = 9
    disc = perturbed(ElectraDiscriminator(config(conv_kernel_size=K)).eval())
    export_discriminator(disc, tmp_path / "d")
    ref = transformers.AutoModel.from_pretrained(tmp_path / "d").eval()
    short = short_text()
    batch = batch_with(short)
    with torch.no_grad():
        alone = ref(short[None], output_hidden_states=True).hidden_states
        padded = ref(**batch, output_hidden_states=True).hidden_states
        ours = disc.electra(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    first = (alone[1][0] - padded[1][1, :SHORT]).abs().amax(-1)  # (SHORT,), per position
    assert first[: SHORT - K // 2].max() <= ATOL
    assert first[SHORT - K // 2 :].min() > 100 * ATOL
    last = (alone[-1][0] - padded[-1][1, :SHORT]).abs().amax(-1)
    assert last.min() > ATOL  # every token of the short row
    assert max_diff(ours[1, :SHORT], alone[-1][0]) <= ATOL
    # The unpadded rows agree padded too (their own batch-mates' padding is not theirs).
    assert max_diff(ours[0], padded[-1][0]) <= ATOL
    assert f"last {K // 2} tokens" in padding_note(K)


def test_a_finetuned_convbert_classifier_in_transformers_and_its_card(tmp_path: Path) -> None:
    """The issue's case: a ConvBERT classifier's probability for a short review shifts in
    transformers when it is padded beside a long one, not in ours; its card says so."""
    transformers = pytest.importorskip("transformers")
    tok = write_tokenizer_dir(
        tmp_path / "tok", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], lowercase=True
    )
    cfg = config(conv_kernel_size=9)
    model = perturbed(get_family("classification").build_model(ElectraModel(cfg), 2).eval())
    info = TaskInfo(task="custom", family="classification", labels=["neg", "pos"])
    out = save_finetuned(model, tmp_path / "ft", info, tok)
    arch = json.loads((out / "config.json").read_text())["architectures"]
    assert arch == ["ConvBertForSequenceClassification"]
    ref = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    short = short_text()
    batch = batch_with(short)
    with torch.no_grad():
        ref_alone, ref_padded = ref(short[None]).logits[0], ref(**batch).logits[1]
    ours_alone, ours_padded = alone_and_padded(model)
    assert max_diff(ours_alone, ref_alone) <= ATOL  # the same model on one text
    assert max_diff(ours_alone, ours_padded) <= ATOL
    assert max_diff(ref_alone, ref_padded) > 10 * ATOL
    card = (out / "README.md").read_text(encoding="utf-8")
    assert padding_note(9) in card and "last 4 tokens" in card
