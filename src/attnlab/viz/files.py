"""Saving figures atomically (temp file + rename), in one or several formats."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from attnlab.utils.files import atomic_path

# Formats `save_figure` knows; a path ending in one of these saves just that format.
FIGURE_FORMATS = ("png", "svg", "pdf")


def save_figure(
    fig: Figure, path: str | os.PathLike, formats: Sequence[str] = ("png", "svg"), *, dpi: int = 120
) -> list[Path]:
    """Write `fig` atomically (temp file + rename) and return the written paths.

    `path` with a known extension (.png/.svg/.pdf) writes just that file; without one, writes
    `path.<fmt>` for every format in `formats`. An interrupted save never leaves a truncated image.
    """
    path = Path(path)
    ext = path.suffix.lower().lstrip(".")
    if ext in FIGURE_FORMATS:
        targets = [(path, ext)]
    else:
        bad = [f for f in formats if f not in FIGURE_FORMATS]
        if bad:
            raise ValueError(f"unknown figure format(s) {bad}; expected some of {FIGURE_FORMATS}")
        targets = [(path.with_name(f"{path.name}.{f}"), f) for f in formats]
    written = []
    for target, fmt in targets:
        # Atomic, also on Ctrl-C: a previous image stays intact until the new one is complete.
        with atomic_path(target) as tmp:
            fig.savefig(tmp, format=fmt, dpi=dpi)
        written.append(target)
    return written
