"""HTML report: every named figure is linked and exists, tables render, writes are atomic."""

import os
from html.parser import HTMLParser

import pytest

from attnlab.chapter.report import Section, format_table, prepare_output_dir, write_report
from attnlab.data import ATTRIBUTION
from attnlab.viz.files import save_figure
from attnlab.viz.plots import plot_loss_curve


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs, self.text = [], []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.imgs.append(dict(attrs)["src"])

    def handle_data(self, data):
        self.text.append(data)


def _figures(tmp_path):
    fig = plot_loss_curve([2.0, 1.0])
    a = save_figure(fig, tmp_path / "figs" / "a", formats=("png",))[0]
    b = save_figure(fig, tmp_path / "figs" / "deep" / "b.svg")[0]
    return a, b


def test_report_links_every_figure(tmp_path):
    a, b = _figures(tmp_path)
    sections = [
        Section("One <&>", "a paragraph", figures=[a], tables=[(["x", "y"], [["r", 1.5], ["s", 2]])]),
        Section("Two", "another", figures=[b], pre="0 in binary is 000"),
    ]
    path = write_report(tmp_path / "out" / "report.html", sections)
    html = path.read_text(encoding="utf-8")
    parser = _Collect()
    parser.feed(html)
    assert len(parser.imgs) == 2
    for src in parser.imgs:
        assert not os.path.isabs(src)
        assert (path.parent / src).resolve().is_file()
    assert {(path.parent / s).resolve() for s in parser.imgs} == {a.resolve(), b.resolve()}
    text = "".join(parser.text)
    assert "One <&>" in text and "0 in binary is 000" in text and ATTRIBUTION in text
    assert "<td>1.5</td>" in html and html.count("<section>") == 2


def test_embedded_report_is_self_contained(tmp_path):
    a, b = _figures(tmp_path)
    path = write_report(tmp_path / "r.html", [Section("s", "p", figures=[a, b])], embed=True)
    parser = _Collect()
    parser.feed(path.read_text())
    assert [s.split(",")[0] for s in parser.imgs] == ["data:image/png;base64", "data:image/svg+xml;base64"]


def test_missing_figure_raises_and_keeps_old_report(tmp_path):
    path = write_report(tmp_path / "r.html", [Section("old", "kept")])
    old = path.read_text()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        write_report(path, [Section("new", "p", figures=[tmp_path / "nope.png"])])
    assert path.read_text() == old


def test_interrupted_write_is_atomic(tmp_path, monkeypatch):
    path = write_report(tmp_path / "r.html", [Section("old", "kept")])
    old = path.read_text()
    real_replace = os.replace

    def interrupted(src, dst):
        raise KeyboardInterrupt  # Ctrl-C between writing the temp file and renaming it

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_report(path, [Section("new", "half")])
    monkeypatch.setattr(os, "replace", real_replace)
    assert path.read_text() == old
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]  # no temp file left behind


def test_format_table_aligns():
    out = format_table(["name", "n"], [["a", 1000], ["bbb", 2.5]]).splitlines()
    assert out[0].startswith("name") and out[2].endswith("1,000") and out[3].endswith("2.5")
    assert len({len(line) for line in out[1:]}) == 1


def test_prepare_output_dir(tmp_path):
    assert prepare_output_dir(tmp_path / "a" / "b").is_dir()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match="not writable"):
        prepare_output_dir(blocker / "sub")
