"""Every flag of every command explains itself: it has help, and its --help says its default."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import tomllib

from attnlab import __version__
from attnlab.cli import build_parser, main


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _shown_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help line `attnlab COMMAND --help` prints for `action`, with %(default)s and friends filled in."""
    text = parser._get_formatter()._get_help_string(action) or ""
    return text % {**vars(action), "prog": parser.prog} if "%" in text else text


def _flags():
    for name, sp in _subparsers().items():
        for action in sp._actions:
            if action.option_strings and not isinstance(action, argparse._HelpAction):
                yield name, sp, action


def test_every_flag_has_help_and_says_its_default():
    missing, silent = [], []
    for name, sp, action in _flags():
        flag = f"attnlab {name} {action.option_strings[-1]}"
        shown = _shown_help(sp, action)
        if not shown.strip():
            missing.append(flag)
            continue
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)) or action.required:
            continue  # an on/off switch, or a flag that must be given
        if "default" not in shown:
            silent.append(flag)
        elif action.default not in (None, [], argparse.SUPPRESS):
            default = action.default
            said = {" ".join(default)} if isinstance(default, list) else {str(default)}
            if isinstance(default, float):
                said.add(f"{default:g}")  # 10 seconds, not 10.0
            if not any(value in shown for value in said):
                silent.append(f"{flag} (default {default!r} not in {shown!r})")
    assert not missing, f"flags without help: {missing}"
    assert not silent, f"flags whose help does not say their default: {silent}"


def test_the_check_catches_a_flag_without_help(monkeypatch):
    """The walk above really sees every subparser's actions: a flag added without help is reported."""
    import attnlab.commands.params as params

    original = params.add_parser

    def with_bare_flag(subparsers):
        original(subparsers)
        subparsers.choices["params"].add_argument("--bare", type=int, default=3)

    monkeypatch.setattr(params, "add_parser", with_bare_flag)
    with pytest.raises(AssertionError, match="params --bare"):
        test_every_flag_has_help_and_says_its_default()


@pytest.mark.parametrize("command", ["translate", "evaluate", "attention", "demo", "prepare", "train"])
def test_help_says_source_and_target_not_english_and_french(command):
    """Any language pair trains, so the commands that take a run speak of sources and targets."""
    sp = _subparsers()[command]
    text = " ".join(_shown_help(sp, a) for a in sp._actions)
    assert "English sentence" not in text and "French" not in text, text


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"attnlab {__version__}"


def test_one_version_source():
    """pyproject.toml reads the version from attnlab.__version__; it writes none of its own."""
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "attnlab.__version__"}
