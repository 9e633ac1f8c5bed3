"""Decoding speed on CPU: cached greedy against two baselines, and beam search against greedy.

A small but non-trivial Transformer (D=256, 4 heads, 3+3 layers, FFN 1024, vocab 1000, untrained weights)
translates 64 source sentences of 20 tokens into exactly 20 output tokens (eos=-1 disables stopping, so
every method does the same number of steps; `--eos ID` makes that token end sentences instead, so
finished sentences leave the batch at different steps):

  greedy, cached     one new token per step through `decode_step` (KV cache, encoder run once)
  greedy, book       the book's way: encode once, then re-run the decoder on the whole prefix each step
  greedy, uncached   `model(src, prefix)` every step (re-encodes and re-runs the prefix: it also pays for
                     the encoder, so the cache's own speed-up is measured against the book's way)
  beam 4             the generator's beam search: self-attention caches expanded once to 64 * 4 rows and reordered
                     each step; encoder memory and cross-attention keys/values stay at 64 rows
  floors             not decoders: every matrix product (and, in the others, every attention kernel) that
                     beam 4 (or greedy) ran, captured once with its shapes and replayed back to back on
                     ready operands, nothing else: a method cannot cost less than this with these kernels

Methods are timed in interleaved rounds (one run of each per round, medians over rounds), so a change
of machine load during the run hits every method alike; the ratios are the result.

    python benchmarks/decoding/decode.py [--threads N] [--rounds 5] [--eos ID] [--device cuda] [--unpacked]

The model is prepared as `load_translator` prepares it (`prepare_for_inference(model, "fp32")`: on the CPU its
linear layers packed for oneDNN); --unpacked leaves them as F.linear.
"""

import argparse
import contextlib
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import print_machine, table, write_result

from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.inference.precision import prepare_for_inference
from attnlab.kernels import loader as native
from attnlab.models import Transformer, TransformerConfig
from attnlab.utils.runtime import intra_op_threads


def search(model, src, lens, bos, eos, T, beam=1):
    """The generator's outputs (greedy, or beam search as `Translator` runs it)."""
    out = generate(model, src, lens, DecodeOptions(beam=beam), bos=bos, eos=eos, max_len=T)
    return [hs[0].tokens for hs in out]


def uncached_greedy(model, src, lens, bos, eos, T):
    """`model(src, prefix)` every step: the encoder and the whole prefix again (each cut at its first <eos>)."""
    with torch.no_grad():
        model.eval()
        prefix = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        for _ in range(T):
            prefix = torch.cat([prefix, model(src, prefix, lens)[:, -1].argmax(-1, keepdim=True)], dim=1)
            if bool((prefix[:, 1:] == eos).any(dim=1).all()):
                break
    rows = prefix[:, 1:].tolist()
    return [r[: r.index(eos)] if eos in r else r for r in rows]


def book_greedy(model, src, lens, bos, eos, T):
    """The book's predict_seq2seq, batched: the encoder runs once, the decoder re-reads the prefix
    (until every sentence has produced <eos>; each is cut at its first)."""
    with torch.no_grad():
        model.eval()
        memory = model.encoder(src, lens)
        prefix = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        for _ in range(T):
            logits = model.decoder(prefix, memory, lens)
            prefix = torch.cat([prefix, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            if bool((prefix[:, 1:] == eos).any(dim=1).all()):
                break
    rows = prefix[:, 1:].tolist()
    return [r[: r.index(eos)] if eos in r else r for r in rows]


# Under torch.inference_mode (greedy decoding) composite ops such as linear and SDPA reach a dispatch mode
# whole; otherwise they arrive decomposed (addmm, the SDPA backend). Each call is seen once either way.
_aten = torch.ops.aten
# mkldnn::_linear_pointwise: fp32 linear layers on packed weights (attnlab.inference.packed, CPU decoding).
PACKED_LINEAR = (
    {torch.ops.mkldnn._linear_pointwise.default} if hasattr(torch.ops.mkldnn, "_linear_pointwise") else set()
)
MATMULS = {
    _aten.addmm.default,
    _aten.mm.default,
    _aten.bmm.default,
    _aten.linear.default,
    _aten.matmul.default,
} | PACKED_LINEAR
ATTENTION = {
    getattr(torch.ops.aten, name).default
    for name in (
        "scaled_dot_product_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    )
    if hasattr(torch.ops.aten, name)
}


class _Kernels(TorchDispatchMode):
    """Records every call of the given aten ops run under it: the op, and its arguments with each tensor
    replaced by its (shape, dtype)."""

    def __init__(self, ops):
        super().__init__()
        self.ops, self.calls = ops, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.ops:
            self.calls.append((func, [_spec(a) for a in args], {k: _spec(v) for k, v in kwargs.items()}))
        return func(*args, **kwargs)


def _spec(a):
    """A tensor argument as ("tensor", shape, dtype); anything else, and a weight in oneDNN's opaque
    packed layout (which no random tensor can stand for), as itself."""
    if isinstance(a, torch.Tensor) and a.layout != torch._mkldnn:
        return ("tensor", tuple(a.shape), a.dtype)
    return a


def kernel_floor(fn, ops, device):
    """A function that replays the calls of `ops` (aten ops, e.g. MATMULS) that `fn` makes, with the same
    shapes, operands allocated once per shape, nothing in between; and the number of calls. Timed, it
    is what `fn` cannot cost less than with those kernels on this machine."""
    return replay_kernels(capture_kernels(fn, ops), device)


def capture_kernels(fn, ops) -> list:
    """The calls of `ops` that `fn` makes, in order: (op, args, kwargs), tensors as ("tensor", shape,
    dtype). Capture once, then replay subsets (`replay_kernels` of the calls whose op is in a smaller set).
    With ATTENTION among `ops` the capture runs with attnlab's C kernels off (no dispatch mode sees a C
    call): the attention floor is PyTorch's kernels, which the C few-queries kernel beats."""
    with native.off() if ops & ATTENTION else contextlib.nullcontext(), _Kernels(ops) as rec:
        fn()
    return rec.calls


def replay_kernels(captured: list, device):
    """`kernel_floor`'s replay (and call count) for calls already captured by `capture_kernels`."""
    operands: dict[tuple, torch.Tensor] = {}

    def value(a):
        if not (isinstance(a, tuple) and a[:1] == ("tensor",)):
            return a
        if a not in operands:
            _, shape, dtype = a
            operands[a] = (
                torch.randn(shape, device=device, dtype=dtype)
                if dtype.is_floating_point
                else torch.ones(shape, device=device, dtype=dtype)  # masks: everything visible
            )
        return operands[a]

    calls = [(func, [value(a) for a in args], {k: value(v) for k, v in kw.items()}) for func, args, kw in captured]

    def run(part):
        with torch.inference_mode():
            for func, args, kw in part:
                func(*args, **kw)

    def replay(workers: int = 1):
        """workers > 1: the calls cut into `workers` equal runs, each on its own thread with one intra-op
        thread (as `Translator.decode(workers=K)` runs its batches, but perfectly balanced)."""
        if workers == 1:
            run(calls)
        else:
            parts = [calls[i::workers] for i in range(workers)]
            with intra_op_threads(1), ThreadPoolExecutor(workers) as pool:
                list(pool.map(run, parts))
        if device.type == "cuda":
            torch.cuda.synchronize()

    return replay, len(calls)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sentences", type=int, default=64)
    p.add_argument("--src-len", type=int, default=20)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--eos", type=int, default=-1, help="token id that ends a sentence (default -1: none)")
    p.add_argument("--skip-uncached", action="store_true", help="leave out the slowest baseline (re-encoding)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--unpacked", action="store_true", help="fp32 linear layers as F.linear, not packed for oneDNN")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("decode.py: --device cuda but torch sees no CUDA device; run without --device")
    torch.manual_seed(0)
    cfg = TransformerConfig(1000, 1000, num_hiddens=256, num_heads=4, num_layers=3, ffn_num_hiddens=1024, dropout=0.1)
    model = Transformer(cfg).to(device)
    if not args.unpacked:  # as `Translator` decodes: fp32 linear layers packed for oneDNN on the CPU
        model = prepare_for_inference(model, "fp32", device)
    src = torch.randint(3, 1000, (args.sentences, args.src_len), device=device)
    lens = torch.full((args.sentences,), args.src_len, device=device)
    bos, eos, T = 1, args.eos, args.steps

    methods = {
        "greedy, cached": lambda: search(model, src, lens, bos, eos, T),
        "greedy, book (encode once, re-run prefix)": lambda: book_greedy(model, src, lens, bos, eos, T),
        "greedy, uncached (re-encodes every step)": lambda: uncached_greedy(model, src, lens, bos, eos, T),
        "beam 4, cached": lambda: search(model, src, lens, bos, eos, T, beam=4),
    }
    if args.skip_uncached:
        del methods["greedy, uncached (re-encodes every step)"]
    outs = {name: fn() for name, fn in methods.items()}  # warm-up, and the outputs to check
    beam_fn = methods["beam 4, cached"]
    both = MATMULS | ATTENTION
    beam_calls = capture_kernels(beam_fn, both)  # once; the matmul floor replays its matmuls
    matmul_calls = [c for c in beam_calls if c[0] in MATMULS]
    methods["beam 4, its matmuls only (floor)"], n_matmuls = replay_kernels(matmul_calls, device)
    methods["beam 4, matmuls + attention kernels (floor)"], n_kernels = replay_kernels(beam_calls, device)
    methods["greedy, matmuls + attention kernels (floor)"], _ = kernel_floor(methods["greedy, cached"], both, device)
    assert (
        outs["greedy, cached"]
        == outs.get("greedy, uncached (re-encodes every step)", outs["greedy, cached"])
        == outs["greedy, book (encode once, re-run prefix)"]
    ), "greedy methods disagree"
    lengths = [len(h) for h in outs["beam 4, cached"]]
    assert eos >= 0 or set(lengths) == {T}
    times = {name: [] for name in methods}
    for _ in range(args.rounds):
        for name, fn in methods.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    base = med["greedy, cached"]
    n_tok = args.sentences * T
    rows = [
        (name, f"{t:.3f}", "-" if "floor" in name else f"{n_tok / t:,.0f}", f"{t / base:.2f}")
        for name, t in med.items()
    ]
    print(
        f"{args.sentences} sentences x {T} tokens, D=256, 3+3 layers, {device.type}, "
        f"torch threads={torch.get_num_threads()}, "
        f"{args.rounds} interleaved rounds, eos={eos}"
    )
    if eos >= 0:
        g = [len(t) for t in outs["greedy, cached"]]
        mean = sum(g) / len(g)
        print(f"output lengths: greedy {min(g)}..{max(g)} (mean {mean:.1f}), beam {min(lengths)}..{max(lengths)}")
    print_machine()
    print(table(["method", "seconds (median)", "output tokens/s", "time / cached greedy"], rows))
    print(f"cache speed-up over the book's decoder: {med['greedy, book (encode once, re-run prefix)'] / base:.2f}x")
    print(f"beam 4 cost (beam / greedy, both cached): {med['beam 4, cached'] / base:.2f}x")
    floor_ratio = med["beam 4, its matmuls only (floor)"] / base
    print(f"beam 4's {n_matmuls} matrix products alone: {floor_ratio:.2f}x greedy's whole time")
    floor_ratio = med["beam 4, matmuls + attention kernels (floor)"] / base
    print(f"beam 4's {n_kernels} matrix products and attention kernels: {floor_ratio:.2f}x greedy's whole time")
    # What the rest (cache writes and reorders, norms, residuals, activations, the search's own work) may
    # cost for beam 4 to stay within 1.6x greedy, against what the rest costs greedy itself.
    budget = 1.6 * base - med["beam 4, matmuls + attention kernels (floor)"]
    greedy_rest = base - med["greedy, matmuls + attention kernels (floor)"]
    print(
        f"outside those kernels: 1.6x greedy would leave beam 4 {budget:.3f} s; greedy spends {greedy_rest:.3f} s "
        f"there, beam 4 {med['beam 4, cached'] - med['beam 4, matmuls + attention kernels (floor)']:.3f} s"
    )
    write_result(__file__, argv)


if __name__ == "__main__":
    main()
