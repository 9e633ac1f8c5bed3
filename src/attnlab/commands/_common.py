"""What the subcommand modules share: how each registers itself with the dispatcher (attnlab.cli)."""

from __future__ import annotations

import argparse
from pathlib import Path


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The command's docstring as written, and every flag's default: a flag whose help does not say its default
    gets ` (default: X)` appended (a default of None, False or [] means "not given" and is said in words)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help = action.help or ""
        unset = action.default is None or action.default is False or action.default == []  # 0 is a default
        if not help or "default" in help or not action.option_strings or unset or action.default == argparse.SUPPRESS:
            return help
        return f"{help} (default: %(default)s)"


def add_command(subparsers, name: str, help: str, doc: str | None) -> argparse.ArgumentParser:
    """Register the subcommand `name` (`help`: its line in `attnlab --help`); its own --help shows `doc`,
    the command module's docstring, with its usage lines and line breaks kept as written, and each flag's
    default (`HelpFormatter`)."""
    return subparsers.add_parser(name, help=help, description=doc, formatter_class=HelpFormatter)


def add_force(p: argparse.ArgumentParser, what: str) -> None:
    """--force: replace `what` (an earlier output of the same kind; attnlab.runs.outputs refuses the rest)."""
    p.add_argument("--force", action="store_true", help=f"replace {what}; never anything else")


def add_figures_command(subparsers, name: str, help: str, doc: str | None) -> argparse.ArgumentParser:
    """A chapter command: `add_command` plus --out, the folder for its figures (default runs/NAME)."""
    p = add_command(subparsers, name, help, doc)
    p.add_argument("--out", default=f"runs/{name}", help="folder for PNG+SVG figures")
    add_force(p, "earlier chapter figures in --out")
    return p


def claim_figures(args):
    """The --out folder of a chapter command, claimed before any work (attnlab.runs.outputs)."""
    from attnlab.runs.outputs import claim_output

    return claim_output(args.out, "figures", force=args.force)


def save_figures(result, claim) -> None:
    """Write a chapter section's figures into the claimed folder, then print its paragraph and their names."""
    from attnlab.runs.outputs import write_output

    with write_output(claim) as tmp:
        section = result.save(tmp)
    print(f"\n{result.paragraph}\n")
    print(f"figures (PNG + SVG) in {claim.path}: {', '.join(Path(p).stem for p in section.figures)}")


def run_model_type(checkpoint) -> str | None:
    """The model type a run folder's config.json names; None for no folder (the command's own loading
    then says what is missing)."""
    from attnlab.runs.config import read_run_config

    if checkpoint is None or not Path(checkpoint).is_dir():
        return None
    return read_run_config(checkpoint)["model_type"]


def refuse_model_types(checkpoint, refused: dict[str, str], command: str) -> None:
    """One line naming what `command` cannot do with a run of a refused model type ({type: what instead})."""
    model_type = run_model_type(checkpoint)
    if model_type in refused:
        raise ValueError(f"attnlab {command} does not take {model_type} runs ({checkpoint}); {refused[model_type]}")
