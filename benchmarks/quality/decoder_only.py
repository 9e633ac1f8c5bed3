"""Encoder–decoder vs decoder-only translators (causal and prefix-LM) at about the same parameter count, on
the same data, machine and training-time budget: validation BLEU (greedy) over training seconds, and
greedy decode speed on the same sentences.

The three models come from one preset (`--preset`, default `cpu-small`): the Transformer's N + N blocks
against one decoder-only stack with the block count whose parameter count is closest (2N + 1 for
`cpu-small`: 2N blocks lack the N cross-attentions), once causal and once with `prefix_lm=True` (the
source attends both ways). Each trains in turn for `--budget` seconds of *training*
time with attnlab's own Trainer update (the clock stops while we score). At every point of `--points` the
model translates the same held-out validation sources (3–10 words, `--valid-limit` of them) greedily; each
hypothesis is scored against all references of its source (multi-reference sacreBLEU). Decode speed is
sentences/s of cached greedy search over those sources at the end, batches of 64, best of `--rounds`.
The test split is touched only by `--test-run DIR` (a model saved with `--save`), once, for the chosen model.

    python benchmarks/quality/decoder_only.py                                  # the run in BENCHMARKS.md (3 x 240 s)
    python benchmarks/quality/decoder_only.py --budget 10 --points 5,10 --num-examples 3000 --valid-limit 50  # smoke
    python benchmarks/quality/decoder_only.py --save-best runs/chosen   # then, once: --test-run runs/chosen
    python benchmarks/quality/decoder_only.py --models encoder-decoder --json ed.json --save-all runs   # one at a time,
    python benchmarks/quality/decoder_only.py --report ed.json,causal.json,prefix.json --figure f.png  # then one table
    python benchmarks/quality/decoder_only.py --speed-runs runs/encoder-decoder,runs/decoder-only-causal  # interleaved
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import budget_points, table, write_result
from time_to_quality import evaluate_split, figure, score

from attnlab.data import iterate_batches, load_translation_data
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.inference.precision import cpu_features, native_bf16
from attnlab.models import build_model
from attnlab.runs.config import write_run_config
from attnlab.runs.layout import WEIGHTS_FILE
from attnlab.runs.weights import save_weights
from attnlab.training.config import TrainConfig
from attnlab.training.presets import get_preset
from attnlab.training.quality import held_out_sources
from attnlab.training.trainer import Trainer
from attnlab.utils.files import write_json

# name -> (model type, model overrides)
MODELS = {
    "encoder-decoder": ("transformer", {}),
    "decoder-only causal": ("decoder-only", {"prefix_lm": False}),
    "decoder-only prefix-LM": ("decoder-only", {"prefix_lm": True}),
}


def count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def matched_layers(preset: str, data) -> int:
    """The decoder-only block count whose parameter count is closest to the encoder–decoder's: its 2N blocks
    lack the N cross-attentions, which about one more block makes up."""
    vocab = {"src_vocab_size": len(data.src_vocab), "tgt_vocab_size": len(data.tgt_vocab)}
    target = count(build_model("transformer", {**get_preset("transformer", preset)["model"], **vocab}))
    spec = get_preset("decoder-only", preset)["model"]
    n = spec["num_layers"]
    return min(
        range(n, 2 * n + 1),
        key=lambda k: abs(count(build_model("decoder-only", {**spec, **vocab, "num_layers": k})) - target),
    )


def build(name: str, preset: str, data, layers: int):
    model_type, overrides = MODELS[name]
    spec = get_preset(model_type, preset)
    cfg = {
        **spec["model"],
        **overrides,
        "src_vocab_size": len(data.src_vocab),
        "tgt_vocab_size": len(data.tgt_vocab),
    }
    if model_type == "decoder-only":
        cfg["num_layers"] = layers
    torch.manual_seed(0)
    model = build_model(model_type, cfg)
    train_cfg = TrainConfig.from_dict({**spec["train"], "time_budget": None, "device": "cpu"})
    return model_type, model, train_cfg


def decode(model, data):
    def run(src, lens, max_len):
        tgt = data.tgt_vocab
        hyps = generate(model, src, lens, DecodeOptions(scores=False), bos=tgt.bos, eos=tgt.eos, max_len=max_len)
        return [hs[0].tokens for hs in hyps]

    return run


def decode_speed(model, data, sources, rounds: int) -> float:
    """Sentences/s of cached greedy search over `sources` (batches of 64), best of `rounds`."""
    model.eval()
    best = math.inf
    for _ in range(rounds):
        t0 = time.perf_counter()
        score(decode(model, data), sources, data)
        best = min(best, time.perf_counter() - t0)
    return len(sources) / best


def interleaved_speeds(run_dirs: list[str], rounds: int) -> None:
    """Greedy sentences/s of saved runs on the same validation sources, in alternating rounds (median
    ratio to the first), so that a shared machine's load falls on every model alike."""
    from attnlab.runs.loading import load_translator

    models = [load_translator(d) for d in run_dirs]
    data = load_translation_data(**{k: v for k, v in models[0].config["data"].items() if k != "loader"})
    ids = [s for _, s, _ in held_out_sources(data.valid, data.tgt_vocab, 500)]
    times: list[list[float]] = [[] for _ in models]
    for _ in range(rounds):
        for tr, t in zip(models, times):
            t0 = time.perf_counter()
            tr.search(ids, tr.options(beam=1, scores=False))
            t.append(time.perf_counter() - t0)
    for d, t in zip(run_dirs, times):
        ratio = sorted(a / b for a, b in zip(times[0], t))[len(t) // 2]
        print(f"{d}: {len(ids) / min(t):.0f} greedy sentences/s (best of {rounds}), {ratio:.2f}x the first")


def run_model(name, data, args, sources, layers: int) -> dict:
    model_type, model, train_cfg = build(name, args.preset, data, layers)
    params = count(model)
    trainer = Trainer(model, data, train_cfg, None, progress=False)
    batching = {"batch_tokens": train_cfg.batch_tokens, "batch_size": train_cfg.batch_size}
    batching = {k: v for k, v in batching.items() if v is not None}
    points = sorted(args.points)
    curve, clock, steps, epoch = [], 0.0, 0, 0
    load = os.getloadavg()[0]
    print(
        f"{name}: {params:,} parameters, {model.config.num_layers} blocks, training {args.budget:.0f} s "
        f"(load average {load:.2f})",
        flush=True,
    )
    while points:
        for batch in iterate_batches(
            data.train, data.src_vocab, data.tgt_vocab, shuffle=True, seed=0, epoch=epoch, **batching
        ):
            t0 = time.perf_counter()
            model.train()
            step_loss, _ = trainer.train_step([batch])
            loss = float(step_loss)  # the trainer leaves it on the device; this script reads every step
            trainer.state.step += 1
            clock += time.perf_counter() - t0
            steps += 1
            if not math.isfinite(loss):
                raise RuntimeError(f"{name}: non-finite loss at step {steps}")
            if clock >= points[0]:
                model.eval()
                bleu = score(decode(model, data), sources, data)
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
                print(f"  {name}: {clock:6.0f} s  step {steps:5d}  loss {loss:.3f}  valid BLEU {bleu:5.2f}", flush=True)
                points.pop(0)
                if not points:
                    break
        epoch += 1
    speed = decode_speed(model, data, sources, args.rounds)
    print(f"  {name}: greedy decode {speed:.0f} sentences/s ({len(sources)} sentences)", flush=True)
    return {
        "recipe": name,
        "model_type": model_type,
        "params": params,
        "curve": curve,
        "sentences_per_s": speed,
        "load_at_start": round(load, 2),
        "_model": model,
        "_train_cfg": train_cfg,
    }


def save_run(result, data, data_cfg, run_dir) -> None:
    model = result["_model"]
    write_run_config(
        run_dir,
        result["model_type"],
        model.config.to_dict(),
        result["_train_cfg"].to_dict(),
        data_cfg,
        src_vocab=data.src_vocab,
        tgt_vocab=data.tgt_vocab,
    )
    save_weights(model, os.path.join(run_dir, WEIGHTS_FILE))


def report(results: list[dict], budget: float) -> None:
    """The curves, the table at the end of the budget and each model's ratios to the first."""
    rows = []
    for r in results:
        last = r["curve"][-1]
        rows.append(
            (
                r["recipe"],
                f"{r['params']:,}",
                last["steps"],
                f"{last['loss']:.3f}",
                f"{last['valid_bleu']:.2f}",
                f"{max(p['valid_bleu'] for p in r['curve']):.2f}",
                f"{r['sentences_per_s']:.0f}",
                r["load_at_start"],
            )
        )
        curve = [(p["seconds"], p["steps"], f"{p['valid_bleu']:.2f}", p["load"]) for p in r["curve"]]
        print(f"\n{r['recipe']}:\n" + table(["train s", "steps", "valid BLEU", "load"], curve))
    head = ["model", "params", "steps", "loss", "valid BLEU", "best", "greedy sent/s", "load"]
    print(f"\nat {budget:.0f} s of training each:\n" + table(head, rows))
    base = results[0]
    for r in results[1:]:
        if base["curve"][-1]["valid_bleu"] > 0:
            ratio = r["curve"][-1]["valid_bleu"] / base["curve"][-1]["valid_bleu"]
            print(f"ratio: {r['recipe']} / {base['recipe']} = {ratio:.2f}x validation BLEU")
        print(
            f"ratio: {r['recipe']} / {base['recipe']} = {r['sentences_per_s'] / base['sentences_per_s']:.2f}x "
            "greedy sentences/s"
        )


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {list(MODELS)}")
    ap.add_argument("--preset", default="cpu-small", help="the preset all models start from (default: cpu-small)")
    ap.add_argument("--budget", type=float, default=240.0, help="training seconds per model")
    ap.add_argument("--points", default=None, help="comma-separated seconds at which to score (default: 6 points)")
    ap.add_argument("--valid-limit", type=int, default=500, help="distinct validation sources scored and decoded")
    ap.add_argument("--num-examples", type=int, help="first N corpus pairs only (smoke runs)")
    ap.add_argument("--rounds", type=int, default=3, help="decode-speed repetitions (the best is kept)")
    ap.add_argument("--save-best", metavar="DIR", help="save the model with the best final validation BLEU here")
    ap.add_argument("--save-all", metavar="DIR", help="save every model as a run folder DIR/<model name>")
    ap.add_argument("--test-run", metavar="DIR", help="only score a saved run on the test split (touch it once)")
    ap.add_argument("--json", help="write the curves here")
    ap.add_argument("--speed-runs", metavar="DIR,DIR", help="only time greedy decoding of saved runs, interleaved")
    ap.add_argument(
        "--report", metavar="JSON[,JSON]", help="only print the table and figure of curves saved with --json"
    )
    ap.add_argument("--figure", help="write the time-to-quality picture here (PNG)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    budget_points(ap, args)
    args.models = args.models.split(",")
    for m in args.models:
        if m not in MODELS:
            ap.error(f"unknown model {m!r}; choose from {list(MODELS)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    print(
        "command: "
        + " ".join(["python", "benchmarks/quality/decoder_only.py", *(sys.argv[1:] if argv is None else argv)])
    )
    feats = cpu_features()
    print(
        f"CPU features: {' '.join(sorted(f for f in feats if f.startswith(('avx', 'amx', 'fma', 'sse4'))))}; "
        f"native bf16: {native_bf16('cpu')[1]}; torch {torch.__version__}, {args.threads} threads, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    if args.test_run:
        evaluate_split(args.test_run, beams=(1,))
        return 0
    if args.speed_runs:
        interleaved_speeds(args.speed_runs.split(","), args.rounds)
        return 0
    if args.report:  # models trained by separate invocations (--models one at a time, --json each)
        results = [r for path in args.report.split(",") for r in json.loads(Path(path).read_text())]
        report(results, args.budget)
        if args.figure:
            figure(results, args.figure)
        write_result(__file__, argv)
        return 0
    data_cfg = dict(get_preset("transformer", args.preset)["data"])
    data_cfg.pop("loader", None)
    if args.num_examples:
        data_cfg["num_examples"] = args.num_examples
    data = load_translation_data(**data_cfg)
    run_data_cfg = {"loader": "translation", **data.settings, "path": data.settings.get("data_path")}
    run_data_cfg.pop("data_path", None)
    sources = held_out_sources(data.valid, data.tgt_vocab, args.valid_limit)
    print(
        f"data: {len(data.train)} training pairs, {len(sources)} validation sources scored, "
        f"vocab {len(data.src_vocab)} / {len(data.tgt_vocab)} ({data_cfg})"
    )
    layers = matched_layers(args.preset, data)
    print(f"decoder-only blocks: {layers} (the parameter count closest to the encoder-decoder's)")
    results = [run_model(name, data, args, sources, layers) for name in args.models]
    report(results, args.budget)
    best = max(results, key=lambda r: r["curve"][-1]["valid_bleu"])
    print(f"chosen on validation: {best['recipe']}")
    if args.save_best:
        save_run(best, data, run_data_cfg, args.save_best)
        print(f"saved {best['recipe']} as a run folder: {args.save_best}")
    for r in results if args.save_all else []:
        run_dir = os.path.join(args.save_all, r["recipe"].replace(" ", "-"))
        save_run(r, data, run_data_cfg, run_dir)
        print(f"saved {r['recipe']} as a run folder: {run_dir}")
    public = [{k: v for k, v in r.items() if not k.startswith("_")} for r in results]
    if args.json:
        write_json(args.json, public)
    if args.figure:
        figure(public, args.figure)
    write_result(__file__, argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
