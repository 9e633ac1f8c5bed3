"""MkDocs hooks: pages generated at build time from the sources they document, so they never go stale.

- tour.md         README's "Install", "Learn" and "Use" sections
- benchmarks.md   BENCHMARKS.md
- cli.md          `attnlab <command> --help` for every command, from the argument parser itself
- notebooks/*.md  the chapter notebooks (notebooks/src/*.py), executed at small settings (ATTNLAB_SMALL=1):
                  text, code, and what the code printed and drew (figures as PNG files beside the page,
                  tables, the interactive attention views); exercise solutions collapsed; with
                  ATTNLAB_DOCS_NOTEBOOKS=DIR the executed notebooks are also written to DIR
- api/*.md        one mkdocstrings page per public module
- explorer-web/   `attnlab export --format web` of a tiny translator trained on the bundled sample pairs at
                  build time (seconds): the explorer translating in the reader's browser, no server
                  (onnxruntime-web from the pinned npm package: `npm ci` on the first build)

Links that point outside the site (source files) become plain text, so the strict build has nothing
dangling. Used by mkdocs.yml (`hooks:`); `make docs` builds the site in strict mode.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import tempfile
import textwrap
from pathlib import Path

import nbformat
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]

API_PAGES = {
    "attention": ("attnlab.attention", "Attention kernels: masking, scoring, multi-head, positions, recording."),
    "data": ("attnlab.data", "Corpora, tokenization, vocabularies, prepared shards and batching."),
    "models": ("attnlab.models", "Translators and kernel regression, built from the attention layer."),
    "decoding": ("attnlab.decoding", "Greedy and beam search over the decoding protocol, and the Translator."),
    "metrics": ("attnlab.metrics", "BLEU (the book's and sacreBLEU's) and chrF."),
    "runs": ("attnlab.runs", "The run folder: config, checkpoints, weights, `load_translator`, the output guard."),
    "viz": ("attnlab.viz", "Heatmaps and the chapter's plots (matplotlib Figures)."),
    "training": ("attnlab.training", "Training: config, trainer, stop policy, presets, whole runs."),
    "analysis": ("attnlab.analysis", "Inside a trained model: explanations, heads, subwords, notebook views."),
    "export": ("attnlab.export", "Formats out and in: CTranslate2, Hugging Face Marian, ONNX, the static web page."),
    "chapter": ("attnlab.chapter", "The chapter's sections as computations, the report and the demo."),
}

# A folder named here receives the executed notebooks too (NAME.ipynb, with their outputs).
KEEP_NOTEBOOKS = "ATTNLAB_DOCS_NOTEBOOKS"

LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def _fix_links(text: str) -> str:
    """docs/x.png -> x.png; BENCHMARKS.md[#section] -> benchmarks.md[#section]; other relative links -> plain text."""

    def sub(m: re.Match) -> str:
        bang, label, target = m.groups()
        if re.match(r"[a-z]+://|#|mailto:", target):
            return m.group(0)
        if target.startswith("docs/"):
            return f"{bang}[{label}]({target[len('docs/') :]})"
        if target == "BENCHMARKS.md" or target.startswith("BENCHMARKS.md#"):  # a section of the page, too
            return f"[{label}](benchmarks.md{target[len('BENCHMARKS.md') :]})"
        return label if not bang else f"`{target}`"

    return LINK.sub(sub, text)


def tour_page() -> str:
    """The README's Install, Learn and Use sections: the two paths, each linking to the page with its details."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("## Install")
    end = readme.index("## Tests and benchmarks") if "## Tests and benchmarks" in readme else len(readme)
    return "# A tour\n\nFrom the README.\n\n" + _fix_links(readme[start:end])


def benchmarks_page() -> str:
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text(encoding="utf-8") if path.is_file() else "# Benchmarks\n\nNo BENCHMARKS.md yet.\n"
    return _fix_links(text)


def cli_page() -> str:
    """Every command's --help, formatted by its own parser (what `attnlab <command> --help` prints)."""
    import os

    from attnlab.cli import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal width; fix it so builds are stable
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = [
        "# Command-line reference",
        "",
        (
            "Generated from the argument parser: this is what `attnlab COMMAND --help` prints. Every user error "
            "is one line on stderr and exit status 2."
        ),
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
        "",
    ]
    for name, sp in sub.choices.items():
        out += [f"## attnlab {name}", "", "```text", sp.format_help().rstrip(), "```", ""]
    return "\n".join(out)


def _notebook_sources():
    """notebooks/build.py as a module (not a package: it is run as a script), for its cell parser."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("attnlab_notebooks_build", ROOT / "notebooks" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def executed_notebooks() -> list[tuple[str, object]]:
    """(stem, notebook with outputs) for every notebooks/src/*.py, run in one kernel at ATTNLAB_SMALL=1."""
    build = _notebook_sources()
    sources = sorted((ROOT / "notebooks" / "src").glob("*.py"))
    notebooks = [build.notebook_of(source) for source in sources]
    saved = {key: os.environ.get(key) for key in ("ATTNLAB_SMALL", "PYTHONPATH")}
    os.environ["ATTNLAB_SMALL"] = "1"  # seconds per notebook; the kernel inherits the environment
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), saved["PYTHONPATH"]) if p)
    try:
        with tempfile.TemporaryDirectory() as cwd:
            executed = build.execute(notebooks, cwd, timeout=300)
    except Exception as exc:  # nbclient's CellExecutionError: name the notebook, keep the cell's error
        where = sources[getattr(exc, "notebook", 0)].name
        raise PluginError(f"notebooks/src/{where} failed under ATTNLAB_SMALL=1:\n{exc}") from exc
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    kept = os.environ.get(KEEP_NOTEBOOKS)
    if kept:  # the test suite checks the executed notebooks of the build it checks, without running them twice
        Path(kept).mkdir(parents=True, exist_ok=True)
        for source, nb in zip(sources, executed):
            nbformat.write(nb, Path(kept) / f"{source.stem}.ipynb")
    return [(source.stem, nb) for source, nb in zip(sources, executed)]


def _fence(text: str, lang: str) -> str:
    return f"```{lang}\n{text.rstrip()}\n```"


def _output(output, name: str, images: dict[str, bytes]) -> str:
    """One cell output as markdown: text in a listing, a PNG as a file beside the page (`images`: uri ->
    bytes), HTML (the attention views) and Markdown (tables) as they are."""
    kind = output.get("output_type")
    if kind == "stream":
        return _fence(output["text"], "text") if output.get("name") == "stdout" else ""
    data = output.get("data", {})
    if "image/png" in data:
        images[f"notebooks/{name}.png"] = base64.b64decode(data["image/png"])
        return f"![output]({Path(name).as_posix()}.png)"
    if "text/html" in data:
        return f'<div class="nb-output">\n{data["text/html"]}\n</div>'
    if "text/markdown" in data:
        return data["text/markdown"]
    return _fence(data["text/plain"], "text") if "text/plain" in data else ""


def notebook_page(stem: str, nb, images: dict[str, bytes]) -> str:
    """An executed notebook as a docs page; a cell tagged `solution` folds into a "Solution" box."""
    parts = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            parts.append(cell.source)
            continue
        pieces = [_fence(cell.source, "python")]
        pieces += [_output(out, f"{stem}/cell{i:02d}-{k}", images) for k, out in enumerate(cell.get("outputs", []))]
        block = "\n\n".join(piece for piece in pieces if piece)
        if "solution" in cell.metadata.get("tags", []):
            block = '??? success "Solution"\n\n' + textwrap.indent(block, "    ")
        parts.append(block)
    nb_file = f"notebooks/{stem}.ipynb"
    return "\n\n".join(parts) + (
        f"\n\n---\nRun at `ATTNLAB_SMALL=1` when this site was built. Open `{nb_file}` in Jupyter to run it "
        "yourself (`pip install 'attnlab[notebooks]' jupyterlab`); without `ATTNLAB_SMALL` the training cells "
        "run ten times longer and translate better.\n"
    )


def api_page(name: str) -> str:
    module, blurb = API_PAGES[name]
    return f"# `{module}`\n\n{blurb}\n\n::: {module}\n"


WEB_PAGE = "explorer-web"  # where the site carries the static explorer (docs/explorer.md links it)
WEB_STEPS = 60  # training steps of its tiny translator: enough to translate the sample's short sentences


def web_page_files() -> dict[str, bytes]:
    """uri -> bytes of the static explorer of a tiny run trained here (attnlab.export.web)."""
    from attnlab.export.formats import export_run
    from attnlab.testing import train_tiny

    with tempfile.TemporaryDirectory() as tmp:
        try:
            run = train_tiny(Path(tmp) / "run", steps=WEB_STEPS)
            out = export_run(run, "web", Path(tmp) / "page")
        except ValueError as exc:  # npm or onnxruntime missing: the export's own one-line advice
            raise PluginError(f"the docs' explorer page: {exc}") from exc
        return {
            f"{WEB_PAGE}/{p.relative_to(out).as_posix()}": p.read_bytes()
            for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != "attnlab-output.json"
        }


def generated_pages() -> dict[str, str | bytes]:
    """uri -> content of every generated page (and the notebooks' figures and the explorer's page)."""
    pages: dict[str, str | bytes] = {"tour.md": tour_page(), "benchmarks.md": benchmarks_page(), "cli.md": cli_page()}
    pages.update(web_page_files())
    images: dict[str, bytes] = {}
    for stem, nb in executed_notebooks():
        pages[f"notebooks/{stem}.md"] = notebook_page(stem, nb, images)
    pages.update(images)
    for name in API_PAGES:
        pages[f"api/{name}.md"] = api_page(name)
    return pages


def on_files(files, config):
    for uri, content in generated_pages().items():
        files.append(File.generated(config, uri, content=content))
    return files
