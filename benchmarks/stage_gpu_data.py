"""Stage the data the GPU check needs into ``gpu_data/``, on a CPU machine, beforehand.

    python benchmarks/stage_gpu_data.py                  # ../shared/data -> gpu_data/
    python benchmarks/stage_gpu_data.py --data-dir D --out DIR

The GPU machine is offline and receives the checkout alone (``../shared`` is
absent there), so this copies the subset the check uses into a git-ignored
folder of the repository, to be carried along (``carry: ["gpu_data"]``):

* ``text/kowiki_slice.txt``: the whole articles within the first 300,000
  characters of one Korean Wikipedia file (``pretrain/ko/kowiki/AA/wiki_00``,
  CC BY-SA);
* ``tokenizer/`` and ``blocks/``: a 1,000-token WordPiece vocabulary trained on
  that slice and its 64-token blocks (``electra prepare``), prebuilt so the
  GPU machine spends none of its minutes on them;
* ``nsmc/raw_subset/``: the first raw NSMC review files (in the reader's
  order) holding at least 3,800 reviews of each label, byte-identical copies
  (CC0), enough for the fine-tuning step's 4,000 training and 1,000 evaluation
  reviews after class balancing and the 60/20/20 split; and NSMC's README;
* ``manifest.json``: every file with its size and sha256, where it came from
  (with the source file's sha256), the blocks' fingerprint, the total size.

The total is asserted to stay under 40 MiB (the machine takes 64 MiB of
checkout in all) and printed. :func:`verify` checks a staged folder against
its manifest; the check's ``data`` step calls it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "src"))

LIMIT_BYTES = 40 * 2**20
WIKI = "pretrain/ko/kowiki/AA/wiki_00"
WIKI_CHARS = 300_000
NSMC_PER_LABEL = 3800
FORMAT = "electra-gpu-data/1"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def nsmc_labels(path: Path) -> tuple[int, int]:
    """(negative, positive) reviews in one raw file by the NSMC rule (1-4, 9-10)."""
    neg = pos = 0
    for r in json.loads(path.read_text(encoding="utf-8")):
        rating = int(r.get("rating") or 0)
        neg += 1 <= rating <= 4
        pos += rating >= 9
    return neg, pos


def stage_nsmc(data_dir: Path, out: Path, per_label: int = NSMC_PER_LABEL) -> list[dict[str, Any]]:
    """Copy raw NSMC files, in the reader's order, until each label has ``per_label``."""
    src = data_dir / "nsmc" / "raw_subset"
    files = sorted(src.glob("*.json"), key=lambda p: (len(p.stem), p.stem))
    if not files:
        raise FileNotFoundError(f"{src}: no raw NSMC review files")
    dst = out / "nsmc" / "raw_subset"
    dst.mkdir(parents=True)
    neg = pos = 0
    copied = []
    for f in files:
        if neg >= per_label and pos >= per_label:
            break
        n, p = nsmc_labels(f)
        neg, pos = neg + n, pos + p
        shutil.copyfile(f, dst / f.name)
        copied.append({"path": f"nsmc/raw_subset/{f.name}", "from": f"nsmc/raw_subset/{f.name}"})
    if neg < per_label or pos < per_label:
        raise ValueError(f"{src}: only {neg} negative / {pos} positive reviews in all files")
    readme = data_dir / "nsmc" / "README.md"
    if readme.is_file():
        shutil.copyfile(readme, out / "nsmc" / "README.md")
        copied.append({"path": "nsmc/README.md", "from": "nsmc/README.md"})
    return copied


def stage_blocks(data_dir: Path, out: Path) -> dict[str, Any]:
    """The Wikipedia slice, its tokenizer and its blocks; the blocks' fingerprint."""
    from electra.blocks.options import PrepareCommand
    from electra.blocks.prepare import prepare
    from electra.text.vocabulary import train_tokenizer

    text = out / "text" / "kowiki_slice.txt"
    text.parent.mkdir(parents=True)
    raw = (data_dir / WIKI).read_text(encoding="utf-8")[:WIKI_CHARS]
    end = raw.rfind("</doc>")  # whole articles only
    text.write_text(raw[: end + len("</doc>")] + "\n" if end >= 0 else raw, encoding="utf-8")
    train_tokenizer([text], out / "tokenizer", vocab_size=1000, progress=False)
    prepare(
        PrepareCommand(
            inputs=[str(text)],
            tokenizer=str(out / "tokenizer"),
            output=str(out / "blocks"),
            max_length=64,
            validation_fraction=0.05,
            workers=1,
            progress=False,
        )
    )
    blocks = json.loads((out / "blocks" / "manifest.json").read_text())
    return {"fingerprint": blocks["fingerprint"], "splits": list(blocks["splits"])}


def _commit() -> str | None:
    try:
        p = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except OSError:
        return None
    return p.stdout.strip() or None


def stage(data_dir: Path, out: Path, force: bool = False) -> dict[str, Any]:
    """Build ``out`` from ``data_dir``; returns the manifest written there."""
    if not (data_dir / "MANIFEST.md").is_file():
        raise FileNotFoundError(f"{data_dir}: not the shared data (no MANIFEST.md)")
    if out.exists():
        if not force and not (out / "manifest.json").is_file():
            raise FileExistsError(f"{out} exists and is not a staged folder; --force replaces it")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    t = time.time()
    blocks = stage_blocks(data_dir, out)
    copied = stage_nsmc(data_dir, out)
    sources = {c["path"]: c["from"] for c in copied}
    sources["text/kowiki_slice.txt"] = (
        f"{WIKI} (whole articles of its first {WIKI_CHARS:,} characters)"
    )
    files = []
    for f in sorted(p for p in out.rglob("*") if p.is_file()):
        rel = f.relative_to(out).as_posix()
        entry = {"path": rel, "bytes": f.stat().st_size, "sha256": sha256(f)}
        origin = sources.get(rel, "").split(" ")[0]
        if origin:
            entry["from"] = sources[rel]
            entry["source_sha256"] = sha256(data_dir / origin)
        files.append(entry)
    total = sum(e["bytes"] for e in files)
    if total >= LIMIT_BYTES:
        raise AssertionError(f"staged {total / 2**20:.1f} MiB, over the 40 MiB limit")
    from electra.finetune.readers import read_nsmc_raw

    _, nsmc = read_nsmc_raw(out / "nsmc" / "raw_subset")
    manifest = {
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "python benchmarks/stage_gpu_data.py",
        "repo_commit": _commit(),
        "source_data_dir": str(data_dir.resolve()),
        "blocks": blocks,
        "nsmc": nsmc,
        "seconds": round(time.time() - t, 1),
        "total_bytes": total,
        "files": files,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def verify(root: Path) -> dict[str, Any]:
    """``root``'s manifest, after checking every file is there with its size and sha256."""
    manifest = json.loads((root / "manifest.json").read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{root}: not a staged folder of format {FORMAT}")
    bad = []
    for e in manifest["files"]:
        f = root / e["path"]
        if not f.is_file() or f.stat().st_size != e["bytes"] or sha256(f) != e["sha256"]:
            bad.append(e["path"])
    if bad:
        raise ValueError(
            f"{root}: {len(bad)} staged files missing or changed ({', '.join(bad[:5])}); "
            "run `python benchmarks/stage_gpu_data.py` again"
        )
    return manifest


def main(argv: list[str] | None = None) -> int:
    from electra.system.paths import default_data_dir

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=None, help="shared/data (default: found)")
    p.add_argument("--out", type=Path, default=REPO / "gpu_data", help="default: gpu_data/")
    p.add_argument("--force", action="store_true", help="replace an existing folder")
    args = p.parse_args(argv)
    m = stage(args.data_dir or default_data_dir(), args.out, args.force)
    print(
        f"staged {args.out}: {len(m['files'])} files, {m['total_bytes'] / 2**20:.2f} MiB "
        f"({m['total_bytes']:,} bytes, limit 40 MiB), {m['nsmc']['kept']} NSMC reviews, "
        f"in {m['seconds']} s; carry it to the GPU machine with the checkout"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
