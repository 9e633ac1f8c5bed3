"""Decoding levers on the VALIDATION split: beam size x length penalty, and other weights of the same
run (checkpoints, averaged checkpoints), scored as `attnlab evaluate` scores: every distinct source
of the split translated once and scored against all of its references (multi-reference sacreBLEU
BLEU and chrF, detokenized). Never on the test split: these choices are made here.

    flock /tmp/attnlab-measure.lock python benchmarks/quality/decode_levers.py --checkpoint LAPTOP \\
        --beams 1,4,5 --length-penalties 0.6,0.8,1.0,1.2
    python benchmarks/quality/decode_levers.py --checkpoint RUN --beams 1,4 --length-penalties 1.0 \\
        --weights final,RUN/checkpoints/step_0002000,RUN/averaged_last3.safetensors

Beam 1 is greedy, which has no length penalty: it runs once per weights.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import table, write_result

from attnlab.inference.precision import cpu_features
from attnlab.metrics import corpus_bleu, corpus_chrf, group_by_source, reference_text
from attnlab.runs.loading import load_translator
from attnlab.training.launch import load_run_data

WATCHED = {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16"}  # the ones that change CPU speed here


def numbers(text: str, kind):
    return [kind(x) for x in text.split(",") if x]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True, metavar="RUN", help="run folder (its config rebuilds the split)")
    ap.add_argument("--weights", default="final", help="comma list: final, checkpoint folders, .safetensors files")
    ap.add_argument("--beams", default="1,4,5")
    ap.add_argument("--length-penalties", default="0.6,0.8,1.0,1.2")
    ap.add_argument("--split", default="valid", choices=["valid", "train"], help="never test: choices are made here")
    ap.add_argument("--limit", type=int, help="the first N distinct sources only (smoke runs)")
    ap.add_argument("--json", help="append the rows here")
    args = ap.parse_args(argv)

    features = " ".join(sorted(cpu_features() & WATCHED))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU features: {features}")
    print(f"load average at start: {os.getloadavg()}")
    data = load_run_data(load_translator(args.checkpoint), args.checkpoint)
    sources, references = group_by_source(getattr(data, args.split))
    sources, references = sources[: args.limit], references[: args.limit]
    src_ids = [ex.src_ids for ex in sources]
    print(f"{args.checkpoint}: {args.split} split, {len(sources)} distinct sources, {sum(map(len, references))} pairs")

    rows, records = [], []
    for weights in args.weights.split(","):
        translator = load_translator(args.checkpoint, weights=None if weights == "final" else weights)
        refs = [[reference_text(t, translator.tgt_vocab) for t in rs] for rs in references]
        for beam in numbers(args.beams, int):
            for alpha in numbers(args.length_penalties, float) if beam > 1 else [1.0]:
                start = time.perf_counter()
                opts = translator.options(beam=beam, length_penalty=alpha)
                out = [hs[0].tokens for hs in translator.search(src_ids, replace(opts, scores=False))]
                seconds = time.perf_counter() - start
                hyps = [translator.tgt_vocab.decode(ids) for ids in out]
                bleu, chrf = corpus_bleu(hyps, refs), corpus_chrf(hyps, refs)
                load = os.getloadavg()[0]
                alpha_text = f"{alpha:g}" if beam > 1 else "-"
                rows.append([weights, beam, alpha_text, f"{bleu:.2f}", f"{chrf:.2f}", f"{seconds:.1f}", f"{load:.2f}"])
                records.append(
                    {"weights": weights, "beam": beam, "length_penalty": alpha if beam > 1 else None, "bleu": bleu}
                    | {"chrf": chrf, "seconds": seconds, "load": load, "sources": len(sources), "split": args.split}
                )
                print(" | ".join(str(x) for x in rows[-1]), flush=True)
    print(table(["weights", "beam", "length penalty", "BLEU", "chrF", "decode s", "load"], rows))
    if args.json:
        with open(args.json, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
    write_result(__file__, argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
