"""The demo's clock: one budget for the whole chapter, each translator's share of what is left, the threads a
trainer may use on a machine others share, and the quiet-machine figures a run is shown beside.

    clock = DemoClock(540)
    seconds = clock.share(weight=1.0, weights_after=3.4, cap=240)   # this trainer's time budget
    threads = free_threads()          # attnlab.utils.runtime: 1 on a busy 2-core machine, as `attnlab train` picks
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.chapter.report import Section
from attnlab.chapter.time_to_quality import measured_curves_path
from attnlab.training.presets import get_preset
from attnlab.utils.files import read_json_object
from attnlab.utils.runtime import usable_cores

DEFAULT_BUDGET = 540.0  # seconds for the whole demo: 9 minutes, so start-up and the report fit in 10
AFTER_TRAINING = 0.15  # share of the budget kept for the stages after training (scoring, heads, report)
MIN_SHARE = 10.0  # seconds a trainer gets however late it starts: a model that learned something


@dataclass
class DemoClock:
    """Seconds since the demo began, against its budget (`seconds`)."""

    seconds: float = DEFAULT_BUDGET
    start: float = field(default_factory=time.perf_counter)
    load: float = field(default_factory=lambda: os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        """Seconds of the budget not yet spent (negative once it is overrun)."""
        return self.seconds - self.elapsed()

    def share(self, weight: float, weights_after: float, cap: float | None = None) -> float:
        """A trainer's seconds: its weight's part of what is left for training (the budget less what is kept
        for the stages after it), so time one stage did not use goes to the next; at most `cap` (a preset's
        own budget), at least `MIN_SHARE`."""
        for_training = self.left() - AFTER_TRAINING * self.seconds
        seconds = for_training * weight / (weight + weights_after)
        if cap is not None:
            seconds = min(seconds, cap)
        return round(max(MIN_SHARE, seconds), 1)

    def scoring_scale(self) -> float:
        """How much of the scoring stages' full sizes the time left allows: 1 while their share is intact,
        down to 0.2 when the trainers overran it."""
        return max(0.2, min(1.0, self.left() / (AFTER_TRAINING * self.seconds)))


def load_quiet_reference(path: str | os.PathLike | None = None) -> dict:
    """The demo's figures on a quiet machine (attnlab/measured/demo.json): {'measured', 'machine',
    'seconds', 'stages': {run name: {'steps', 'seconds', 'threads', 'book_sentences', ...}}, 'commands'}.
    Empty when the file is missing or unreadable: the report then says so instead of comparing."""
    path = Path(path) if path is not None else measured_curves_path("demo")
    try:
        data = read_json_object(path, "quiet-machine demo figures")
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data.get("stages"), dict) else {}


@dataclass
class StageTime:
    """One stage of the demo as it ran: its name, wall seconds, and the trained model (`TrainedModel`) if any."""

    name: str
    seconds: float
    trained: Any = None
    note: str = ""  # e.g. what the scoring stages left out to keep to the budget


def _cut_short(t, quiet: dict) -> str:
    """Whether (and by what) a trainer stopped before what it reaches on a quiet machine."""
    r = t.result
    own = get_preset(t.model_type, t.preset)["train"].get("time_budget")
    if r.stop_reason != "time_budget":
        return "no"
    if own is None or (t.budget is not None and t.budget < own):
        return f"yes: the demo's budget ({t.budget:.0f} s)"
    steps = quiet.get("steps")
    if steps and r.step < 0.9 * steps:
        return f"by load: {r.step:,} of a quiet machine's {steps:,} steps in its {own:.0f} s"
    return "no"


def budget_section(stages: list[StageTime], clock: DemoClock, outcomes: dict, reference: dict) -> Section:
    """The report's "Time budget" section: per stage the threads, seconds given and used, steps, why it
    stopped and whether that cut it short, beside a quiet machine's figures (`load_quiet_reference`); then
    each translator's results beside the quiet machine's. `outcomes`: run name -> {'book_sentences',
    'test_bleu', 'final_loss'} of this run."""
    quiet = reference.get("stages", {})
    headers = ["stage", "threads", "budget (s)", "seconds", "steps", "stopped by", "quiet machine", "cut short"]
    rows: list[list] = []
    for s in stages:
        t, q = s.trained, quiet.get(s.trained.name if s.trained is not None else s.name, {})
        where = ", ".join(f"{q[k]:,} {k}" for k in ("steps", "seconds") if k in q) or "—"
        if t is None:
            rows.append([s.name, "—", "—", round(s.seconds), "—", "—", where, s.note or "no"])
            continue
        budget = round(t.budget) if t.budget is not None else "—"
        rows.append(
            [s.name, t.threads or "all", budget, round(s.seconds), t.result.step, t.result.stop_reason, where]
            + [_cut_short(t, q)]
        )
    result_headers = ["model", "book sentences at 1.000", "quiet machine", "final loss", "quiet", "test BLEU", "quiet"]
    result_rows = []
    for name, got in outcomes.items():
        q = quiet.get(name, {})
        result_rows.append(
            [name, f"{got['book_sentences']}/4", f"{q['book_sentences']}/4" if "book_sentences" in q else "—"]
            + [got.get("final_loss", "—"), q.get("final_loss", "—"), got.get("test_bleu", "—"), q.get("test_bleu", "—")]
        )
    cut = [r[0] for r in rows if r[-1] != "no"]
    paragraph = (
        f"The whole demo had {clock.seconds:.0f} s and took {clock.elapsed():.0f} s, on {usable_cores()} usable "
        f"core(s) at a load average of {clock.load:.1f} when it began. Each translator trained for its share of the "
        "time left (a preset's own limit, such as cpu-small's 240 s, being its cap) on the threads free when it "
        "started: on a shared machine two threads that fight other processes run many times slower than one. "
        + (f"Cut short on this machine: {', '.join(cut)}. " if cut else "Nothing was cut short. ")
        + "On a busy machine fewer steps fit in the same seconds, and the translators translate worse."
    )
    if reference:
        paragraph += (
            " The quiet-machine figures ship with attnlab (attnlab/measured/demo.json): "
            f"{reference.get('measured', '')}"
            f" Commands: {'; '.join(f'`{c}`' for c in reference.get('commands', []))}."
        )
    else:
        paragraph += " No quiet-machine figures are compared (attnlab/measured/demo.json holds the full scale's)."
    return Section("Time budget", paragraph, tables=[(headers, rows), (result_headers, result_rows)])
