"""Multi-head self-attention, forward + backward, float32 on CPU.

Compares attnlab's MultiHeadAttention (fused SDPA path) with two baselines measured in the same run:
  (a) the book's formulation (benchmarks/baselines/d2l_attention.py: bmm + -1e6 masked softmax + bmm),
  (b) a minimal reference: the same four projections around one direct F.scaled_dot_product_attention call.
Then peak memory (RSS growth of a fresh subprocess) of the fused path and of local attention up to L=16,384.

    python benchmarks/kernels/attention.py            # the full run recorded in BENCHMARKS.md
    python benchmarks/kernels/attention.py --quick    # a smoke run
"""

import argparse
import os
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from baselines.d2l_attention import MultiHeadAttention as BookMHA
from common import median_time, table, write_result

from attnlab.attention import MultiHeadAttention


class SDPAReference(nn.Module):
    """Baseline (b): nothing but projections, head reshapes and one SDPA call."""

    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d, d, bias=False) for _ in range(4))

    def forward(self, x, key_padding=None):
        B, L, D = x.shape
        split = lambda t: t.view(B, L, self.h, D // self.h).transpose(1, 2)
        o = F.scaled_dot_product_attention(
            split(self.W_q(x)), split(self.W_k(x)), split(self.W_v(x)), attn_mask=key_padding
        )
        return self.W_o(o.transpose(1, 2).reshape(B, L, D))


def bench_speed(lengths, B=4, H=8, Dh=64, repeats=3):
    D = H * Dh
    rows = []
    for L in lengths:
        torch.manual_seed(0)
        ours, book, ref = MultiHeadAttention(D, H), BookMHA(D, H), SDPAReference(D, H)
        book.load_state_dict(ours.state_dict())
        ref.load_state_dict(ours.state_dict())
        x = torch.randn(B, L, D, requires_grad=True)
        lens = torch.full((B,), L)
        lens[0] = L // 2  # one padded sentence so every path masks
        mask = (torch.arange(L)[None] < lens[:, None])[:, None, None, :]

        def step(fn):
            return lambda: fn().sum().backward()

        fns = {
            "ours": step(lambda: ours(x, x, x, valid_lens=lens)),
            "ref": step(lambda: ref(x, mask)),
            "book": step(lambda: book(x, x, x, lens)),
        }
        for fn in fns.values():  # warm up every path once
            fn()
        # Interleaved rounds, median of per-round ratios: a burst of load hits all three paths alike.
        rounds = [{k: median_time(fn, repeats=1, warmup=0) for k, fn in fns.items()} for _ in range(repeats)]
        t_ours = statistics.median(r["ours"] for r in rounds)
        t_book = t_ours * statistics.median(r["book"] / r["ours"] for r in rounds)
        t_ref = t_ours / statistics.median(r["ours"] / r["ref"] for r in rounds)
        rows.append([L, f"{t_book / t_ours:.2f}x", f"{t_ours / t_ref:.3f}", f"{t_ours * 1e3:.0f} ms"])
    return table(["L", "speed-up vs book (a)", "time / SDPA reference (b)", "attnlab time (noise)"], rows)


def _peak_child(kind: str, L: int, B: int, H: int, Dh: int, window: int) -> float:
    """Run one forward+backward in a fresh process; return its peak RSS growth in MB.

    kind: "full" (fused SDPA), "local" (blockwise sliding window, causal) or "band" (the same window as a
    dense L x L boolean mask: what local attention costs without the blockwise path).
    """
    code = f"""
import torch
from attnlab.attention import MultiHeadAttention, window_mask
torch.manual_seed(0)
D = {H * Dh}
m = MultiHeadAttention(D, {H}, window={window} if "{kind}" == "local" else None, block_size=256)
x = torch.randn({B}, {L}, D, requires_grad=True)
mask = window_mask({L}, {L}, {window}, causal=True) if "{kind}" == "band" else None
def status(field):  # kB -> MB, from /proc/self/status
    line = next(l for l in open("/proc/self/status") if l.startswith(field))
    return int(line.split()[1]) / 1024
open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM): it survives fork+exec otherwise
base = status("VmRSS")
m(x, x, x, mask=mask, causal="{kind}" == "local").sum().backward()
print(status("VmHWM") - base)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def bench_memory(lengths, B=1, H=4, Dh=64, window=128, band_max=8192):
    rows = []
    for L in lengths:
        full = _peak_child("full", L, B, H, Dh, window)
        local = _peak_child("local", L, B, H, Dh, window)
        band = f"{_peak_child('band', L, B, H, Dh, window):.0f}" if band_max >= L else "(skipped: quadratic)"
        rows.append([L, f"{full:.0f}", f"{local:.0f}", band, f"{local / L * 1024:.1f}"])
    return table(
        [
            "L",
            "full (fused SDPA) MB",
            f"local w={window} blockwise MB",
            "same window as dense mask MB",
            "local MB per 1k positions",
        ],
        rows,
        caption="Peak memory: resident-set growth of a fresh process over one forward + backward, B 1, H 4, Dh 64",
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    args = ap.parse_args()
    speed_L = [64, 128] if args.quick else [256, 1024, 4096]
    mem_L = [256] if args.quick else [1024, 2048, 4096, 8192, 16384]
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    print("\n## Peak memory, forward+backward (B=1, H=4, head dim 64)\n")
    print(bench_memory(mem_L))
    print("\n## Multi-head self-attention forward+backward (B=4, H=8, head dim 64, float32, CPU)\n")
    print(bench_speed(speed_L, repeats=3))
    write_result(__file__)


if __name__ == "__main__":
    main()
