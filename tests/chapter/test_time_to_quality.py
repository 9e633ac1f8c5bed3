"""The time-to-quality figure of the demo report: the shipped measured curves, a run's own curve from
its checkpoints, and a clear note (not a crash) when the measured curves are missing or broken."""

from __future__ import annotations

import json

import pytest
import torch
from train_helpers import needs_data, tiny_run

from attnlab.chapter.time_to_quality import (
    load_measured_curves,
    measured_curves_path,
    plot_time_to_quality,
    time_to_quality_section,
)
from attnlab.training.quality import (
    averaged_translator,
    decode_speed,
    held_out_sources,
    run_curve,
    run_settings,
    score_sources,
    training_seconds,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_shipped_curves_hold_both_recipes_and_say_how_they_were_measured():
    measured = load_measured_curves()
    assert measured_curves_path().is_file()
    names = [r["recipe"] for r in measured["recipes"]]
    assert "torch-tutorial" in names and any(n.startswith("laptop") for n in names)
    for r in measured["recipes"]:
        seconds = [p["seconds"] for p in r["curve"]]
        assert seconds == sorted(seconds) and seconds[-1] >= 600
        assert all(0 <= p["valid_bleu"] <= 100 for p in r["curve"])
    assert "benchmarks/quality/time_to_quality.py" in " ".join(measured["commands"]) and measured["measured"]


def test_missing_or_broken_curves_raise_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"benchmarks/quality/time_to_quality\.py"):
        load_measured_curves(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        load_measured_curves(tmp_path / "bad.json")
    (tmp_path / "empty.json").write_text(json.dumps({"recipes": []}))
    with pytest.raises(ValueError, match="no curves"):
        load_measured_curves(tmp_path / "empty.json")
    # The benchmark's own --json output (a bare list) is accepted too.
    (tmp_path / "bare.json").write_text(json.dumps([{"recipe": "x", "curve": [{"seconds": 1, "valid_bleu": 2}]}]))
    assert load_measured_curves(tmp_path / "bare.json")["recipes"][0]["recipe"] == "x"


def test_the_figure_draws_every_measured_curve_and_the_run_dashed():
    recipes = load_measured_curves()["recipes"]
    own = [{"seconds": 100.0, "steps": 10, "valid_bleu": 5.0}, {"seconds": 200.0, "steps": 20, "valid_bleu": 9.0}]
    fig = plot_time_to_quality(recipes, own, "mine")
    lines = fig.axes[0].get_lines()
    beams = sum(all("valid_bleu_beam4" in p for p in r["curve"]) for r in recipes)  # a dotted line each
    assert len(lines) == len(recipes) + beams + 1
    assert lines[-1].get_linestyle() == "--" and list(lines[-1].get_ydata()) == [0, 5.0, 9.0]
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "mine" in labels and any("nn.Transformer" in t for t in labels)


def test_a_resumed_runs_seconds_continue_from_its_resume_step(tmp_path):
    events = [
        {"event": "train", "step": 10, "elapsed_s": 5.0},
        {"event": "train", "step": 20, "elapsed_s": 10.0},
        {"event": "end", "step": 25, "elapsed_s": 12.0},  # stopped by its time budget, checkpoint at 25
        {"event": "resume", "step": 25, "from": "step_0000025"},
        {"event": "train", "step": 30, "elapsed_s": 2.5},  # the new invocation's clock starts at 0
        {"event": "end", "step": 40, "elapsed_s": 7.5},
    ]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    assert training_seconds(tmp_path) == {10: 5.0, 20: 10.0, 25: 12.0, 30: 14.5, 40: 19.5}
    assert training_seconds(tmp_path / "no-run") == {}


@pytest.fixture(scope="module")
def run_with_checkpoints(tmp_path_factory):
    run = tmp_path_factory.mktemp("ttq") / "run"
    tiny_run(run, max_steps=6, checkpoint_every=2, keep_last=10)
    return run


@needs_data
def test_a_runs_curve_scores_each_checkpoint_at_its_logged_seconds(run_with_checkpoints):
    from attnlab.data import load_data
    from attnlab.runs.config import read_run_config
    from attnlab.runs.loading import load_translator

    curve = run_curve(run_with_checkpoints, limit=20)
    assert [p["steps"] for p in curve] == [2, 4, 6]
    seconds = [p["seconds"] for p in curve]
    assert seconds == sorted(seconds) and seconds[-1] > seconds[0] >= 0
    log = [json.loads(line) for line in (run_with_checkpoints / "log.jsonl").read_text().splitlines()]
    end = next(e for e in log if e["event"] == "end")
    assert seconds[-1] == round(end["elapsed_s"], 2)
    # The final point is the final model, scored on the run's 3-10-word validation sources.
    translator = load_translator(run_with_checkpoints)
    data = load_data(read_run_config(run_with_checkpoints)["data"])
    sources = held_out_sources(data.valid, translator.tgt_vocab, 20)
    assert sources and all(3 <= len(src.split()) <= 10 and refs for src, _, refs in sources)
    assert curve[-1]["valid_bleu"] == pytest.approx(score_sources(translator, sources))


@needs_data
def test_the_section_notes_missing_curves_and_still_draws_the_run(run_with_checkpoints, tmp_path):
    section = time_to_quality_section(run_with_checkpoints, tmp_path, "tiny run", tmp_path / "nope.json", limit=20)
    assert section.paragraph.startswith("The measured curves are missing:") and "nope.json" in section.paragraph
    assert [f.name for f in section.figures] == ["time_to_quality.png"] and section.figures[0].stat().st_size > 0
    headers, rows = section.tables[0]
    assert [r[0] for r in rows] == ["tiny run"] * 3

    section = time_to_quality_section(run_with_checkpoints, tmp_path, "tiny run", limit=20)
    assert "missing" not in section.paragraph and "benchmarks/quality/time_to_quality.py" in section.paragraph
    assert "torch-tutorial" in [r[0] for r in section.tables[0][1]]
    assert "(dotted: beam 4)" in section.paragraph  # the shipped laptop curve is scored with beam 4 too

    record = {"command": "python benchmarks/quality/time_to_quality.py", "date": "d", "figures": [], "recipes": []}
    point = {"seconds": 60, "steps": 9, "valid_bleu": 1.0, "valid_bleu_beam4": 2.0}
    record["recipes"] = [{"recipe": "laptop", "curve": [point]}]
    (tmp_path / "record.json").write_text(json.dumps(record))
    section = time_to_quality_section(run_with_checkpoints, tmp_path, "tiny run", tmp_path / "record.json", limit=20)
    assert "The solid curves (dotted: beam 4) were measured once" in section.paragraph


def test_the_benchmarks_record_is_read_as_measured_curves(tmp_path):
    record = {
        "command": "python benchmarks/quality/time_to_quality.py --points 60,600",
        "cpu_features": ["avx2"],
        "torch": "2.13.0",
        "date": "2026-12-01 10:00 UTC",
        "figures": [{"recipe": "laptop"}],
        "recipes": [{"recipe": "laptop", "curve": [{"seconds": 60, "valid_bleu": 1.0, "valid_bleu_beam4": 2.0}]}],
    }
    (tmp_path / "record.json").write_text(json.dumps(record))
    measured = load_measured_curves(tmp_path / "record.json")
    assert measured["commands"] == [record["command"]]
    assert "2026-12-01" in measured["measured"] and "avx2" in measured["measured"]


def test_a_recipe_scored_with_beam_4_gets_a_dotted_line_of_its_colour():
    curve = [{"seconds": 60, "valid_bleu": 3.0, "valid_bleu_beam4": 4.0}, {"seconds": 600, "valid_bleu": 30.0}]
    recipes = [
        {"recipe": "laptop", "curve": [dict(p, valid_bleu_beam4=p["valid_bleu"] + 1) for p in curve]},
        {"recipe": "torch-tutorial", "curve": [{"seconds": 60, "valid_bleu": 0.1}, {"seconds": 600, "valid_bleu": 4}]},
    ]
    lines = plot_time_to_quality(recipes).axes[0].get_lines()
    assert [line.get_label() for line in lines] == [
        "laptop, greedy",
        "laptop, beam 4",
        "plain nn.Transformer (PyTorch tutorial recipe)",
    ]
    assert lines[1].get_linestyle() == ":" and lines[1].get_color() == lines[0].get_color()
    assert list(lines[1].get_ydata()) == [0, 4.0, 31.0]


@needs_data
def test_a_runs_settings_speed_and_average_of_its_last_checkpoints(run_with_checkpoints, tmp_path):
    row = run_settings(run_with_checkpoints)
    assert row["run"] == run_with_checkpoints.name and row["steps"] == 6 and row["seconds"] >= 0
    assert row["precision"] == "fp32" and row["schedule"] == "inverse_sqrt"
    cfg = json.loads((run_with_checkpoints / "config.json").read_text())["model"]
    assert row["layers"] == f"{cfg['num_layers']} + {cfg['num_layers']}" and row["d"] == cfg["num_hiddens"]
    translator = averaged_translator(run_with_checkpoints, 2, tmp_path)
    assert (tmp_path / f"{run_with_checkpoints.name}_averaged_last2.safetensors").is_file()
    from attnlab.data import load_data
    from attnlab.runs.checkpoints import average_checkpoints, list_checkpoints
    from attnlab.runs.config import read_run_config

    mean = average_checkpoints(list_checkpoints(run_with_checkpoints)[-2:])
    state = translator.model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in mean.items() if k in state)
    data = load_data(read_run_config(run_with_checkpoints)["data"])
    sources = held_out_sources(data.valid, translator.tgt_vocab, 8)
    assert 0 <= score_sources(translator, sources, beam=4) <= 100
    assert decode_speed(translator, sources, beam=4) > 0
    with pytest.raises(ValueError, match=r"last 99 checkpoints .* found 3; pass a smaller --average"):
        averaged_translator(run_with_checkpoints, 99, tmp_path)
