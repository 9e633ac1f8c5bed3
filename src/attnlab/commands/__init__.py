"""One module per `attnlab` subcommand: each parses its flags, calls the library and prints."""

from __future__ import annotations

import argparse


def add_command(subparsers, name: str, help: str, doc: str | None) -> argparse.ArgumentParser:
    """A subcommand parser whose --help shows the module docstring `doc` as written (examples kept)."""
    return subparsers.add_parser(name, help=help, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
