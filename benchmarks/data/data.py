"""Data-layer timing: load the full corpus + build vocabularies + collate the first epoch's batches,
cold (empty tokenized cache) and warm (cache present). Budget from the spec: under 10 s.

    ATTNLAB_DATA=/path/to/fra-eng.zip .venv/bin/python benchmarks/data/data.py [--batch-tokens 4096]

Each measurement runs in a fresh process (no warm imports or allocator state), with the cache
redirected to a temporary XDG_CACHE_HOME so the user's own cache is never touched.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import table, write_result


def one_run(batch_tokens: int) -> dict:
    from attnlab.data import load_translation_data

    t0 = time.perf_counter()
    data = load_translation_data()
    t1 = time.perf_counter()
    num_batches = sum(1 for _ in data.batches(batch_tokens=batch_tokens, epoch=0))
    t2 = time.perf_counter()
    return {
        "load_s": t1 - t0,
        "batches_s": t2 - t1,
        "total_s": t2 - t0,
        "pairs": data.stats["pairs_read"],
        "train": len(data.train),
        "batches": num_batches,
        "cache_hit": data.stats["tokenized_cache_hit"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args.batch_tokens)))
        return 0
    if not os.environ.get("ATTNLAB_DATA"):
        print("set ATTNLAB_DATA to the fra-eng.zip path", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "XDG_CACHE_HOME": cache}
        results = {}
        for label in ("cold", "warm"):
            out = subprocess.run(
                [sys.executable, __file__, "--one", "--batch-tokens", str(args.batch_tokens)],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            results[label] = json.loads(out.strip().splitlines()[-1])
    cold, warm = results["cold"], results["warm"]
    assert not cold["cache_hit"] and warm["cache_hit"], results
    print(
        f"pairs={cold['pairs']} train={cold['train']} first-epoch batches={cold['batches']} "
        f"(batch_tokens={args.batch_tokens}); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    rows = [
        [
            label,
            f"{r['load_s']:.2f}",
            f"{r['batches_s']:.2f}",
            f"{r['total_s']:.2f}",
            f"{r['total_s'] / cold['total_s']:.2f}x",
        ]
        for label, r in (("cold (no tokenized cache)", cold), ("cached", warm))
    ]
    print(table(["run", "load + vocabulary s", "first epoch's batches s", "total s", "vs cold"], rows))
    write_result(__file__, pairs=cold["pairs"], batches=cold["batches"], batch_tokens=args.batch_tokens)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
