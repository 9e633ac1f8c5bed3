"""attnlab vs CTranslate2 on the same model and sentences: greedy sentences/s, same threads.

The run is exported once (float32) with `attnlab.export.ctranslate2`; CTranslate2 loads it as float32
and as int8 (compute_type), attnlab decodes in fp32 and its other precisions. All decode the same
sentences (the run's test split) in batches of 128, greedy, with the same output length cap; rounds are
interleaved (rotating order), model loading and conversion are not timed. sentences/s is the median over
rounds; ratios are medians of paired ratios against CTranslate2 float32. Token agreement with attnlab fp32
is printed too.

    flock /tmp/attnlab-measure.lock python benchmarks/ct2_speed.py --checkpoint /tmp/speed-run --rounds 3
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time

import torch

# This file's name shadows the ctranslate2 package when run as a script: import the real one first, with
# benchmarks/ off the path, then put benchmarks/ back (last) for the shared helpers.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
import ctranslate2

sys.path.append(_HERE)
from common import add_decoding_args, table
from precision import header

from attnlab import precision as prec
from attnlab.checkpoint import load_translator
from attnlab.export.ctranslate2 import export, source_tokens
from attnlab.train import load_data


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_decoding_args(ap, "run folder (a Transformer)")
    ap.add_argument("--attnlab", default="fp32,int8", help="attnlab precisions to time")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    header(argv)
    print(f"ctranslate2 {ctranslate2.__version__}")
    base = load_translator(args.checkpoint, precision="fp32")
    examples = getattr(load_data(base.config["data"]), args.split)[: args.limit]
    src_ids = [ex.src_ids for ex in examples]
    toks = [source_tokens(base.src_vocab, ex.src_text) for ex in examples]
    # attnlab caps each batch of 128 (sorted by length) by its longest source; CTranslate2 takes one cap
    # per call, so it is given per batch the same way.
    order = sorted(range(len(src_ids)), key=lambda i: -len(src_ids[i]))
    batches = [order[i : i + 128] for i in range(0, len(order), 128)]

    tmp = tempfile.mkdtemp(prefix="attnlab-ct2-")
    out = export(args.checkpoint, os.path.join(tmp, "model"))
    engines = {}
    for name in args.attnlab.split(","):
        t = copy.copy(base)
        t.model = prec.prepare_for_inference(base.model, name)
        engines[f"attnlab {name}"] = ("attnlab", t)
    for ct in ("float32", "int8"):
        engines[f"CTranslate2 {ct}"] = (
            "ct2",
            ctranslate2.Translator(
                str(out), device="cpu", compute_type=ct, inter_threads=1, intra_threads=args.threads
            ),
        )

    def run(kind, engine):
        if kind == "attnlab":
            return [engine.tgt_vocab.to_tokens(h) for h in engine.decode_ids(src_ids)]
        res = [None] * len(toks)
        for b in batches:
            limit = base.output_limit(len(src_ids[b[0]]) + 1)
            outs = engine.translate_batch(
                [toks[i] for i in b], beam_size=1, max_decoding_length=limit, max_batch_size=128
            )
            for i, o in zip(b, outs):
                res[i] = o.hypotheses[0]
        return res

    names = list(engines)
    outputs = {n: run(*engines[n]) for n in names}  # warm-up pass
    times = {n: [] for n in names}
    for r in range(args.rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            t0 = time.perf_counter()
            run(*engines[n])
            times[n].append(time.perf_counter() - t0)
    anchor = "CTranslate2 float32"
    print(
        f"\n## {args.checkpoint}: {len(src_ids)} sentences of the {args.split} split, greedy, batch 128, "
        f"{args.threads} threads each, {args.rounds} interleaved rounds\n"
    )
    rows = []
    for n in names:
        sps = statistics.median(len(src_ids) / t for t in times[n])
        ratio = statistics.median(a / t for a, t in zip(times[anchor], times[n]))
        same = sum(a == b for a, b in zip(outputs[n], outputs["attnlab fp32"]))
        rows.append([n, f"{sps:.1f}", f"{ratio:.2f}x", f"{same}/{len(src_ids)}"])
    print(table(["engine", "sentences/s", f"vs {anchor}", "same tokens as attnlab fp32"], rows))
    best_ours = max((n for n in names if n.startswith("attnlab")), key=lambda n: statistics.median(times[n]) ** -1)
    best_ct2 = max((n for n in names if n.startswith("CTranslate2")), key=lambda n: statistics.median(times[n]) ** -1)
    ratio = statistics.median(c / a for a, c in zip(times[best_ours], times[best_ct2]))
    print(f"\nbest attnlab ({best_ours}) / best CTranslate2 ({best_ct2}): {ratio:.2f}x sentences/s")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
