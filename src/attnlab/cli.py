"""`attnlab ...`: a thin dispatcher. Each subcommand lives in `attnlab.commands.<name>` and exposes
`add_parser(subparsers)` (registers its flags, sets `func`) so commands never collide in one file."""

from __future__ import annotations

import argparse
import importlib
import sys

# Module names under attnlab.commands, in the order `attnlab --help` lists them.
COMMANDS = [
    "demo",
    "kernel_regression",
    "positional_encoding",
    "scaling",
    "params",
    "train",
    "translate",
    "evaluate",
    "attention",
    "average",
    "serve",
    "export",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnlab",
        description="Attention mechanisms and the Transformer: learn, see and use attention.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"attnlab.commands.{name}")
        except ModuleNotFoundError as exc:
            # A command whose module is not written yet is simply absent, never a crash.
            if exc.name == f"attnlab.commands.{name}":
                continue
            raise
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        # User-actionable errors: one clear line, no traceback.
        print(f"attnlab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":
    raise SystemExit(main())
