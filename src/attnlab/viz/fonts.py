"""Fonts for token labels in any script: each label gets a family list whose fonts hold its glyphs
(matplotlib falls back along the list glyph by glyph), so Chinese, Japanese, Korean or Arabic tokens are
drawn with an installed Noto / Droid / DejaVu / ... font instead of as boxes with a warning per glyph.

- One list per axis: the font matplotlib would use anyway (DejaVu Sans by default) and adds, in order
  of preference (`FALLBACK_PREFIXES`), the installed fonts that hold glyphs it lacks.
- A glyph no installed font holds is drawn by matplotlib's bundled Last Resort font (a box naming the
  script) or, without it, as "□"; never with a glyph warning. The first such label logs one line naming
  the font package that would draw it (`FONT_PACKAGES`), once per package.
- Right-to-left labels (Arabic, Hebrew): matplotlib >= 3.11 lays text out with libraqm, which joins the
  letters and orders them right to left itself. Older matplotlib draws characters as stored, so there
  labels are shaped and put in display order when `arabic-reshaper` and `python-bidi` are installed
  (optional); without them they are drawn as stored, letters unjoined, still without a warning.

Examples:
    >>> text, families = label_font("cat")
    >>> text, families[0] == default_family()
    ('cat', True)
"""

from __future__ import annotations

import functools
import logging
import unicodedata
from collections.abc import Callable, Sequence

from matplotlib import font_manager
from matplotlib.ft2font import FT2Font

try:  # optional: Arabic letters joined, right-to-left text in display order
    import arabic_reshaper
    from bidi.algorithm import get_display
except ImportError:
    arabic_reshaper = None
    get_display = None

log = logging.getLogger(__name__)
# matplotlib >= 3.11 shapes text (libraqm: joining, bidi); shaping before it would reverse it twice
MATPLOTLIB_SHAPES = hasattr(FT2Font, "_layout")

# Installed families tried, in this order, for glyphs the default font lacks (sans before serif).
FALLBACK_PREFIXES = (
    "DejaVu Sans",
    "Noto Sans",
    "Noto Naskh Arabic",
    "Noto Kufi Arabic",
    "Droid Sans",
    "Source Han Sans",
    "WenQuanYi",
    "Nanum",
    "IPAGothic",
    "IPAPGothic",
    "Takao",
    "AR PL",
    "Amiri",
    "Vazirmatn",
    "Arial Unicode",
    "FreeSans",
    "Liberation Sans",
    "Noto Serif",
    "DejaVu Serif",
    "FreeSerif",
)
LAST_RESORT = "Last Resort High-Efficiency"  # bundled with matplotlib >= 3.10: a box per Unicode block
PLACEHOLDER = "\N{WHITE SQUARE}"
# (first code point, last code point, the font package that draws them: Debian / Ubuntu names)
FONT_PACKAGES = (
    (0x1100, 0x11FF, "fonts-noto-cjk"),
    (0x2E80, 0x9FFF, "fonts-noto-cjk"),
    (0xA960, 0xA97F, "fonts-noto-cjk"),
    (0xAC00, 0xD7FF, "fonts-noto-cjk"),
    (0xF900, 0xFAFF, "fonts-noto-cjk"),
    (0xFE30, 0xFE4F, "fonts-noto-cjk"),
    (0xFF00, 0xFFEF, "fonts-noto-cjk"),
    (0x20000, 0x3FFFF, "fonts-noto-cjk"),
    (0x1F000, 0x1FAFF, "fonts-noto-color-emoji"),
)
_told: set[str] = set()  # packages already named in the log


def font_package(codepoint: int) -> str:
    """The Debian / Ubuntu package whose fonts draw `codepoint` (fonts-noto-core for the scripts it holds)."""
    for lo, hi, package in FONT_PACKAGES:
        if lo <= codepoint <= hi:
            return package
    return "fonts-noto-core"


@functools.cache
def _charmap(path: str) -> frozenset[int]:
    try:
        return frozenset(FT2Font(path).get_charmap())
    except (OSError, RuntimeError, ValueError):  # an unreadable font file holds no glyphs
        return frozenset()


@functools.cache
def default_family() -> str:
    """The family matplotlib draws text in when none is asked for (DejaVu Sans unless rcParams say else)."""
    path = font_manager.findfont(font_manager.FontProperties())
    return next((f.name for f in font_manager.fontManager.ttflist if f.fname == path), "DejaVu Sans")


def _preference(name: str) -> int:
    return next(i for i, p in enumerate(FALLBACK_PREFIXES) if name.startswith(p))


@functools.cache
def fallback_fonts() -> tuple[tuple[str, str], ...]:
    """(family, file) of the installed fonts that may stand in for missing glyphs, upright regular faces
    first, in `FALLBACK_PREFIXES` order; the default family first of all."""
    entries = [
        f
        for f in font_manager.fontManager.ttflist
        if any(f.name.startswith(p) for p in FALLBACK_PREFIXES) and "Mono" not in f.name and "Math" not in f.name
    ]
    entries.sort(key=lambda f: (f.style != "normal", f.weight not in (400, "normal", "regular"), _preference(f.name)))
    seen = {default_family()}
    out: list[tuple[str, str]] = [(default_family(), font_manager.findfont(font_manager.FontProperties()))]
    for f in entries:
        if f.name not in seen:
            seen.add(f.name)
            out.append((f.name, f.fname))
    return tuple(out)


def _last_resort() -> bool:
    return any(f.name == LAST_RESORT for f in font_manager.fontManager.ttflist)


def _is_rtl(text: str) -> bool:
    return any(unicodedata.bidirectional(ch) in ("R", "AL") for ch in text)


def shape_rtl(
    text: str,
    reshape: Callable[[str], str] | None = None,
    display: Callable[[str], str] | None = None,
    native: bool = MATPLOTLIB_SHAPES,
) -> str:
    """Right-to-left `text` as it must be handed to matplotlib: as is where matplotlib shapes it itself
    (`native`); else Arabic letters joined and put in display order when arabic-reshaper and python-bidi
    are installed (or `reshape` / `display` are given); else as is."""
    reshape = reshape or (arabic_reshaper.reshape if arabic_reshaper is not None else None)
    display = display or get_display
    if native or not _is_rtl(text) or reshape is None or display is None:
        return text
    return display(reshape(text))


def label_fonts(labels: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the labels to draw, one family list that draws them all): the default family, then each installed
    fallback holding a glyph the ones before it lack (one list for all of an axis's labels, as matplotlib
    copies one tick's font to the ticks it adds). Glyphs no installed font holds log one line naming the
    package to install (once per package) and are drawn by Last Resort, or as a placeholder without it."""
    texts = [shape_rtl(str(t)) for t in labels]
    fonts = fallback_fonts()
    families = [fonts[0][0]]
    missing = {ord(ch) for t in texts for ch in t if not ch.isspace()} - _charmap(fonts[0][1])
    for family, path in fonts[1:]:
        if not missing:
            break
        found = missing & _charmap(path)
        if found:
            families.append(family)
            missing -= found
    if not missing:
        return texts, families
    for package in sorted({font_package(cp) for cp in missing} - _told):
        _told.add(package)
        example = next(chr(cp) for cp in sorted(missing) if font_package(cp) == package)
        log.warning(
            "attnlab: no installed font draws %r (%s) in figure labels; install %s "
            "(apt-get install %s) and clear matplotlib's font cache (matplotlib.get_cachedir()) to see them",
            example,
            unicodedata.name(example, f"U+{ord(example):04X}"),
            package,
            package,
        )
    if _last_resort():
        return texts, [*families, LAST_RESORT]
    placeholder = PLACEHOLDER if ord(PLACEHOLDER) in _charmap(fonts[0][1]) else "?"
    return ["".join(placeholder if ord(ch) in missing else ch for ch in t) for t in texts], families


def label_font(text: str) -> tuple[str, list[str]]:
    """`label_fonts` for one label: (the text to draw, its family list)."""
    texts, families = label_fonts([text])
    return texts[0], families


__all__ = [
    "FALLBACK_PREFIXES",
    "FONT_PACKAGES",
    "default_family",
    "fallback_fonts",
    "font_package",
    "label_font",
    "label_fonts",
    "shape_rtl",
]
