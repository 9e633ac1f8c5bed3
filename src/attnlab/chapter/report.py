"""A small, self-contained HTML report: one section per demonstration, written atomically.

    sections = [Section("Kernel regression", "Attention pooling ...", figures=["kr/predictions.png"],
                        tables=[(["method", "test MSE"], [["gaussian", 0.43]])])]
    write_report("runs/demo/report.html", sections)

Figures are linked relative to the report (so the folder can be moved or zipped as a whole) or,
with `embed=True`, inlined as data URIs so the single HTML file travels alone. Text tables for the
terminal come from `format_table`, so the CLI and the report show the same rows.
"""

from __future__ import annotations

import base64
import html
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.data import ATTRIBUTION  # the report's footer credits the data
from attnlab.utils.files import atomic_write_text

__all__ = ["Section", "TableView", "format_cell", "format_table", "prepare_output_dir", "write_report"]

Table = tuple[Sequence[str], Sequence[Sequence[object]]]  # (headers, rows)

_MIME = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif"}


@dataclass
class Section:
    """One item of the report: a title, one short paragraph, then figures, tables and a <pre>."""

    title: str
    paragraph: str = ""
    figures: Sequence[str | os.PathLike] = field(default_factory=list)  # image files (png/svg/...)
    tables: Sequence[Table] = field(default_factory=list)
    pre: str = ""  # preformatted text (e.g. the binary-counting listing)


def format_cell(value: object) -> str:
    """Numbers to short strings: 4 significant digits, integers with thousands separators."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f"{value:.3e}"
        return f"{value:.4g}"
    return str(value)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table with aligned columns (numbers right-aligned)."""
    cells = [[format_cell(v) for v in row] for row in rows]
    widths = [max([len(str(h))] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(row[i], (int, float)) for row in rows) if rows else False for i in range(len(headers))]

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    out = [line([str(h) for h in headers]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    return "\n".join(out)


@dataclass
class TableView:
    """A table that shows itself: a Markdown table in Jupyter (and on the docs site's notebook pages), the
    aligned plain text of `format_table` everywhere else.

    Examples:
        >>> print(TableView(["d", "heads"], [[512, 8]]))
          d  heads
        ---  -----
        512      8
    """

    headers: Sequence[str]
    rows: Sequence[Sequence[object]]

    def __str__(self) -> str:
        return format_table(self.headers, self.rows)

    def _repr_markdown_(self) -> str:
        numeric = [
            bool(self.rows) and all(isinstance(r[i], (int, float)) for r in self.rows) for i in range(len(self.headers))
        ]

        def cell(text: str) -> str:
            return text.replace("|", "\\|")  # |J|_F is a norm, not three columns

        lines = ["| " + " | ".join(cell(str(h)) for h in self.headers) + " |"]
        lines.append("|" + "|".join("---:" if num else ":---" for num in numeric) + "|")
        lines += ["| " + " | ".join(cell(format_cell(v)) for v in row) + " |" for row in self.rows]
        return "\n".join(lines)


def prepare_output_dir(path: str | os.PathLike) -> Path:
    """Create `path` and prove it is writable *before* any long computation starts."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(
            f"output folder {str(path)!r} is not writable ({exc.strerror or exc}); "
            "pass --out with a folder you can write to"
        ) from None
    return path


def _figure_src(fig: Path, base: Path, embed: bool) -> str:
    if embed:
        mime = _MIME.get(fig.suffix.lower(), "application/octet-stream")
        return f"data:{mime};base64,{base64.b64encode(fig.read_bytes()).decode('ascii')}"
    # Relative links with forward slashes work in every browser and survive moving the folder.
    return Path(os.path.relpath(fig.resolve(), base.resolve())).as_posix()


def _table_html(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(format_cell(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_CSS = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem;
       color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #c33; padding-bottom: .3rem; }
section { margin-bottom: 2.5rem; }
figure { margin: 1rem 0; } figure img { max-width: 100%; }
figcaption { font-size: .85rem; color: #666; }
table { border-collapse: collapse; margin: 1rem 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ccc; padding: .25rem .6rem; text-align: right; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
pre { background: #f7f7f7; padding: .8rem; overflow-x: auto; }
footer { margin-top: 3rem; font-size: .85rem; color: #666; border-top: 1px solid #ddd; }
"""


def render_report(sections: Sequence[Section], base: Path, title: str, embed: bool, credit: str = ATTRIBUTION) -> str:
    """The whole HTML document as a string (no file is touched); its footer credits `credit`, the data used."""
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
    ]
    for s in sections:
        parts.append(f"<section><h2>{esc(s.title)}</h2>")
        if s.paragraph:
            parts.append(f"<p>{esc(s.paragraph)}</p>")
        for fig in s.figures:
            fig = Path(fig)
            if not fig.is_file():
                raise FileNotFoundError(f"report figure {str(fig)!r} does not exist; save it before writing the report")
            parts.append(
                f'<figure><img src="{esc(_figure_src(fig, base, embed))}" '
                f'alt="{esc(fig.stem)}"><figcaption>{esc(fig.name)}</figcaption></figure>'
            )
        for headers, rows in s.tables:
            parts.append(_table_html(headers, rows))
        if s.pre:
            parts.append(f"<pre>{esc(s.pre)}</pre>")
        parts.append("</section>")
    parts.append(f"<footer><p>Data: {esc(credit)}.</p><p>Generated by attnlab.</p></footer></body></html>")
    return "\n".join(parts)


def write_report(
    path: str | os.PathLike,
    sections: Sequence[Section],
    *,
    title: str = "attnlab report",
    embed: bool = False,
    credit: str = ATTRIBUTION,
) -> Path:
    """Write the report to `path` atomically and return the path; its footer credits `credit` (the data used).

    The HTML is rendered in memory first, then written to a temp file beside `path` and renamed
    over it, so an interruption (Ctrl-C, a missing figure) leaves the previous report untouched.

    Raises:
        FileNotFoundError: a section names a figure file that does not exist.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = render_report(sections, path.parent, title, embed, credit)
    atomic_write_text(path, text)
    return path
