"""What the subcommand modules share: how each registers itself with the dispatcher (attnlab.cli)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_command(subparsers, name: str, help: str, doc: str | None) -> argparse.ArgumentParser:
    """Register the subcommand `name` (`help`: its line in `attnlab --help`); its own --help shows `doc`,
    the command module's docstring, with its usage lines and line breaks kept as written."""
    return subparsers.add_parser(name, help=help, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_figures_command(subparsers, name: str, help: str, doc: str | None) -> argparse.ArgumentParser:
    """A chapter command: `add_command` plus --out, the folder for its figures (default runs/NAME)."""
    p = add_command(subparsers, name, help, doc)
    p.add_argument("--out", default=f"runs/{name}", help="folder for PNG+SVG figures")
    return p


def save_figures(result, out: Path) -> None:
    """Write a chapter section's figures into `out`, then print its paragraph and the figures' names."""
    section = result.save(out)
    print(f"\n{result.paragraph}\n")
    print(f"figures (PNG + SVG) in {out}: {', '.join(Path(p).stem for p in section.figures)}")
