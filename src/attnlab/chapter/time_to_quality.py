"""Time to quality: validation BLEU against training wall-clock seconds, as a figure for the demo report.

    measured = load_measured_curves()               # the 600 s curves of benchmarks/time_to_quality.py
    own = run_curve("runs/demo/transformer")        # this machine's run: each kept checkpoint, scored
    fig = plot_time_to_quality(measured["recipes"], own, "this demo's cpu-small run")

The measured curves (the `laptop` recipe, one run per point up to 600 s, and a plain `torch.nn.Transformer`
recipe) take half an hour to draw, too long for the demo, so they ship with attnlab (`attnlab/measured/`:
the benchmark's record, benchmarks/results/time_to_quality.json, is such a file) with where, when and how
they were measured. A run's own curve comes from its checkpoints: each is scored the
way the benchmark scores (`held_out_sources`, `score_sources`) at the training seconds its log gives.
A run folder is described and timed the way the benchmark's recipe search compares runs: `run_settings`
(what it was trained with, how far it got), `decode_speed`, and `averaged_translator` (its last K
checkpoints averaged, judged without retraining).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from importlib import resources
from pathlib import Path

from matplotlib.figure import Figure

from attnlab.chapter.report import Section
from attnlab.data import load_data
from attnlab.metrics import corpus_bleu, group_by_source, reference_text
from attnlab.runs.checkpoints import average_checkpoints, list_checkpoints, save_tensors
from attnlab.runs.config import read_run_config
from attnlab.runs.layout import META_FILE
from attnlab.runs.loading import load_translator
from attnlab.utils.files import read_json
from attnlab.viz.files import save_figure

PLAIN_RECIPE = "torch-tutorial"  # the benchmark's name for the plain nn.Transformer recipe


def measured_curves_path(name: str = "time_to_quality") -> Path:
    """A curve file attnlab ships: 'time_to_quality' (the presets) or 'positions' (the position schemes)."""
    return Path(str(resources.files("attnlab") / "measured" / f"{name}.json"))


def load_measured_curves(path: str | os.PathLike | None = None) -> dict:
    """{'measured', 'commands', 'metric', 'source', 'recipes': [{'recipe', 'curve': [{'seconds',
    'valid_bleu', ...}], ...}]}, from such a file, the benchmark's record (benchmarks/results/
    time_to_quality.json: 'command' and 'date' stand for 'commands' and 'measured') or its bare --json
    list. Raises FileNotFoundError / ValueError saying what is wrong."""
    path = Path(path) if path is not None else measured_curves_path()
    if not path.is_file():
        raise FileNotFoundError(
            f"no measured time-to-quality curves at {path}; run benchmarks/time_to_quality.py --json FILE "
            f"and pass FILE, or reinstall attnlab (it ships them)"
        )
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        what = "expected the curves benchmarks/time_to_quality.py writes"
        raise ValueError(f"{path} is not JSON ({exc}); {what}") from None
    if isinstance(data, list):  # a bare --json file of the benchmark: curves without their provenance
        data = {"recipes": data}
    if isinstance(data, dict) and "command" in data and "commands" not in data:  # the benchmark's record
        features = " ".join(data.get("cpu_features") or []) or "none recorded"
        where = f"{data.get('date')}, torch {data.get('torch')}, CPU features {features}"
        data = {
            **data,
            "commands": [data["command"]] if isinstance(data["command"], str) else list(data["command"]),
            "measured": data.get("measured") or where,
        }
    recipes = data.get("recipes") if isinstance(data, dict) else None
    if not recipes or not all(isinstance(r, dict) and r.get("curve") for r in recipes):
        raise ValueError(f"{path} holds no curves; expected {{'recipes': [{{'recipe', 'curve': [...]}}]}}")
    return data


def held_out_sources(examples, vocab, limit: int, min_words: int = 3, max_words: int = 10):
    """Distinct sources of `min_words`..`max_words` words, each with all of its references, first `limit`:
    [(source text, source ids, [reference texts as hypotheses are written])]."""
    sources, refs = group_by_source(examples)
    keep = [
        (ex.src_text, ex.src_ids, [reference_text(t, vocab) for t in rs])
        for ex, rs in zip(sources, refs)
        if min_words <= len(ex.src_text.split()) <= max_words
    ]
    return keep[:limit]


def score_sources(translator, sources, beam: int = 1) -> float:
    """Multi-reference corpus BLEU of `translator` on `held_out_sources` output."""
    found = translator.search([ids for _, ids, _ in sources], translator.options(beam=beam, scores=False))
    hyps = [translator.tgt_vocab.decode(hs[0].tokens) for hs in found]
    return corpus_bleu(hyps, [refs for _, _, refs in sources])


def training_seconds(run_dir: str | os.PathLike) -> dict[int, float]:
    """step -> seconds of training up to that step, from the run's log.jsonl ('train' and 'end' events).
    Each invocation's clock starts at 0, so a resumed run adds the seconds spent up to its resume step."""
    seconds: dict[int, float] = {}
    offset = 0.0
    log = Path(run_dir) / "log.jsonl"
    for line in log.read_text().splitlines() if log.is_file() else []:
        event = json.loads(line)
        if event.get("event") == "resume":
            offset = seconds.get(event["step"], offset)
        elif event.get("event") in ("train", "end") and "elapsed_s" in event:
            seconds[event["step"]] = offset + event["elapsed_s"]
    return seconds


def run_settings(run_dir: str | os.PathLike) -> dict:
    """What a run was trained with and how far it got, as one table row: 'run' (the folder's name),
    'precision' (what training ran: `auto`'s pick), 'schedule', 'layers' ("encoder + decoder"), 'd',
    'steps' and 'seconds' (from its log; None before its end), and 'averaged in run' where its
    config sets `train.average_last`."""
    cfg = read_run_config(run_dir)
    model, train = cfg.get("model", {}), cfg.get("train", {})
    encoder = model.get("num_layers")
    decoder = model.get("decoder_layers") or encoder  # unset: as deep as the encoder
    seconds = training_seconds(run_dir)
    final = max(seconds, default=None)
    row = {
        "run": Path(run_dir).name,
        "precision": (cfg.get("precision") or {}).get("picked", train.get("precision", "fp32")),
        "schedule": train.get("schedule"),
        "layers": f"{encoder} + {decoder}",
        "d": model.get("num_hiddens"),
        "steps": final,
        "seconds": None if final is None else round(seconds[final], 1),
    }
    if "average_last" in train:
        row["averaged in run"] = train["average_last"]
    return row


def decode_speed(translator, sources, beam: int = 4) -> float:
    """Sentences per second of `translator.search` on `sources` (`held_out_sources` output) at `beam`, the
    run's other decoding defaults kept. Timed as the difference of the sources twice over and once, after
    a warm-up: what stays is the cost of the sentences, not that of the first call (kernels built on
    first use, caches grown)."""
    ids = [s for _, s, _ in sources]
    opts = translator.options(beam=beam)
    translator.search(ids, replace(opts, scores=False))  # warm-up
    took = []
    for copies in (1, 2):
        start = time.perf_counter()
        translator.search(ids * copies, replace(opts, scores=False))
        took.append(time.perf_counter() - start)
    extra = took[1] - took[0]
    return len(ids) / extra if extra > 0 else 2 * len(ids) / took[1]  # noise beat a tiny input: the mean


def averaged_translator(run_dir: str | os.PathLike, last: int, folder: str | os.PathLike):
    """The run's translator with the mean of its newest `last` checkpoints as weights, written as a
    .safetensors file into `folder` (a scratch folder of the caller's). ValueError (one line) when the
    run kept fewer checkpoints."""
    ckpts = list_checkpoints(run_dir)
    if last < 1 or len(ckpts) < last:
        raise ValueError(
            f"averaging the last {last} checkpoints of {run_dir} needs at least {max(last, 1)}, found "
            f"{len(ckpts)}; pass a smaller --average, or train with a larger keep_last / smaller checkpoint_every"
        )
    path = Path(folder) / f"{Path(run_dir).name}_averaged_last{last}.safetensors"
    save_tensors(average_checkpoints(ckpts[-last:]), path)
    return load_translator(run_dir, weights=path)


def run_curve(run_dir: str | os.PathLike, limit: int = 500, split: str = "valid") -> list[dict]:
    """[{'seconds', 'steps', 'valid_bleu'}] of a finished run: each kept checkpoint whose step the log
    timed, then the final weights, scored greedily on its `split` (`held_out_sources`, `limit` of them).
    Empty when the split has no 3-10-word source."""

    run_dir = Path(run_dir)
    seconds = training_seconds(run_dir)
    data = load_data(read_run_config(run_dir)["data"])
    translator = load_translator(run_dir)
    sources = held_out_sources(getattr(data, split), translator.tgt_vocab, limit)
    if not sources:
        return []
    points = []
    for ckpt in list_checkpoints(run_dir):
        step = read_json(ckpt / META_FILE)["step"]
        if step in seconds:
            bleu = score_sources(load_translator(run_dir, weights=ckpt), sources)
            points.append({"seconds": round(seconds[step], 2), "steps": step, "valid_bleu": bleu})
    final = max(seconds, default=None)  # the end event: the final weights at the run root
    if final is not None and all(p["steps"] != final for p in points):
        points.append(
            {"seconds": round(seconds[final], 2), "steps": final, "valid_bleu": score_sources(translator, sources)}
        )
    return sorted(points, key=lambda p: p["seconds"])


def plot_time_to_quality(recipes: list[dict], own: list[dict] | None = None, own_label: str = "this run"):
    """Validation BLEU against training seconds: one line per measured recipe (greedy), a dotted one for
    each recipe whose points hold 'valid_bleu_beam4', `own` dashed on top. Returns a matplotlib Figure."""
    fig = Figure(figsize=(6, 3.6), dpi=120, layout="tight")  # no pyplot: no GUI backend, nothing to close
    ax = fig.subplots()
    for r in recipes:
        xs = [0] + [p["seconds"] for p in r["curve"]]
        ys = [0] + [p["valid_bleu"] for p in r["curve"]]
        label = "plain nn.Transformer (PyTorch tutorial recipe)" if r["recipe"] == PLAIN_RECIPE else r["recipe"]
        beam = [p.get("valid_bleu_beam4") for p in r["curve"]]
        (line,) = ax.plot(xs, ys, marker="o", label=label + (", greedy" if None not in beam else ""))
        if None not in beam:  # scored with beam 4 too: the same colour, dotted
            ax.plot(xs, [0, *beam], marker="^", linestyle=":", color=line.get_color(), label=f"{label}, beam 4")
    if own:
        xs = [0] + [p["seconds"] for p in own]
        ys = [0] + [p["valid_bleu"] for p in own]
        ax.plot(xs, ys, marker="s", linestyle="--", color="black", label=own_label)
    ax.set_xlabel("training wall-clock seconds (2 CPU cores)")
    ax.set_ylabel("validation BLEU (multi-reference)")
    ax.set_title("Time to quality: English→French, 3–10-word sources")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def time_to_quality_section(run_dir, fig_dir, own_label: str, curves_path=None, limit: int = 500):
    """The demo report's "Time to quality" Section: the measured curves (or a note saying why they are
    missing) with `run_dir`'s own curve on top, saved as fig_dir/time_to_quality.png/.svg."""
    try:
        measured = load_measured_curves(curves_path)
        recipes, note = measured["recipes"], ""
    except (FileNotFoundError, ValueError) as exc:
        measured, recipes, note = {}, [], f"The measured curves are missing: {exc}. "
    own = run_curve(run_dir, limit)
    if not recipes and not own:
        return Section("Time to quality", note + "This run has no 3–10-word validation source to score either.")
    fig = plot_time_to_quality(recipes, own, own_label)
    figures = save_figure(fig, Path(fig_dir) / "time_to_quality", ("png", "svg"))[:1]
    where = ""
    if recipes:
        commands = "; ".join(f"`{c}`" for c in measured.get("commands", [])) or "benchmarks/time_to_quality.py"
        dotted = any("valid_bleu_beam4" in p for r in recipes for p in r["curve"])
        where = (
            f"The solid curves{' (dotted: beam 4)' if dotted else ''} were measured once, not by this demo "
            f"(they take half an hour): "
            f"{measured.get('measured', 'when and where unrecorded')}, with {commands}. "
            f"Their score: {measured.get('metric', 'validation BLEU')}. "
        )
    max_len = read_run_config(run_dir)["data"].get("max_len")
    shorter = (
        f" (its recipe keeps pairs of at most {max_len} words, so its sources are shorter and the curves are "
        f"not directly comparable)"
        if max_len is not None and max_len < 10
        else ""
    )
    ours = (
        f"The dashed curve is this demo's own run on this machine ({own_label}): each checkpoint it kept, "
        f"at the training seconds its log records, scored the same way on up to {limit} distinct 3–10-word "
        f"sources of its own validation split{shorter}. "
        if own
        else "This demo's run had no 3–10-word validation source to score. "
    )
    return Section("Time to quality", note + where + ours, figures=figures, tables=[_table(recipes, own, own_label)])


def _table(recipes: list[dict], own: list[dict], own_label: str):
    headers = ["recipe", "seconds", "steps", "validation BLEU"]
    rows = [
        [r["recipe"], p["seconds"], p["steps"], round(p["valid_bleu"], 2)] for r in recipes for p in r["curve"][-1:]
    ]
    rows += [[own_label, p["seconds"], p["steps"], round(p["valid_bleu"], 2)] for p in own]
    return headers, rows
