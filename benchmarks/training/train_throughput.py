"""Transformer training throughput (target tokens/s of forward + backward + Adam step), as ratios.

attnlab's `Transformer` against two baselines measured in the same process on the same batches:
  (a) `torch.nn.Transformer` (batch_first) with the same embeddings * sqrt(D), sinusoidal positions,
      output layer, post-norm blocks (its extra final LayerNorms removed, so the architecture is ours),
      source key-padding masks and a causal target mask;
  (b) the book's formulation (benchmarks/baselines/d2l_transformer.py): bmm + -1e6 masked softmax,
      (B, T) arange valid lengths for causality.
All three share D, heads, layers, FFN width, dropout and vocabulary. Steps are interleaved round-robin
(one step of each model per round, same batch), so load on a shared machine hits all of them alike;
each speed-up is the median over rounds of the paired time ratio.

    python benchmarks/training/train_throughput.py                  # the run recorded in BENCHMARKS.md
    python benchmarks/training/train_throughput.py --quick          # a smoke run (seconds)
    python benchmarks/training/train_throughput.py --compile        # + torch.compile(ours), in a capped child process
    python benchmarks/training/train_throughput.py --profile        # + where the time goes (torch.profiler)
    python benchmarks/training/train_throughput.py --plain-dropout --no-book   # + attnlab with nn.Dropout layers
    python benchmarks/training/train_throughput.py --device cuda --amp --batch-size 256   # GPU, bf16 autocast
    python benchmarks/training/train_throughput.py --precision fp32,bf16,bf16-autocast --quality 40   # + attnlab's bf16
                            # step and plain autocast (interleaved too), and a same-seed validation-loss check

`--quality STEPS` trains the cpu-small recipe (a narrower model, D=64) from one seed for STEPS steps on the
real corpus ($ATTNLAB_DATA) once per precision and compares the validation loss with fp32's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from baselines.d2l_transformer import from_attnlab_config
from common import table, write_result
from train_quality import quality

from attnlab.attention.dropout import Dropout
from attnlab.attention.positions import sinusoidal_encoding
from attnlab.inference.precision import TRAIN_PRECISIONS, bf16_attention, cpu_features, resolve_precision
from attnlab.models import Transformer, TransformerConfig
from attnlab.training.flops import transformer_step_flops
from attnlab.training.mixed import Bf16Compute

PAD = 0


class TorchTransformer(nn.Module):
    """Baseline (a): `nn.Transformer` wrapped into the same translator as ours.

    Shape: src (B, S), tgt_in (B, T), src_valid_lens (B,) -> logits (B, T, V).
    """

    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.d = c.num_hiddens
        self.src_emb = nn.Embedding(c.src_vocab_size, c.num_hiddens)
        self.tgt_emb = nn.Embedding(c.tgt_vocab_size, c.num_hiddens)
        self.register_buffer("P", sinusoidal_encoding(torch.arange(c.max_len), c.num_hiddens), persistent=False)
        self.drop = nn.Dropout(c.dropout)
        with warnings.catch_warnings():  # "enable_nested_tensor ..." concerns inference only
            warnings.simplefilter("ignore")
            self.core = nn.Transformer(
                c.num_hiddens, c.num_heads, c.num_layers, c.num_layers, c.ffn_num_hiddens, c.dropout, batch_first=True
            )
        # nn.Transformer always ends each stack with a LayerNorm; post-norm blocks (ours, the paper's)
        # have none, so drop them: both models then compute the same function.
        self.core.encoder.norm = None
        self.core.decoder.norm = None
        self.out = nn.Linear(c.num_hiddens, c.tgt_vocab_size)

    def forward(self, src, tgt_in, src_valid_lens):
        S, T = src.shape[1], tgt_in.shape[1]
        # True = ignore (torch's sense)
        padding = torch.arange(S, device=src.device)[None, :] >= src_valid_lens[:, None]
        causal = torch.ones(T, T, dtype=torch.bool, device=src.device).triu(1)
        x = self.drop(self.src_emb(src) * math.sqrt(self.d) + self.P[:S])
        y = self.drop(self.tgt_emb(tgt_in) * math.sqrt(self.d) + self.P[:T])
        h = self.core(
            x, y, tgt_mask=causal, src_key_padding_mask=padding, memory_key_padding_mask=padding, tgt_is_causal=True
        )
        return self.out(h)


def make_batches(n, B, min_len, max_len, src_vocab, tgt_vocab, seed=0):
    """n synthetic padded batches: lengths uniform in [min_len, max_len], padded to the batch maximum.

    Returns a list of (src (B, S), src_valid_lens (B,), tgt_in (B, T), tgt_out (B, T), tgt_valid_lens (B,)).
    """
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n):
        src_lens = torch.randint(min_len, max_len + 1, (B,), generator=g)
        tgt_lens = torch.randint(min_len, max_len + 1, (B,), generator=g)
        S, T = int(src_lens.max()), int(tgt_lens.max())
        src = torch.randint(3, src_vocab, (B, S), generator=g)
        src[torch.arange(S)[None] >= src_lens[:, None]] = PAD
        tgt = torch.randint(3, tgt_vocab, (B, T + 1), generator=g)
        batches.append((src, src_lens, tgt[:, :-1].contiguous(), tgt[:, 1:].contiguous(), tgt_lens))
    return batches


def masked_loss(logits, tgt_out, tgt_lens):
    """Mean cross-entropy over real target tokens (identical for every model); logits (B, T, V), or
    (N, V) already restricted to the real positions (attnlab's `targets_mask` path)."""
    real = torch.arange(tgt_out.shape[1], device=tgt_out.device)[None] < tgt_lens[:, None]
    return F.cross_entropy((logits if logits.dim() == 2 else logits[real]).float(), tgt_out[real])


def real_rows(name: str) -> bool:
    """attnlab as its Trainer runs it: output layer + loss on real target positions, fused Adam.
    "attnlab before" is the earlier step (logits at every position, torch's default per-tensor Adam)."""
    return name.startswith("attnlab") and "before" not in name


def build_models(args, names):
    torch.manual_seed(0)
    config = TransformerConfig(
        src_vocab_size=args.vocab,
        tgt_vocab_size=args.vocab,
        num_hiddens=args.d,
        num_heads=args.heads,
        num_layers=args.layers,
        ffn_num_hiddens=args.ffn,
        dropout=args.dropout,
    )
    factories = {
        "attnlab": lambda: Transformer(config),
        "attnlab nn.Dropout": lambda: plain_dropout(Transformer(config)),
        "nn.Transformer": lambda: TorchTransformer(config),
        "book (d2l)": lambda: from_attnlab_config(config),
    }
    models = {}
    for name in names:
        base = name.removesuffix(" + compile").removesuffix(" bf16").removesuffix(" bf16-autocast")
        m = factories[base.removesuffix(" before")]().to(args.device).train()
        # attnlab: the optimizer `attnlab.training.build_optimizer` picks (fused where torch has it).
        opt = torch.optim.Adam(m.parameters(), lr=1e-4, fused=True if real_rows(name) else None)
        fwd = torch.compile(m) if name.endswith("+ compile") else m
        if name.endswith(" bf16") and torch.device(args.device).type == "cpu":
            fwd = Bf16Compute(m)  # what the Trainer runs for bf16 on the CPU
        models[name] = (fwd, m, opt)
    return config, models


def plain_dropout(model: nn.Module) -> nn.Module:
    """`model` with each attnlab `Dropout` (the cheaper CPU mask) replaced by the `nn.Dropout` it extends."""
    for module in list(model.modules()):
        for name, child in module.named_children():
            if isinstance(child, Dropout):
                setattr(module, name, nn.Dropout(child.p))
    return model


def train_step(model, opt, batch, device, amp, only_real=False):
    """One update. `model` a Bf16Compute: the Trainer's CPU bf16 step (bf16 copy, fp32 masters, SDPA's
    math path); else `amp` = plain torch.autocast around the forward (default SDPA kernels)."""
    src, src_lens, tgt_in, tgt_out, tgt_lens = batch
    opt.zero_grad(set_to_none=True)
    mixed = model if isinstance(model, Bf16Compute) else None
    if mixed is not None:
        mixed.refresh()  # this step's bf16 weights, from the fp32 masters
        model, ctx = mixed.model, bf16_attention(device)
    else:
        ctx = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp)
    with ctx:
        if only_real:
            real = torch.arange(tgt_in.shape[1], device=tgt_in.device)[None] < tgt_lens[:, None]
            logits = model(src, tgt_in, src_lens, targets_mask=real)
        else:
            logits = model(src, tgt_in, src_lens)
    masked_loss(logits, tgt_out, tgt_lens).backward()
    if mixed is not None:
        mixed.grads_to_masters()
    opt.step()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_rate(device: torch.device, n: int) -> float:
    """The dense bf16 matmul rate here, FLOP/s: an (n, n) @ (n, n) product, the best of 10 after a warm-up."""
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    best = math.inf
    for i in range(11):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        if i:
            best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def step_flops(args, batch) -> float:
    """Model FLOPs of one training step on `batch` (`attnlab.training.flops`)."""
    src_lens, tgt_lens = batch[1].tolist(), batch[4].tolist()
    return transformer_step_flops(args.d, args.ffn, args.layers, args.vocab, src_lens, tgt_lens)


def measure(args, names, log=print):
    """Round-robin timing. Returns ({name: [seconds per step]}, tokens per step, first-step seconds)."""
    device = torch.device(args.device)
    config, models = build_models(args, names)
    batches = [
        tuple(t.to(device) for t in b)
        for b in make_batches(args.num_batches, args.batch_size, args.min_len, args.max_len, args.vocab, args.vocab)
    ]
    times = {n: [] for n in names}
    first = {}
    tokens = []
    for r in range(args.warmup + args.steps):
        batch = batches[r % len(batches)]
        order = names[r % len(names) :] + names[: r % len(names)]  # rotate who goes first
        for name in order:
            fwd, _, opt = models[name]
            sync(device)
            t0 = time.perf_counter()
            train_step(fwd, opt, batch, device, args.amp or " bf16" in name, real_rows(name))
            sync(device)
            dt = time.perf_counter() - t0
            if r == 0:
                first[name] = dt
            if r >= args.warmup:
                times[name].append(dt)
        if r >= args.warmup:
            tokens.append(int(batch[4].sum()))
            args.flops.append(step_flops(args, batch))
    return times, tokens, first


def mfu(flops: list[float], ts: list[float], peak: float) -> float:
    """Model FLOPs per second over the dense bf16 matmul rate, the median over rounds."""
    return statistics.median(f / t for f, t in zip(flops, ts)) / peak


REPORT_FORMATS = {
    "target tokens/s (noise)": "{:,}",
    "median step (noise)": "{} ms",
    "attnlab speed-up vs this": "{:.2f}x",
    "MFU": "{:.1f} %",
}


def report(times, tokens, base="attnlab", flops=None, peak=None):
    rows = []
    for name, ts in times.items():
        tok_s = statistics.median(n / t for n, t in zip(tokens, ts))
        ratio = statistics.median(t / o for t, o in zip(ts, times[base]))  # >1: ours is faster
        rows.append(
            [
                name,
                round(tok_s),
                round(statistics.median(ts) * 1e3),
                "(ours)" if name == base else round(ratio, 2),
                round(100 * mfu(flops, ts, peak), 1) if flops and peak else "-",
            ]
        )
    columns = ["model", "target tokens/s (noise)", "median step (noise)", "attnlab speed-up vs this", "MFU"]
    return table(columns, rows, formats=REPORT_FORMATS)


def profile(args, name, steps=3):
    """Top operators by self time for a few steps of one model (after one warm-up step)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    device = torch.device(args.device)
    _, models = build_models(args, [name])
    fwd, _, opt = models[name]
    batch = tuple(
        t.to(device) for t in make_batches(1, args.batch_size, args.min_len, args.max_len, args.vocab, args.vocab)[0]
    )
    train_step(fwd, opt, batch, device, args.amp, real_rows(name))
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with prof(activities=acts) as p:
        for _ in range(steps):
            train_step(fwd, opt, batch, device, args.amp, real_rows(name))
            sync(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    return p.key_averages().table(sort_by=key, row_limit=args.profile_rows)


def compile_child(args) -> int:
    """Run inside the capped child: eager vs compiled attnlab, interleaved; prints one JSON line."""
    names = ["attnlab", "attnlab + compile"]
    t0 = time.perf_counter()
    times, tokens, first = measure(args, names)
    ratio = statistics.median(e / c for e, c in zip(times["attnlab"], times["attnlab + compile"]))
    peak = matmul_rate(torch.device(args.device), args.matmul_n)
    print(
        json.dumps(
            {
                "ratio": ratio,
                "first_step_s": first["attnlab + compile"],
                "eager_first_step_s": first["attnlab"],
                "total_s": time.perf_counter() - t0,
                "mfu": mfu(args.flops, times["attnlab + compile"], peak),
                "tokens_per_s": statistics.median(n / t for n, t in zip(tokens, times["attnlab + compile"])),
            }
        )
    )
    return 0


def run_compile(args, argv) -> str:
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--compile-child"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.compile_timeout)
    except subprocess.TimeoutExpired:
        return f"torch.compile: gave up after {args.compile_timeout:.0f} s (cap; --compile-timeout) -- not measured"
    if out.returncode != 0:
        err = (out.stderr.strip().splitlines() or ["?"])[-1]
        return f"torch.compile: unavailable here ({err})"
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return (
        f"ratio: torch.compile(attnlab) / attnlab = {r['ratio']:.2f}x target tokens/s; compiled: "
        f"{r['tokens_per_s']:,.0f} target tokens/s, MFU {100 * r['mfu']:.1f} % "
        f"(first compiled step {r['first_step_s']:.1f} s vs eager {r['eager_first_step_s']:.2f} s; "
        f"child total {r['total_s']:.0f} s)"
    )


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--amp", action="store_true", help="bf16 autocast (CUDA)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--min-len", type=int, default=12)
    ap.add_argument("--max-len", type=int, default=20)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--steps", type=int, default=8, help="timed rounds (one step per model each)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    ap.add_argument("--num-batches", type=int, default=4, help="distinct batches cycled through")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's own choice)")
    ap.add_argument("--no-book", action="store_true", help="skip the book's baseline (slow on big sizes)")
    ap.add_argument(
        "--before",
        action="store_true",
        help="also time 'attnlab before': logits at padded positions too and torch's default Adam",
    )
    ap.add_argument("--plain-dropout", action="store_true", help="also time attnlab with nn.Dropout layers")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile(attnlab) in a child process")
    ap.add_argument("--compile-timeout", type=float, default=300.0, help="cap on the compile child, seconds")
    ap.add_argument("--profile", action="store_true", help="print torch.profiler tables for attnlab and nn.Transformer")
    ap.add_argument("--profile-rows", type=int, default=15)
    ap.add_argument(
        "--precision",
        default="fp32",
        help="attnlab precisions to time, e.g. fp32,bf16,bf16-autocast (bf16: the Trainer's step, a bf16 "
        "compute copy on the CPU; bf16-autocast: plain torch.autocast with the default SDPA kernels)",
    )
    ap.add_argument("--quality", type=int, metavar="STEPS", help="also compare validation loss after STEPS real steps")
    ap.add_argument("--quality-d", type=int, default=64, help="model width D of the --quality runs")
    ap.add_argument("--matmul-n", type=int, help="size of the bf16 matmul that sets MFU's rate (default 8192 on CUDA)")
    ap.add_argument("--compile-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.flops = []  # model FLOPs of each timed round's batch
    if args.matmul_n is None:
        args.matmul_n = 8192 if args.device.startswith("cuda") else (256 if args.quick else 1024)
    if args.quick:
        args.batch_size, args.d, args.heads, args.layers, args.ffn, args.vocab = 8, 32, 2, 1, 64, 200
        args.min_len, args.max_len, args.steps, args.warmup, args.num_batches = 4, 8, 3, 1, 2
    if args.min_len < 1 or args.max_len < args.min_len:
        raise SystemExit(f"need 1 <= --min-len <= --max-len, got {args.min_len} and {args.max_len}")
    if args.steps < 1 or args.warmup < 1:
        raise SystemExit("--steps and --warmup must be >= 1 (the first step of a model is never timed)")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device} asked for, but CUDA is not available; use --device cpu")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)  # a benchmark knob; the library never sets it
    if args.compile_child:
        return compile_child(args)
    ours = ["attnlab"] + [f"attnlab {p}" for p in args.precision.split(",") if p and p != "fp32"]
    names = (
        ours
        + (["attnlab before"] if args.before else [])
        + (["attnlab nn.Dropout"] if args.plain_dropout else [])
        + ["nn.Transformer"]
        + ([] if args.no_book else ["book (d2l)"])
    )
    print(f"command: python benchmarks/training/train_throughput.py {shlex.join(argv)}".rstrip())
    print(
        f"torch {torch.__version__}, device {args.device}, threads {torch.get_num_threads()}, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs"
    )
    feats = sorted(f for f in cpu_features() if f.startswith(("avx", "amx", "fma")))
    auto = resolve_precision("auto", args.device, training=True)
    print(f"CPU features: {' '.join(feats)}; training precision auto -> {auto.picked} ({auto.reason})")
    print(
        f"\n## Transformer training step (forward + backward + Adam), B={args.batch_size}, "
        f"S,T in [{args.min_len}, {args.max_len}] padded, D={args.d}, H={args.heads}, layers={args.layers}, "
        f"FFN={args.ffn}, V={args.vocab}, dropout={args.dropout}, {'bf16 autocast' if args.amp else 'float32'}, "
        f"median of {args.steps} interleaved rounds after {args.warmup} warm-up\n"
    )
    times, tokens, _ = measure(args, names)
    peak = matmul_rate(torch.device(args.device), args.matmul_n)
    print(report(times, tokens, flops=args.flops, peak=peak))
    print()
    print(
        f"dense bf16 matmul ({args.matmul_n}^3): {peak / 1e12:.2f} TFLOP/s; MFU = model FLOPs (6 x matmul parameters "
        f"x real tokens + attention, attnlab.training.flops) per second over it"
    )
    for name in names:
        print(f"MFU: {name} {100 * mfu(args.flops, times[name], peak):.1f} %")
    for mine in ours[1:]:  # each precision against fp32 attnlab, paired per round
        ratio = statistics.median(f / t for t, f in zip(times[mine], times["attnlab"]))
        print(f"ratio: {mine} / attnlab (fp32) = {ratio:.2f}x target tokens/s")
    for mine in ours:
        for name in names:
            if name not in ours:
                ratio = statistics.median(t / o for t, o in zip(times[name], times[mine]))
                print(f"ratio: {mine} / {name} = {ratio:.2f}x target tokens/s")
    if args.quality:
        trained = [p for p in args.precision.split(",") if p in TRAIN_PRECISIONS and p != "fp32"]
        print(quality(args.quality, ["fp32", *trained], args.quality_d))
    compiled = None
    if args.compile:
        compiled = run_compile(args, [a for a in argv if a != "--compile"])
        print(compiled)
    if args.profile:
        for name in ("attnlab", "nn.Transformer"):
            print(f"\n## torch.profiler: {name}, 3 steps, top operators by self time\n")
            print(profile(args, name))
    figures = {
        "dense bf16 matmul TFLOP/s": round(peak / 1e12, 2),
        **{f"MFU {n}": f"{100 * mfu(args.flops, times[n], peak):.1f} %" for n in names},
    }
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    write_result(__file__, argv, main=0, device=device, mfu=figures, **({"compile": compiled} if compiled else {}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
