"""What checking a prepared corpus against its manifest costs when it is opened: sizes only, the
default (sizes + sha256 of all but a large corpus' training token files) and a full sha256 of every
file, on synthetic folders of the layout `prepare` writes (shards of 250,000 pairs, 25 tokens a side,
uint16 ids), made here and deleted afterwards. The page cache is warm (a file just read), as for a
corpus trained on again; a cold read adds the disk's time to the hashed bytes.

    flock /tmp/attnlab-measure.lock python benchmarks/data/prepared_check.py --sizes 500000,5000000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import cpu_features, median_time, table, write_result
from data_scale import load

from attnlab.data.prepared.manifest import FULL_CHECK_BYTES, check_manifest, write_manifest

SHARD, TOKENS = 250_000, 25


def make_folder(root: Path, n: int) -> dict[str, int]:
    rng = np.random.default_rng(0)
    root.mkdir()
    for k in range(-(-n // SHARD)):
        m = min(SHARD, n - k * SHARD)
        for side in ("src", "tgt"):
            rng.integers(4, 8000, m * TOKENS, dtype=np.uint16).tofile(root / f"train-{k:05d}.{side}")
        np.save(root / f"train-{k:05d}.len.npy", np.full((m, 2), TOKENS, np.int32))
    for split in ("valid", "test"):
        for side in ("src", "tgt"):
            rng.integers(4, 8000, 500 * TOKENS, dtype=np.uint16).tofile(root / f"{split}-00000.{side}")
        np.save(root / f"{split}-00000.len.npy", np.full((500, 2), TOKENS, np.int32))
        (root / f"{split}.tsv").write_text("ein satz\ta sentence\n" * 500, encoding="utf-8")
    for name in ("meta.json", "src_vocab.json", "tgt_vocab.json"):
        (root / name).write_text(json.dumps({"entries": list(range(8000))}), encoding="utf-8")
    pairs = {"train": n, "valid": 500, "test": 500}
    write_manifest(root, pairs)
    return pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="500000,5000000", help="pairs, comma-separated")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(f"cpu: {' '.join(cpu_features())}; cores {os.cpu_count()}; load {load()}")
    print(f"full hash below {FULL_CHECK_BYTES >> 20} MiB")
    rows = []
    with tempfile.TemporaryDirectory(prefix="attnlab-check-") as work:
        for n in (int(s) for s in args.sizes.split(",")):
            root = Path(work) / f"p{n}"
            pairs = make_folder(root, n)
            size = sum(p.stat().st_size for p in root.iterdir())
            times = {
                mode: median_time(lambda f=full: check_manifest(root, pairs, full=f), repeats=args.repeats)
                for mode, full in (("sizes", False), ("default", None), ("full", True))
            }
            base = times["full"]
            rows.append(
                [f"{n:,}", len(list(root.glob("train-*.src"))), f"{size / 2**20:.0f} MiB"]
                + [f"{times[m] * 1e3:.1f} ms ({times[m] / base:.3f}x)" for m in ("sizes", "default", "full")]
            )
            shutil.rmtree(root)
    print(table(["pairs", "shards", "on disk", "sizes only", "default", "full sha256"], rows))
    print("baseline of each ratio: the full sha256 check of the same folder")
    write_result(__file__, baseline="the full sha256 check of the same folder")


if __name__ == "__main__":
    main()
