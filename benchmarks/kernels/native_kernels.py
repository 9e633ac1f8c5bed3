"""attnlab's C kernels against the PyTorch operators they replace, at the `laptop` decoder's shapes.

    one query        a greedy step's self-attention: 1 query over Lk cached keys (strided cache views)
    one query, lens  a step's cross-attention: 1 query over the first lens[b] of Lk source keys
    one query, bf16  bf16 decoding's step (PyTorch: its three bf16 operators, `few_queries_attention`)
    encoder          a sentence's self-attention, Lq = Lk, key lengths per sentence (fp32, and bf16)
    add + LayerNorm  the post-norm residual LayerNorm(x + y) at M rows
    pick             greedy's choice from (B, V 4000) logits: arg-max, and with scores the log-probability

Each line: PyTorch's time (SDPA with the mask the model would build; `layer_norm(x + y)`; `pick`'s
block maxima and logsumexp), the C kernel's
(`attnlab.kernels.loader.off` switches it off), the ratio (median of paired ratios over interleaved rounds),
and the largest difference between the two outputs. The int8 linear layers' C passes are measured by
`precision_kernels.py` ("int8 _int_mm (row)" against "int8 (row), ops").

    flock /tmp/attnlab-measure.lock python benchmarks/kernels/native_kernels.py --rounds 7 [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import header, table, time_call, write_result

from attnlab.attention.masking import lengths_to_mask
from attnlab.kernels import loader as native
from attnlab.kernels.argmax import pick
from attnlab.kernels.few_queries import few_queries_attention, native_few_queries
from attnlab.kernels.layer_norm import add_layer_norm
from attnlab.kernels.loader import KERNELS

H, DH = 4, 48  # the laptop preset: D 192, 4 heads


def attention_cases(B: int):
    """(name, PyTorch fn, C fn) for the three attention shapes."""
    for Lk in (5, 10, 20, 30):
        cap = 64  # a self-attention cache buffer holds more steps than are filled
        k, v = torch.randn(B, H, cap, DH)[:, :, :Lk], torch.randn(B, H, cap, DH)[:, :, :Lk]
        q = torch.randn(B, 1, 3 * H * DH)[..., : H * DH].view(B, 1, H, DH).transpose(1, 2)
        yield (
            f"one query, B {B}, Lk {Lk}",
            (lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v)),
            (lambda q=q, k=k, v=v: native_few_queries(q, k, v)),
        )
        lens = torch.randint(max(1, Lk // 2), Lk + 1, (B,))
        visible = lengths_to_mask(lens, 1, Lk)  # (B, 1, 1, Lk)
        yield (
            f"one query, lens, B {B}, Lk {Lk}",
            (lambda q=q, k=k, v=v, m=visible: F.scaled_dot_product_attention(q, k, v, attn_mask=m)),
            (lambda q=q, k=k, v=v, lens=lens: native_few_queries(q, k, v, lens)),
        )
    for Lk in (10, 20):  # bf16 decoding: its cache in bf16; PyTorch's path is three bf16 ops (`few_queries_attention`)
        k, v = (torch.randn(B, H, 64, DH)[:, :, :Lk].bfloat16() for _ in range(2))
        q = torch.randn(B, H, 1, DH).bfloat16()
        yield (
            f"one query, bf16, B {B}, Lk {Lk}",
            (lambda q=q, k=k, v=v: few_queries_attention(q, k, v).float()),
            (lambda q=q, k=k, v=v: native_few_queries(q, k, v).float()),
        )
    for L, b in ((10, B), (20, B // 2), (40, B // 4), (64, B // 6)):  # up to 64 x 64 (beyond: SDPA)
        x = torch.randn(b, L, 3 * H * DH)
        q, k, v = (t.view(b, L, H, DH).transpose(1, 2) for t in x.split(H * DH, -1))
        lens = torch.randint(L // 2, L + 1, (b,))
        visible = lengths_to_mask(lens, L, L)
        yield (
            f"encoder, B {b}, L {L}",
            (lambda q=q, k=k, v=v, m=visible: F.scaled_dot_product_attention(q, k, v, attn_mask=m)),
            (lambda q=q, k=k, v=v, lens=lens: native_few_queries(q, k, v, lens)),
        )
        if L * L > 40 * 40:  # bf16's bound (`steps._MAX_QUERIES_KEYS`): SDPA's from there
            continue
        qb, kb, vb = q.bfloat16(), k.bfloat16(), v.bfloat16()
        yield (
            f"encoder, bf16, B {b}, L {L}",
            (lambda q=qb, k=kb, v=vb, m=visible: F.scaled_dot_product_attention(q, k, v, attn_mask=m).float()),
            (lambda q=qb, k=kb, v=vb, lens=lens: native_few_queries(q, k, v, lens).float()),
        )


def layer_norm_cases():
    ln = torch.nn.LayerNorm(H * DH)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    for M in (64, 256, 2560):
        x, y = torch.randn(M, 1, H * DH), torch.randn(M, 1, H * DH)
        yield f"add + LayerNorm, {M} rows", (lambda x=x, y=y: ln(x + y)), (lambda x=x, y=y: add_layer_norm(x, y, ln))


def pick_cases(B: int):
    for rows in (B // 4, B):
        logits = torch.randn(rows, 1, 4000)[:, -1]  # a decoding step's last-position logits
        for scores in (False, True):

            def on_ops(logits=logits, scores=scores):
                with native.off():
                    return pick(logits, scores)

            fast = lambda logits=logits, scores=scores: pick(logits, scores)
            name = f"pick{', scores' if scores else ''}, B {rows}"
            yield name, (lambda f=on_ops: _pick_value(f())), (lambda f=fast: _pick_value(f()))


def _pick_value(picked):
    """The chosen tokens (and log-probabilities) as one float tensor, to compare the two paths."""
    tokens, lp = picked
    return tokens.float() if lp is None else torch.cat([tokens.float(), lp])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=50, help="calls per timing")
    ap.add_argument("--batch", type=int, default=256, help="sentences in a decoding batch")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    header(argv)
    for lib in KERNELS:
        print(f"C kernel {lib}: {native.status(lib)}")
    torch.manual_seed(0)
    rows = []
    with torch.inference_mode():
        for name, ref, fast in [*attention_cases(args.batch), *layer_norm_cases(), *pick_cases(args.batch)]:
            got = fast()
            if got is None:
                raise SystemExit(f"{name}: the C kernel declined or is missing (its status is printed above)")
            diff = (got - ref()).abs().max().item()
            times: dict[str, list[float]] = {"torch": [], "c": []}
            for r in range(args.rounds):
                pair = [("torch", ref), ("c", fast)]
                for key, fn in pair if r % 2 == 0 else pair[::-1]:
                    times[key].append(time_call(fn, args.reps))
            ratio = statistics.median(a / b for a, b in zip(times["torch"], times["c"]))
            rows.append(
                [
                    name,
                    f"{statistics.median(times['torch']) * 1e6:.1f}",
                    f"{statistics.median(times['c']) * 1e6:.1f}",
                    f"{ratio:.2f}x",
                    f"{diff:.1e}",
                ]
            )
    print()
    print(table(["case", "PyTorch us", "C kernel us", "C vs PyTorch", "max |difference|"], rows))
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    write_result(__file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
