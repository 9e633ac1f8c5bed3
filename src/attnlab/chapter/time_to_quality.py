"""Time to quality: validation BLEU against training wall-clock seconds, as a figure for the demo report.

    measured = load_measured_curves()               # the 600 s curves of benchmarks/quality/time_to_quality.py
    own = run_curve("runs/demo/transformer")        # this machine's run: each kept checkpoint, scored
    fig = plot_time_to_quality(measured["recipes"], own, "this demo's cpu-small run")

The measured curves (the `laptop` recipe, one run per point up to 600 s, and a plain `torch.nn.Transformer`
recipe) take half an hour to draw, too long for the demo, so they ship with attnlab (`attnlab/measured/`:
the benchmark's record, benchmarks/results/time_to_quality.json, is such a file) with where, when and how
they were measured. A run's own curve comes from its checkpoints, each scored the way the benchmark scores
(`attnlab.training.quality`, which draws nothing) at the training seconds its log gives.
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

from matplotlib.figure import Figure

from attnlab.chapter.report import Section
from attnlab.runs.config import read_run_config
from attnlab.training.quality import PLAIN_RECIPE, run_curve
from attnlab.viz.files import save_figure


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
            f"no measured time-to-quality curves at {path}; run benchmarks/quality/time_to_quality.py --json FILE "
            f"and pass FILE, or reinstall attnlab (it ships them)"
        )
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        what = "expected the curves benchmarks/quality/time_to_quality.py writes"
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
        commands = "; ".join(f"`{c}`" for c in measured.get("commands", [])) or "benchmarks/quality/time_to_quality.py"
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
