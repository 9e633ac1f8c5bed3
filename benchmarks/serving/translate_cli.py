"""`attnlab translate` on a file as a user runs it, against CTranslate2 on the same exported weights: sentences/s
of the whole command (reading, windows, worker hand-offs, detokenization, writing), by the difference of two
input sizes, so that starting Python and loading the model cancel out.

The input is the run's --split sources repeated to --sizes lines (small, large). Each engine translates each
size once per round, rounds interleaved (rotating order); the rate (sentences/s in the table) is
(large - small) / (t_large - t_small) from the median times. attnlab: `python -m attnlab translate
--checkpoint RUN --precision P < in > out` with the search's flags. CTranslate2: a Python process that
tokenizes each line as the export does (`source_tokens`), translates with `translate_iterable`
(max_batch_size 128, --threads threads as inter x intra: 1x2 and 2x1), joins the target tokens and writes
them; its best layout is the baseline.

    flock -x /tmp/attnlab-measure.lock python benchmarks/serving/translate_cli.py --checkpoint RUN --split valid \\
        --sizes 1000,8000 --rounds 2 --searches greedy,beam,sampling
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import add_decoding_args, table, write_result

from attnlab.data import load_data
from attnlab.export.ctranslate2 import export
from attnlab.runs.loading import load_translator

SEARCHES = {  # name -> (attnlab translate flags, CTranslate2 translate_iterable arguments)
    "greedy": (["--beam", "1"], "beam_size=1"),
    "beam": (["--beam", "4"], "beam_size=4, length_penalty=1.0"),
    "sampling": (["--sample", "--top-k", "10", "--seed", "1"], "sampling_topk=10, beam_size=1"),
}

CT2 = """
import sys, ctranslate2
from attnlab.export.ctranslate2 import source_tokens
from attnlab.runs.loading import load_translator
vocab = load_translator(sys.argv[1], precision="fp32").src_vocab
tr = ctranslate2.Translator(sys.argv[2], compute_type="int8", inter_threads=int(sys.argv[3]),
                            intra_threads=int(sys.argv[4]))
lines = sys.stdin.read().splitlines()
out = tr.translate_iterable((source_tokens(vocab, s) for s in lines), max_batch_size=128, {kwargs})
sys.stdout.writelines(" ".join(r.hypotheses[0]) + "\\n" for r in out)
"""


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_decoding_args(ap, "run folder (a Transformer)")
    ap.add_argument("--sizes", default="1000,8000", help="small,large: lines of the two inputs")
    ap.add_argument("--precision", default="int8", help="attnlab translate's --precision")
    ap.add_argument("--searches", default="greedy,beam,sampling", help=f"of {', '.join(SEARCHES)}")
    args = ap.parse_args(argv)
    small, large = (int(n) for n in args.sizes.split(","))
    wanted = args.searches.split(",")
    if not 0 < small < large or set(wanted) - set(SEARCHES):
        ap.error(f"--sizes: two line counts, small < large; --searches: of {','.join(SEARCHES)}; got {argv}")
    base = load_translator(args.checkpoint, precision="fp32")
    sources = [ex.src_text for ex in getattr(load_data(base.config["data"]), args.split)[: args.limit]]
    tmp = tempfile.TemporaryDirectory(prefix="attnlab-cli-")
    model = export(args.checkpoint, os.path.join(tmp.name, "model"))
    inputs = {}
    for n in (small, large):
        inputs[n] = os.path.join(tmp.name, f"in{n}.txt")
        with open(inputs[n], "w", encoding="utf-8") as f:
            f.writelines(sources[i % len(sources)] + "\n" for i in range(n))
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    rows: list[list] = []
    for search in wanted:
        flags, kwargs = SEARCHES[search]
        script = CT2.replace("{kwargs}", kwargs)
        T, ct2 = args.threads, [sys.executable, "-c", script, args.checkpoint, str(model)]
        engines = {
            f"attnlab translate --precision {args.precision}": [sys.executable, "-m", "attnlab", "translate",
                "--checkpoint", args.checkpoint, "--precision", args.precision, *flags],
            f"CTranslate2 int8, {T}x1 threads": [*ct2, str(T), "1"],
            f"CTranslate2 int8, 1x{T} threads": [*ct2, "1", str(T)],
        }  # fmt: skip
        names = list(engines)
        times = {(e, n): [] for e in names for n in (small, large)}
        for r in range(args.rounds):
            for e in names[r % len(names) :] + names[: r % len(names)]:
                for n in (small, large):
                    with open(inputs[n], "rb") as fin:
                        t0 = time.perf_counter()
                        subprocess.run(engines[e], stdin=fin, stdout=subprocess.DEVNULL, env=env, check=True)
                        times[(e, n)].append(time.perf_counter() - t0)
        rate = {
            e: (large - small) / (statistics.median(times[(e, large)]) - statistics.median(times[(e, small)]))
            for e in names
        }
        theirs = max(names[1:], key=rate.get)
        print(f"\n{search}: {large} - {small} lines of the {args.split} split's sources, {args.rounds} rounds: "
              + ", ".join(f"{e} {rate[e]:.1f}/s" for e in names))  # fmt: skip
        rows.append([search, round(rate[names[0]], 1), round(rate[theirs], 1), theirs.split(", ")[1],
                     round(rate[names[0]] / rate[theirs], 2)])  # fmt: skip
    heads = ["search", f"attnlab translate --precision {args.precision}", "best CTranslate2 int8", "its threads",
             "vs best CTranslate2"]  # fmt: skip
    print()
    print(table(heads, rows, formats={"vs best CTranslate2": "{:.2f}×"}))
    summary = [{"what": "attnlab translate on a file / best CTranslate2", "baseline": "CTranslate2 int8, best threads",
                "measured": [r[-1] for r in rows]}]  # fmt: skip
    formats = {"measured": ", ".join(f"{r[0]} {{{i}:.2f}}×" for i, r in enumerate(rows))}  # "greedy {0:.2f}×, ..."
    write_result(__file__, argv, baseline="CTranslate2 int8 on the same exported weights, best thread layout",
                 summary=summary, summary_formats=formats)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
