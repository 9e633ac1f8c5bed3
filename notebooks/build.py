"""Write notebooks/*.ipynb from the plain-Python sources in notebooks/src/ (jupytext's percent format: `# %%`
starts a code cell, `# %% [markdown]` a markdown cell whose lines start with `# `, and `# %% tags=["solution"]`
an exercise's solution, collapsed in Jupyter and on the docs site). The sources are what we review and diff; the
.ipynb files are what readers open. Outputs are never committed: `execute` runs the notebooks (the tests and
the docs build do), and the docs site shows what they print and draw.

    python notebooks/build.py           # (re)write the .ipynb files
    python notebooks/build.py --check   # exit 1 if a .ipynb is missing or differs from its source
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "src"


SOLUTION = "solution"  # the tag of a cell that solves the exercise above it


def notebook_of(source: Path):
    """The notebook of one percent-format source: its cells, fixed ids, solutions collapsed."""
    import jupytext  # here, not at the top: the [notebooks] extra (tools/docs_hooks.py loads this file too)

    nb = jupytext.reads(source.read_text(encoding="utf-8"), fmt="py:percent")
    # Fixed ids keep rebuilt notebooks byte-identical (nbformat draws random ones).
    for i, cell in enumerate(nb.cells):
        cell.id = f"{source.stem[:2]}-{i:02d}"
        if SOLUTION in cell.metadata.get("tags", []):
            cell.metadata["jupyter"] = {"source_hidden": True}  # JupyterLab shows a bar to click open
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    return nb


def execute(notebooks: list, cwd: str | Path, timeout: int = 120) -> list:
    """Run `notebooks` (nbformat notebooks) top to bottom in ONE kernel (starting a kernel and importing torch
    costs more than a small notebook), with `%reset -f` before each so none leans on another's variables.
    Returns them with their outputs. Raises nbclient's CellExecutionError at the first failing cell, with
    `.notebook` set to the index of the notebook it belongs to. The kernel inherits the environment
    (ATTNLAB_SMALL=1 runs each in seconds)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    combined = nbformat.v4.new_notebook(metadata=notebooks[0].metadata if notebooks else {})
    owner: list[tuple[int, int]] = []  # (notebook, cell) of each combined cell; -1: the reset between them
    for n, nb in enumerate(notebooks):
        combined.cells.append(nbformat.v4.new_code_cell("%reset -f"))
        owner.append((n, -1))
        for c, cell in enumerate(nb.cells):
            combined.cells.append(nbformat.from_dict(dict(cell)))
            owner.append((n, c))
    # Bounded: a cell that hangs fails instead of the CI job; an error stops at its cell.
    client = NotebookClient(
        combined, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    )
    try:
        client.execute()
    except CellExecutionError as exc:
        failed = next(
            (
                i
                for i, cell in enumerate(combined.cells)
                if any(o.get("output_type") == "error" for o in cell.get("outputs", []))
            ),
            0,
        )
        exc.notebook = owner[failed][0]  # type: ignore[attr-defined]
        raise
    out = [nbformat.from_dict(dict(nb)) for nb in notebooks]
    for cell, (n, c) in zip(combined.cells, owner):
        if c >= 0:
            out[n].cells[c] = cell
    return out


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
