"""Fused QKV projection and head pruning, measured on CPU.

1. One self-attention layer forward + backward: Q, K, V from one matmul (`queries is keys is values`,
   today's path) against three matmuls (the same layer called with `keys`/`values` as other views of the
   same tensor, which takes the separate-projection path). Same weights, same inputs, interleaved rounds.
2. A Transformer with half of every attention module's heads pruned against the full one: a
   teacher-forced forward and greedy decoding of the same random batch.

    flock /tmp/attnlab-measure.lock python benchmarks/kernels/fused_qkv.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import print_machine, table, write_result

from attnlab.attention import MultiHeadAttention
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.models import Transformer, TransformerConfig


def interleaved(fns: dict, rounds: int) -> dict:
    times = {k: [] for k in fns}
    for fn in fns.values():
        fn()  # warm-up
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def bench_qkv(D, H, B, L, rounds):
    torch.manual_seed(0)
    m = MultiHeadAttention(D, H, bias=True)
    x = torch.randn(B, L, D, requires_grad=True)
    lens = torch.randint(L // 2, L + 1, (B,))

    def fused():
        m(x, x, x, valid_lens=lens).sum().backward()

    def separate():
        m(x, x.view_as(x), x.view_as(x), valid_lens=lens).sum().backward()

    t = interleaved({"three matmuls": separate, "fused QKV": fused}, rounds)
    return [
        f"self-attention fwd+bwd, D={D} H={H} B={B} L={L}",
        f"three Q/K/V matmuls {t['three matmuls'] * 1e3:.1f} ms",
        f"fused QKV {t['fused QKV'] * 1e3:.1f} ms",
        f"{t['three matmuls'] / t['fused QKV']:.2f}x",
    ]


@torch.no_grad()
def bench_pruned(rounds):
    torch.manual_seed(0)
    cfg = TransformerConfig(4000, 4000, num_hiddens=256, num_heads=8, num_layers=3, ffn_num_hiddens=1024, dropout=0.0)
    full = Transformer(cfg).eval()
    pruned = Transformer(TransformerConfig.from_dict(cfg.to_dict())).eval()
    pruned.load_state_dict(full.state_dict())
    pruned.prune_heads({name: [0, 2, 4, 6] for name, m in pruned.named_modules() if isinstance(m, MultiHeadAttention)})
    src, tgt = torch.randint(3, 4000, (64, 20)), torch.randint(3, 4000, (64, 20))
    lens = torch.full((64,), 20)
    fns = {}
    for name, model in (("full (8 heads)", full), ("pruned (4 heads)", pruned)):
        fns[name + " forward"] = lambda model=model: model(src, tgt, lens)
        fns[name + " greedy"] = lambda model=model: generate(
            model, src[:32], lens[:32], DecodeOptions(), bos=1, eos=2, max_len=20
        )
    t = interleaved(fns, rounds)
    rows = []
    for what, shape in (("forward", "forward 64x20"), ("greedy", "greedy 32 sentences")):
        a, b = t[f"full (8 heads) {what}"], t[f"pruned (4 heads) {what}"]
        rows.append([f"Transformer D=256 N=3, {shape}", f"8 heads {a * 1e3:.0f} ms", f"4 heads {b * 1e3:.0f} ms"])
        rows[-1].append(f"{a / b:.2f}x")
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print_machine()
    print(f"{args.threads} thread(s); load before: {os.getloadavg()}")
    rows = [bench_qkv(D, H, B, L, args.rounds) for D, H, B, L in ((256, 4, 32, 32), (512, 8, 32, 32), (256, 4, 8, 128))]
    rows += bench_pruned(max(args.rounds // 3, 3))
    print(table(["measurement", "baseline", "attnlab", "ratio"], rows))
    print(f"load after: {os.getloadavg()}")
    write_result(__file__)


if __name__ == "__main__":
    main()
