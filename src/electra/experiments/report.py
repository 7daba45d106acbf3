"""``electra report RUN_DIR``: see what a pre-training run did without reading logs.

Writes into ``RUN_DIR/report/``:

* PNG plots from ``metrics.jsonl``: losses (train and validation), generator
  and discriminator accuracy, replaced-token precision and recall, health
  (replaced-token and in-row-swap ROC-AUC, token-vector cosine, generator
  accuracy against the unigram floor; see ``electra.pretrain.health``), learning
  rate, throughput;
* a plain health verdict (``electra.pretrain.health.verdict``) from the last validation;
* ``index.html``, self-contained (plots embedded), with the run's summary and
  configuration and one validation block as the discriminator sees it: each
  token coloured by the discriminator's probability that it was replaced,
  the generator's replacements outlined, the original token on hover.

TensorBoard reads the same logs: ``tensorboard --logdir RUN_DIR/tensorboard``.

PyTorch, and the modules that import it, are imported inside the functions
that use them, so ``electra report --help`` answers without loading it.
"""

from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from electra.blocks.read import open_blocks
from electra.experiments.options import ReportCommand
from electra.text.tokenizer import load_tokenizer

PLOTS: dict[str, tuple[str, list[str]]] = {
    "losses": (
        "Loss",
        ["loss", "mlm_loss", "disc_loss", "val/loss", "val/mlm_loss", "val/disc_loss"],
    ),
    "accuracy": (
        "Accuracy",
        ["gen_accuracy", "disc_accuracy", "val/gen_accuracy", "val/disc_accuracy"],
    ),
    "replaced": (
        "Replaced-token detection",
        ["replaced_precision", "replaced_recall", "val/replaced_precision", "val/replaced_recall"],
    ),
    "health": (
        "Health (validation): AUCs, token cosine, generator vs unigram floor",
        [
            "val/disc_auc",
            "val/swap_auc",
            "val/token_cosine",
            "val/gen_accuracy",
            "val/unigram_accuracy",
        ],
    ),
    "lr": ("Learning rate", ["lr"]),
    "throughput": ("Tokens per second", ["tokens_per_s"]),
}


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Records of ``metrics.jsonl``; a torn last line (a killed run) is ignored."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no metrics (is {run_dir} a pre-training run?)")
    records = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i != len(lines):
                raise ValueError(f"{path}:{i}: not valid JSON") from None
    return records


def series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    pts = [(r["step"], r[key]) for r in records if key in r and r[key] is not None]
    return [p[0] for p in pts], [float(p[1]) for p in pts]


def plot_metrics(records: list[dict[str, Any]], out: Path) -> dict[str, Path]:
    """One PNG per panel of :data:`PLOTS` that has data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, (title, keys) in PLOTS.items():
        present = [k for k in keys if series(records, k)[0]]
        if not present:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
        for k in present:
            x, y = series(records, k)
            style = "--" if k.startswith("val/") else "-"
            marker = "o" if k.startswith("val/") or len(x) < 3 else None
            ax.plot(x, y, style, marker=marker, label=k, linewidth=1.4, markersize=3)
        if name == "losses" and all(v > 0 for k in present for v in series(records, k)[1]):
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"{name}.png"
        fig.savefig(path)
        plt.close(fig)
        written[name] = path
    return written


@dataclass
class TokenView:
    token: str
    original: str
    replaced: bool
    prob: float  # discriminator's P(replaced)


def validation_example(run_dir: Path, seed: int = 0) -> list[TokenView] | None:
    """One validation (or train) block through generator and discriminator."""
    import torch

    from electra.pretrain.export import load_run_model
    from electra.pretrain.objective import SampleRNG

    try:
        model, config, _ = load_run_model(run_dir)
    except (ValueError, FileNotFoundError):
        return None
    if model.discriminator is None:
        return None
    blocks_dir = Path(config["data"]["blocks"])
    try:
        blocks = open_blocks(blocks_dir, "validation")
        if len(blocks) == 0:
            raise ValueError("empty")
    except (ValueError, FileNotFoundError, KeyError):
        blocks = open_blocks(blocks_dir, "train")
    tok = load_tokenizer(blocks_dir)
    # Among a few blocks from ``seed`` on, show the fullest (short blocks teach little).
    candidates = [(seed + i) % len(blocks) for i in range(min(32, len(blocks)))]
    lengths = (blocks.get(candidates)[0] != blocks.special.pad).sum(axis=1)
    ids, types = blocks.get([candidates[int(lengths.argmax())]])
    ids_t = torch.from_numpy(ids)
    mask = (ids_t != blocks.special.pad).long()
    model.eval()
    with torch.no_grad():
        out = model(
            ids_t,
            mask,
            torch.from_numpy(types),
            rng=SampleRNG(SampleRNG.seeds_for(seed, [0])),
            keep_tensors=True,
        )
    probs = torch.sigmoid(out.disc_logits.float())[0]
    n = int(mask.sum())
    return [
        TokenView(
            token=tok.id_to_token(int(out.corrupted_ids[0, i])) or "?",
            original=tok.id_to_token(int(ids[0, i])) or "?",
            replaced=bool(out.replaced[0, i]),
            prob=float(probs[i]),
        )
        for i in range(n)
    ]


def _colour(p: float) -> str:
    """White (original) to red (replaced) by probability."""
    g = int(255 - 200 * p)
    return f"rgb(255,{g},{g})"


def tokens_html(view: list[TokenView]) -> str:
    spans = []
    for t in view:
        title = f"P(replaced) = {t.prob:.2f}"
        if t.replaced:
            title += f"; generator replaced {t.original!r}"
        cls = "tok rep" if t.replaced else "tok"
        spans.append(
            f'<span class="{cls}" style="background:{_colour(t.prob)}" '
            f'title="{html.escape(title)}">{html.escape(t.token)}</span>'
        )
    n_rep = sum(t.replaced for t in view)
    caught = sum(t.replaced and t.prob > 0.5 for t in view)
    false_alarm = sum((not t.replaced) and t.prob > 0.5 for t in view)
    return (
        f"<p>{len(view)} tokens, {n_rep} replaced by the generator; the discriminator flags "
        f"{caught} of them and {false_alarm} originals (threshold 0.5). Hover a token for "
        "details.</p><div class='sentence'>" + " ".join(spans) + "</div>"
    )


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{path.stem}" src="data:image/png;base64,{data}">'


def run_verdict(run_dir: Path, records: list[dict[str, Any]]) -> str | None:
    """The health verdict of the run's last validation (``summary.json`` or ``metrics.jsonl``)."""
    from electra.pretrain.cooccurrence import WARM_START_FILE
    from electra.pretrain.health import verdict

    summary = _read_json(run_dir / "summary.json") or {}
    if summary.get("verdict"):
        return summary["verdict"]
    last = next((r for r in reversed(records) if any(k.startswith("val/") for k in r)), None)
    if last is None:
        return None
    warm = _read_json(run_dir / WARM_START_FILE)  # a running PPMI-started run
    return verdict({**last, "token_embeddings": warm} if warm else last)


def write_html(
    run_dir: Path,
    plots: dict[str, Path],
    view: list[TokenView] | None,
    health: str | None = None,
) -> Path:
    summary = _read_json(run_dir / "summary.json")
    config = _read_json(run_dir / "config.json")
    rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>"
        for k, v in (summary or {}).items()
    )
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>electra report: {html.escape(run_dir.name)}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "img{max-width:49%;margin:2px}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;font-size:13px}"
        ".sentence{line-height:2.2em;font-size:15px}.tok{padding:2px 3px;border-radius:3px}"
        ".rep{outline:2px solid #1a5fb4}pre{background:#f6f6f6;padding:8px;font-size:12px;"
        "overflow:auto}</style></head><body>",
        f"<h1>Pre-training run <code>{html.escape(str(run_dir))}</code></h1>",
    ]
    if health:
        from electra.pretrain.health import COLLAPSED_COSINE, CONTEXT_BASE_AUC, CONTEXT_LEARNING_AUC

        parts.append(
            f"<h2>Health</h2><p class='verdict'><b>{html.escape(health)}</b></p>"
            "<p>In-row-swap AUC: tokens moved within their row, so only context can spot "
            f"them (below {CONTEXT_BASE_AUC}: base rate; {CONTEXT_LEARNING_AUC} and above: "
            f"learning context). Token cosine above {COLLAPSED_COSINE}: the vectors have "
            "collapsed.</p>"
        )
    if rows:
        parts.append(f"<h2>Summary</h2><table>{rows}</table>")
    parts.append("<h2>Training curves</h2>" + "".join(_img(p) for p in plots.values()))
    if view:
        parts.append(
            "<h2>A validation block, as the discriminator sees it</h2>"
            "<p>Red: the discriminator's probability that the token was replaced; "
            "outlined: tokens the generator actually replaced.</p>" + tokens_html(view)
        )
    if config:
        parts.append(
            "<h2>Configuration</h2><pre>" + html.escape(json.dumps(config, indent=2)) + "</pre>"
        )
    parts.append(
        "<p>TensorBoard: <code>tensorboard --logdir "
        f"{html.escape(str(run_dir / 'tensorboard'))}</code></p></body></html>"
    )
    out = run_dir / "report" / "index.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(parts), encoding="utf-8")
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return json.dumps(v)
    return str(v)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def build_report(run_dir: str | Path, example_seed: int = 0) -> Path:
    """Plots and ``index.html`` for ``run_dir``; returns the HTML path."""
    run = Path(run_dir)
    records = read_metrics(run)
    plots = plot_metrics(records, run / "report")
    view = validation_example(run, example_seed)
    return write_html(run, plots, view, run_verdict(run, records))


def report_cli(cmd: ReportCommand) -> int:
    """Run ``electra report`` (its ``--help`` is :class:`~electra.experiments.options.ReportCommand`'s docstring)."""
    path = build_report(cmd.run, cmd.example)
    health = run_verdict(Path(cmd.run), read_metrics(Path(cmd.run)))
    if health:
        print(f"health: {health}")
    print(f"report: {path}")
    for png in sorted(path.parent.glob("*.png")):
        print(f"  {png}")
    return 0
