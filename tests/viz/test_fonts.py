"""Token labels in any script: a fallback family list holding their glyphs, no glyph warnings, one line
naming the font package when no installed font has a glyph, right-to-left labels shaped only where
matplotlib does not shape them itself."""

import doctest
import io
import logging
import warnings

import numpy as np
import pytest

from attnlab.viz import fonts
from attnlab.viz.heatmaps import show_heatmaps

CJK = ["猫", "が", "고양이", "cat"]
ARABIC = ["القط", "dog", "كبير"]


def _draw(xt=CJK, yt=ARABIC):
    """Draw and save in every format with warnings as errors: a glyph warning fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = show_heatmaps(np.random.rand(1, 2, len(yt), len(xt)), "keys", "queries", xticklabels=xt, yticklabels=yt)
        for fmt in ("png", "svg", "pdf"):
            fig.savefig(io.BytesIO(), format=fmt)
    return fig


def test_cjk_and_arabic_labels_draw_without_glyph_warnings():
    fig = _draw()
    want_x, want_y = fonts.label_fonts(CJK)[1], fonts.label_fonts(ARABIC)[1]
    for ax in fig.axes[:2]:
        assert {tuple(t.get_fontfamily()) for t in ax.get_xticklabels()} == {tuple(want_x)}
    # shared y axes: the first column carries the labels
    assert {tuple(t.get_fontfamily()) for t in fig.axes[0].get_yticklabels()} == {tuple(want_y)}
    # the default font has no CJK glyphs: something after it in the list draws them (a CJK font or Last Resort)
    assert want_x[0] == fonts.default_family() and len(want_x) > 1, want_x


def test_an_installed_font_holding_the_glyphs_is_added(monkeypatch):
    default = fonts.fallback_fonts()[0]
    monkeypatch.setattr(fonts, "fallback_fonts", lambda: (default, ("Arabic Only", "ar.ttf"), ("Han Only", "han.ttf")))
    real = fonts._charmap
    fake = {"ar.ttf": frozenset(map(ord, "القط")), "han.ttf": frozenset(map(ord, "猫狗"))}
    monkeypatch.setattr(fonts, "_charmap", lambda path: fake.get(path) or real(path))
    texts, families = fonts.label_fonts(["猫", "cat"])
    assert texts == ["猫", "cat"] and families == [default[0], "Han Only"]  # not the font it does not need


def test_missing_glyphs_name_the_package_once(monkeypatch, caplog):
    only_default = fonts.fallback_fonts()[:1]  # as on a machine with no font but the default
    monkeypatch.setattr(fonts, "fallback_fonts", lambda: only_default)
    monkeypatch.setattr(fonts, "_told", set())
    with caplog.at_level(logging.WARNING, logger="attnlab.viz.fonts"):
        _draw()
        _draw(xt=["狗", "x"])
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert "install fonts-noto-cjk" in lines[0], lines
    # without matplotlib's Last Resort font, such glyphs become a placeholder, still without a warning
    monkeypatch.setattr(fonts, "_last_resort", lambda: False)
    texts, families = fonts.label_fonts(["猫 cat"])
    assert texts == ["□ cat"] and fonts.LAST_RESORT not in families
    _draw()


def test_right_to_left_shaped_only_where_matplotlib_does_not():
    def reshape(s):
        return s.replace("ل", "ﻟ")

    def display(s):
        return s[::-1]

    assert fonts.shape_rtl("القط", reshape, display, native=False) == "ط" + "ق" + "ﻟ" + "ا"
    assert fonts.shape_rtl("القط", reshape, display, native=True) == "القط"  # matplotlib >= 3.11 shapes it
    assert fonts.shape_rtl("cat", reshape, display, native=False) == "cat"


@pytest.mark.parametrize(
    ("ch", "package"),
    [("猫", "fonts-noto-cjk"), ("고", "fonts-noto-cjk"), ("ก", "fonts-noto-core"), ("😀", "fonts-noto-color-emoji")],
)
def test_font_package(ch, package):
    assert fonts.font_package(ord(ch)) == package


def test_docstring_examples():
    result = doctest.testmod(fonts, verbose=False)
    assert result.failed == 0 and result.attempted > 0
