"""Decoding speed and BLEU per precision (fp32 / bf16 / int8 variants) on a run's test split.

Every precision decodes the same sentences (the run's test split, rebuilt from its config.json), greedy,
batches sorted by length (--batch-size, --workers: `Translator.decode`'s), as `attnlab evaluate` does.
Rounds are interleaved (one pass of every variant per round, rotating who goes first) so machine load
hits them alike; sentences/s is the median
over rounds, the speed-up the median of paired ratios against fp32 greedy. Corpus BLEU (sacreBLEU) of
each variant is printed beside it, and how many sentences it translates exactly as fp32 does (fp32 is
always run, first: the baseline of every column; 'fp32 (F.linear)' is fp32 without its packed linear
layers, as attnlab decoded before them; a name followed by ' without C kernels' is that variant on
PyTorch's operators alone, `attnlab.kernels.loader.off`; by ' on worker threads', decoded by
`Translator.decode`'s worker threads instead of its worker processes, ATTNLAB_WORKER_PROCESSES=0; by
' without the fused step', every decoding step on the model's modules, `attnlab.inference.int8_step.off`; ':bN'
at the end decodes that variant in batches of N instead of its precision's own size). Model
loading and conversion are not timed. --floors adds each precision's kernel floor: its linear-layer
kernels, captured once from a decode and replayed back to back on ready operands (LINEAR), timed in the
same interleaved rounds.

    flock /tmp/attnlab-measure.lock python benchmarks/decoding/precision.py --checkpoint /tmp/speed-run --rounds 3 \
        --split valid --workers 2 --floors --precisions 'fp32,bf16,int8,int8 (fbgemm),fp32 without C kernels'

A variant run beside the same variant ' without C kernels' also gets a line of how many outputs the two share
(`--precisions 'int8,int8 without C kernels' --beam 4`: docs/translators.md, "int8 with and without the C kernels").
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import re
import statistics
import sys
import time
from dataclasses import replace
from unittest import mock

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import add_decoding_args, header, table, write_result
from decode import ATTENTION as SDPA
from decode import PACKED_LINEAR as PACKED
from decode import capture_kernels, replay_kernels

from attnlab.data import load_data
from attnlab.decoding.translator import BATCH_SIZE_BY_PRECISION, DEFAULT_BATCH_SIZE
from attnlab.inference import int8_step
from attnlab.inference.packed import PackedLinear, retype_linears
from attnlab.inference.precision import (
    DECODE_PRECISIONS,
    prepare_for_inference,
    resolve_precision,
)
from attnlab.kernels import loader as native
from attnlab.metrics import corpus_bleu, reference_text
from attnlab.runs.loading import load_translator

# The kernels a floor replays. Under inference_mode linear and SDPA reach a dispatch mode whole, a decoding
# step's attention as matmul (`_few_queries`); the per-row int8 kernel's own quantize/rescale ops are not
# in LINEAR (only its torch._int_mm), so its floor is the int8 products alone.
_aten = torch.ops.aten
QUANTIZED = {
    getattr(torch.ops.quantized, name).default
    for name in ("linear_dynamic", "linear_dynamic_fp16", "linear")
    if hasattr(torch.ops.quantized, name)
} | {_aten._int_mm.default}  # the int8 products of `Int8Linear` (per-row scales)
LINEAR = {_aten.linear.default, _aten.addmm.default, _aten.mm.default} | QUANTIZED | PACKED
ATTENTION = SDPA | {_aten.matmul.default, _aten.bmm.default}


def linear_floor(translator, src_ids, batch_size):
    """A replay of every linear-layer kernel `translator` runs decoding src_ids (one capture, one thread),
    and the number of calls: what no decoder on those kernels can cost less than."""
    greedy = translator.options(beam=1)
    calls = capture_kernels(
        lambda: translator.search(src_ids, replace(greedy, scores=False), batch_size=batch_size), LINEAR
    )
    return replay_kernels(calls, torch.device("cpu"))


# int8 variants beyond `--precision int8` (every Linear, fbgemm per-channel): NAME -> prepare_for_inference options.
INT8_VARIANTS = {
    "int8": {},
    "int8 (fp32 output)": {"keep_fp32": ("decoder.dense",)},
    "int8 (fbgemm)": {"kernel": "fbgemm"},
    "int8 (per-row)": {"kernel": "int_mm"},  # the per-row kernel even where `int8` runs fbgemm (no int8 dot products)
    "int8 (per-tensor)": {"kernel": "fbgemm-tensor"},
}
# Appended to any variant's name: that variant with attnlab's C kernels off (`attnlab.kernels.loader.off`),
# PyTorch's operators in their place.
NO_NATIVE = " without C kernels"
# A variant decoded with `Translator.decode`'s worker threads instead of its worker processes.
THREADS = " on worker threads"
# A variant whose every decoding step runs the modules (`attnlab.inference.int8_step.off`), not int8's fused step.
NO_FUSED = " without the fused step"
SUFFIXES = (NO_NATIVE, THREADS, NO_FUSED)


# fp32 as it ran before its linear layers were packed for oneDNN (F.linear: the weight reordered per call).
UNPACKED = "fp32 (F.linear)"


def unpacked(model):
    """A copy of `model` whose PackedLinears are plain nn.Linears again."""
    return retype_linears(model, PackedLinear, nn.Linear, copy=True)


def parse_variant(full: str) -> tuple[str, frozenset[str], int | None]:
    """'int8 on worker threads without C kernels:b256' -> ('int8', {THREADS, NO_NATIVE}, 256): the precision,
    its SUFFIXES (in any order) and the batch size."""
    name, batch = full, None
    if m := re.fullmatch(r"(.*):b(\d+)", name):
        name, batch = m.group(1), int(m.group(2))
    found: set[str] = set()
    while suffix := next((x for x in SUFFIXES if name.endswith(x)), None):
        name = name.removesuffix(suffix)
        found.add(suffix)
    return name, frozenset(found), batch


def variants(translator, names, batch_size: int | None = None):
    """name -> a Translator sharing vocabularies, with the model prepared for that precision
    (fp32, bf16, auto, UNPACKED or one of INT8_VARIANTS) and its batch size: the name's :bN, else
    batch_size, else the precision's own; `switches(t)` applies the variant's SUFFIXES."""
    out = {}
    for full in names:
        name, suffixes, batch = parse_variant(full)
        t = copy.copy(translator)
        if name == UNPACKED:
            t.model = unpacked(translator.model)
        elif name in INT8_VARIANTS:
            t.model = prepare_for_inference(translator.model, "int8", **INT8_VARIANTS[name])
        elif name in DECODE_PRECISIONS:
            t.model = prepare_for_inference(translator.model, name)
        else:
            raise SystemExit(
                f"unknown precision variant {name!r}; expected {DECODE_PRECISIONS}, "
                f"{UNPACKED!r} or {list(INT8_VARIANTS)}, any of them followed by any of {list(SUFFIXES)}, "
                "then optionally :bN (batches of N)"
            )
        t.precision = resolve_precision("int8" if name in INT8_VARIANTS else "fp32" if name == UNPACKED else name)
        t.batch_size = batch or batch_size or BATCH_SIZE_BY_PRECISION.get(t.precision.picked, DEFAULT_BATCH_SIZE)
        t.bench_switches = suffixes
        out[full] = t
    return out


@contextlib.contextmanager
def switches(t):
    """Inside the block, `t`'s variant runs as its name said: C kernels off, on worker threads, without int8's
    fused step."""
    suffixes = getattr(t, "bench_switches", frozenset())
    with contextlib.ExitStack() as stack:
        if NO_NATIVE in suffixes:
            stack.enter_context(native.off())
        if THREADS in suffixes:
            stack.enter_context(mock.patch.dict(os.environ, {"ATTNLAB_WORKER_PROCESSES": "0"}))
        if NO_FUSED in suffixes:
            stack.enter_context(int8_step.off())
        yield


def translate(t, src, beam=1):
    """t's outputs for src, in t.batch_size, as its variant runs (`switches`)."""
    with switches(t):
        return [t.tgt_vocab.decode(hs[0].tokens) for hs in t.search(src, t.options(beam=beam, scores=False))]


def same_as_baseline(hyps: dict[str, list], baseline: str) -> dict[str, str]:
    """name -> "k/n": how many of n outputs equal the baseline's; the baseline itself -> "baseline"."""
    ref = hyps[baseline]
    return {
        n: "baseline" if n == baseline else f"{sum(a == b for a, b in zip(h, ref))}/{len(ref)}" for n, h in hyps.items()
    }


def native_pairs(names: list[str]) -> list[tuple[str, str]]:
    """(variant, the same variant without C kernels) for every such pair among `names`: how often the C kernels
    change an output (docs/translators.md, "int8 with and without the C kernels")."""
    parsed = {n: parse_variant(n) for n in names}
    return [
        (n, off)
        for off, (base, suffixes, batch) in parsed.items()
        if NO_NATIVE in suffixes
        for n, other in parsed.items()
        if other == (base, suffixes - {NO_NATIVE}, batch)
    ]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_decoding_args(ap)
    ap.add_argument("--precisions", default="fp32,bf16,int8,int8 (fp32 output)")
    ap.add_argument("--batch-size", type=int, help="sentences per batch (default: the precision's own)")
    ap.add_argument("--beam", type=int, default=1, help="beam size (1: greedy)")
    ap.add_argument("--workers", type=int, default=1, help="batches decoded at once (Translator.decode)")
    ap.add_argument("--floors", action="store_true", help="also each precision's linear layers alone, replayed")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    header(argv)
    base = load_translator(args.checkpoint, precision="fp32")
    data = load_data(base.config["data"])
    examples = getattr(data, args.split)[: args.limit]
    src = [ex.src_ids for ex in examples]
    refs = [reference_text(ex.tgt_text, base.tgt_vocab) for ex in examples]
    names = ["fp32", *(n for n in args.precisions.split(",") if n != "fp32")]
    models = variants(base, names, args.batch_size)
    for t in models.values():
        t.workers = args.workers
    batch = args.batch_size or "of each precision's size"
    search = "greedy" if args.beam == 1 else f"beam {args.beam}"
    print(
        f"\n## {args.checkpoint}: {len(src)} sentences of the {args.split} split, {search}, batch "
        f"{batch}, {args.workers} worker(s), {args.rounds} interleaved rounds\n"
    )
    hyps = {}
    for n in names:  # warm-up pass (also gives the outputs: decoding is deterministic)
        hyps[n] = translate(models[n], src, args.beam)
    runs = {n: (lambda t=models[n]: translate(t, src, args.beam)) for n in names}
    floors = {}
    for n in names if args.floors else ():
        models[n].workers = 1  # one capture on one thread; the replay deals the calls over the workers
        replay, calls = linear_floor(models[n], src, models[n].batch_size)
        models[n].workers = args.workers
        floors[n] = f"{calls} calls"
        runs[f"{n}, floor"] = lambda replay=replay: replay(args.workers)
    times: dict[str, list[float]] = {n: [] for n in runs}
    order = list(runs)
    for r in range(args.rounds):
        for n in order[r % len(order) :] + order[: r % len(order)]:
            t0 = time.perf_counter()
            runs[n]()
            times[n].append(time.perf_counter() - t0)
    rows = []
    base_bleu = corpus_bleu(hyps["fp32"], refs)
    same = same_as_baseline(hyps, "fp32")
    for n in names:
        sps = statistics.median(len(src) / t for t in times[n])
        ratio = statistics.median(b / t for b, t in zip(times["fp32"], times[n]))
        bleu = corpus_bleu(hyps[n], refs)
        row = [n, f"{sps:.1f}", f"{ratio:.2f}x", f"{bleu:.2f}", f"{bleu - base_bleu:+.2f}", same[n]]
        if args.floors:
            f, f32 = times[f"{n}, floor"], times["fp32, floor"]
            fsps = statistics.median(len(src) / t for t in f)
            row += [f"{fsps:.1f} ({floors[n]})", f"{statistics.median(b / t for b, t in zip(f32, f)):.2f}x"]
        rows.append(row)
    heads = ["precision", "sentences/s", f"vs fp32 {search}", "BLEU", "BLEU - fp32", "same output as fp32"]
    if args.floors:
        heads += ["linear layers alone (floor), sentences/s", "floor vs fp32 floor"]
    print(table(heads, rows))
    for on, off in native_pairs(names):
        print(f"same output with and without the C kernels: {same_as_baseline(hyps, on)[off]} ({off!r} as {on!r})")
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    write_result(__file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
