"""The manifest of a prepared corpus: size and sha256 of every file, and the pairs of each split,
written last by `prepare` and checked whenever the folder is opened, so a shard cut short by a full disk
or a copy, padded, or altered is one error naming the file instead of training on empty pairs.

What a load checks: the size of every file, always (a stat each), and the sha256 of every file except
the training split's token files (`train-*.src/.tgt`, the bulk of a large corpus); those are hashed too
when the folder holds at most `FULL_CHECK_BYTES`, or when `full=True` is asked for. So a corpus of a
few million pairs opens with a stat per shard plus a hash of its lengths index and held-out splits,
and a small one is checked byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

MANIFEST = "manifest.json"
FULL_CHECK_BYTES = 128 << 20  # a folder up to this size is hashed in full on every load (~0.1 s)
_BULK = re.compile(r"^train-\d+\.(src|tgt)$")  # hashed on every load only in small folders


def file_digest(path: Path) -> dict:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return {"size": path.stat().st_size, "sha256": h.hexdigest()}


def write_manifest(folder: Path, pairs: dict[str, int]) -> dict:
    """Record every file of `folder` (write it after all the others); `pairs`: split -> pair count."""
    files = {p.name: file_digest(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST}
    manifest = {"files": files, "pairs": pairs}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return manifest


def check_manifest(folder: str | os.PathLike, pairs: dict[str, int], full: bool | None = None) -> None:
    """ValueError, one line naming the file, when `folder` does not match its manifest.

    Args:
        folder: a prepared corpus.
        pairs: split -> pair count as meta.json states them (they must agree with the manifest).
        full: True hashes every file, False none beyond the sizes; None (default) as the module says.
    """
    root = Path(folder)
    fix = f"re-run `attnlab prepare` to rebuild {root}"
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        files, counts = dict(manifest["files"]), dict(manifest["pairs"])
    except FileNotFoundError:
        raise ValueError(f"{root / MANIFEST} is missing, so the shards cannot be checked; {fix}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{root / MANIFEST} is unreadable ({type(exc).__name__}: {exc}); {fix}") from None
    if counts != pairs:
        raise ValueError(f"{root}: meta.json counts {pairs} pairs but {MANIFEST} {counts}; {fix}")
    sizes = {}
    for name, want in files.items():
        try:
            sizes[name] = (root / name).stat().st_size
        except FileNotFoundError:
            raise ValueError(f"{root / name} is missing (listed in {MANIFEST}); {fix}") from None
        if sizes[name] != want["size"]:
            how = "truncated" if sizes[name] < want["size"] else "padded"
            raise ValueError(f"{root / name} has {sizes[name]} bytes but {MANIFEST} says {want['size']} ({how}); {fix}")
    if full is False:
        return
    everything = full or sum(sizes.values()) <= FULL_CHECK_BYTES
    for name, want in files.items():
        if (everything or not _BULK.match(name)) and file_digest(root / name)["sha256"] != want["sha256"]:
            raise ValueError(f"{root / name} does not match its sha256 in {MANIFEST} (altered or damaged); {fix}")
