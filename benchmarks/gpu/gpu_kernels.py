"""Attention kernel rates as a fraction of this machine's own dense matmul rate (bf16 on CUDA).

First the dense bf16 matmul rate (N x N x N, TFLOP/s) is measured; then attention forward at several
sequence lengths L with B * L fixed, H heads of head dim Dh, in TFLOP/s and as % of that matmul rate:
  - raw `F.scaled_dot_product_attention` forced onto the flash backend (the baseline),
  - attnlab's `MultiHeadAttention._fused` (the kernel path the module takes; q, k, v already split),
  - the whole attnlab `MultiHeadAttention` forward under bf16 autocast (projections counted in the FLOPs),
    with no mask and with per-sentence `valid_lens` (one padded sentence; a boolean mask reaches SDPA).
Then masked attention through each backend of `attnlab.attention.masked_attention`, forward and forward +
backward, beside unmasked SDPA on its flash backend: a padded batch (`valid_lens`, one sentence half padded)
by SDPA with the bool mask, FlexAttention (compiled, a block mask from the lengths), attnlab's Triton kernel
and varlen (SDPA on nested jagged tensors, the valid keys packed, no mask); causal self-attention by SDPA's
causal flash kernel, FlexAttention and the Triton kernel (varlen has no causal form). The fastest of each
(mask, direction) is printed as the `CUDA_BACKEND` table `attnlab.attention.backends` takes.
Attention FLOPs: 4 * B * H * L^2 * Dh (QK^T and PV; half of it causal; padded keys counted), forward + backward
3.5x that; projections: 4 * 2 * B * L * D^2. Cases that would start after --budget seconds are skipped.

    python benchmarks/gpu/gpu_kernels.py            # on a CUDA machine (an H200: about a minute and a half)
    python benchmarks/gpu/gpu_kernels.py --smoke    # tiny float32 sizes on CPU (the Triton kernel interpreted):
                                                # checks the code runs; its record goes to a scratch folder
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import table, write_result

from attnlab.attention import MultiHeadAttention, masked_attention
from attnlab.attention.backends import BACKENDS
from attnlab.kernels.flash import available as triton_available

# (row name, backend, mask): the masked-attention cases, each timed forward and forward + backward
MASKED = [
    ("SDPA flash, no mask", "sdpa", None),
    ("SDPA + bool mask", "sdpa", "valid_lens"),
    ("FlexAttention", "flex", "valid_lens"),
    ("attnlab Triton flash", "flash", "valid_lens"),
    ("varlen (nested jagged SDPA)", "varlen", "valid_lens"),
    ("SDPA causal (flash)", "sdpa", "causal"),
    ("FlexAttention causal", "flex", "causal"),
    ("attnlab Triton flash causal", "flash", "causal"),
]


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


def masked_rows(lengths, tokens, H, Dh, dtype, device, repeats, peak, deadline):
    """Time every MASKED case at each length, forward and forward + backward; rows, {(mask, grad): {backend:
    [rates]}} for the cases that ran. FlexAttention goes last at every length: its compilations (one per shape
    and mask) may take the rest of --budget, never the other backends' figures."""
    rows: dict[tuple[int, int, bool], list] = {}
    rates: dict[tuple[str, bool], dict[str, list[float]]] = {}
    for flex in (False, True):
        for L in lengths:
            B = max(1, tokens // L)
            torch.manual_seed(0)
            q, k, v = (torch.randn(B, H, L, Dh, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
            grad = torch.randn_like(q)
            lens = torch.full((B,), L, device=device)
            lens[0] = L // 2
            for i, (name, backend, mask) in enumerate(MASKED):
                if (backend == "flex") != flex:
                    continue
                for train in (False, True):
                    flops = 4 * B * H * L * L * Dh * (0.5 if mask == "causal" else 1.0) * (3.5 if train else 1.0)
                    cells = [L, B, name, "forward + backward" if train else "forward"]
                    rows[L, i, train] = cells + _masked_cell(
                        q, k, v, grad, lens, backend, mask, train, device, repeats, peak, flops, deadline, rates
                    )
            del q, k, v, grad
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return [rows[key] for key in sorted(rows)], rates


def _masked_cell(q, k, v, grad, lens, backend, mask, train, device, repeats, peak, flops, deadline, rates) -> list:
    """[TFLOP/s, % of the matmul rate] of one case, or [why it did not run, ""]; its rate goes into `rates`."""
    why = _cannot_run(backend, train, device, time.perf_counter() > deadline)
    if why:
        return [why, ""]
    fn = _masked_case(q, k, v, grad, lens, backend, mask, train, device)
    try:
        t = timeit(fn, device, repeats, warmup=2 if device.type == "cuda" else 0)  # the first calls compile
    except Exception as exc:  # noqa: BLE001 - one failing kernel must not cost the run's other figures
        return [f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}", ""]
    rate = flops / t / 1e12
    if mask is not None:
        rates.setdefault((mask, train), {}).setdefault(backend, []).append(rate)
    return [f"{rate:.3g}", f"{100 * rate / peak:.0f}%"]


def _cannot_run(backend, train, device, late) -> str:
    if late:
        return "skipped: past --budget"
    if backend == "flash" and not triton_available():
        return "n/a: no triton (pip install 'attnlab[kernels]')"
    if backend == "flex" and train and device.type != "cuda":
        return "n/a: FlexAttention has no CPU backward"
    return ""


def _masked_case(q, k, v, grad, lens, backend, mask, train, device):
    if not train:
        q, k, v = q.detach(), k.detach(), v.detach()  # inference: no autograd (eager FlexAttention refuses it on CPU)
    if mask is None:  # the baseline: unmasked SDPA on its flash kernel

        def attend():
            with flash_only(device):
                return F.scaled_dot_product_attention(q, k, v)
    else:
        attend = lambda: masked_attention(
            q, k, v, lens if mask == "valid_lens" else None, mask == "causal", backend=backend
        )
    if not train:
        return attend
    return lambda: torch.autograd.grad(attend(), (q, k, v), grad)


def fastest(rates) -> dict[str, str]:
    """(mask, autograd) -> the backend with the highest mean rate over the lengths that ran, as CUDA_BACKEND keys."""
    return {f"{mask}, {'train' if train else 'inference'}": max(by, key=lambda b: statistics.mean(by[b]))
            for (mask, train), by in sorted(rates.items())}  # fmt: skip


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny float32 sizes (runs on CPU)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--budget", type=float, default=65.0, help="start no masked case after this many seconds")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda asked for, but CUDA is not available; use --smoke on CPU")
    if args.smoke:
        dtype, n, lengths, tokens, H, Dh, repeats = torch.float32, 256, [64, 128], 256, 2, 16, 3
        masked_lengths, masked_tokens = [20], 40  # the Triton kernel runs interpreted: tiny, and timed once
    else:
        masked_lengths, masked_tokens = [1024, 4096, 16384], 32768  # timed 5 times each, to fit gpu.sh's minutes
        dtype, n, lengths, tokens, H, Dh, repeats = (
            torch.bfloat16,
            8192,
            [1024, 4096, 16384],
            32768,
            args.heads,
            args.head_dim,
            10,
        )
    print(f"command: python benchmarks/gpu/gpu_kernels.py {shlex.join(argv)}".rstrip())
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
    print(f"\n## Masked attention backends, H={H}, head dim {Dh}, {str(dtype).removeprefix('torch.')}\n")
    masked, masked_rates = masked_rows(
        masked_lengths, masked_tokens, H, Dh, dtype, device, 1 if args.smoke else 5, peak, start + args.budget
    )
    print(table(["L", "B", "path", "pass", "TFLOP/s", "% of matmul"], masked, caption="masked attention backends"))
    best = fastest(masked_rates)
    print()
    for case, backend in best.items():
        print(f"fastest: {case}: {backend}")
    table_line = ", ".join(f'("{c.split(", ")[0]}", {c.endswith("train")}): "{b}"' for c, b in best.items())
    print(f"CUDA_BACKEND = {{{table_line}}}  (attnlab/attention/backends.py; {', '.join(BACKENDS)})")
    if args.smoke and not os.environ.get("ATTNLAB_RESULTS"):
        os.environ["ATTNLAB_RESULTS"] = tempfile.mkdtemp(prefix="attnlab-gpu-kernels-smoke-")  # never results/
    if device.type != "cuda" and not args.smoke:
        print("not recorded: benchmarks/results/gpu_kernels.json holds GPU figures only")
        return 0
    write_result(__file__, argv, main=0, fastest=best)
    return 0


if __name__ == "__main__":
    sys.exit(main())
