"""`attnlab demo --scale tiny`: every step of the real demo, with tiny models."""

import contextlib
import io
import os
import re
from html import escape as html_escape

import pytest

from attnlab.cli import main
from attnlab.data import ATTRIBUTION
from attnlab.data.translation import SAMPLE_CREDIT

DATA = os.environ.get("ATTNLAB_DATA")


def _offline(*args, **kwargs):
    raise OSError("network unreachable")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The tiny demo on the corpus where ATTNLAB_DATA gives it, else as on a fresh clone offline: no corpus
    anywhere (an empty cache, no download), so it runs on the bundled sample."""
    out = tmp_path_factory.mktemp("demo") / "runs" / "demo"
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(printed):
        if not DATA:
            mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
            mp.setattr("attnlab.data.corpus.download_fra_eng", _offline)
        code = main(["demo", "--scale", "tiny", "--out", str(out)])
    return code, out, printed.getvalue()


# What the report and the last line credit: the corpus, or the bundled sample the demo fell back to.
CREDIT = ATTRIBUTION if DATA else SAMPLE_CREDIT


def test_demo_writes_a_report_linking_every_figure(demo_run, capsys):
    code, out, _ = demo_run
    assert code == 0
    html = (out / "report.html").read_text()
    srcs = re.findall(r'<img[^>]+src="([^"]+)"', html)
    assert len(srcs) >= 10  # chapter figures, loss curves, attention maps
    for src in srcs:
        f = out / src
        assert f.is_file() and f.stat().st_size > 0, src
    for name in (
        "predictions",
        "attention_parametric",
        "pe_heatmap",
        "scaling",
        "bahdanau_loss",
        "transformer_encoder_self_attention",
        "encoder_decoder_attention",
        "bahdanau_decoder_attention",
    ):
        assert any(name in s for s in srcs), name
    for text in ("four sentences", "BLEU", "Which heads matter", "heads can go before BLEU falls"):
        assert text in html
    assert f"Data: {html_escape(CREDIT)}." in html
    # The time budget: one row per stage with its threads, seconds and whether it was cut short.
    assert "<h2>Time budget</h2>" in html and "<th>cut short</th>" in html
    for stage in ("training bahdanau", "training transformer-d2l", "training transformer", "scoring"):
        assert f"<td>{stage}" in html, stage
    assert any("head_importance" in s for s in srcs) and any("pruning" in s for s in srcs)
    # The time-to-quality figure: the shipped measured curves with the demo's own run over them.
    assert any(s.endswith("time_to_quality.png") for s in srcs)
    assert "Time to quality" in html and "benchmarks/quality/time_to_quality.py" in html and "dashed curve" in html
    assert not list(out.glob(".*.tmp"))  # no half-written report or run left behind


def test_demo_saves_the_transformer_where_translate_finds_it(demo_run, capsys):
    _, out, _ = demo_run
    for name in ("config.json", "model.safetensors", "src_vocab.json", "tgt_vocab.json", "heads/heads.json"):
        assert (out / "transformer" / name).is_file()
    # The head analysis fits the saved model: `attnlab serve` shows it as the importance strip.
    from attnlab.commands.serve import load_importance
    from attnlab.runs.loading import load_translator

    tr = load_translator(out / "transformer")
    imp = load_importance(None, out / "transformer", tr.model)
    assert "heads.json" in imp["source"] and set(imp["values"]) == {"encoder_self", "decoder_self", "cross"}
    assert main(["translate", "--checkpoint", str(out / "transformer"), "go ."]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1  # one translation line (a tiny model may say little)


def test_demo_ends_with_its_time_the_command_to_type_and_the_data_it_used(demo_run):
    _, out, printed = demo_run
    lines = printed.strip().splitlines()
    # the "source .../activate" hint appears only where attnlab is not on PATH: count from the report line
    last = lines[max(i for i, line in enumerate(lines) if line.startswith("report: ")) :]
    assert "budget 540 s" in last[0] and "the attnlab command is" in last[1] and len(last) in (5, 6)
    # Not runs/demo under the working folder: translate and serve are told where the run is.
    assert f'translate --checkpoint {out / "transformer"} "i\'m home ."' in last[2]
    assert last[-1] == f"data: {CREDIT}"
    assert ("NOTE: the English–French corpus is not available" in printed) == (not DATA)
    assert "== time budget ==" in printed and "cut short" in printed


@pytest.mark.parametrize("budget", ["0", "-5", "nan", "inf"])
def test_demo_refuses_a_budget_that_is_not_seconds(budget, tmp_path, capsys):
    assert main(["demo", "--scale", "tiny", "--budget", budget, "--out", str(tmp_path / "demo")]) == 2
    err = capsys.readouterr().err
    assert "--budget must be seconds above 0" in err and err.count("\n") == 1
    assert not (tmp_path / "demo").exists()


def test_demo_refuses_an_unwritable_folder_before_any_work(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main(["demo", "--scale", "tiny", "--out", str(blocker / "demo")]) == 2
    err = capsys.readouterr().err
    assert "demo" in err and str(blocker) in err
    assert not (blocker.parent / "demo").exists()


def test_demo_falls_back_to_the_shipped_sample_when_offline(monkeypatch, tmp_path):
    from attnlab.chapter import demo

    monkeypatch.delenv("ATTNLAB_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def offline(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr("attnlab.data.corpus.download_fra_eng", offline)
    path, note = demo.find_data(None)
    assert path.name == "fra-eng-sample.txt" and "sample" in note and "NOTE" in note
    with pytest.raises(FileNotFoundError):
        demo.find_data(str(tmp_path / "missing.zip"))  # an explicit --data is never replaced


def test_every_chapter_heading_has_its_tables_or_figures_under_it(demo_run):
    _, _, printed = demo_run
    lines = printed.splitlines()
    cues = lines.index("== Attention cues ==")
    assert lines[cues + 1].startswith("figure: ") and lines[cues + 1].endswith("attention_cues.png")


def test_a_second_make_demo_names_the_make_variable_that_replaces_it(demo_run, monkeypatch, capsys):
    _, out, _ = demo_run
    capsys.readouterr()
    monkeypatch.delenv("MAKELEVEL", raising=False)  # typed as a command (`make test` itself runs under make)
    assert main(["demo", "--scale", "tiny", "--out", str(out)]) == 2
    assert "pass --force" in capsys.readouterr().err  # typed as a command: the flag
    monkeypatch.setenv("MAKELEVEL", "1")  # what make sets for `make demo`'s recipe
    assert main(["demo", "--scale", "tiny", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "`make demo DEMO_FLAGS=--force`" in err and err.count("\n") == 1
