"""The demo's clock (attnlab.chapter.budget): free threads, each trainer's share, what the report says was cut
short, the quiet-machine figures it compares with, and the closing lines' command and data credit."""

from __future__ import annotations

import html
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from attnlab.chapter.budget import (
    AFTER_TRAINING,
    MIN_SHARE,
    DemoClock,
    StageTime,
    budget_section,
    load_quiet_reference,
)
from attnlab.chapter.demo import SCALES, cli_command
from attnlab.chapter.report import Section, render_report
from attnlab.data import ATTRIBUTION, SAMPLE_CREDIT, data_credit, sample_data_path
from attnlab.training.presets import get_preset
from attnlab.utils.runtime import free_threads, load_now


@pytest.mark.parametrize(
    ("cores", "load", "threads"),
    [(2, 0.2, 2), (2, 1.1, 2), (2, 1.6, 1), (2, 5.5, 1), (1, 0.0, 1), (8, 3.0, 6), (8, 40.0, 1)],
)
def test_free_threads_leaves_the_cores_others_use(cores, load, threads):
    assert free_threads(cores=cores, load=load) == threads


def test_a_share_is_the_trainers_part_of_what_is_left_capped_and_floored():
    clock = DemoClock(100.0, start=time.perf_counter())
    left = 100.0 - AFTER_TRAINING * 100.0  # nothing spent yet
    assert clock.share(1.0, 1.0) == pytest.approx(left / 2, abs=0.5)
    assert clock.share(3.0, 1.0) == pytest.approx(left * 3 / 4, abs=0.5)
    assert clock.share(1.0, 0.0, cap=20.0) == 20.0  # a preset's own budget is the cap
    late = DemoClock(100.0, start=time.perf_counter() - 500.0)  # already over the budget
    assert late.share(1.0, 1.0) == MIN_SHARE
    assert late.scoring_scale() == 0.2 and clock.scoring_scale() == 1.0


def _trained(name, model_type, preset, steps, stop, budget, threads=1, seconds=100.0):
    result = SimpleNamespace(step=steps, stop_reason=stop)
    return SimpleNamespace(name=name, model_type=model_type, preset=preset, result=result, budget=budget,
                           threads=threads, seconds=seconds)  # fmt: skip


def test_the_budget_section_says_what_cut_each_stage_short():
    reference = {
        "measured": "a quiet machine.",
        "commands": ["attnlab demo"],
        "stages": {"bahdanau": {"steps": 2500, "seconds": 150}, "transformer": {"steps": 1374, "seconds": 241}},
    }
    bahdanau = _trained("bahdanau", "bahdanau", "d2l", 900, "time_budget", 90.0)
    d2l = _trained("transformer-d2l", "transformer", "d2l", 2000, "epochs", 99.0)
    small = _trained("transformer", "transformer", "cpu-small", 400, "time_budget", 240.0, 2)
    stages = [
        StageTime("the chapter's demonstrations", 12.0),
        StageTime("training bahdanau", 90.0, bahdanau),
        StageTime("training transformer-d2l", 30.0, d2l),
        StageTime("training transformer", 240.0, small),
        StageTime("scoring, drawing, head analysis", 40.0, note="yes: scored at 50% of the full sizes"),
    ]
    outcomes = {
        "bahdanau": {"book_sentences": 1, "final_loss": 2.5},
        "transformer": {"book_sentences": 2, "test_bleu": 9.0},
    }
    section = budget_section(stages, DemoClock(540.0), outcomes, reference)
    (headers, rows), (_, results) = section.tables
    cut = {str(row[0]): str(row[-1]) for row in rows}
    assert cut["training bahdanau"] == "yes: the demo's budget (90 s)"  # stopped before its 250 epochs
    assert cut["training transformer-d2l"] == "no"  # finished its epochs
    assert cut["training transformer"].startswith("by load: 400 of a quiet machine's 1,374 steps")  # its own 240 s
    assert cut["scoring, drawing, head analysis"].startswith("yes: scored at 50%")
    assert rows[1][headers.index("quiet machine")] == "2,500 steps, 150 seconds"
    assert rows[3][headers.index("threads")] == 2
    assert results[1][:3] == ["transformer", "2/4", "—"] and results[1][-2:] == [9.0, "—"]
    assert "Cut short on this machine: training bahdanau, training transformer, scoring" in section.paragraph
    assert "`attnlab demo`" in section.paragraph
    assert "nothing is compared" not in budget_section(stages, DemoClock(540.0), outcomes, {}).paragraph
    assert "No quiet-machine figures" in budget_section(stages, DemoClock(540.0), outcomes, {}).paragraph


def test_the_shipped_quiet_figures_cover_every_trainer_of_the_full_demo():
    reference = load_quiet_reference()
    assert reference["commands"] and reference["measured"]
    assert set(reference["stages"]) == {spec[0] for spec in SCALES["full"]}
    for name, model_type, preset, *_ in SCALES["full"]:
        quiet = reference["stages"][name]
        assert quiet["steps"] > 0 and quiet["seconds"] > 0 and 0 <= quiet["book_sentences"] <= 4
        if preset == "d2l":  # the book's fixed run: 600 pairs in batches of 64 = 10 steps an epoch
            assert quiet["steps"] == get_preset(model_type, preset)["train"]["epochs"] * 10
            assert quiet["threads"] == get_preset(model_type, preset)["train"]["threads"] == 1


def test_a_missing_or_broken_reference_compares_nothing(tmp_path):
    assert load_quiet_reference(tmp_path / "missing.json") == {}
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert load_quiet_reference(tmp_path / "bad.json") == {}


def test_the_footer_credits_the_data_the_demo_used(tmp_path):
    assert data_credit(sample_data_path()) == SAMPLE_CREDIT
    assert data_credit(os.path.relpath(sample_data_path())) == SAMPLE_CREDIT  # as a run's config.json may hold it
    assert data_credit(None) == ATTRIBUTION
    assert data_credit(Path("/data/fra-eng.zip")) == ATTRIBUTION
    page = render_report([Section("x")], tmp_path, "t", False, credit=SAMPLE_CREDIT)
    assert html.escape(SAMPLE_CREDIT) in page and html.escape(ATTRIBUTION) not in page


def test_the_closing_lines_name_the_command_this_shell_reaches(tmp_path, monkeypatch):
    venv = tmp_path / "checkout" / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "attnlab").write_text("#!/bin/sh\n")
    (venv / "bin" / "attnlab").chmod(0o755)
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.chdir(tmp_path / "checkout")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # not activated: the venv's bin is not on PATH
    assert cli_command() == ".venv/bin/attnlab"
    monkeypatch.setenv("PATH", str(venv / "bin"))  # activated
    assert cli_command() == "attnlab"
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "elsewhere"))  # no script: the module
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert cli_command() == f"{sys.executable} -m attnlab"


def test_the_demo_page_shows_the_shipped_quiet_figures():
    page = (Path(__file__).resolve().parents[2] / "docs" / "demo.md").read_text(encoding="utf-8")
    stages = load_quiet_reference()["stages"]
    for quiet in stages.values():
        assert f"{quiet['steps']:,} in {quiet['seconds']} s" in page
    assert f"BLEU {stages['transformer']['test_bleu']} / chrF {stages['transformer']['test_chrf']}" in page
    assert "src/attnlab/measured/demo.json" in page


@pytest.mark.skipif(not Path("/proc/loadavg").exists(), reason="the running-task count is Linux's /proc/loadavg")
def test_the_load_counts_a_process_that_just_started(monkeypatch):
    monkeypatch.setattr("os.getloadavg", lambda: (0.0, 0.0, 0.0))  # the 1-minute average has not seen it yet
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        assert load_now() >= 2.0  # the busy loop and this process, both running
        assert free_threads(cores=2, load=load_now()) == 1
    finally:
        busy.kill()
        busy.wait(timeout=30)
