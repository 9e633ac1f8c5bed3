"""Position schemes (and multi-query attention) trained for the same wall-clock budget on fra-eng.

Each scheme trains the `cpu-small` preset (sentences of up to 6 words) with `--time-budget` seconds, then
reports validation BLEU (greedy), parameters, the KV cache of one validation sentence (float32, target
and source tokens) and BLEU on corpus sentences of 7-10 source words, longer than any seen in training
(length extrapolation).

    flock /tmp/attnlab-measure.lock python benchmarks/positions.py --time-budget 60 --out /tmp/positions
"""

import argparse
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

from common import table

from attnlab.data import load_data
from attnlab.metrics import corpus_bleu, reference_text
from attnlab.models.config import POSITIONS
from attnlab.runs.loading import load_translator

TRAIN_MAX_WORDS = 6  # the cpu-small preset's data.max_len


def train(out: Path, positions: str, kv: int | None, budget: int, threads: int) -> tuple[Path, int]:
    """The run folder and the optimizer steps its budget allowed (the machine's load decides them)."""
    run = out / (positions + ("" if kv is None else f"-kv{kv}"))
    cmd = [sys.executable, "-m", "attnlab", "train", "--preset", "cpu-small", "--out", str(run), "--force"]
    cmd += ["--set", f"train.time_budget={budget}", "--set", f"model.positions={positions}"]
    cmd += ["--set", f"train.threads={threads}"]
    if kv is not None:
        cmd += ["--set", f"model.num_kv_heads={kv}"]
    done = subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    steps = re.findall(r"step (\d+)/", done.stderr)
    return run, int(steps[-1]) if steps else 0


def bleu(translator, pairs) -> float:
    hyps = translator.translate([src for src, _ in pairs])
    return corpus_bleu(hyps, [reference_text(tgt, translator.tgt_vocab) for _, tgt in pairs])


def measure(run: Path, long_pairs, limit: int) -> dict:
    tr = load_translator(run)
    data = load_data(tr.config["data"])
    valid = [(ex.src_text, ex.tgt_text) for ex in data.valid[:limit]]
    cfg = tr.model.config
    lens = [(len(ex.src_ids) + 1, len(ex.tgt_ids) + 1) for ex in data.valid[:limit]]  # with <eos>
    kv = sum(cfg.kv_cache_bytes(t, s) for s, t in lens) / len(lens)
    return {
        "bleu": bleu(tr, valid),
        "long": bleu(tr, long_pairs),
        "params": sum(p.numel() for p in tr.model.parameters()),
        "kv": kv,
    }


def long_pairs(run: Path, limit: int):
    """Pairs of 7-10 source words (cpu-small trains on <= 6): none of them can be a training pair."""
    cfg = load_translator(run).config["data"]
    data = load_data({**cfg, "max_len": 10, "min_freq": 1, "use_cache": False})
    pairs = [(ex.src_text, ex.tgt_text) for ex in data.valid if len(ex.src_text.split()) > TRAIN_MAX_WORDS]
    return pairs[:limit]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-budget", type=int, default=60, help="training seconds per scheme")
    ap.add_argument("--out", type=Path, default=Path("/tmp/attnlab-positions"))
    ap.add_argument("--limit", type=int, default=500, help="validation sentences (and long ones) scored")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--schemes", nargs="*", default=[*POSITIONS, "rope:1"], help="name or name:num_kv_heads")
    args = ap.parse_args()
    if "ATTNLAB_DATA" not in os.environ:
        sys.exit("set ATTNLAB_DATA to the fra-eng corpus (fra-eng.zip)")
    rows, long = [], None
    for scheme in args.schemes:
        name, _, kv = scheme.partition(":")
        run, steps = train(args.out, name, int(kv) if kv else None, args.time_budget, args.threads)
        long = long if long is not None else long_pairs(run, args.limit)
        m = measure(run, long, args.limit)
        rows.append([scheme, steps, f"{m['bleu']:.3f}", f"{m['long']:.3f}", f"{m['params']:,}", f"{m['kv']:,.0f}"])
        print(rows[-1], flush=True)
    cpu = platform.processor() or platform.machine()
    print(f"\n{args.time_budget} s per scheme, {args.threads} threads, {cpu}, {len(long)} long sentences")
    print(table(["scheme", "steps", "valid BLEU", "BLEU 7-10 words", "parameters", "KV bytes/sentence"], rows))


if __name__ == "__main__":
    main()
