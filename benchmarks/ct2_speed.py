"""attnlab vs CTranslate2 on the same model and sentences: sentences/s, greedy or beam search, same threads.

The run is exported once (float32) with `attnlab.export.ctranslate2`; CTranslate2 loads it as float32
and as int8 (compute_type), attnlab decodes in fp32 and its other precisions. All decode the same
sentences (the run's test split), sorted by length, greedy or with --beam K (both sides: beam K, length
penalty 1, the 1-best), with the same output length cap per batch;
rounds are interleaved (rotating order), model loading and conversion are not timed. sentences/s is the
median over rounds; ratios are medians of paired ratios against the first CTranslate2 engine. Token
agreement with attnlab fp32 is printed too.

With --floors, each attnlab engine also gets two rows that are not decoders: every linear layer that
engine ran (its matmuls, or its quantized linears), captured once with its shapes and replayed back to back
on ready operands, nothing in between, split evenly over the engine's workers; and the same with its
attention kernels (SDPA) too. Any decoder of this model must compute those products, so none built on those
PyTorch kernels translates faster than the first row; the second shows what PyTorch's attention adds.
Each floor prints what it captured: its matmuls, quantized linears and attention kernels, counted.

Each side gets the same number of threads (--threads T) and may use them its best way, each at its
best batch size: an engine spec is `NAME[:bN][:wK]` (batch N sentences; K workers of T / K threads).
attnlab NAME is a precision (fp32, int8, bf16) or a variant of benchmarks/precision.py ("int8 (fbgemm)");
its workers are `Translator.decode(workers=K)` (worker processes; "CPU s / wall s" counts them too).
CTranslate2 NAME is a compute_type; its workers are inter_threads (batches submitted asynchronously, so K
run at once).

    flock /tmp/attnlab-measure.lock python benchmarks/ct2_speed.py --checkpoint /tmp/speed-run --rounds 3 \
        --attnlab fp32:b256,fp32:b256:w2,int8:b256:w2 --ct2 float32:b128,int8:b128,int8:b256,int8:b128:w2
"""

from __future__ import annotations

import argparse
import contextlib
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
from common import add_decoding_args, table, write_result
from decode import capture_kernels, replay_kernels
from precision import ATTENTION, LINEAR, QUANTIZED, header, switches, variants

from attnlab.data import load_data
from attnlab.decoding.batches import length_batches
from attnlab.export.ctranslate2 import export, source_tokens
from attnlab.runs.loading import load_translator


def cpu_seconds() -> float:
    """CPU time of this process and of its live children (attnlab's decoding worker processes)."""
    total = time.process_time()
    tick = os.sysconf("SC_CLK_TCK")
    for pid in _children():
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def _children() -> list[int]:
    try:
        with open(f"/proc/self/task/{os.getpid()}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:  # not Linux: this process alone
        return []


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_decoding_args(ap, "run folder (a Transformer)")
    ap.add_argument("--attnlab", default="fp32:b256,int8:b256", help="attnlab engines, NAME[:bN][:wK], comma-separated")
    ap.add_argument("--ct2", default="float32:b128,int8:b128", help="CTranslate2 engines, NAME[:bN][:wK]")
    ap.add_argument("--floors", action="store_true", help="add each attnlab engine's kernel floor (see above)")
    ap.add_argument("--beam", type=int, default=1, help="beam size on both sides (1: greedy)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    header(argv)
    print(f"ctranslate2 {ctranslate2.__version__}")
    base = load_translator(args.checkpoint, precision="fp32")
    examples = getattr(load_data(base.config["data"]), args.split)[: args.limit]
    src_ids = [ex.src_ids for ex in examples]
    toks = [source_tokens(base.src_vocab, ex.src_text) for ex in examples]
    tmp = tempfile.TemporaryDirectory(prefix="attnlab-ct2-")  # removed at exit (CTranslate2 has loaded it)
    out = export(args.checkpoint, os.path.join(tmp.name, "model"))
    engines = {}
    for spec in args.attnlab.split(","):
        name, bs, workers = parse_spec(spec)
        t = variants(base, [name])[name]
        t.workers = workers
        engines[f"attnlab {spec}"] = ("attnlab", t, bs)
        if args.floors:
            linear, both, counts = floors(t, src_ids, bs, args.beam)
            print(f"floor of attnlab {spec}: captured " + ", ".join(f"{v} {k}" for k, v in counts.items()))
            engines[f"attnlab {spec}, its linear layers only (floor)"] = ("floor", linear, workers)
            engines[f"attnlab {spec}, its linear layers + attention (floor)"] = ("floor+attention", both, workers)
    for spec in args.ct2.split(","):
        name, bs, workers = parse_spec(spec)
        if args.threads % workers:
            raise SystemExit(f"--ct2 {spec}: {workers} workers do not divide --threads {args.threads}")
        ct = ctranslate2.Translator(
            str(out), device="cpu", compute_type=name, inter_threads=workers, intra_threads=args.threads // workers
        )
        engines[f"CTranslate2 {spec}"] = ("ct2", ct, bs)

    def run(kind, engine, bs):
        if kind.startswith("floor"):  # engine: the replay; bs: its workers
            return engine(bs)
        if kind == "attnlab":
            with switches(engine):  # a variant's " without C kernels" / " on worker threads"
                found = engine.search(src_ids, engine.options(beam=args.beam), batch_size=bs, scores=False)
                return [engine.tgt_vocab.to_tokens(hs[0].tokens) for hs in found]
        # attnlab caps each batch (sorted by length) by its longest source; CTranslate2 takes one cap per
        # call, so it gets one call per batch, all submitted at once (its workers take them in turn).
        batches = length_batches([len(s) for s in src_ids], bs)
        pending = [
            engine.translate_batch(
                [toks[i] for i in b],
                beam_size=args.beam,
                length_penalty=1.0,
                max_decoding_length=base.output_limit(len(src_ids[b[0]]) + 1),
                min_decoding_length=0,  # as attnlab: an empty translation is allowed (CTranslate2's default: 1)
                max_batch_size=bs,
                asynchronous=True,
            )
            for b in batches
        ]
        res = [None] * len(toks)
        for b, outs in zip(batches, pending):
            for i, o in zip(b, outs):
                res[i] = o.result().hypotheses[0]
        return res

    names = list(engines)
    fp32 = next((n for n in names if n.split(":")[0] == "attnlab fp32"), names[0])
    outputs = {n: run(*engines[n]) for n in names}  # warm-up pass
    times: dict[str, list[float]] = {n: [] for n in names}
    cores: dict[str, list[float]] = {n: [] for n in names}  # process CPU time / wall time: threads busy
    for r in range(args.rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            t0, c0 = time.perf_counter(), cpu_seconds()
            run(*engines[n])
            times[n].append(time.perf_counter() - t0)
            cores[n].append((cpu_seconds() - c0) / times[n][-1])
    anchor = next(n for n in names if n.startswith("CTranslate2"))
    search = "greedy" if args.beam == 1 else f"beam {args.beam}"
    print(
        f"\n## {args.checkpoint}: {len(src_ids)} sentences of the {args.split} split, {search}, "
        f"{args.threads} threads each, {args.rounds} interleaved rounds\n"
    )
    rows = []
    for n in names:
        sps = statistics.median(len(src_ids) / t for t in times[n])
        ratio = statistics.median(a / t for a, t in zip(times[anchor], times[n]))
        same = (
            "-"
            if outputs[n] is None
            else "baseline"
            if n == fp32
            else f"{sum(a == b for a, b in zip(outputs[n], outputs[fp32]))}/{len(src_ids)}"
        )
        rows.append([n, f"{sps:.1f}", f"{ratio:.2f}x", f"{statistics.median(cores[n]):.2f}", same])
    print(table(["engine", "sentences/s", f"vs {anchor}", "CPU s / wall s", f"same tokens as {fp32}"], rows))

    def best(kind):
        return max((n for n in names if engines[n][0] == kind), key=lambda n: statistics.median(times[n]) ** -1)

    best_ct2 = best("ct2")
    for kind in ("attnlab", "floor") if args.floors else ("attnlab",):
        ours = best(kind)
        ratio = statistics.median(c / a for a, c in zip(times[ours], times[best_ct2]))
        print(f"\nbest {kind} ({ours}) / best CTranslate2 ({best_ct2}): {ratio:.2f}x sentences/s")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    write_result(__file__, argv)
    return 0


def floors(translator, src_ids, bs, beam=1):
    """The replays of `translator` decoding src_ids: its linear layers (matmuls / quantized linears), and
    those with its attention kernels; and the calls each kind captured (matmuls, quantized linears,
    attention kernels). One capture, on one thread (a dispatch mode sees only its own thread's calls)."""
    workers, translator.workers = translator.workers, 1
    try:
        greedy = translator.options(beam=beam)
        calls = capture_kernels(
            lambda: translator.search(src_ids, greedy, batch_size=bs, scores=False), LINEAR | ATTENTION
        )
    finally:
        translator.workers = workers
    cpu = torch.device("cpu")
    linear, n_linear = replay_kernels([c for c in calls if c[0] in LINEAR], cpu)
    both, n_both = replay_kernels(calls, cpu)
    counts = {kind: sum(c[0] in ops for c in calls) for kind, ops in _KINDS.items()}
    assert n_linear == counts["matmuls"] + counts["quantized linears"] and n_both == len(calls)
    return linear, both, counts


_KINDS = {"matmuls": LINEAR - QUANTIZED, "quantized linears": QUANTIZED, "attention kernels": ATTENTION}


def parse_spec(spec: str) -> tuple[str, int, int]:
    """'int8:b256:w2' -> ('int8', 256, 2); batch 128 and 1 worker unless given."""
    name, *opts = spec.split(":")
    bs, workers = 128, 1
    for o in opts:
        if o[:1] == "b" and o[1:].isdigit():
            bs = int(o[1:])
        elif o[:1] == "w" and o[1:].isdigit():
            workers = int(o[1:])
        else:
            raise SystemExit(f"engine spec {spec!r}: expected NAME[:bN][:wK], e.g. int8:b256:w2")
    return name, bs, workers


if __name__ == "__main__":
    sys.exit(main())
