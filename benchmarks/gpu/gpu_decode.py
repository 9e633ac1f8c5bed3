"""Decoding speed of a trained run in big batches: sentences/s, greedy and beam 4, on 3-10-word sources.

The run's translator (`load_translator(run, device)`, as `attnlab translate --device D` loads it) decodes the
first N distinct training sources of 3-10 words (cycled when the split has fewer), sorted by length into
batches of `--batch-size` (the translator's default on the device: thousands on a GPU). A speed is the
difference of two input sizes, (N2 - N1) / (t(N2) - t(N1)), after a warm-up decode of N1, so start-up and the
last short batches cancel. `--step` picks the decoding step: the dynamic cache (`dynamic`), or the
static-shape step (`attnlab.decoding.static`) run eagerly (`static`), replayed as a CUDA graph (`graphs`), or
through torch.compile's reduce-overhead mode (`compile`); the outputs of each are compared with the
dynamic cache's (identical tokens, in float32).

    python benchmarks/gpu/gpu_decode.py --run runs/gpu --device cuda                      # 1,000 and 20,000 lines
    python benchmarks/gpu/gpu_decode.py --run runs/tiny --lines 20,100 --steps dynamic,static   # smoke (CPU)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import table, write_result

from attnlab.data import load_data
from attnlab.runs.config import read_run_config
from attnlab.runs.loading import load_translator
from attnlab.training.quality import held_out_sources

STEPS = ("dynamic", "static", "graphs", "compile")


def sources(run: str, n: int) -> list[list[int]]:
    """The first `n` distinct training sources of 3-10 words, as id lists (cycled when there are fewer)."""
    data = load_data(read_run_config(run)["data"])
    found = [ids for _, ids, _ in held_out_sources(data.train, data.tgt_vocab, limit=n)]
    if not found:
        raise SystemExit(f"gpu_decode.py: {run}'s training split holds no source of 3-10 words")
    return [found[i % len(found)] for i in range(n)]


def timed(translator, ids, beam: int, batch_size: int) -> tuple[float, list]:
    sync = torch.cuda.synchronize if translator.device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    out = translator.search(ids, translator.options(beam=beam, scores=False), batch_size=batch_size)
    sync()
    return time.perf_counter() - t0, [hs[0].tokens for hs in out]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="a trained run folder")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--lines", default="1000,20000", help="the two input sizes N1,N2")
    ap.add_argument("--beams", default="1,4")
    ap.add_argument("--batch-size", type=int, help="sentences per batch (default: the translator's on the device)")
    ap.add_argument("--steps", default="dynamic", help=f"comma-separated, from {STEPS}")
    ap.add_argument("--precision", default="fp32", help="the translator's precision (fp32, bf16)")
    args = ap.parse_args(argv)
    n1, n2 = (int(x) for x in args.lines.split(","))
    steps = args.steps.split(",")
    if not 0 < n1 < n2 or any(s not in STEPS for s in steps):
        ap.error(f"--lines needs 0 < N1 < N2, --steps names from {STEPS}; got {args.lines!r}, {args.steps!r}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: CUDA is not available here; use --device cpu")
    translator = load_translator(args.run, args.device, precision=args.precision)
    translator.workers = 1  # one decoding loop: worker processes forked earlier would not see `static_step`
    batch_size = args.batch_size or translator.batch_size
    ids = sources(args.run, n2)
    name = torch.cuda.get_device_name() if translator.device.type == "cuda" else "CPU"
    print(f"{args.run} on {name}: {n1:,} and {n2:,} sources of 3-10 words, batches of {batch_size}, {args.precision}")
    rows: list[dict] = []
    reference: dict = {}
    for step in steps:
        translator.static_step = None if step == "dynamic" else step  # attnlab.decoding.static's hook
        for beam in (int(b) for b in args.beams.split(",")):
            try:
                timed(translator, ids[:n1], beam, batch_size)  # warm-up: kernels chosen, graphs captured
                t1, _ = timed(translator, ids[:n1], beam, batch_size)
                t2, out = timed(translator, ids, beam, batch_size)
            except Exception as exc:  # noqa: BLE001 — one mode failing on a GPU must not cost the others' figures
                print(f"{step}, beam {beam}: failed: {type(exc).__name__}: {exc}", flush=True)
                rows.append({"step": step, "decoding": f"beam {beam}", "sentences/s": 0, "failed": str(exc)[:200]})
                continue
            same = reference.setdefault(beam, out) is out or sum(a == b for a, b in zip(out, reference[beam])) / n2
            rate = (n2 - n1) / (t2 - t1) if t2 > t1 else 0.0  # 0: noise beat the difference (a tiny model)
            label = "greedy" if beam == 1 else f"beam {beam}"
            print(f"ratio: {step} {label}: {rate:,.0f} sentences/s", flush=True)
            rows.append(
                {
                    "step": step,
                    "decoding": label,
                    "sentences/s": round(rate),
                    f"seconds for {n2:,}": round(t2, 2),
                    "outputs equal to dynamic's": "(reference)" if same is True else f"{same:.1%}",
                }
            )
    columns = list(dict.fromkeys(k for r in rows for k in r))
    print(table(columns, [[r.get(c, "") for c in columns] for r in rows]))
    best = {r["decoding"]: max(x["sentences/s"] for x in rows if x["decoding"] == r["decoding"]) for r in rows}
    summary = [
        {"what": f"decoding a Transformer run on {name}, {k}, 3-10-word sources", "measured": f"{v:,} sentences/s"}
        for k, v in best.items()
    ]
    write_result(__file__, argv, rows, device=name, summary=summary, title="Decoding on the GPU in big batches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
