"""attnlab vs CTranslate2 on the same model and sentences, one table per search: sentences/s and BLEU.

The run is exported once (float32) with `attnlab.export.ctranslate2`; CTranslate2 loads it as float32
and as int8 (compute_type), attnlab decodes in fp32 and its other precisions. One invocation measures every
search of --searches on the same sentences (the run's --split), sorted by length, with the same output
length cap per batch, so that all share one machine state:

    greedy       beam 1 on both sides
    beam         beam K (--beam), length penalty 1, the 1-best
    nbest        beam K returning K hypotheses (CTranslate2: num_hypotheses K); BLEU of the first
    sampling     one draw per sentence from the top --top-k tokens, temperature 1 (CTranslate2:
                 sampling_topk, sampling_temperature); seeded on both sides
    constrained  beam K where every output must hold one or two phrases of its reference's words
                 (`benchmarks/decoding/constraints.py`'s phrases); CTranslate2 has no lexical constraints: "—"

Rounds are interleaved within each search (rotating order), model loading and conversion are not timed.
sentences/s is the median over rounds; ratios are medians of paired ratios against the search's best
CTranslate2 engine. BLEU is corpus sacreBLEU of the first hypotheses against the split's references; token
agreement with attnlab fp32 is printed too (not for sampling: draws differ).

With --floors, each attnlab engine also gets two rows in the greedy and beam tables that are not decoders:
every linear layer that engine ran (its matmuls, or its quantized linears), captured once with its shapes
and replayed back to back on ready operands, nothing in between, split evenly over the engine's workers; and
the same with its attention kernels (SDPA) too. Any decoder of this model must compute those products, so
none built on those PyTorch kernels translates faster than the first row; the second shows what PyTorch's
attention adds. Each floor prints what it captured: its matmuls, quantized linears and attention kernels.

Each side gets the same number of threads (--threads T) and may use them its best way, each at its
best batch size: an engine spec is `NAME[:bN][:wK]` (batch N sentences; K workers of T / K threads).
attnlab NAME is a precision (fp32, int8, bf16) or a variant of benchmarks/decoding/precision.py ("int8 (fbgemm)");
its workers are `Translator.decode(workers=K)` (worker processes). CTranslate2 NAME is a compute_type; its
workers are inter_threads (batches submitted asynchronously, so K run at once).

    flock /tmp/attnlab-measure.lock python benchmarks/decoding/ct2_speed.py --checkpoint RUN --split valid --rounds 3 \
        --attnlab int8:b96:w2,fp32:b256:w2 --ct2 int8:b128:w2,int8:b128
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from typing import NamedTuple

import torch

# This file's name shadows the ctranslate2 package when run as a script: import the real one first, with
# this folder off the path, then put it back (last) with benchmarks/ for the shared helpers.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
import ctranslate2

sys.path += [_HERE, os.path.dirname(_HERE)]
from common import add_decoding_args, header, table, write_result
from constraints import phrases_from
from decode import capture_kernels, replay_kernels
from precision import ATTENTION, LINEAR, QUANTIZED, switches, variants

from attnlab.data import load_data
from attnlab.decoding.batches import length_batches
from attnlab.export.ctranslate2 import export, source_tokens
from attnlab.metrics import corpus_bleu, reference_text
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


SEARCHES = ("greedy", "beam", "nbest", "sampling", "constrained")


def searches(names: list[str], K: int, top_k: int, phrases) -> dict[str, tuple[dict, dict | None]]:
    """Each search's title -> (attnlab's DecodeOptions changes, CTranslate2's translate_batch arguments or None)."""
    every = {
        "greedy": ("greedy", {"beam": 1}, {"beam_size": 1}),
        "beam": (f"beam {K}", {"beam": K}, {"beam_size": K}),
        "nbest": (
            f"n-best (beam {K}, {K} hypotheses)",
            {"beam": K, "n_best": K},
            {"beam_size": K, "num_hypotheses": K},
        ),
        "sampling": (
            f"sampling (top-k {top_k}, temperature 1)",
            {"sample": True, "top_k": top_k, "temperature": 1.0, "seed": 0},
            {"beam_size": 1, "sampling_topk": top_k, "sampling_temperature": 1.0},
        ),
        "constrained": (f"constrained beam {K}", {"beam": K, "constraints": phrases}, None),
    }
    return {every[n][0]: every[n][1:] for n in names}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_decoding_args(ap, "run folder (a Transformer)")
    ap.add_argument("--attnlab", default="fp32:b256,int8:b256", help="attnlab engines, NAME[:bN][:wK], comma-separated")
    ap.add_argument("--ct2", default="float32:b128,int8:b128", help="CTranslate2 engines, NAME[:bN][:wK]")
    ap.add_argument("--floors", action="store_true", help="add each attnlab engine's kernel floor (see above)")
    ap.add_argument("--searches", default=",".join(SEARCHES), help=f"comma-separated, of {', '.join(SEARCHES)}")
    ap.add_argument("--beam", type=int, default=4, help="beam size of the beam, n-best and constrained searches")
    ap.add_argument("--top-k", type=int, default=10, help="sampling's top-k on both sides")
    args = ap.parse_args(argv)
    wanted = args.searches.split(",")
    if not wanted or set(wanted) - set(SEARCHES) or args.beam < 2:
        ap.error(
            f"--searches: expected some of {','.join(SEARCHES)} and --beam >= 2; "
            f"got {args.searches!r}, --beam {args.beam}: pass names from that list, a beam of 2 or more"
        )
    torch.set_num_threads(args.threads)
    header(argv)
    print(f"ctranslate2 {ctranslate2.__version__}")
    ctranslate2.set_random_seed(0)
    base = load_translator(args.checkpoint, precision="fp32")
    examples = getattr(load_data(base.config["data"]), args.split)[: args.limit]
    vocab = base.tgt_vocab
    refs = [reference_text(ex.tgt_text, vocab) for ex in examples]
    rng = random.Random(0)
    phrases = tuple(tuple(vocab.decode(p) for p in phrases_from(r, vocab, rng, i % 2 == 1)) for i, r in enumerate(refs))
    data = Data(
        [ex.src_ids for ex in examples], [source_tokens(base.src_vocab, ex.src_text) for ex in examples], refs, base
    )
    tmp = tempfile.TemporaryDirectory(prefix="attnlab-ct2-")  # removed at exit (CTranslate2 has loaded it)
    out = export(args.checkpoint, os.path.join(tmp.name, "model"))
    engines = make_engines(args, base, out)
    best, fastest = {}, {}
    for title, (ours, theirs) in searches(wanted, args.beam, args.top_k, phrases).items():
        fl = args.floors and not ours.get("sample") and not ours.get("constraints") and "n_best" not in ours
        best[title], fastest[title] = measure(args, data, title, engines, ours, theirs, fl)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    beam = f"beam {args.beam}"
    summary = [  # the page's summary: greedy and beam K (the other searches: their tables)
        {"what": f"best attnlab / best CTranslate2, {t}", "baseline": "CTranslate2's best engine", "measured": r}
        for t, r in best.items()
        if r is not None and t in ("greedy", beam)
    ]
    constrained = next((t for t in fastest if t.startswith("constrained")), None)
    if constrained is not None and beam in fastest:  # no CTranslate2 equivalent: against attnlab's own beam
        (c_name, c_speed), (b_name, b_speed) = fastest[constrained], fastest[beam]
        print(f"\nbest attnlab {constrained} ({c_name}) / best attnlab {beam} ({b_name}): {c_speed / b_speed:.2f}x")
    baseline = f"CTranslate2's best engine of each search, same exported weights, {args.threads} threads each"
    quoted = {}  # README's figure: greedy's and beam's ratios, when both were measured
    if [s["what"].rsplit(", ", 1)[1] for s in summary] == ["greedy", beam]:
        quoted["readme"] = (
            "[{summary[0][measured][0]:.2f}× CTranslate2's fastest engine with greedy search and "
            "{summary[1][measured][0]:.2f}× with " + beam + "](BENCHMARKS.md#against-ctranslate2)"
        )
    write_result(__file__, argv, main=0, baseline=baseline, summary=summary, summary_formats=SUMMARY, **quoted)
    return 0


class Data(NamedTuple):
    """The sentences every engine decodes: attnlab's source ids, CTranslate2's source tokens, references."""

    src_ids: list
    tokens: list
    refs: list
    base: object  # the fp32 translator (vocabularies, output limit)


def make_engines(args, base, out) -> dict[str, tuple]:
    """name -> (kind, engine, batch size): attnlab's translators, and CTranslate2's on the export `out`."""
    engines = {}
    for spec in args.attnlab.split(","):
        name, bs, workers = parse_spec(spec)
        t = variants(base, [name])[name]
        t.workers = workers
        engines[f"attnlab {spec}"] = ("attnlab", t, bs)
    for spec in args.ct2.split(","):
        name, bs, workers = parse_spec(spec)
        if args.threads % workers:
            raise SystemExit(f"--ct2 {spec}: {workers} workers do not divide --threads {args.threads}")
        ct = ctranslate2.Translator(
            str(out), device="cpu", compute_type=name, inter_threads=workers, intra_threads=args.threads // workers
        )
        engines[f"CTranslate2 {spec}"] = ("ct2", ct, bs)
    return engines


def decode(data: Data, kind: str, engine, bs: int, ours: dict, theirs: dict | None):
    """One pass: every sentence's first hypothesis as target tokens (floors: None)."""
    if kind.startswith("floor"):  # engine: the replay; bs: its workers
        return engine(bs)
    if kind == "attnlab":
        with switches(engine):  # a variant's " without C kernels" / " on worker threads"
            found = engine.search(data.src_ids, engine.options(**ours, scores=False), batch_size=bs)
            return [engine.tgt_vocab.to_tokens(hs[0].tokens) for hs in found]
    # attnlab caps each batch (sorted by length) by its longest source; CTranslate2 takes one cap per
    # call, so it gets one call per batch, all submitted at once (its workers take them in turn).
    batches = length_batches([len(s) for s in data.src_ids], bs)
    pending = [
        engine.translate_batch(
            [data.tokens[i] for i in b],
            length_penalty=1.0,
            max_decoding_length=data.base.output_limit(len(data.src_ids[b[0]]) + 1),
            min_decoding_length=0,  # as attnlab: an empty translation is allowed (CTranslate2's default: 1)
            max_batch_size=bs,
            asynchronous=True,
            **theirs,
        )
        for b in batches
    ]
    res = [None] * len(data.tokens)
    for b, outs in zip(batches, pending):
        for i, o in zip(b, outs):
            res[i] = o.result().hypotheses[0]
    return res


def measure(args, data: Data, title: str, engines: dict, ours: dict, theirs: dict | None, with_floors: bool):
    """One search's table: every engine (CTranslate2's where it has the search), warm-up then interleaved rounds;
    returns best attnlab / best CTranslate2 as text (None without CTranslate2), and attnlab's fastest engine
    with its sentences/s."""
    runs = {n: e for n, e in engines.items() if e[0] == "attnlab" or theirs is not None}
    if with_floors:
        for n, (_, t, _) in list(runs.items()):
            if n.startswith("attnlab"):
                linear, both, counts = floors(t, data.src_ids, runs[n][2], ours["beam"])
                print(f"floor of {n}, {title}: captured " + ", ".join(f"{v} {k}" for k, v in counts.items()))
                runs[f"{n}, its linear layers only (floor)"] = ("floor", linear, t.workers)
                runs[f"{n}, its linear layers + attention (floor)"] = ("floor+attention", both, t.workers)
    names = list(runs)
    outputs = {n: decode(data, *runs[n], ours, theirs) for n in names}  # warm-up pass
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            t0 = time.perf_counter()
            decode(data, *runs[n], ours, theirs)
            times[n].append(time.perf_counter() - t0)
    speed = {n: len(data.src_ids) / statistics.median(times[n]) for n in names}
    fp32 = next((n for n in names if n.split(":")[0] == "attnlab fp32"), names[0])
    theirs_best = max((n for n in names if runs[n][0] == "ct2"), key=speed.get, default=None)
    rows: list[list] = []
    for n in names:
        ratio = None if theirs_best is None else statistics.median(a / t for a, t in zip(times[theirs_best], times[n]))
        text = None if outputs[n] is None else [data.base.tgt_vocab.decode(data.base.tgt_vocab[o]) for o in outputs[n]]
        same = None if outputs[n] is None or ours.get("sample") else "baseline" if n == fp32 else (
            f"{sum(a == b for a, b in zip(outputs[n], outputs[fp32]))}/{len(data.src_ids)}")  # fmt: skip
        rows.append([n, round(speed[n], 1), None if ratio is None else round(ratio, 2),
                     None if text is None else round(corpus_bleu(text, data.refs), 2), same])  # fmt: skip
    ours_fastest = max((n for n in names if runs[n][0] == "attnlab"), key=speed.get)
    fastest = (ours_fastest.split(" ", 1)[1], speed[ours_fastest])
    if theirs is None:  # CTranslate2's engines have no such search: their rows say so
        rows += [[n, None, None, None, None] for n, e in engines.items() if e[0] == "ct2"]
    print(f"\n## {args.checkpoint}, {title}: {len(data.src_ids)} sentences of the {args.split} split, "
          f"{args.threads} threads each, {args.rounds} interleaved rounds\n")  # fmt: skip
    heads = [title, "sentences/s", "vs best CTranslate2", "BLEU", "same tokens as attnlab fp32"]
    # n-best (as fast as its beam) and constrained beam (no CTranslate2 rows): kept in the record, off the page.
    secondary = title.startswith(("n-best", "constrained"))
    print(table(heads, [[("—" if c is None else c) for c in r] for r in rows], formats=RATIO, file_only=secondary))
    if theirs is None:
        print(f"\n{title}: CTranslate2 has no equivalent")
        return None, fastest
    kinds = ("attnlab", "floor") if with_floors else ("attnlab",)
    for kind in kinds:
        ours_best = max((n for n in names if runs[n][0] == kind), key=speed.get)
        ratio = statistics.median(c / a for a, c in zip(times[ours_best], times[theirs_best]))
        print(f"\nbest {kind} ({ours_best}) / best CTranslate2 ({theirs_best}), {title}: {ratio:.2f}x sentences/s")
        if kind == "attnlab":
            result = [round(ratio, 2), ours_best.split(" ", 1)[1], theirs_best.split(" ", 1)[1]]
    return result, fastest


RATIO = {"vs best CTranslate2": "{:.2f}×"}
SUMMARY = {"measured": "{0:.2f}× ({1} vs {2})"}  # the ratio, attnlab's best engine, CTranslate2's


def floors(translator, src_ids, bs, beam=1):
    """The replays of `translator` decoding src_ids: its linear layers (matmuls / quantized linears), and
    those with its attention kernels; and the calls each kind captured (matmuls, quantized linears,
    attention kernels). One capture, on one thread (a dispatch mode sees only its own thread's calls)."""
    workers, translator.workers = translator.workers, 1
    try:
        greedy = translator.options(beam=beam)
        calls = capture_kernels(
            lambda: translator.search(src_ids, replace(greedy, scores=False), batch_size=bs), LINEAR | ATTENTION
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
