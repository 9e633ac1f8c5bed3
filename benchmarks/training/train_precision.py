"""Where a training step's time goes, per precision: forward, backward and optimizer, op by op.

The `laptop` preset's model (D=192, FFN 384, 2+2 layers, 4 heads, shared embeddings and output, dropout 0)
on synthetic batches of ~1,000 target tokens (B=80, lengths 8-18), stepped as the Trainer steps it:
  fp32            the model itself, fused Adam
  bf16            attnlab's CPU bf16 step: a bf16 compute copy refreshed from the fp32 masters, SDPA's math
                  path, bf16 gradients copied to the masters, fused Adam in fp32 (attnlab.training.mixed)
  bf16-autocast   torch.autocast(cpu, bfloat16) around the forward with the default SDPA kernels
Per phase: the median wall time over interleaved steps (the precisions alternate, so load hits them alike),
then torch.profiler's top operators by self time within that phase (3 profiled steps, ms per step).
"forward" includes the fp32 loss; "optimizer" includes the bf16 copy's refresh and the gradient copy.

    flock /tmp/attnlab-measure.lock python benchmarks/training/train_precision.py --threads 1,2
    python benchmarks/training/train_precision.py --attention           # + one SDPA call, forward/backward, per kernel
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import table, write_result
from train_throughput import make_batches, masked_loss

from attnlab.inference.precision import bf16_attention, cpu_features
from attnlab.models import Transformer, TransformerConfig
from attnlab.training.mixed import Bf16Compute
from attnlab.training.presets import get_preset

PHASES = ("forward", "backward", "optimizer")


class Stepper:
    """One precision's model, optimizer and step, split into phases (each a method)."""

    def __init__(self, precision: str, config: TransformerConfig):
        torch.manual_seed(0)
        self.precision = precision
        self.master = Transformer(config).train()
        self.opt = torch.optim.Adam(self.master.parameters(), lr=1e-4, fused=True)
        self.mixed = Bf16Compute(self.master) if precision == "bf16" else None
        self.loss: torch.Tensor | None = None

    def forward(self, batch) -> None:
        src, src_lens, tgt_in, tgt_out, tgt_lens = batch
        self.opt.zero_grad(set_to_none=True)
        model = self.master
        if self.mixed is not None:
            self.mixed.refresh()
            model = self.mixed.model
        real = torch.arange(tgt_in.shape[1])[None] < tgt_lens[:, None]
        if self.precision == "bf16":
            ctx = bf16_attention("cpu")
        else:
            ctx = torch.autocast("cpu", torch.bfloat16, enabled=self.precision == "bf16-autocast")
        with ctx:
            logits = model(src, tgt_in, src_lens, targets_mask=real)
        self.loss = masked_loss(logits, tgt_out, tgt_lens)

    def backward(self, batch) -> None:
        assert self.loss is not None
        self.loss.backward()

    def optimizer(self, batch) -> None:
        if self.mixed is not None:
            self.mixed.grads_to_masters()
        self.opt.step()


def phase_times(steppers: dict, batches, steps: int) -> dict:
    """{precision: {phase: [seconds]}}, precisions alternating step by step (after one warm-up step)."""
    times = {p: {ph: [] for ph in PHASES} for p in steppers}
    names = list(steppers)
    for r in range(steps + 1):
        batch = batches[r % len(batches)]
        for p in names[r % len(names) :] + names[: r % len(names)]:
            for ph in PHASES:
                t0 = time.perf_counter()
                getattr(steppers[p], ph)(batch)
                if r:
                    times[p][ph].append(time.perf_counter() - t0)
    return times


def phase_profile(stepper: Stepper, batch, steps: int = 3) -> dict:
    """{phase: Counter(op name -> self CPU ms per step)} from torch.profiler, by each op's start time."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            for ph in PHASES:
                with record_function(f"PHASE {ph}"):
                    getattr(stepper, ph)(batch)
    events = prof.events()
    spans = [(e.name.removeprefix("PHASE "), e.time_range) for e in events if e.name.startswith("PHASE ")]
    out: dict = {ph: collections.Counter() for ph in PHASES}
    for e in events:
        if e.name.startswith("PHASE "):
            continue
        for ph, span in spans:
            if span.start <= e.time_range.start < span.end:
                out[ph][e.name] += e.self_cpu_time_total / 1e3 / steps
                break
    return out


def attention_kernels(threads: int, repeats: int = 20) -> str:
    """One self-attention SDPA call at the profiled shapes (B=80, H=4, L=18, Dh=48), per kernel and dtype."""
    torch.set_num_threads(threads)
    B, H, L, Dh = 80, 4, 18, 48
    rows = []
    for label, dtype, backend in (
        ("fp32, default (flash)", torch.float32, None),
        ("bf16, default (flash)", torch.bfloat16, None),
        ("fp32, math", torch.float32, SDPBackend.MATH),
        ("bf16, math", torch.bfloat16, SDPBackend.MATH),
    ):
        q, k, v = (torch.randn(B, H, L, Dh, dtype=dtype, requires_grad=True) for _ in range(3))
        grad = torch.randn(B, H, L, Dh, dtype=dtype)
        fwd, bwd = [], []
        for i in range(repeats + 3):
            with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
                t0 = time.perf_counter()
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                t1 = time.perf_counter()
                out.backward(grad)
                t2 = time.perf_counter()
            if i >= 3:
                fwd.append(t1 - t0)
                bwd.append(t2 - t1)
        rows.append([label, f"{statistics.median(fwd) * 1e3:.2f} ms", f"{statistics.median(bwd) * 1e3:.2f} ms"])
    head = f"\n## one causal SDPA call, (B, H, L, Dh) = ({B}, {H}, {L}, {Dh}), {threads} thread(s)\n\n"
    return head + table(["dtype, kernel", "forward", "backward"], rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    ap.add_argument("--precision", default="fp32,bf16,bf16-autocast")
    ap.add_argument("--batch-size", type=int, default=80)
    ap.add_argument("--min-len", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=18)
    ap.add_argument("--steps", type=int, default=6, help="timed steps per precision (interleaved)")
    ap.add_argument("--rows", type=int, default=8, help="operators shown per phase")
    ap.add_argument("--attention", action="store_true", help="also time one SDPA call per kernel")
    args = ap.parse_args(argv)
    config = TransformerConfig(src_vocab_size=4000, tgt_vocab_size=4000, **get_preset("transformer", "laptop")["model"])
    batches = make_batches(4, args.batch_size, args.min_len, args.max_len, 4000, 4000)
    tokens = statistics.median(int(b[4].sum()) for b in batches)
    feats = sorted(f for f in cpu_features() if f.startswith(("avx512f", "avx512_bf16", "avx512_vnni", "amx")))
    print(f"command: python benchmarks/training/train_precision.py {' '.join(sys.argv[1:] if argv is None else argv)}")
    print(f"torch {torch.__version__}; CPU features {' '.join(feats) or '(none of avx512f/bf16/vnni/amx)'}")
    precisions = args.precision.split(",")
    every = []  # one row per (threads, precision): the record's figures
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        print(f"\n# {threads} thread(s), load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"laptop-sized Transformer, B={args.batch_size}, ~{tokens:.0f} target tokens per batch\n")
        steppers = {p: Stepper(p, config) for p in precisions}
        times = phase_times(steppers, batches, args.steps)
        med = {p: {ph: statistics.median(times[p][ph]) * 1e3 for ph in PHASES} for p in precisions}
        step = {p: statistics.median(sum(x) for x in zip(*(times[p][ph] for ph in PHASES))) * 1e3 for p in precisions}
        base = step[precisions[0]]
        rows = [
            [p, *(f"{med[p][ph]:.1f}" for ph in PHASES), f"{step[p]:.1f}", f"{base / step[p]:.2f}x"] for p in precisions
        ]
        heads = ["precision", "forward ms", "backward ms", "optimizer ms", "step ms", "speed vs first"]
        print(table(heads, rows))
        every += [{"threads": threads, **dict(zip(heads, r))} for r in rows]
        for p in precisions:
            prof = phase_profile(steppers[p], batches[0])
            for ph in PHASES:
                top = ", ".join(f"{n.removeprefix('aten::')} {ms:.1f}" for n, ms in prof[ph].most_common(args.rows))
                print(f"  {p} {ph} (self ms/step): {top}")
        if args.attention:
            print(attention_kernels(threads))
    write_result(__file__, argv, figures=every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
