"""`ChapterResult`: what every section's computation returns (title, one paragraph written from the
measured numbers, tables as (headers, rows), named Figures, raw data). The CLI commands print it; the
demo turns it into a report `Section` with `result.save(out_dir)`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.figure import Figure

from attnlab.chapter.report import Section
from attnlab.viz.files import save_figure


@dataclass
class ChapterResult:
    """What one demonstration produced."""

    title: str
    paragraph: str
    tables: list[tuple[list[str], list[list]]] = field(default_factory=list)
    figures: dict[str, Figure] = field(default_factory=dict)  # file stem -> Figure
    pre: str = ""  # preformatted text shown under the tables
    data: dict = field(default_factory=dict)  # raw measurements, for tests and callers

    def save(self, out_dir: str | os.PathLike, formats: Sequence[str] = ("png", "svg")) -> Section:
        """Save every figure as out_dir/<name>.<fmt>; return a report Section linking the first format."""
        paths = [save_figure(fig, Path(out_dir) / name, formats)[0] for name, fig in self.figures.items()]
        return Section(self.title, self.paragraph, figures=paths, tables=self.tables, pre=self.pre)
