"""Time to quality: validation BLEU against training wall-clock seconds, for attnlab's `laptop` recipe and
PyTorch's `nn.Transformer` tutorial recipe (benchmarks/baselines/torch_tutorial.py), on the same data,
sources and machine, in one invocation.

`laptop` trains through the product's own loop (`train_run`, as `attnlab train --preset laptop` does:
its precision, schedule, checkpoints and averaging), one run per point of `--points` with that point as
its time budget, since a budget-aware schedule decays to zero at the budget: a point at t seconds is a
t-second run. The tutorial recipe's lr is constant, so it trains once and is scored at each point (its
clock stops while it is scored). Every point translates the first `--valid-limit` distinct validation
sources of 3–10 words, each scored against all of its references (multi-reference sacreBLEU): `laptop`
greedily and with beam 4 (its default decoding), the tutorial recipe greedily (its tutorial's decoding).

    python benchmarks/quality/time_to_quality.py --save runs/laptop-600 --figure docs/time_to_quality.png  # 60..600 s
    python benchmarks/quality/time_to_quality.py --points 2,4 --num-examples 3000 --valid-limit 20  # smoke
    python benchmarks/quality/time_to_quality.py --recipes laptop --set model.num_layers=3 --label d192x3  # a variant
    python benchmarks/quality/time_to_quality.py --valid-run runs/a runs/b --average 5   # the recipe search's table
    python benchmarks/quality/time_to_quality.py --test-run runs/laptop-600               # the test split, once
    python benchmarks/quality/time_to_quality.py --valid-run runs/gpu --device cuda --record gpu_valid  # a GPU run

The curve mode writes benchmarks/results/time_to_quality.json (also `--json`: the curves alone); the
`--valid-run` mode benchmarks/results/laptop_search.json (one row per run: settings, validation BLEU greedy
and beam 4, beam-4 sentences/s, and with `--average K` the BLEU of its last K checkpoints averaged).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from baselines.torch_tutorial import BATCHING, SETTINGS, tutorial_recipe
from common import budget_points, print_machine, table, write_result

from attnlab.data import iterate_batches, load_data
from attnlab.inference.precision import native_bf16
from attnlab.metrics import corpus_bleu
from attnlab.runs.config import read_run_config
from attnlab.runs.loading import load_translator
from attnlab.training.launch import claim_run_dir, train_run
from attnlab.training.quality import (
    PLAIN_RECIPE,
    averaged_translator,
    decode_speed,
    held_out_sources,
    run_settings,
    score_sources,
)
from attnlab.training.settings import no_overrides, parse_set, resolve
from attnlab.utils.files import write_json

RECIPES = ("laptop", PLAIN_RECIPE)
DEFAULT_POINTS = (0.1, 0.25, 0.5, 1.0)  # of --budget: 60, 150, 300 and 600 s
METRIC = "multi-reference sacreBLEU on the first {n} distinct validation sources of 3-10 words"


# --------------------------------------------------------------------------- scoring
def score(decode, sources, data, batch: int = 64) -> float:
    """Corpus BLEU of decode(src (B, S), lens (B,), max_len) -> token id lists on `held_out_sources`."""
    hyps = []
    for i in range(0, len(sources), batch):
        chunk = sources[i : i + batch]
        seqs = [list(ids) + [data.src_vocab.eos] for _, ids, _ in chunk]
        S = max(len(s) for s in seqs)
        src = torch.tensor([s + [data.src_vocab.pad] * (S - len(s)) for s in seqs])
        lens = torch.tensor([len(s) for s in seqs])
        hyps += [data.tgt_vocab.decode(h) for h in decode(src, lens, 2 * S + 10)]
    return corpus_bleu(hyps, [refs for _, _, refs in sources])


def bleu_pair(translator, sources) -> tuple[float, float]:
    """(greedy, beam 4) validation BLEU, the run's other decoding defaults kept."""
    return score_sources(translator, sources, beam=1), score_sources(translator, sources, beam=4)


# --------------------------------------------------------------------------- the two recipes
def laptop_settings(args, budget: float | None = None):
    """The `laptop` preset with `--set`, `--num-examples` and (given) the time budget, as `attnlab train`
    resolves it."""
    over = copy.deepcopy(args.overrides)
    if args.num_examples:
        over["data"]["num_examples"] = args.num_examples
    if budget is not None:
        over["train"]["time_budget"] = budget
    if args.device != "cpu":
        over["train"]["device"] = args.device
    return resolve("transformer", args.preset, None, over)


def point_dirs(args) -> dict[float, Path]:
    """The run folder of each `laptop` point, every one claimed before any training: `--save` for the
    longest, `--runs DIR`/laptop-Ts (or a scratch folder) for the others."""
    base = Path(args.runs) if args.runs else Path(args.scratch)
    dirs = {t: base / f"laptop-{t:g}s" for t in args.points}
    if args.save:
        dirs[max(args.points)] = Path(args.save)
    for path in dirs.values():
        claim_run_dir(path)  # never a folder a user made: a new one, or an error before any work
    return dirs


def laptop_curve(args, sources, log=print) -> dict:
    """One `train_run` per point, each scored greedily and with beam 4."""
    curve = []
    for t, run_dir in sorted(point_dirs(args).items()):
        s = laptop_settings(args, t)
        result = train_run("transformer", s.sections["model"], s.train, s.sections["data"], run_dir, progress=False)
        greedy, beam = bleu_pair(load_translator(run_dir), sources)
        curve.append(
            {
                "seconds": t,
                "train_s": round(result.seconds, 1),
                "steps": result.step,
                "epoch": result.epoch,
                "loss": result.train_loss,
                "stop": result.stop_reason,
                "valid_bleu": greedy,
                "valid_bleu_beam4": beam,
                "load": round(os.getloadavg()[0], 2),
                "run": str(run_dir) if args.runs or run_dir == Path(args.save or "") else None,  # kept folders only
            }
        )
        log(f"  laptop: {t:6.0f} s run  step {result.step:5d}  valid BLEU greedy {greedy:5.2f}  beam 4 {beam:5.2f}")
    settings = laptop_settings(args).sections
    return {"recipe": args.label or args.preset, "settings": settings, "curve": curve, "valid_sources": len(sources)}


def plain_curve(data, args, sources, log=print) -> dict:
    """The tutorial recipe trained once to the last point, scored greedily at each (clock stopped)."""
    step, decode = tutorial_recipe(data)
    points = sorted(args.points)
    curve, clock, steps, epoch = [], 0.0, 0, 0
    while points:
        for batch in iterate_batches(
            data.train, data.src_vocab, data.tgt_vocab, shuffle=True, seed=0, epoch=epoch, **BATCHING
        ):
            t0 = time.perf_counter()
            loss = step(batch)
            clock += time.perf_counter() - t0
            steps += 1
            if not math.isfinite(loss):
                raise RuntimeError(f"{PLAIN_RECIPE}: non-finite loss at step {steps}")
            if clock >= points[0]:
                bleu = score(decode, sources, data)
                point = {"seconds": points.pop(0), "train_s": round(clock, 1), "steps": steps, "epoch": epoch}
                curve.append({**point, "loss": loss, "valid_bleu": bleu, "load": round(os.getloadavg()[0], 2)})
                log(f"  {PLAIN_RECIPE}: {clock:6.0f} s  step {steps:5d}  loss {loss:.3f}  valid BLEU {bleu:5.2f}")
                if not points:
                    break
        epoch += 1
    return {"recipe": PLAIN_RECIPE, "settings": SETTINGS, "curve": curve, "valid_sources": len(sources)}


# --------------------------------------------------------------------------- the curve mode
def curves(args) -> int:
    """Both recipes' points: printed, as a record (time_to_quality.json), `--json` and `--figure`."""
    settings = laptop_settings(args)  # every setting checked before any data is read
    data = load_data(settings.sections["data"])
    sources = held_out_sources(data.valid, data.tgt_vocab, args.valid_limit)
    if not sources:
        raise ValueError("the validation split holds no source of 3-10 words; use more --num-examples")
    print(
        f"data: {len(data.train)} training pairs, {len(data.valid)} validation pairs, vocabulary "
        f"{len(data.src_vocab)} / {len(data.tgt_vocab)}; {len(sources)} validation sources scored; "
        f"native bf16: {native_bf16('cpu')[1]}; {args.threads} threads"
    )
    results = []
    args.scratch = tempfile.mkdtemp(prefix="attnlab-ttq-")
    try:
        for name in args.recipes:
            print(f"{name}: points at {', '.join(f'{t:g}' for t in args.points)} s (load {os.getloadavg()[0]:.2f})")
            results.append(laptop_curve(args, sources) if name == "laptop" else plain_curve(data, args, sources))
    finally:
        shutil.rmtree(args.scratch, ignore_errors=True)
    rows = [
        {
            "recipe": r["recipe"],
            "budget s": p["seconds"],
            "trained s": p["train_s"],
            "updates": p["steps"],
            "valid BLEU greedy": round(p["valid_bleu"], 2),
            "valid BLEU beam 4": round(p["valid_bleu_beam4"], 2) if "valid_bleu_beam4" in p else None,
        }
        for r in results
        for p in r["curve"]
    ]
    print(table(list(rows[0]), [list(r.values()) for r in rows]))
    notes, summary = ratio_notes(results)
    for line in notes:
        print(line)
    if args.json:
        write_json(args.json, results)
    if args.figure:
        figure(results, args.figure)
    clocks = "laptop's clock is its run's time budget, the tutorial's its training steps"
    metric = f"{METRIC.format(n=len(sources))}; {clocks}"
    formats = {"summary_formats": SUMMARY_FORMATS} if summary else {}
    write_result(__file__, args.argv, recipes=results, metric=metric, notes=notes, summary=summary, **formats)
    return 0


def ratio_notes(results) -> tuple[list[str], list[dict]]:
    """laptop's beam 4 (its default decoding) over the tutorial recipe's greedy (its tutorial's) at the
    last point: the notes line and the summary row of the record."""
    by = {r["recipe"]: r["curve"][-1] for r in results if r["curve"]}
    ours = next((p for name, p in by.items() if name != PLAIN_RECIPE), None)
    plain = by.get(PLAIN_RECIPE)
    if ours is None or plain is None or plain["valid_bleu"] <= 0 or "valid_bleu_beam4" not in ours:
        return [], []
    t, ratio = ours["seconds"], ours["valid_bleu_beam4"] / plain["valid_bleu"]
    line = (
        f"laptop beam 4 / {PLAIN_RECIPE} greedy validation BLEU at {t:g} s: {ours['valid_bleu_beam4']:.2f} / "
        f"{plain['valid_bleu']:.2f} = {ratio:.2f}x"
    )
    row = {
        "what": f"`laptop`, {t:g} s of training on 2 cores, validation BLEU (beam 4)",
        "baseline": "PyTorch's nn.Transformer tutorial recipe, greedy, same run",
        "measured": [round(ours["valid_bleu_beam4"], 2), round(plain["valid_bleu"], 2), round(ratio, 2)],
    }
    return [line], [row]


SUMMARY_FORMATS = {"measured": "{0:.2f} against {1:.2f} ({2:.2f}×)"}  # ratio_notes' row: ours, the tutorial's, ratio


# --------------------------------------------------------------------------- saved runs
def check_runs(runs, average: int | None) -> None:
    """Every run folder readable (and, with --average K, holding K checkpoints) before any is scored."""
    from attnlab.runs.checkpoints import list_checkpoints

    for run in runs:
        read_run_config(run)
        kept = len(list_checkpoints(run))
        if average and kept < average:
            raise ValueError(
                f"--average {average}: {run} kept {kept} checkpoint(s); pass --average {kept or 1} or fewer, "
                f"or train with a larger keep_last"
            )


def run_row(run: str, limit: int, average: int | None, scratch: str, device: str = "cpu") -> dict:
    """One row of the recipe search: `run_settings`, validation BLEU greedy and beam 4, beam-4 sentences/s
    and, with `average`, the BLEU of the last `average` checkpoints averaged."""
    translator = load_translator(run, device)
    data = load_data(read_run_config(run)["data"])
    sources = held_out_sources(data.valid, translator.tgt_vocab, limit)
    if not sources:
        raise ValueError(f"{run}: its validation split holds no source of 3-10 words to score")
    greedy, beam = bleu_pair(translator, sources)
    row = {**run_settings(run), "valid BLEU greedy": round(greedy, 2), "valid BLEU beam 4": round(beam, 2)}
    row["beam 4 sent/s"] = round(decode_speed(translator, sources, beam=4), 1)
    if average:
        greedy, beam = bleu_pair(averaged_translator(run, average, scratch), sources)
        row[f"last {average} averaged: greedy"] = round(greedy, 2)
        row[f"last {average} averaged: beam 4"] = round(beam, 2)
    return row | {"sources": len(sources)}


def valid_runs(args) -> int:
    """The recipe search's table (laptop_search.json): one row per `--valid-run` folder."""
    check_runs(args.valid_run, args.average)
    rows = []
    with tempfile.TemporaryDirectory(prefix="attnlab-avg-") as scratch:
        for run in args.valid_run:
            rows.append(run_row(run, args.valid_limit, args.average, scratch, args.device))
            print(f"{run}: " + ", ".join(f"{k} {v}" for k, v in rows[-1].items() if k != "run"), flush=True)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    print(table(columns, [[r.get(c) for c in columns] for r in rows]))
    metric = METRIC.format(n=max(r["sources"] for r in rows)) + "; speed: beam 4, the sources twice minus once"
    title = "How `laptop` was chosen"
    if args.preset != "laptop":
        title = f"The `{args.preset}` run on `laptop`'s validation sources"
    write_result(
        __file__, args.argv, stem=args.record or "laptop_search", title=title, metric=metric
    )  # the table: its figures
    return 0


def evaluate_split(run_dir, split: str = "test", limit: int = 10**9, beams=(1, 4), device: str = "cpu") -> list[dict]:
    """A saved run on a split, greedy and beam search: its 3-10-word held-out sources (the first `limit`),
    each against all of its references (multi-reference sacreBLEU BLEU and chrF). The test figure is
    touched once, for the chosen recipe."""
    from attnlab.metrics import book_bleu, corpus_chrf

    translator = load_translator(run_dir, device)
    data = load_data(read_run_config(run_dir)["data"])
    sources = held_out_sources(getattr(data, split), data.tgt_vocab, limit=limit)
    refs = [r for _, _, r in sources]
    pairs = sum(len(r) for r in refs)
    print(f"{run_dir}: {split} split, {len(sources)} distinct sources of 3-10 words ({pairs} reference pairs)")
    rows = []
    for beam in beams:
        opts = translator.options(beam=beam)
        found = translator.search([ids for _, ids, _ in sources], replace(opts, scores=False))
        hyps = [translator.tgt_vocab.decode(hs[0].tokens) for hs in found]
        bleu, chrf = corpus_bleu(hyps, refs), corpus_chrf(hyps, refs)
        print(f"  beam {beam}: BLEU {bleu:.2f}  chrF {chrf:.2f}")
        book = book_bleu(translator, opts)
        right = sum(score == 1.0 for _, _, score in book)
        print(
            f"  beam {beam}: the book's four sentences at BLEU 1.000: {right}/4 "
            + "; ".join(f"{src} => {out}" for src, out, _ in book)
        )
        rows.append(
            {
                "decoding": "greedy" if beam == 1 else f"beam {beam}",
                f"{split} BLEU": round(bleu, 2),
                f"{split} chrF": round(chrf, 2),
                "the book's four sentences at 1.000": f"{right}/4",
                "sources": len(sources),
                "reference pairs": pairs,
            }
        )
    return rows


def figure(results, path):
    """The curves as one PNG at `path` (`plot_time_to_quality`)."""
    from attnlab.chapter.time_to_quality import plot_time_to_quality
    from attnlab.utils.files import atomic_path

    fig = plot_time_to_quality(results)  # a pyplot-free Figure: nothing to close
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")


# --------------------------------------------------------------------------- command line
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipes", default=",".join(RECIPES), help=f"comma-separated, from {list(RECIPES)}")
    ap.add_argument("--budget", type=float, default=600.0, help="the longest point, in training seconds")
    ap.add_argument("--points", help="comma-separated training seconds (default: 0.1, 0.25, 0.5, 1 x --budget)")
    ap.add_argument("--valid-limit", type=int, default=500, help="distinct validation sources scored")
    ap.add_argument("--num-examples", type=int, help="first N corpus pairs only (smoke runs)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=JSON", help="a laptop preset field")
    ap.add_argument("--save", metavar="DIR", help="the run folder of laptop's longest point (a new folder)")
    ap.add_argument("--runs", metavar="DIR", help="keep every laptop point's run folder in DIR (default: none)")
    ap.add_argument("--json", help="write the curves here")
    ap.add_argument("--figure", help="write the picture here (PNG)")
    ap.add_argument("--label", help="name this run's laptop curve (e.g. a candidate's settings)")
    ap.add_argument("--plot", metavar="JSON[,JSON]", help="only draw --figure from curves saved with --json")
    ap.add_argument("--test-run", metavar="DIR", help="only score a saved run on the test split (touch it once)")
    ap.add_argument("--valid-run", nargs="+", metavar="DIR", help="only score saved runs on the validation sources")
    ap.add_argument("--average", type=int, metavar="K", help="with --valid-run: also their last K checkpoints averaged")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="where to train and decode: cpu (default), cuda, cuda:1 ...")
    ap.add_argument("--preset", default="laptop", help="the attnlab recipe of the curve (default laptop; gpu)")
    ap.add_argument("--record", metavar="STEM", help="--valid-run/--test-run: the record's name (default laptop_*)")
    args = ap.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    if args.average is not None and (args.average < 1 or not args.valid_run):
        ap.error(f"--average expects K >= 1 with --valid-run DIR...; got --average {args.average}")
    if args.points is None:
        args.points = ",".join(f"{args.budget * f:g}" for f in DEFAULT_POINTS)
    try:
        budget_points(ap, args)
    except ValueError:
        ap.error(f"--points expects comma-separated seconds such as 60,150,300,600; got {args.points!r}")
    if not all(p > 0 and math.isfinite(p) for p in args.points):
        ap.error(f"--points expects positive seconds; got {args.points}")
    args.points = sorted(set(args.points))
    args.recipes = args.recipes.split(",")
    args.preset_label = "600 s `laptop`" if args.preset == "laptop" else f"`{args.preset}`"
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: CUDA is not available here; use --device cpu")
    unknown = [r for r in args.recipes if r not in RECIPES]
    if unknown:
        ap.error(f"--recipes expects names from {list(RECIPES)}; got {unknown}")
    try:
        args.overrides = parse_set(args.set, no_overrides())
    except ValueError as exc:
        ap.error(str(exc))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    print_machine()
    try:
        if args.test_run:
            rows = evaluate_split(args.test_run, device=args.device)
            title = f"The saved {args.preset_label} run on the test split, touched once"
            metric = "multi-reference sacreBLEU and chrF on every distinct test source of 3-10 words"
            write_result(__file__, args.argv, rows, stem=args.record or "laptop_test", title=title, metric=metric)
            return 0
        if args.valid_run:
            return valid_runs(args)
        if args.plot:
            if not args.figure:
                raise ValueError("--plot draws a picture: add --figure PATH")
            results = [r for path in args.plot.split(",") for r in json.loads(Path(path).read_text())]
            figure(results, args.figure)
            return 0
        return curves(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"time_to_quality.py: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
