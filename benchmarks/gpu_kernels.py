"""Attention kernel rates as a fraction of this machine's own dense matmul rate (bf16 on CUDA).

First the dense bf16 matmul rate (N x N x N, TFLOP/s) is measured; then attention forward at several
sequence lengths L with B * L fixed, H heads of head dim Dh, in TFLOP/s and as % of that matmul rate:
  - raw `F.scaled_dot_product_attention` forced onto the flash backend (the baseline),
  - attnlab's `MultiHeadAttention._fused` (the kernel path the module takes; q, k, v already split),
  - the whole attnlab `MultiHeadAttention` forward under bf16 autocast (projections counted in the FLOPs),
    with no mask and with per-sentence `valid_lens` (one padded sentence; a boolean mask reaches SDPA).
Attention FLOPs: 4 * B * H * L^2 * Dh (QK^T and PV); projections: 4 * 2 * B * L * D^2.

    python benchmarks/gpu_kernels.py            # on a CUDA machine (an H200: about a minute)
    python benchmarks/gpu_kernels.py --smoke    # tiny float32 sizes on CPU: checks the code runs
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import table, write_result

from attnlab.attention import MultiHeadAttention


def timeit(fn, device, repeats, warmup=3) -> float:
    """Median seconds of fn(); CUDA events on the GPU (no host overhead counted between launches)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def matmul_rate(n, dtype, device, repeats) -> float:
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    t = timeit(lambda: a @ b, device, repeats)
    return 2 * n**3 / t / 1e12


def flash_only(device):
    if device.type != "cuda":
        return contextlib.nullcontext()  # CPU: let SDPA choose
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.FLASH_ATTENTION)


@torch.no_grad()
def attention_rows(lengths, tokens, H, Dh, dtype, device, repeats, peak):
    rows, rates = [], {}
    for L in lengths:
        # One function call per length: its tensors are freed on return, before the next length allocates.
        _length_rows(L, tokens, H, Dh, dtype, device, repeats, peak, rows, rates)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows, rates


def _length_rows(L, tokens, H, Dh, dtype, device, repeats, peak, rows, rates):
    """Time every case at sequence length L; append to `rows` and `rates`."""
    D = H * Dh
    B = max(1, tokens // L)
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, L, Dh, device=device, dtype=dtype) for _ in range(3))
    x = torch.randn(B, L, D, device=device, dtype=dtype)
    lens = torch.full((B,), L, device=device)
    lens[0] = L // 2
    mha = MultiHeadAttention(D, H).to(device).eval()
    attn = 4 * B * H * L * L * Dh
    proj = 4 * 2 * B * L * D * D
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=dtype == torch.bfloat16)

    def raw():
        with flash_only(device):
            return F.scaled_dot_product_attention(q, k, v)

    def fused():
        return mha._fused(q, k, v, None, None, False)

    def module(valid_lens=None):
        with autocast:
            return mha(x, x, x, valid_lens=valid_lens)

    cases = [
        ("raw SDPA (flash)", raw, attn),
        ("attnlab MHA._fused", fused, attn),
        ("attnlab MHA forward", module, attn + proj),
        ("attnlab MHA forward + valid_lens", lambda: module(lens), attn + proj),
    ]
    for name, fn, flops in cases:
        t = timeit(fn, device, repeats)
        rates[L, name] = rate = flops / t / 1e12
        rows.append([L, B, name, f"{rate:.3g}", f"{100 * rate / peak:.0f}%"])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny float32 sizes (runs on CPU)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=16)
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda asked for, but CUDA is not available; use --smoke on CPU")
    if args.smoke:
        dtype, n, lengths, tokens, H, Dh, repeats = torch.float32, 256, [64, 128], 256, 2, 16, 3
    else:
        dtype, n, lengths, tokens, H, Dh, repeats = (
            torch.bfloat16,
            8192,
            [1024, 4096, 16384],
            32768,
            args.heads,
            args.head_dim,
            10,
        )
    print(f"command: python benchmarks/gpu_kernels.py {shlex.join(argv)}".rstrip())
    print(
        f"torch {torch.__version__}, device {device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
    )
    peak = matmul_rate(n, dtype, device, repeats)
    print(
        f"\ndense {str(dtype).removeprefix('torch.')} matmul {n}x{n}x{n}: {peak:.3g} TFLOP/s "
        f"(measured here; the 100% below)\n"
    )
    print(f"## Attention forward, H={H}, head dim {Dh}, B*L={tokens}, {str(dtype).removeprefix('torch.')}\n")
    rows, rates = attention_rows(lengths, tokens, H, Dh, dtype, device, repeats, peak)
    print(table(["L", "B", "path", "TFLOP/s", "% of matmul"], rows))
    print()
    for L in lengths:
        raw, ours = rates[L, "raw SDPA (flash)"], rates[L, "attnlab MHA._fused"]
        print(
            f"ratio: L={L}: attnlab fused / raw SDPA flash = {ours / raw:.2f}; "
            f"attnlab fused = {100 * ours / peak:.0f}% of the matmul rate"
        )
    write_result(__file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
