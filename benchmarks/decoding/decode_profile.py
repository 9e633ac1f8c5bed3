"""Where a greedy decode's time goes, per precision: sentences/s of one worker, then `torch.profiler`'s
operators by self time (the kernels a faster path would have to shrink). attnlab's C kernels are ctypes
calls, not operators: their time, and Python's, is the line "outside PyTorch's operators" (the profiled
pass's wall time minus the operators' self time).

    python benchmarks/decoding/decode_profile.py --checkpoint RUN --split valid --limit 500 --threads 1
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import add_decoding_args, table, write_result

from attnlab.data import load_data
from attnlab.inference.precision import cpu_features
from attnlab.runs.config import read_run_config
from attnlab.runs.loading import load_translator
from attnlab.training.quality import held_out_sources


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_decoding_args(ap, "run folder (a translator)")
    ap.add_argument("--precisions", default="fp32,bf16,int8")
    ap.add_argument("--rows", type=int, default=12, help="operators shown per precision")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    feats = " ".join(sorted(f for f in cpu_features() if f.startswith(("avx", "amx", "fma"))))
    print(f"CPU features: {feats}; torch {torch.__version__}, {args.threads} threads, load {os.getloadavg()[0]:.2f}")
    data = load_data(read_run_config(args.checkpoint)["data"])
    ids = [s for _, s, _ in held_out_sources(getattr(data, args.split), data.tgt_vocab, args.limit or 500)]
    rows, bests = [], []
    for precision in args.precisions.split(","):
        tr = load_translator(args.checkpoint, precision=precision)
        tr.workers = 1  # one batch at a time: the profile of one decoding loop
        tr.search(ids, tr.options(beam=1, scores=False))  # warm-up: kernels chosen, caches allocated
        best = min(_timed(tr, ids) for _ in range(args.rounds))
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            wall = _timed(tr, ids)
        print(
            f"\n== {precision}: {len(ids) / best:.0f} sentences/s "
            f"({len(ids)} {args.split} sources, best of {args.rounds})"
        )
        averages = prof.key_averages()
        print(averages.table(sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=45))
        outside = max(wall - sum(e.self_cpu_time_total for e in averages) / 1e6, 0.0)
        print(
            f"outside PyTorch's operators (C kernels, Python): {outside * 1e3:.1f} ms of the "
            f"profiled pass's {wall * 1e3:.1f} ms ({outside / wall:.0%})"
        )
        bests.append(best)
        rows.append([precision, f"{len(ids) / best:.0f}", f"{bests[0] / best:.2f}x"])
    print(table(["precision", "sentences/s (best pass)", "vs the first"], rows))
    write_result(__file__, argv)
    return 0


def _timed(tr, ids) -> float:
    t0 = time.perf_counter()
    tr.search(ids, tr.options(beam=1, scores=False))
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.exit(main())
