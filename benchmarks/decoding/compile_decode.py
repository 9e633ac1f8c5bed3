"""Greedy decoding with a `torch.compile`d decoding step against eager, per precision and worker count:
sentences/s in interleaved rounds on the same sentences (tokens checked identical), compile time apart.

    python benchmarks/decoding/compile_decode.py --checkpoint RUN --split valid --limit 1000 --rounds 3 --workers 1,2

--step module compiles the model's `decode_step` as it is (`torch.compile(decode_step, dynamic=True)`: the
KV cache's Python bookkeeping and the head-mask context variable break the graph); --step functional
compiles a tensor-only rewrite of the step for a post-norm, sinusoidal, plain multi-head decoder
(`FunctionalStep`, one graph per step up to 0/1 specialisations); functional-eager runs that rewrite
uncompiled (what the rewrite alone changes). The first compiled pass over the sentences (compilation
included) is timed apart. Figures and verdict: BENCHMARKS.md, "Tried, not kept".
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch._dynamo
import torch._inductor.config as inductor_config
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import add_decoding_args, table, write_result

from attnlab.data import load_data
from attnlab.inference.precision import cpu_features
from attnlab.runs.config import read_run_config
from attnlab.runs.loading import load_translator
from attnlab.training.quality import held_out_sources


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_decoding_args(ap, "run folder (a translator)")
    ap.add_argument("--precisions", default="fp32,int8")
    ap.add_argument("--workers", default="1,2", help="worker counts measured (each on one intra-op thread)")
    ap.add_argument("--mode", default="default", help="torch.compile mode, e.g. max-autotune-no-cudagraphs")
    ap.add_argument("--cpp-wrapper", action="store_true", help="inductor's C++ wrapper (cpp_wrapper=True)")
    ap.add_argument("--freezing", action="store_true", help="inductor freezing (weights folded as constants)")
    ap.add_argument(
        "--step",
        default="module",
        choices=["module", "functional", "functional-eager"],
        help="module: compile the model's decode_step as it is; functional: compile a tensor-only rewrite of it",
    )
    ap.add_argument("--quick", action="store_true", help="smoke size: fp32 only, 1 worker, one round")
    args = ap.parse_args(argv)
    if args.quick:
        args.precisions, args.workers, args.rounds = "fp32", "1", 1
    inductor_config.cpp_wrapper = args.cpp_wrapper
    inductor_config.freezing = args.freezing
    torch._dynamo.config.cache_size_limit = 64  # recompilations are counted below, not hidden
    torch.set_num_threads(args.threads)
    feats = " ".join(sorted(f for f in cpu_features() if f.startswith(("avx", "amx", "fma"))))
    print(f"CPU features: {feats}; torch {torch.__version__}, {args.threads} threads, load {os.getloadavg()[0]:.2f}")
    print(
        "command: python benchmarks/decoding/compile_decode.py " + " ".join(argv if argv is not None else sys.argv[1:])
    )
    data = load_data(read_run_config(args.checkpoint)["data"])
    ids = [s for _, s, _ in held_out_sources(getattr(data, args.split), data.tgt_vocab, args.limit or 1000)]
    worker_counts = [int(w) for w in args.workers.split(",")]
    print(f"{len(ids)} {args.split} sources, greedy, default batch size")
    print(f"step={args.step} mode={args.mode} cpp_wrapper={args.cpp_wrapper} freezing={args.freezing}")
    rows = []
    for precision in args.precisions.split(","):
        eager = load_translator(args.checkpoint, precision=precision)
        comp = load_translator(args.checkpoint, precision=precision)
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        try:
            kw = {"mode": args.mode}
            if args.step == "module":
                comp.model.decode_step = torch.compile(comp.model.decode_step, dynamic=True, **kw)
            else:  # one tensor-only step function, compiled or (functional-eager) not
                comp.model = FunctionalStep(comp.model, None if args.step == "functional-eager" else kw)
            want = _run(eager, ids, 1)
            t0 = time.perf_counter()
            got = _run(comp, ids, 1)
            first = time.perf_counter() - t0
        except RuntimeError as exc:  # dynamo and inductor raise RuntimeErrors: a failure is a result too
            print(f"\n== {precision}: compile failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            continue
        c = torch._dynamo.utils.counters
        graphs, breaks = c["stats"].get("unique_graphs", 0), sum(c["graph_break"].values())
        print(
            f"\n== {precision}: first compiled pass (compilation included) {first:.1f} s; {graphs} graphs, "
            f"{breaks} graph breaks; sentences whose tokens differ from eager: {_differ(got, want)}/{len(want)}"
        )
        for reason, n in sorted(c["graph_break"].items(), key=lambda kv: -kv[1])[:3]:
            print(f"   break x{n}: {reason[:150]}")
        for w in worker_counts:
            best = {"eager": float("inf"), "compiled": float("inf")}
            same = True
            for _ in range(args.rounds):  # interleaved: a load change hits both alike
                for name, tr in (("eager", eager), ("compiled", comp)):
                    t0 = time.perf_counter()
                    out = _run(tr, ids, w)
                    best[name] = min(best[name], time.perf_counter() - t0)
                    same = same and out == want
            recompiles = torch._dynamo.utils.counters["stats"].get("unique_graphs", 0) - graphs
            print(
                f"   {w} worker(s): eager {len(ids) / best['eager']:.0f} sentences/s, compiled "
                f"{len(ids) / best['compiled']:.0f} ({best['eager'] / best['compiled']:.2f}x eager); "
                f"tokens identical: {same}; graphs compiled while timed: {recompiles}"
            )
            rows.append([precision, w, f"{len(ids) / best['eager']:.0f}", f"{len(ids) / best['compiled']:.0f}"])
            rows[-1] += [f"{best['eager'] / best['compiled']:.2f}x", graphs, breaks]
            rows[-1].append(f"{_differ(got, want)}/{len(want)}")
    heads = ["precision", "workers", "eager sentences/s", "compiled sentences/s", "compiled vs eager", "graphs"]
    print(table([*heads, "graph breaks", "tokens differing"], rows))
    write_result(__file__, argv, step=args.step)
    return 0


class FunctionalStep:
    """The laptop Transformer's decoder step (post-norm, sinusoidal, MHA, no rotary/bias/head masks) as one
    tensor-only function over preallocated (n, H, max_len, Dh) caches, so dynamo captures a single graph
    per step instead of breaking at the KV cache's and the context variables' Python bookkeeping.
    It stands in for the model in `greedy` (start_decoding / decode_step / reorder_state)."""

    def __init__(self, model, compile_kw: dict | None):
        self.inner = model
        # Self-attention's fused Q/K/V projection, concatenated once (int8 has its own quantized W_qkv).
        self.qkv = [
            b.self_attention.W_qkv if b.self_attention.W_qkv is not None else _concat(b.self_attention)
            for b in model.decoder.blocks
        ]
        fn = self._step
        self.step = torch.compile(fn, dynamic=True, **compile_kw) if compile_kw is not None else fn

    def __getattr__(self, name):  # eval(), training, config, max_target_positions: the model's
        return getattr(self.inner, name)

    def start_decoding(self, src, lens):
        memory = self.inner.encoder(src, lens)  # (n, S, D)
        S, n = memory.shape[1], memory.shape[0]
        visible = torch.arange(S)[None, :] < lens[:, None] if lens is not None else torch.ones(n, S, dtype=torch.bool)
        cross = [
            (_heads(b.cross_attention.W_k(memory), b), _heads(b.cross_attention.W_v(memory), b)) for b in self.blocks
        ]
        return _State(cross=cross, mask=visible[:, None, None, :])

    @property
    def blocks(self):
        return self.inner.decoder.blocks

    def decode_step(self, inp, state):
        if state.bufs is None:
            a = self.blocks[0].self_attention
            shape = (inp.shape[0], a.num_heads, state.max_len, a.head_dim)
            dtype = state.cross[0][0].dtype  # bf16: the caches in the model's dtype
            state.bufs = [(torch.empty(shape, dtype=dtype), torch.empty(shape, dtype=dtype)) for _ in self.blocks]
        L = state.L
        P = self.inner.decoder.pos_encoding.encoding(1, L, inp.device)[None].to(state.cross[0][0].dtype)
        past = [(k[:, :, :L], v[:, :, :L]) for k, v in state.bufs]
        logits, new = self.step(inp, P, state.cross, state.mask, past)
        # The new step's keys/values are written here, not in the graph: written in the compiled graph (into
        # a slice of an input buffer at a symbolic position), the caches differed from eager from step 2 on.
        for (kb, vb), (k, v) in zip(state.bufs, new):
            kb[:, :, L : L + 1] = k
            vb[:, :, L : L + 1] = v
        state.L = L + 1
        return logits, state

    def reorder_state(self, state, keep):
        state.cross = [(k[keep], v[keep]) for k, v in state.cross]
        state.bufs = [(k[keep], v[keep]) for k, v in state.bufs]
        state.mask = state.mask[keep]
        return state

    def _step(self, inp, P, cross, mask, past):
        dec = self.inner.decoder
        X = dec.embedding(inp) * dec.embed_scale + P  # (n, 1, D)
        new = []
        for block, qkv, (ck, cv), (pk, pv) in zip(dec.blocks, self.qkv, cross, past):
            sa = block.self_attention
            q, k, v = (qkv(X) if isinstance(qkv, torch.nn.Module) else F.linear(X, *qkv)).chunk(3, dim=-1)
            k, v = _heads(k, block), _heads(v, block)
            new.append((k, v))
            a = F.scaled_dot_product_attention(_heads(q, block), torch.cat([pk, k], 2), torch.cat([pv, v], 2))
            X = block.addnorm1.ln(X + sa.W_o(_merge(a)))
            ca = block.cross_attention
            a = F.scaled_dot_product_attention(_heads(ca.W_q(X), block), ck, cv, attn_mask=mask)
            X = block.addnorm2.ln(X + ca.W_o(_merge(a)))
            X = block.addnorm3.ln(X + block.ffn(X))
        return dec.dense(dec.final_norm(X)), new


def _concat(sa) -> tuple:
    w = torch.cat([sa.W_q.weight, sa.W_k.weight, sa.W_v.weight]).detach()
    return w, torch.cat([sa.W_q.bias, sa.W_k.bias, sa.W_v.bias]).detach()


class _State:
    def __init__(self, cross, mask):
        self.cross, self.mask, self.L, self.bufs, self.max_len = cross, mask, 0, None, 0

    def reserve(self, steps: int) -> None:
        self.max_len = steps


def _heads(x, block):  # (n, L, H*Dh) -> (n, H, L, Dh)
    H = block.self_attention.num_heads
    return x.view(x.shape[0], x.shape[1], H, -1).transpose(1, 2)


def _merge(a):  # (n, H, L, Dh) -> (n, L, H*Dh)
    return a.transpose(1, 2).reshape(a.shape[0], a.shape[2], -1)


def _differ(got, want) -> int:
    return sum(g != w for g, w in zip(got, want))


def _run(tr, ids, workers: int) -> list[list[int]]:
    return [hs[0].tokens for hs in tr.search(ids, tr.options(beam=1, scores=False), workers=workers)]


if __name__ == "__main__":
    sys.exit(main())
