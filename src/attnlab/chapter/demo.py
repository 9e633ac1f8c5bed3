"""`attnlab demo`'s pipeline: the attention chapter end to end, written up in one report.

Steps: the chapter's demonstrations (attention cues, kernel regression, positional encoding, scaling,
parameter counts, normalisation); then the Bahdanau and the Transformer translators trained on the
English–French pairs, their translations of the book's four sentences with BLEU, their attention maps,
the Transformer's test-set BLEU, its time-to-quality curve (its checkpoints scored on validation, drawn
over the curves benchmarks/quality/time_to_quality.py measured, which attnlab ships) and which of its heads
matter. The trained Transformer is saved where `attnlab translate` and `attnlab serve` look by default.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnlab.chapter.budget import (
    DEFAULT_BUDGET,
    DemoClock,
    StageTime,
    budget_section,
    load_quiet_reference,
)
from attnlab.chapter.cues import attention_cues
from attnlab.chapter.nadaraya_watson import kernel_regression
from attnlab.chapter.parameters import params
from attnlab.chapter.report import Section, format_table, write_report
from attnlab.chapter.scoring_functions import scaling
from attnlab.chapter.self_attention import positional_encoding
from attnlab.chapter.time_to_quality import time_to_quality_section
from attnlab.chapter.transformer import norm_comparison
from attnlab.chapter.translators import (
    TrainedModel,
    attention_sections,
    book_sentences_section,
    test_split_section,
    training_section,
    which_heads,
)
from attnlab.data import data_credit, resolve_data_path, sample_data_path
from attnlab.runs.outputs import claim_output, write_output
from attnlab.training.config import TrainConfig
from attnlab.training.launch import train_run
from attnlab.training.presets import get_preset
from attnlab.utils.checks import check_seed
from attnlab.utils.runtime import free_threads

# What each scale trains: (run name, model type, preset, overrides of train settings, of data settings, weight).
# A weight is the trainer's part of the training time the budget leaves (`DemoClock.share`): the demo's
# Transformer, the one translate and serve use, gets the most; its preset's own 240 s is its cap.
SCALES: dict[str, list[tuple[str, str, str, dict, dict, float]]] = {
    "full": [
        ("bahdanau", "bahdanau", "d2l", {}, {}, 1.5),
        ("transformer-d2l", "transformer", "d2l", {}, {}, 1.0),
        # Every checkpoint kept (not only the last 5): each is a point of the time-to-quality curve.
        ("transformer", "transformer", "cpu-small", {"keep_last": 100}, {}, 2.4),
    ],
    "tiny": [
        ("bahdanau", "bahdanau", "d2l", {"epochs": 3}, {"num_examples": 200}, 1.0),
        ("transformer-d2l", "transformer", "d2l", {"epochs": 3}, {"num_examples": 200}, 1.0),
        (
            "transformer",
            "transformer",
            "tiny",
            {"max_steps": 20, "checkpoint_every": 5, "keep_last": 100},
            {},
            1.0,
        ),
    ],
}


def find_data(path: str | None) -> tuple[Path, str]:
    """The corpus, or our own small sample when none can be found or downloaded (said loudly)."""

    try:
        found = resolve_data_path(path)
        return found, f"data: {found}"
    except FileNotFoundError as exc:
        if path is not None:  # an explicit --data that does not exist is an error, not a fallback
            raise
        sample = sample_data_path()
        return sample, (
            f"NOTE: the English–French corpus is not available ({exc}).\n"
            f"The demo uses attnlab's own small sample {sample} instead: every step runs, translations will be poor. "
            "Give it the corpus with ATTNLAB_DATA=PATH/fra-eng.zip or --data PATH (docs/data.md)."
        )


def train_model(
    name,
    model_type,
    preset,
    train_over,
    data_over,
    data_path,
    out: Path,
    seed: int,
    *,
    budget: float | None = None,
    threads: int | None = None,
) -> TrainedModel:
    """Train one preset into out/<name> (the demo's own temp folder: see `run_demo`), for at most `budget`
    seconds and on at most `threads` intra-op threads (a preset that pins fewer keeps its own)."""

    spec = get_preset(model_type, preset)
    train = {**spec["train"], **train_over, "seed": seed}
    if budget is not None:
        own = train.get("time_budget")
        train["time_budget"] = budget if own is None else min(own, budget)
    if threads is not None:
        train["threads"] = threads if train.get("threads") is None else min(train["threads"], threads)
    train_cfg = TrainConfig.from_dict(train)
    data_cfg = {**spec["data"], **data_over, "path": str(data_path)}
    run_dir = out / name
    limit = f", at most {train_cfg.time_budget:.0f} s" if train_cfg.time_budget is not None else ""
    print(f"\n== training {name}: {model_type}, preset {preset}, {train_cfg.threads or 'all'} thread(s){limit} ==")
    t0 = time.perf_counter()
    result = train_run(model_type, spec["model"], train_cfg, data_cfg, run_dir)
    seconds = time.perf_counter() - t0
    loss = f"{result.train_loss:.4f}" if result.train_loss is not None else "n/a"
    print(f"{name}: {result.step} steps in {seconds:.0f} s, final training loss {loss} ({result.stop_reason})")
    return TrainedModel(
        name, model_type, preset, run_dir, result, seconds, budget=train_cfg.time_budget, threads=train_cfg.threads
    )


def run_demo(
    out: str | Path,
    data: str | None = None,
    scale: str = "full",
    seed: int = 0,
    force: bool = False,
    budget: float = DEFAULT_BUDGET,
) -> Path:
    """The whole chapter into `out`: the section demonstrations, then the translators of `SCALES[scale]`
    trained on the corpus at `data` (or the bundled sample), each scored and drawn; returns report.html.
    Progress goes to stdout as it happens. The whole run keeps to `budget` seconds: each trainer gets its
    share of what is left (`DemoClock.share`) on the threads free when it starts (`free_threads`), and the
    report says per stage what it got and what a quiet machine reaches.

    `out` must be new, or (with `force`) an earlier demo holding nothing else (`attnlab.runs.outputs`).
    The demo is built in a temp folder beside it and renamed into place at the end, so a Ctrl-C or a
    failure leaves the earlier demo (or nothing) where translate and serve look."""

    check_seed(seed)
    if scale not in SCALES:
        raise ValueError(f"unknown demo scale {scale!r}; expected one of {sorted(SCALES)}")
    if not (budget > 0 and math.isfinite(budget)):
        raise ValueError(f"--budget must be seconds above 0, got {budget}; the default is {DEFAULT_BUDGET:.0f}")
    clock = DemoClock(budget)
    # The corpus is found (or refused) before any work: a wrong --data must not cost the chapter's demos.
    data_path, data_note = find_data(data)
    claim = claim_output(out, "demo", force=force, sources=[data_path])
    with write_output(claim, {"scale": scale, "seed": seed}) as tmp:
        _build_demo(tmp, data_path, data_note, scale, seed, clock)
    out = claim.path
    cli = cli_command()
    run = out / "transformer"
    # translate and serve look in runs/demo/transformer by default; elsewhere the run is named.
    where = "" if run.resolve() == (Path.cwd() / "runs" / "demo" / "transformer").resolve() else f" --checkpoint {run}"
    print(f"\nreport: {out / 'report.html'}  ({clock.elapsed():.0f} s in all, budget {budget:.0f} s)")
    print(f"the trained Transformer is in {run}; the attnlab command is {cli}:")
    print(f'  {cli} translate{where} "i\'m home ."')
    print(f"  {cli} serve{where}        # the attention explorer on http://127.0.0.1:8000")
    if cli != "attnlab" and cli.endswith("/bin/attnlab"):
        print(f"  (or `source {cli[: -len('/attnlab')]}/activate` once, then plain `attnlab ...`)")
    print(f"data: {data_credit(data_path)}")
    return out / "report.html"


def cli_command() -> str:
    """How this shell reaches the attnlab command: `attnlab` when it is on PATH, else the script of the
    environment running now (`.venv/bin/attnlab` after `make demo`), else `python -m attnlab`."""
    script = Path(sys.prefix) / "bin" / "attnlab"
    on_path = shutil.which("attnlab")
    if on_path is not None and (not script.is_file() or Path(on_path).resolve() == script.resolve()):
        return "attnlab"
    if script.is_file():
        try:
            return str(script.relative_to(Path.cwd()))
        except ValueError:
            return str(script)
    return f"{sys.executable} -m attnlab"


def _build_demo(out: Path, data_path: Path, data_note: str, scale: str, seed: int, clock: DemoClock) -> None:
    fig_dir = out / "figures"
    tiny = scale == "tiny"
    sections: list[Section] = []
    stages: list[StageTime] = []

    # 1. The chapter's demonstrations: numbers, tables, figures.
    t0 = clock.elapsed()
    demos: list[tuple[Callable[..., Any], dict[str, Any]]] = [
        (attention_cues, {}),
        (kernel_regression, {"seed": seed}),
        (positional_encoding, {}),
        (scaling, {"samples": 200 if tiny else 1000, "seed": seed}),
        (params, {}),
        (norm_comparison, {}),
    ]
    for fn, kwargs in demos:
        result = fn(**kwargs)
        print(f"\n== {result.title} ==")
        for headers, rows in result.tables:
            print(format_table(headers, rows))
        sections.append(result.save(fig_dir))
        for figure in sections[-1].figures:  # every heading has something under it, a figure-only one too
            print(f"figure: {figure}")
    stages.append(StageTime("the chapter's demonstrations", clock.elapsed() - t0))

    # 2. Translators.
    print(f"\n{data_note}")
    trained = []
    plan = SCALES[scale]
    for i, (name, model_type, preset, train_over, data_over, weight) in enumerate(plan):
        share = clock.share(weight, sum(p[-1] for p in plan[i + 1 :]))
        t = train_model(
            name, model_type, preset, train_over, data_over, data_path, out, seed, budget=share, threads=free_threads()
        )
        trained.append(t)
        stages.append(StageTime(f"training {name}", t.seconds, t))
    t0 = clock.elapsed()
    scale_down = clock.scoring_scale()  # < 1 when the trainers ran over their share: fewer sentences scored

    section, perfect = book_sentences_section(trained, data_note)
    sections.append(section)
    sections.append(training_section(trained, fig_dir))
    sections += attention_sections(trained, fig_dir)
    quality, eval_rows = test_split_section(trained, 50 if tiny else max(50, int(1000 * scale_down)))
    if quality is not None:
        sections.append(quality)

    for t in trained:
        if t.name == "transformer":
            limit = 50 if tiny else max(50, int(500 * scale_down))
            section = time_to_quality_section(t.run_dir, fig_dir, f"{t.preset}, this demo", limit=limit)
            print(f"\n== time to quality ==\n{format_table(*section.tables[0])}" if section.tables else "")
            sections.append(section)

    for t in trained:
        if t.name == "transformer":
            sections.append(which_heads(t, fig_dir, limit=30 if tiny else max(30, int(150 * scale_down))))
    note = f"yes: scored at {scale_down:.0%} of the full sizes" if scale_down < 1 else "no"
    stages.append(StageTime("scoring, drawing, head analysis", clock.elapsed() - t0, note=note))

    outcomes = {
        t.name: {
            "book_sentences": perfect[t.name],
            "final_loss": round(t.result.train_loss, 4) if t.result.train_loss is not None else "n/a",
        }
        for t in trained
    }
    for row in eval_rows:
        outcomes[row[0]]["test_bleu"] = row[2]
    # The quiet machine's figures are of the full scale; the tiny one is compared with nothing.
    budget = budget_section(stages, clock, outcomes, load_quiet_reference() if not tiny else {})
    print(f"\n== time budget ==\n{format_table(*budget.tables[0])}\n\n{format_table(*budget.tables[1])}")
    sections.insert(next(i for i, s in enumerate(sections) if s.title == "Training") + 1, budget)
    write_report(out / "report.html", sections, title="attnlab: the attention chapter", credit=data_credit(data_path))
