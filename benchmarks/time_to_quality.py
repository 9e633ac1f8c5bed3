"""Time to quality: validation BLEU against training wall-clock seconds, for attnlab's `laptop`
recipe and a plain `torch.nn.Transformer` recipe, on the same data, machine and run.

Both recipes train one after the other in this process for `--budget` seconds of *training* time
(the clock stops while we score, so evaluation never eats the budget). At each point of `--points`
the model translates a fixed set of held-out validation sources (3–10 words, `--valid-limit` of them)
greedily, and each hypothesis is scored against **all** references of its source (multi-reference
sacreBLEU), the way the test figure is computed.

The plain recipe is what a user who follows PyTorch's "Language Translation with nn.Transformer"
tutorial writes: `nn.Transformer` with d_model 512, 8 heads, FFN 512, 3 + 3 layers, dropout 0.1,
batches of 128 sentences, Adam at a constant 1e-4 (betas 0.9/0.98, eps 1e-9), cross-entropy that
ignores padding, recomputing greedy decoding; the same word vocabulary and training pairs as ours.

    python benchmarks/time_to_quality.py                       # the run in BENCHMARKS.md (2 x 600 s)
    python benchmarks/time_to_quality.py --budget 20 --points 10,20 --num-examples 3000 --valid-limit 50  # smoke
    python benchmarks/time_to_quality.py --recipes laptop --set model.num_layers=3   # one recipe, a variant
    python benchmarks/time_to_quality.py --valid-run RUN   # a saved run on the same validation sources, beams 1 and 4

Prints a table per recipe, writes the curve as JSON (`--json`) and a figure (`--figure`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import budget_points, table, write_result

from attnlab.chapter.time_to_quality import held_out_sources
from attnlab.data import iterate_batches
from attnlab.metrics import corpus_bleu
from attnlab.models import build_model
from attnlab.runs.config import write_run_config
from attnlab.runs.layout import WEIGHTS_FILE
from attnlab.runs.weights import save_weights
from attnlab.training.presets import get_preset
from attnlab.utils.files import write_json
from attnlab.utils.precision import cpu_features, native_bf16


# --------------------------------------------------------------------------- the plain recipe
class TutorialTransformer(nn.Module):
    """PyTorch's tutorial translator: embeddings * sqrt(D) + sinusoids, nn.Transformer, linear out.

    Shape: src (B, S), tgt_in (B, T), src_valid_lens (B,) -> logits (B, T, V).
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        d: int = 512,
        heads: int = 8,
        layers: int = 3,
        ffn: int = 512,
        dropout: float = 0.1,
        max_len: int = 256,
    ):
        super().__init__()
        from attnlab.attention.positions import sinusoidal_encoding

        self.d = d
        self.src_emb, self.tgt_emb = nn.Embedding(src_vocab, d), nn.Embedding(tgt_vocab, d)
        self.register_buffer("P", sinusoidal_encoding(torch.arange(max_len), d), persistent=False)
        self.drop = nn.Dropout(dropout)
        self.core = nn.Transformer(d, heads, layers, layers, ffn, dropout, batch_first=True)
        self.out = nn.Linear(d, tgt_vocab)

    def forward(self, src, tgt_in, src_valid_lens):
        S, T = src.shape[1], tgt_in.shape[1]
        pad = torch.arange(S)[None, :] >= src_valid_lens[:, None]  # True = ignore (torch's sense)
        causal = nn.Transformer.generate_square_subsequent_mask(T)
        x = self.drop(self.src_emb(src) * math.sqrt(self.d) + self.P[:S])
        y = self.drop(self.tgt_emb(tgt_in) * math.sqrt(self.d) + self.P[:T])
        return self.out(self.core(x, y, tgt_mask=causal, src_key_padding_mask=pad, memory_key_padding_mask=pad))

    @torch.no_grad()
    def greedy(self, src, src_valid_lens, bos: int, eos: int, max_len: int) -> list[list[int]]:
        """The tutorial's greedy decoding: the whole prefix is recomputed at every step."""
        self.eval()
        B = src.shape[0]
        prefix = torch.full((B, 1), bos, dtype=torch.long)
        done = torch.zeros(B, dtype=torch.bool)
        for _ in range(max_len):
            nxt = self(src, prefix, src_valid_lens)[:, -1].argmax(-1)
            prefix = torch.cat([prefix, nxt[:, None]], 1)
            done |= nxt == eos
            if bool(done.all()):
                break
        out = []
        for row in prefix[:, 1:].tolist():
            out.append(row[: row.index(eos)] if eos in row else row)
        return out


# --------------------------------------------------------------------------- recipes
def laptop_recipe(data, overrides):
    """attnlab's `laptop` preset: the model and the Trainer's own update (param groups, schedule)."""
    from attnlab.training.config import TrainConfig
    from attnlab.training.trainer import Trainer

    preset = get_preset("transformer", "laptop")
    for section, key, value in overrides:
        preset[section][key] = value
    cfg = {**preset["model"], "src_vocab_size": len(data.src_vocab), "tgt_vocab_size": len(data.tgt_vocab)}
    torch.manual_seed(preset["train"].get("seed", 0))  # --set train.seed=N: another initialisation and batch order
    model = build_model("transformer", cfg)
    train_cfg = TrainConfig.from_dict({**preset["train"], "time_budget": None, "device": "cpu"})
    trainer = Trainer(model, data, train_cfg, None, progress=False)
    opts = {"batch_tokens": train_cfg.batch_tokens, "batch_size": train_cfg.batch_size}

    def step(batch):
        loss, _ = trainer.train_step([batch])
        trainer.state.step += 1
        return loss

    def decode(src, lens, max_len):
        from attnlab.decoding.generator import generate
        from attnlab.decoding.options import DecodeOptions

        tgt = data.tgt_vocab
        return [
            hs[0].tokens
            for hs in generate(model, src, lens, DecodeOptions(), bos=tgt.bos, eos=tgt.eos, max_len=max_len)
        ]

    def save(run_dir, data_cfg):

        write_run_config(
            run_dir,
            "transformer",
            model.config.to_dict(),
            train_cfg.to_dict(),
            data_cfg,
            data.src_vocab,
            data.tgt_vocab,
        )
        save_weights(model, os.path.join(run_dir, WEIGHTS_FILE))

    step.save = save
    step.seed = preset["train"].get("seed", 0)
    return model, step, decode, {k: v for k, v in opts.items() if v is not None}, preset


def torch_recipe(data, overrides):
    torch.manual_seed(0)
    model = TutorialTransformer(len(data.src_vocab), len(data.tgt_vocab))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    pad = data.tgt_vocab.pad

    def step(batch):
        model.train()
        logits = model(batch.src, batch.tgt_in, batch.src_valid_lens)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.tgt_out.reshape(-1), ignore_index=pad)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss.detach())

    def decode(src, lens, max_len):
        return model.greedy(src, lens, data.tgt_vocab.bos, data.tgt_vocab.eos, max_len)

    settings = {"model": "nn.Transformer d512 h8 ffn512 3+3 dropout 0.1", "train": "Adam 1e-4 const, 128 sents"}
    return model, step, decode, {"batch_size": 128}, settings


RECIPES = {"laptop": laptop_recipe, "torch-tutorial": torch_recipe}


# --------------------------------------------------------------------------- evaluation
def score(decode, sources, data, batch: int = 64) -> float:
    hyps = []
    for i in range(0, len(sources), batch):
        chunk = sources[i : i + batch]
        seqs = [list(ids) + [data.src_vocab.eos] for _, ids, _ in chunk]
        S = max(len(s) for s in seqs)
        src = torch.tensor([s + [data.src_vocab.pad] * (S - len(s)) for s in seqs])
        lens = torch.tensor([len(s) for s in seqs])
        hyps += [data.tgt_vocab.decode(h) for h in decode(src, lens, 2 * S + 10)]
    return corpus_bleu(hyps, [refs for _, _, refs in sources])


def run_recipe(name, data, args, overrides, log=print) -> dict:
    model, step, decode, batching, settings = RECIPES[name](data, overrides)
    sources = held_out_sources(data.valid, data.tgt_vocab, args.valid_limit)
    points = sorted(args.points)
    curve, clock, steps, epoch = [], 0.0, 0, 0
    load = os.getloadavg()[0]
    while points:
        for batch in iterate_batches(
            data.train,
            data.src_vocab,
            data.tgt_vocab,
            shuffle=True,
            seed=getattr(step, "seed", 0),
            epoch=epoch,
            **batching,
        ):
            t0 = time.perf_counter()
            loss = step(batch)
            clock += time.perf_counter() - t0
            steps += 1
            if not math.isfinite(loss):
                raise RuntimeError(f"{name}: non-finite loss at step {steps}")
            if clock >= points[0]:
                bleu = score(decode, sources, data)
                curve.append(
                    {
                        "seconds": round(clock, 1),
                        "steps": steps,
                        "epoch": epoch,
                        "loss": loss,
                        "valid_bleu": bleu,
                        "load": round(os.getloadavg()[0], 2),
                    }
                )
                log(f"  {name}: {clock:6.0f} s  step {steps:5d}  loss {loss:.3f}  valid BLEU {bleu:5.2f}")
                points.pop(0)
                if not points:
                    break
        epoch += 1
    if args.save and hasattr(step, "save"):
        step.save(args.save, args.data_cfg)
        log(f"  {name}: saved the final model as a run folder: {args.save}")
    return {
        "recipe": name,
        "settings": settings,
        "curve": curve,
        "valid_sources": len(sources),
        "load_at_start": round(load, 2),
    }


def evaluate_split(run_dir, split: str = "test", limit: int = 10**9, beams=(1, 4)) -> None:
    """A saved run on a split, greedy and beam search: its 3-10-word held-out sources (the first `limit`;
    for valid, the ones the curves score), each against all of its references (multi-reference sacreBLEU
    BLEU and chrF). The test figure is touched once, for the chosen recipe."""
    from attnlab.data import load_data
    from attnlab.metrics import book_bleu, corpus_chrf
    from attnlab.runs.config import read_run_config
    from attnlab.runs.loading import load_translator

    translator = load_translator(run_dir)
    data = load_data(read_run_config(run_dir)["data"])
    sources = held_out_sources(getattr(data, split), data.tgt_vocab, limit=limit)
    refs = [r for _, _, r in sources]
    pairs = sum(len(r) for r in refs)
    print(f"{run_dir}: {split} split, {len(sources)} distinct sources of 3-10 words ({pairs} reference pairs)")
    for beam in beams:
        opts = translator.options(beam=beam)
        found = translator.search([ids for _, ids, _ in sources], opts, scores=False)
        hyps = [translator.tgt_vocab.decode(hs[0].tokens) for hs in found]
        print(f"  beam {beam}: BLEU {corpus_bleu(hyps, refs):.2f}  chrF {corpus_chrf(hyps, refs):.2f}")
        book = book_bleu(translator, opts)
        right = sum(score == 1.0 for _, _, score in book)
        print(
            f"  beam {beam}: the book's four sentences at BLEU 1.000: {right}/4 "
            + "; ".join(f"{src} => {out}" for src, out, _ in book)
        )


def figure(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnlab.chapter.time_to_quality import plot_time_to_quality
    from attnlab.utils.files import atomic_path

    fig = plot_time_to_quality(results)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipes", default="laptop,torch-tutorial", help=f"comma-separated, from {sorted(RECIPES)}")
    ap.add_argument("--budget", type=float, default=600.0, help="training seconds per recipe")
    ap.add_argument("--points", default=None, help="comma-separated seconds at which to score (default: 6 points)")
    ap.add_argument("--valid-limit", type=int, default=500, help="distinct validation sources scored")
    ap.add_argument("--num-examples", type=int, help="first N corpus pairs only (smoke runs)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=JSON",
        help="override a field of the laptop preset (model/train/data)",
    )
    ap.add_argument(
        "--save", metavar="DIR", help="save the final laptop model as a run folder (for `attnlab evaluate`)"
    )
    ap.add_argument("--json", help="write the curves here")
    ap.add_argument("--figure", help="write the picture here (PNG)")
    ap.add_argument("--label", help="name this run's laptop curve (e.g. a candidate's settings)")
    ap.add_argument("--plot", metavar="JSON[,JSON]", help="only draw --figure from curves saved with --json")
    ap.add_argument("--test-run", metavar="DIR", help="only score a saved run on the test split (touch it once)")
    ap.add_argument(
        "--valid-run", metavar="DIR", help="only score a saved run on the curves' validation sources, greedy and beam 4"
    )
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    budget_points(ap, args)
    args.recipes = args.recipes.split(",")
    for r in args.recipes:
        if r not in RECIPES:
            ap.error(f"unknown recipe {r!r}; choose from {sorted(RECIPES)}")
    overrides = []
    for item in args.set:
        target, _, raw = item.partition("=")
        section, _, key = target.partition(".")
        if section not in ("model", "train", "data") or not key or not raw:
            ap.error(f"--set expects SECTION.KEY=VALUE, got {item!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        overrides.append((section, key, value))
    args.overrides = overrides
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.test_run or args.valid_run:
        torch.set_num_threads(args.threads)
        if args.test_run:
            evaluate_split(args.test_run)
        else:
            evaluate_split(args.valid_run, "valid", args.valid_limit)
        return 0
    if args.plot:
        if not args.figure:
            raise SystemExit("--plot needs --figure PATH")
        results = [r for path in args.plot.split(",") for r in json.loads(Path(path).read_text())]
        figure(results, args.figure)
        return 0
    torch.set_num_threads(args.threads)
    from attnlab.data import load_translation_data

    feats = cpu_features()
    print(
        f"CPU features: {' '.join(sorted(f for f in feats if f.startswith(('avx', 'amx', 'fma', 'sse4'))))}; "
        f"native bf16: {native_bf16('cpu')[1]}; torch {torch.__version__}, {args.threads} threads"
    )
    data_cfg = dict(get_preset("transformer", "laptop")["data"])
    data_cfg.pop("loader", None)
    for section, key, value in args.overrides:
        if section == "data":
            data_cfg[key] = value
    if args.num_examples:
        data_cfg["num_examples"] = args.num_examples
    data = load_translation_data(**data_cfg)
    args.data_cfg = {"loader": "translation", **data.settings, "path": data.settings.get("data_path")}
    args.data_cfg.pop("data_path", None)
    print(
        f"data: {len(data.train)} training pairs, {len(data.valid)} validation pairs, "
        f"vocab {len(data.src_vocab)} / {len(data.tgt_vocab)} ({data_cfg})"
    )
    results = []
    for name in args.recipes:
        print(f"{name}: training {args.budget:.0f} s (load average {os.getloadavg()[0]:.2f})")
        result = run_recipe(name, data, args, args.overrides)
        if name == "laptop" and args.label:
            result["recipe"] = args.label
        results.append(result)
    for r in results:
        rows = [
            (p["seconds"], p["steps"], p["epoch"], f"{p['loss']:.3f}", f"{p['valid_bleu']:.2f}", p["load"])
            for p in r["curve"]
        ]
        print(f"\n{r['recipe']} ({r['valid_sources']} validation sources, load at start {r['load_at_start']})")
        print(table(["train s", "steps", "epoch", "loss", "valid BLEU", "load"], rows))
    summary = [
        [r["recipe"], r["curve"][-1]["steps"], " / ".join(f"{p['valid_bleu']:.2f}" for p in r["curve"])]
        for r in results
    ]
    points = " / ".join(f"{p['seconds']:.0f}" for p in results[0]["curve"]) if results else ""
    print(table(["recipe", f"updates in {args.budget:.0f} s", f"validation BLEU at {points} s"], summary))
    if len(results) == 2 and results[1]["curve"][-1]["valid_bleu"] > 0:
        ratio = results[0]["curve"][-1]["valid_bleu"] / results[1]["curve"][-1]["valid_bleu"]
        print(f"\n{results[0]['recipe']} / {results[1]['recipe']} validation BLEU at {args.budget:.0f} s: {ratio:.2f}x")
    if args.json:
        write_json(args.json, results)
    if args.figure:
        figure(results, args.figure)
    write_result(__file__, argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
