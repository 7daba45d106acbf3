"""The blocks directory on disk: names and version.

``manifest.json`` (written last, atomically: a directory without it is an
incomplete or interrupted run), the tokenizer files (``vocab.txt``,
``tokenizer.json``, ...) and per split shards ``<split>-00000.npy``: ``.npy``
arrays of shape ``(blocks, max_length)``, ``uint16`` when the vocabulary
fits in 16 bits, else ``uint32``, padded with ``[PAD]``. Token types are not
stored: they follow from the ``[SEP]`` positions. Each shard is written
under a temporary name, fsynced and renamed, so a shard name always means a
complete shard; the manifest lists every shard with its block count and
sha256, and the sources with their sizes and sha256. Running ``prepare``
again with the same inputs, tokenizer and options finds the finished
directory and reuses it; ``--overwrite`` rebuilds it.
"""

from __future__ import annotations

import re

FORMAT_NAME = "electra-blocks"


FORMAT_VERSION = 1


MANIFEST = "manifest.json"


SPLITS = ("train", "validation")


SHARD_NAME = re.compile(r"^(train|validation)-\d{5}\.npy$")


NPY_HEADER_BYTES = 128  # every shard's .npy header, padded to this size


def shard_size_bytes(blocks: int, block_length: int, itemsize: int) -> int:
    """The exact size on disk of a shard of ``blocks`` blocks (header and rows)."""
    return NPY_HEADER_BYTES + blocks * block_length * itemsize
