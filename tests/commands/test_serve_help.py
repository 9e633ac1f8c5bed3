"""`attnlab serve --help` lists its bounds with their defaults, and the page it points to names each of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.commands.serve import LIMIT_FLAGS

ROOT = Path(__file__).resolve().parents[2]


def test_serve_help_lists_every_bound_where_it_says(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    pointed = re.findall(r"(docs/[\w/.-]+\.md|README\.md|BENCHMARKS\.md)", text)
    assert "docs/explorer.md" in pointed
    for flag in LIMIT_FLAGS:
        assert re.search(rf"{re.escape(flag)} \S+ .*?\(default: [^)]+\)", text), flag
    for page in pointed:  # whatever the help points to exists, and the explorer's page names every bound
        assert (ROOT / page).is_file(), page
    explorer = (ROOT / "docs" / "explorer.md").read_text(encoding="utf-8")
    assert all(f"`{flag}`" in explorer for flag in LIMIT_FLAGS)
