"""Write notebooks/*.ipynb from the plain-Python sources in notebooks/src/ (percent format: `# %%` starts
a code cell, `# %% [markdown]` a markdown cell whose lines start with `# `). The sources are what we
review and diff; the .ipynb files are what readers open. Outputs are never committed.

    python notebooks/build.py           # (re)write the .ipynb files
    python notebooks/build.py --check   # exit 1 if a .ipynb is missing or differs from its source
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "src"


def percent_cells(text: str) -> list[tuple[str, str]]:
    """A percent-format source as ("markdown" | "code", body) pairs: markdown without its `# `
    prefixes, empty code cells dropped. tools/docs_hooks.py renders the same cells as a docs page."""
    cells: list[tuple[str, str]] = []
    kind, lines = None, []

    def flush():
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            body = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in body.splitlines())
            cells.append((kind, body))
        elif kind == "code" and body:
            cells.append((kind, body))

    for line in text.splitlines():
        if line.startswith("# %%"):
            flush()
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        else:
            lines.append(line)
    flush()
    return cells


def cells_of(text: str) -> list:
    """Split a percent-format source into nbformat cells."""
    import nbformat

    new = {"markdown": nbformat.v4.new_markdown_cell, "code": nbformat.v4.new_code_cell}
    return [new[kind](body) for kind, body in percent_cells(text)]


def notebook_of(source: Path):
    import nbformat  # here, not at the top: tools/docs_hooks.py loads this file for percent_cells only

    nb = nbformat.v4.new_notebook()
    nb.cells = cells_of(source.read_text(encoding="utf-8"))
    # Fixed ids keep rebuilt notebooks byte-identical (nbformat draws random ones).
    for i, cell in enumerate(nb.cells):
        cell.id = f"{source.stem[:2]}-{i:02d}"
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    return nb


def main(argv: list[str]) -> int:
    import nbformat

    check = "--check" in argv
    stale = []
    for source in sorted(SOURCES.glob("*.py")):
        target = HERE / f"{source.stem}.ipynb"
        text = nbformat.writes(notebook_of(source)) + "\n"
        if check:
            if not target.is_file() or target.read_text(encoding="utf-8") != text:
                stale.append(target.name)
        else:
            target.write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date: {', '.join(stale)}; run `python notebooks/build.py`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
