"""Decoding speed on CPU: cached vs uncached greedy, and beam search vs greedy.

A small but non-trivial Transformer (D=256, 4 heads, 3+3 layers, FFN 1024, vocab 1000, untrained weights)
translates 64 source sentences of 20 tokens into exactly 20 output tokens (eos=-1 disables stopping, so
every method does the same number of steps):

  greedy, cached    one new token per step through `decode_step` (KV cache, encoder run once)
  greedy, uncached  `model(src, prefix)` on the whole prefix every step (re-encodes, re-runs the prefix)
  beam 4            `beam_search` over the cached state, 64 * 4 rows, `reorder_state` every step

    python benchmarks/decode.py [--threads N] [--repeats 3]
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import median_time, table  # noqa: E402

from attnlab import decode  # noqa: E402
from attnlab.models import Transformer, TransformerConfig  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sentences", type=int, default=64)
    p.add_argument("--src-len", type=int, default=20)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = TransformerConfig(1000, 1000, num_hiddens=256, num_heads=4, num_layers=3, ffn_num_hiddens=1024,
                            dropout=0.1)
    model = Transformer(cfg)
    src = torch.randint(3, 1000, (args.sentences, args.src_len))
    lens = torch.full((args.sentences,), args.src_len)
    bos, eos, T = 1, -1, args.steps

    outs = {}

    def run(name, fn):
        outs[name] = fn()
        return median_time(fn, repeats=args.repeats)

    t_cached = run("cached", lambda: decode.greedy(model, src, lens, bos, eos, T))
    t_full = run("uncached", lambda: decode.greedy(model, src, lens, bos, eos, T, use_cache=False))
    t_beam = run("beam4", lambda: decode.beam_search(model, src, lens, bos, eos, beam=4, max_len=T))
    assert outs["cached"] == outs["uncached"], "cached and uncached greedy disagree"
    assert all(len(h) == T for h in outs["beam4"])

    n_tok = args.sentences * T
    rows = [
        ("greedy, cached", f"{t_cached:.3f}", f"{n_tok / t_cached:,.0f}", "1.00"),
        ("greedy, uncached", f"{t_full:.3f}", f"{n_tok / t_full:,.0f}", f"{t_full / t_cached:.2f}"),
        ("beam 4, cached", f"{t_beam:.3f}", f"{n_tok / t_beam:,.0f}", f"{t_beam / t_cached:.2f}"),
    ]
    print(f"{args.sentences} sentences x {T} tokens, D=256, 3+3 layers, torch threads={torch.get_num_threads()}")
    print(table(["method", "seconds (median)", "output tokens/s", "time / cached greedy"], rows))
    print(f"cache speed-up (uncached / cached): {t_full / t_cached:.2f}x")
    print(f"beam 4 cost (beam / greedy, both cached): {t_beam / t_cached:.2f}x")


if __name__ == "__main__":
    main()
