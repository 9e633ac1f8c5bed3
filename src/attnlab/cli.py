"""`attnlab ...`: a thin dispatcher. Each subcommand lives in `attnlab.commands.<name>` and exposes
`add_parser(subparsers)` (registers its flags, sets `func`) so commands never collide in one file."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from attnlab import __version__

# Module names under attnlab.commands, in the order `attnlab --help` lists them.
COMMANDS = [
    "demo",
    "kernel_regression",
    "positional_encoding",
    "scaling",
    "params",
    "prepare",
    "train",
    "translate",
    "evaluate",
    "attention",
    "heads",
    "average",
    "serve",
    "import_",  # `attnlab import` (import is a Python keyword)
    "export",
]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (what was wrong, where to look) instead of the usage
    block plus the error: the same shape as every other user error of attnlab. Subcommand parsers
    inherit this class, so `attnlab train --scale x` answers in one line too."""

    command_names: tuple[str, ...] = ()  # the subcommands, for the "a command is required" message

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}; see `{self.prog} --help`\n")


# Errors a user causes with a flag or a file they gave: printed as one line, exit 2. Everything else
# (TypeError, RuntimeError, AttributeError ...) is a bug in attnlab and keeps its traceback.
# json.JSONDecodeError and UnicodeDecodeError are ValueErrors; they are named to say they are meant.
# IsADirectoryError, NotADirectoryError, PermissionError and FileExistsError come from paths the user
# named (a folder given as --out file, an --out below a file); other OSErrors (disk full, I/O errors)
# are not listed and keep their traceback, which names the failing call.
USER_ERRORS = (
    ValueError,
    json.JSONDecodeError,
    UnicodeDecodeError,
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)


def describe(exc: BaseException) -> str:
    """One line for a user error: OSErrors carry their path, decoding errors say what was expected."""
    if isinstance(exc, UnicodeDecodeError):
        return f"a file is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8 and try again"
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        hint = {
            IsADirectoryError: "expected a file, got a folder",
            NotADirectoryError: "expected a folder, but a part of the path is a file",
            PermissionError: "choose a path you may write to",
            FileExistsError: "choose a new path or remove it",
        }.get(type(exc), "check the path")
        return f"{exc.strerror}: {exc.filename} ({hint})"
    return " ".join(str(exc).split()) or type(exc).__name__  # one line, whatever the message held


def build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="attnlab",
        description="Attention mechanisms and the Transformer: learn, see and use attention.",
    )
    parser.add_argument("--version", action="version", version=f"attnlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"attnlab.commands.{name}").add_parser(sub)  # a broken command fails loudly
    parser.command_names = tuple(sub.choices)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.error(f"a command is required, one of: {', '.join(parser.command_names)}")
    try:
        code = args.func(args)
    except USER_ERRORS as exc:
        # User-actionable errors: one clear line, no traceback.
        print(f"attnlab {args.command}: error: {describe(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":
    raise SystemExit(main())
