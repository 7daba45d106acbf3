"""Throughput and memory of ``electra prepare`` against the raw tokenizer.

The physical limit of ``prepare`` is tokenization: ``tokenizers``'
multithreaded ``Tokenizer.encode_batch`` over the same text, held in memory.
This script measures both on one corpus and prints the ratio:

* raw: the corpus's lines (as the readers yield them) encoded with
  ``encode_batch`` in batches of 10,000 lines, all cores, text in memory;
* prepare: ``electra.blocks.prepare.prepare`` (reading, sentence splitting,
  tokenization in worker processes, block building, shards, manifest) in a
  fresh subprocess; its time is measured inside the subprocess, from the
  ``prepare()`` call to its return (interpreter start and imports excluded);
  the peak RSS is summed over its whole process tree (sampled from /proc).

MB are megabytes (1e6 bytes) of UTF-8 text as the readers yield it (JSON
syntax of the NSMC files excluded); runs of both kinds alternate and the best
of ``--repeats`` is reported, to keep other load on a shared machine from
deciding the ratio.

Usage::

    python benchmarks/prepare_throughput.py              # ~35 MB of shared data
    python benchmarks/prepare_throughput.py --big /tmp/big-corpus   # >= 200 MB

    python benchmarks/prepare_throughput.py --formats [INPUTS]   # JSON Lines vs Parquet

``--formats`` writes the documents of the inputs (default: the shared Korean
Wikipedia, 10.5 MB) once as JSON Lines and once as Parquet (one row a document,
column ``text``, pyarrow's defaults: snappy) and runs ``electra prepare`` on
each, alternating; it prints, per format, the best of ``--repeats`` as MB/s of
text and tokens/s (prepare), the reading alone (the corpus reader, no
tokenizer: MB/s of text) and the CPU's name (``lscpu``).

``--big DIR`` builds (once) a corpus of at least 200 MB in DIR by
concatenating the shared pre-training text and the NSMC files repeatedly:
Korean Wikipedia x8 in one WikiExtractor file, the English books, WikiText,
Shakespeare and the Korean law texts x6 in one plain-text file, and the NSMC
JSON files x3.

Measured on the project's 2-core VM (AMD EPYC, shared with other jobs, so
single runs vary by 10-20%; a 32,000-token cased vocabulary trained on the
shared pre-training text and NSMC; 2 worker processes):

* default corpus (40.3 MB of files, 26.8 MB of text, best of 3): raw
  ``encode_batch`` 6.53 MB/s (``encode_batch_fast`` 8.72 MB/s), prepare
  5.78 MB/s of text (8.69 MB/s of files) -> ratio 0.89 (0.89 by CPU time);
  peak memory of the prepare process tree: RSS sum 318 MB, PSS 248 MB.
* ``--big`` (221.9 MB of files, 180.0 MB of text, 465,013 blocks of 128,
  best of 2): raw ``encode_batch`` 5.65 MB/s, prepare 5.53 MB/s of text
  (6.82 MB/s of files) -> ratio 0.98 (0.91 by CPU time); peak RSS sum
  366 MB, PSS 287 MB. Memory does not grow with the corpus: one ``electra
  prepare`` of this corpus peaked at 350 MB (RSS sum; PSS 278 MB), of the
  same corpus twice (443.9 MB of files, 930,026 blocks, 61.8 s) at 378 MB
  (PSS 301 MB); the difference is the per-file statistics of 11,000 files.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from electra.system.paths import default_data_dir  # noqa: E402
from electra.text.corpus import Corpus, ReadOptions  # noqa: E402
from electra.text.tokenizer import encoding_tokenizer, load_tokenizer  # noqa: E402
from electra.text.vocabulary import train_tokenizer  # noqa: E402


def default_inputs(data: Path) -> list[str]:
    return [
        str(data / "pretrain" / "ko" / "kowiki"),
        str(data / "pretrain" / "en" / "gutenberg"),
        str(data / "nsmc" / "raw_subset"),
    ]


def build_big_corpus(data: Path, out: Path, min_bytes: int = 200_000_000) -> list[str]:
    """Concatenate the shared text repeatedly into ``out`` (kept for later runs)."""
    out.mkdir(parents=True, exist_ok=True)
    marker = out / ".complete"
    if not marker.exists():
        wiki = sorted((data / "pretrain" / "ko" / "kowiki").rglob("wiki_*"))
        plain = sorted((data / "pretrain" / "en").rglob("*.txt")) + sorted(
            (data / "pretrain" / "ko" / "konlpy").rglob("*.txt")
        )
        with open(out / "kowiki_x8.wiki", "wb") as f:
            for _ in range(8):
                for p in wiki:
                    f.write(p.read_bytes())
        with open(out / "text_x6.txt", "wb") as f:
            for _ in range(6):
                for p in plain:
                    f.write(p.read_bytes() + b"\n\n")
        for k in range(3):
            d = out / f"nsmc_{k}"
            d.mkdir(exist_ok=True)
            for p in sorted((data / "nsmc" / "raw_subset").glob("*.json")):
                shutil.copyfile(p, d / p.name)
        marker.touch()
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    if total < min_bytes:
        raise SystemExit(f"{out}: only {total / 1e6:.0f} MB")
    return [str(out)]


def cpu_name() -> str:
    """The CPU's model name, as ``lscpu`` gives it (else /proc/cpuinfo, else platform)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def write_formats(inputs: list[str], out: Path) -> dict[str, Path]:
    """The inputs' documents, one per row/line, as ``corpus.jsonl`` and ``corpus.parquet``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = ["\n".join(doc.lines) for _, doc in Corpus(inputs, ReadOptions()).documents()]
    jsonl = out / "corpus.jsonl"
    with open(jsonl, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({"text": row}, ensure_ascii=False) + "\n")
    parquet = out / "corpus.parquet"
    pq.write_table(pa.table({"text": rows}), parquet)
    return {"jsonl": jsonl, "parquet": parquet}


def read_seconds(path: Path, rounds: int = 3) -> float:
    """Wall seconds of the corpus reader alone over ``path`` (documents, no tokenizer),
    the best of ``rounds``."""
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in Corpus([path], ReadOptions()).documents():
            pass
        best = min(best, time.perf_counter() - t)
    return best


def compare_formats(inputs: list[str], tokenizer: str, tmp: Path, workers: int, repeats: int):
    """``electra prepare`` on the same documents as JSON Lines and as Parquet."""
    files = write_formats(inputs, tmp)
    lines, text_bytes = read_lines([str(files["jsonl"])])
    mb = text_bytes / 1e6
    cores = len(os.sched_getaffinity(0))
    print(f"CPU: {cpu_name()} ({cores} cores usable), {workers or cores} prepare workers")
    sizes = ", ".join(f"{k} {p.stat().st_size / 1e6:.2f} MB" for k, p in files.items())
    with open(files["jsonl"], "rb") as f:
        docs = sum(1 for _ in f)
    print(f"text: {mb:.2f} MB, {docs:,} documents in {len(lines):,} lines; files: {sizes}")
    best: dict[str, tuple[float, float, float]] = {}
    tokens: dict[str, int] = {}
    for r in range(repeats):
        for fmt, path in files.items():
            out = tmp / f"out-{fmt}"
            wall, cpu = run_prepare([str(path)], tokenizer, str(out), workers)[:2]
            reading = read_seconds(path)
            old = best.get(fmt, (float("inf"),) * 3)
            best[fmt] = (min(old[0], wall), min(old[1], cpu), min(old[2], reading))
            m = json.loads((out / "manifest.json").read_text())
            # every token of the text, kept in blocks or cut by truncation: the same for both
            tokens[fmt] = sum(s["tokens"] + s["tokens_dropped"] for s in m["splits"].values())
            print(
                f"  run {r + 1} {fmt}: prepare {wall:.2f} s ({cpu:.2f} CPU s), "
                f"reading alone {reading:.3f} s"
            )
    if len(set(tokens.values())) != 1:
        raise SystemExit(f"the formats gave different text: {tokens} tokens")
    for fmt, (wall, cpu, reading) in best.items():
        print(
            f"{fmt:8s} prepare {mb / wall:.2f} MB/s of text, {tokens[fmt] / wall:,.0f} tokens/s "
            f"({tokens[fmt]:,} tokens, best {wall:.2f} s, {cpu:.2f} CPU s); "
            f"reading alone {mb / reading:.1f} MB/s"
        )


def read_lines(inputs: list[str]) -> tuple[list[str], int]:
    lines: list[str] = []
    for _, doc in Corpus(inputs, ReadOptions()).documents():
        lines.extend(doc.lines)
    return lines, sum(len(s.encode("utf-8")) + 1 for s in lines)


def raw_encode(tok, lines: list[str], fast: bool = False) -> tuple[float, float]:
    """Wall and CPU seconds of encoding ``lines`` in batches of 10,000."""
    encode = tok.encode_batch_fast if fast else tok.encode_batch
    t, c = time.perf_counter(), time.process_time()
    for i in range(0, len(lines), 10_000):
        encode(lines[i : i + 10_000], add_special_tokens=False)
    return time.perf_counter() - t, time.process_time() - c


def _tree_memory_kb(root: int) -> tuple[int, int]:
    """Sums of RSS and of PSS over ``root`` and its descendants (Linux /proc).

    Forked workers share pages with their parent: the RSS sum counts those
    pages once per process (an upper bound), the PSS sum splits them.
    """
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    rss = pss = 0
    stack = [root]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
        except OSError:
            continue
    return rss, pss


RUNNER = """
import json, resource, sys, time
from electra.blocks.prepare import PrepareCommand, prepare
def cpu():
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime
args = json.loads(sys.argv[1])
t, c = time.perf_counter(), cpu()
prepare(PrepareCommand(**args))
print(json.dumps({"seconds": time.perf_counter() - t, "cpu": cpu() - c}))
"""


def run_prepare(
    inputs: list[str], tokenizer: str, out: str, workers: int
) -> tuple[float, float, int, int]:
    """Wall and CPU seconds (all processes), peak tree RSS and PSS (MB) of one prepare."""
    args = dict(
        inputs=inputs, tokenizer=tokenizer, output=out, workers=workers,
        overwrite=True, progress=False,
    )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-c", RUNNER, json.dumps(args)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    peak_rss = peak_pss = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak_rss, peak_pss
        while not done.is_set():
            rss, pss = _tree_memory_kb(proc.pid)
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, _ = proc.communicate()
    done.set()
    sampler.join()
    if proc.returncode:
        raise SystemExit(f"prepare failed with exit code {proc.returncode}")
    result = json.loads(stdout.strip().splitlines()[-1])
    return result["seconds"], result["cpu"], peak_rss // 1024, peak_pss // 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="*", help="corpus (default: shared kowiki+gutenberg+nsmc)")
    ap.add_argument("--big", metavar="DIR", help="build/use a >= 200 MB corpus in DIR")
    ap.add_argument("--tokenizer", help="tokenizer directory (default: train one, 32k)")
    ap.add_argument("--workers", type=int, default=0, help="prepare workers (0: all cores)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--formats", action="store_true", help="the same text as JSON Lines vs Parquet")
    ns = ap.parse_args()

    data = default_data_dir()
    inputs = ns.inputs or default_inputs(data)
    if ns.formats and not ns.inputs:
        inputs = [str(data / "pretrain" / "ko" / "kowiki")]
    if ns.big:
        inputs = build_big_corpus(data, Path(ns.big))
    with tempfile.TemporaryDirectory(prefix="electra-bench-") as tmp:
        tokenizer = ns.tokenizer
        if tokenizer is None:
            tokenizer = str(Path(tmp) / "tok")
            train_tokenizer([str(data / "pretrain"), str(data / "nsmc" / "raw_subset")], tokenizer)
        if ns.formats:
            compare_formats(inputs, tokenizer, Path(tmp), ns.workers, ns.repeats)
            return
        tok = encoding_tokenizer(load_tokenizer(tokenizer))
        lines, text_bytes = read_lines(inputs)
        mb = text_bytes / 1e6
        file_mb = sum(p.stat().st_size for p in Corpus(inputs, ReadOptions()).files) / 1e6
        print(f"corpus: {file_mb:.1f} MB of files, {mb:.1f} MB of text, {len(lines):,} lines")
        raw, fast, prep, peaks = [], [], [], []
        for r in range(ns.repeats):
            raw.append(raw_encode(tok, lines))
            fast.append(raw_encode(tok, lines, fast=True))
            wall, cpu, rss, pss = run_prepare(inputs, tokenizer, str(Path(tmp) / "out"), ns.workers)
            prep.append((wall, cpu))
            peaks.append((rss, pss))
            print(
                f"  run {r + 1}: raw encode_batch {mb / raw[-1][0]:.2f} MB/s "
                f"({raw[-1][1]:.1f} CPU s), encode_batch_fast {mb / fast[-1][0]:.2f} MB/s, "
                f"prepare {mb / wall:.2f} MB/s ({cpu:.1f} CPU s), peak RSS {rss} MB "
                f"(PSS {pss} MB)"
            )
        manifest = json.loads((Path(tmp) / "out" / "manifest.json").read_text())
        blocks = sum(s["blocks"] for s in manifest["splits"].values())
    best_raw, best_fast = min(w for w, _ in raw), min(w for w, _ in fast)
    best_prep = min(w for w, _ in prep)
    print(
        f"raw tokenizers encode_batch: {mb / best_raw:.2f} MB/s (encode_batch_fast "
        f"{mb / best_fast:.2f} MB/s); prepare: {mb / best_prep:.2f} MB/s of text "
        f"({file_mb / best_prep:.2f} MB/s of files), {blocks:,} blocks"
    )
    print(
        f"ratio prepare / raw encode_batch: {best_raw / best_prep:.2f} by wall time, "
        f"{min(c for _, c in raw) / min(c for _, c in prep):.2f} by CPU time"
    )
    print(
        f"peak memory of the prepare process tree: RSS sum {max(r for r, _ in peaks)} MB, "
        f"PSS sum {max(p for _, p in peaks)} MB"
    )


if __name__ == "__main__":
    main()
