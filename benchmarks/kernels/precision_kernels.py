"""One linear layer at the decoder's shapes, per kernel: fp32, bf16, and the int8 candidates.

Rows 1..256 (sentences still decoding) x in-features 192/256/512 -> out-features 256/512/1024/V. Each
kernel includes what it costs to get there from an fp32 activation and back (quantizing the activation,
dequantizing the result); operands are ready (weights converted once). Time per call is the median over
interleaved rounds; ratios are medians of paired ratios against fp32 `F.linear` in the same round.

    fp32 packed         the weight reordered once for oneDNN (`attnlab.inference.packed`: what fp32 decoding runs)
    int8 dyn (tensor)   fbgemm dynamic quantization, per-tensor weight scale (`quantize_dynamic` default)
    int8 dyn (channel)  fbgemm dynamic quantization, per-output-channel weight scales
    int8 _int_mm (row)  attnlab.inference.quantize.Int8Linear: per-row activation scales, torch._int_mm (VNNI),
                        the activation quantized and the sums rescaled by attnlab's C passes (what int8 runs)
    int8 (row), ops     the same with PyTorch's operators for those two passes (`attnlab.kernels.loader.off`)
    bf16                F.linear on bf16 operands (activation cast included unless --bf16-resident)

    flock /tmp/attnlab-measure.lock python benchmarks/kernels/precision_kernels.py --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import header, table, time_call, write_result

from attnlab.inference.packed import can_pack, linear, pack_weight
from attnlab.inference.quantize import Int8Linear, fbgemm_linear
from attnlab.kernels import loader as native


def kernels(lin: nn.Linear, bf16_resident: bool) -> dict:
    w, b = lin.weight, lin.bias
    wb, bb = w.to(torch.bfloat16), b.to(torch.bfloat16)
    per_tensor = fbgemm_linear(lin, per_channel=False)
    per_channel = fbgemm_linear(lin, per_channel=True)
    ours = Int8Linear.from_float(lin)
    wp = pack_weight(w) if can_pack(w) else None

    def ours_on_ops(x):
        with native.off():
            return ours(x)

    out = {
        "fp32": lambda x: F.linear(x, w, b),
        "fp32 packed": lambda x: linear(x, w, b, wp),
        "bf16": (lambda x: F.linear(x, wb, bb)) if bf16_resident else (lambda x: F.linear(x.bfloat16(), wb, bb)),
        "int8 dyn (tensor)": per_tensor,
        "int8 dyn (channel)": per_channel,
        "int8 _int_mm (row)": ours,
        "int8 (row), ops": ours_on_ops,
    }
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,16,64,256")
    ap.add_argument("--shapes", default="192x192,192x384,384x192,192x4000,256x1024,512x512,512x4000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bf16-resident", action="store_true", help="bf16 input already (no cast in the timing)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    header(argv)
    torch.manual_seed(0)
    rows_out = []
    with torch.inference_mode():
        for shape in args.shapes.split(","):
            d_in, d_out = (int(v) for v in shape.split("x"))
            with torch.inference_mode(False):  # an inference-tensor weight could not be packed
                lin = nn.Linear(d_in, d_out)
                ks = kernels(lin, args.bf16_resident)
            for rows in (int(r) for r in args.rows.split(",")):
                x = torch.randn(rows, d_in)
                xin = {n: (x.bfloat16() if n == "bf16" and args.bf16_resident else x) for n in ks}
                reps = max(5, int(2e7 / (rows * d_in * d_out) + 1))
                for n, fn in ks.items():
                    fn(xin[n])
                times: dict[str, list[float]] = {n: [] for n in ks}
                for r in range(args.rounds):
                    names = list(ks)
                    for n in names[r % len(names) :] + names[: r % len(names)]:
                        times[n].append(time_call(ks[n], reps, xin[n]))
                cells = [f"{rows}x{d_in}->{d_out}", f"{statistics.median(times['fp32']) * 1e6:.1f}"]
                for n in list(ks)[1:]:
                    cells.append(f"{statistics.median(a / b for a, b in zip(times['fp32'], times[n])):.2f}x")
                rows_out.append(cells)
    print()
    print(table(["rows x in -> out", "fp32 us/call", *(f"{n} vs fp32" for n in list(ks)[1:])], rows_out))
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    write_result(__file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
