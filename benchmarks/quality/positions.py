"""Position schemes and grouped-query attention, trained for the same wall-clock budget on fra-eng.

Each scheme (`name` or `name:num_kv_heads`) trains the `laptop` recipe with `benchmarks/quality/time_to_quality.py`
(the same data, seed and clock; validation BLEU along the way), one after the other. Then every saved run
is measured here: greedy validation BLEU and chrF on the curves' 3-10-word sources, BLEU on corpus
sentences of 13-20 source words (longer than any pair `laptop` trains on: length extrapolation),
parameters, the float32 KV cache of one validation sentence (decoder self-attention over the target plus
cross-attention over the source), and greedy sentences/s.

    python benchmarks/quality/positions.py --budget 180 --out /tmp/positions            # trains, then measures
    python benchmarks/quality/positions.py --out /tmp/positions --measure-only          # the saved runs only
    python benchmarks/quality/positions.py --plot --out /tmp/positions --figure docs/positions.png
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import table, write_result
from time_to_quality import figure

from attnlab.data import load_data
from attnlab.inference.precision import cpu_features
from attnlab.metrics import corpus_bleu, corpus_chrf
from attnlab.runs.config import read_run_config
from attnlab.runs.loading import load_translator
from attnlab.training.quality import held_out_sources

HERE = Path(__file__).resolve().parent
SCHEMES = ["sinusoidal", "rope", "learned", "alibi", "t5", "none", "sinusoidal:1", "sinusoidal:2"]
LONG_WORDS = (13, 20)


def run_name(scheme: str) -> str:
    name, _, kv = scheme.partition(":")
    return name + (f"-kv{kv}" if kv else "")


def train(scheme: str, out: Path, budget: float, threads: int, num_examples: int | None) -> None:
    """One scheme's time_to_quality run: curves in OUT/NAME.json, the model in OUT/NAME/."""
    name, _, kv = scheme.partition(":")
    cmd = [sys.executable, str(HERE / "time_to_quality.py"), "--recipes", "laptop", "--budget", str(budget)]
    cmd += ["--threads", str(threads), "--set", f"model.positions={name}", "--label", run_name(scheme)]
    cmd += ["--json", str(out / f"{run_name(scheme)}.json"), "--save", str(out / run_name(scheme))]
    if kv:
        cmd += ["--set", f"model.num_kv_heads={kv}"]
    if num_examples:
        cmd += ["--num-examples", str(num_examples)]
    subprocess.run(cmd, check=True)


def long_sources(cfg: dict, limit: int) -> list[tuple[str, list[str]]]:
    """(source, references) of 13-20-word sources from the corpus (word tokens, so no BPE to learn):
    no training pair of `laptop` is this long."""
    data = load_data({**cfg, "tokenizer": "word", "max_len": LONG_WORDS[1], "min_freq": 1, "use_cache": False})
    refs: dict[str, list[str]] = {}
    for ex in (*data.valid, *data.test):
        if LONG_WORDS[0] <= len(ex.src_text.split()) <= LONG_WORDS[1]:
            refs.setdefault(ex.src_text, []).append(ex.tgt_text)
    return list(refs.items())[:limit]


def greedy_speed(translator, ids, rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        translator.search(ids, translator.options(beam=1, scores=False))
        best = min(best, time.perf_counter() - t0)
    return len(ids) / best


def measure(run: Path, long: list, limit: int) -> dict:
    tr = load_translator(run)
    data = load_data(tr.config["data"])
    sources = held_out_sources(data.valid, data.tgt_vocab, limit)
    ids = [s for _, s, _ in sources]
    refs = [r for _, _, r in sources]
    out_ids = [hs[0].tokens for hs in tr.search(ids, tr.options(beam=1, scores=False))]
    hyps = [tr.tgt_vocab.decode(o) for o in out_ids]
    long_hyps = tr.translate([src for src, _ in long], truncate=True, options=tr.options(beam=1))
    cfg = tr.model.config
    lens = [(len(s) + 1, len(o) + 1) for s, o in zip(ids, out_ids)]  # source and output, with <eos>
    return {
        "bleu": corpus_bleu(hyps, refs),
        "chrf": corpus_chrf(hyps, refs),
        "long": corpus_bleu(long_hyps, [r for _, r in long]),
        "params": sum(p.numel() for p in tr.model.parameters()),
        "kv": sum(cfg.kv_cache_bytes(t, s) for s, t in lens) / len(lens),
        "speed": greedy_speed(tr, ids),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=180, help="training seconds per scheme")
    ap.add_argument("--out", type=Path, help="folder of the runs (default: a fresh temporary one when training)")
    ap.add_argument("--limit", type=int, default=500, help="validation sources (and long ones) scored")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--schemes", nargs="*", default=SCHEMES, help="name or name:num_kv_heads")
    ap.add_argument("--num-examples", type=int, help="first N corpus pairs only (smoke runs)")
    ap.add_argument("--measure-only", action="store_true", help="measure the runs saved in --out; train nothing")
    ap.add_argument("--plot", action="store_true", help="only draw --figure from the curves saved in --out")
    ap.add_argument("--figure", help="validation BLEU against training seconds, one curve per scheme (PNG)")
    args = ap.parse_args()
    if "ATTNLAB_DATA" not in os.environ:
        sys.exit("set ATTNLAB_DATA to the fra-eng corpus (fra-eng.zip)")
    if args.out is None:
        if args.plot or args.measure_only:
            ap.error("--plot and --measure-only read the runs saved in --out DIR: pass --out")
        args.out = Path(tempfile.mkdtemp(prefix="attnlab-positions-"))  # never into an earlier invocation's runs
        print(f"runs: {args.out}")
    if args.plot:
        figure(
            [r for s in args.schemes for r in json.loads((args.out / f"{run_name(s)}.json").read_text())], args.figure
        )
        return 0
    if not args.measure_only:
        args.out.mkdir(parents=True, exist_ok=True)
        for scheme in args.schemes:
            train(scheme, args.out, args.budget, args.threads, args.num_examples)
    torch.set_num_threads(args.threads)
    feats = " ".join(sorted(f for f in cpu_features() if f.startswith(("avx", "amx", "fma"))))
    print(f"CPU features: {feats}; torch {torch.__version__}, {args.threads} threads")
    long = long_sources(read_run_config(args.out / run_name(args.schemes[0]))["data"], args.limit)
    rows = []
    for scheme in args.schemes:
        curve = json.loads((args.out / f"{run_name(scheme)}.json").read_text())[0]["curve"]
        m = measure(args.out / run_name(scheme), long, args.limit)
        rows.append([
            scheme, curve[-1]["steps"], " / ".join(f"{p['valid_bleu']:.1f}" for p in curve), f"{m['bleu']:.2f}",
            f"{m['chrf']:.2f}", f"{m['long']:.2f}", f"{m['params']:,}", f"{m['kv']:,.0f}", f"{m['speed']:.0f}",
        ])  # fmt: skip
        print(rows[-1], flush=True)
    print(f"\n{len(long)} long sources ({LONG_WORDS[0]}-{LONG_WORDS[1]} words), load {os.getloadavg()[0]:.2f}")
    head = ["scheme", "steps", "valid BLEU along the way", "valid BLEU", "chrF", "BLEU 13-20 words"]
    print(table([*head, "parameters", "KV bytes/sentence", "greedy sent/s"], rows))
    write_result(__file__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
