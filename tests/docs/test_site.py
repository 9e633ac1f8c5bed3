"""`make docs`: the MkDocs site builds in strict mode (broken links, missing pages and references fail),
has every generated page, shows the executed notebooks' figures and outputs, and its home page, an API page
and a notebook page render in headless Chromium. The build executes every notebook (ATTNLAB_SMALL=1) and keeps
the executed notebooks (ATTNLAB_DOCS_NOTEBOOKS), which the notebook checks here read: one execution for both."""

from __future__ import annotations

import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


# Never build with -q: mkdocs counts warnings for --strict through its log handler, and -q silences them
# before they are counted (measured: a broken link then builds with exit 0).
@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> Path:
    """Where the site's build writes the notebooks it executed (STEM.ipynb, with outputs)."""
    return tmp_path_factory.mktemp("executed")


@pytest.fixture(scope="module")
def site(tmp_path_factory, executed) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        "NO_MKDOCS_2_WARNING": "1",
        "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": "1",  # the build and its notebook kernel beside the suite's other process
        "ATTNLAB_DOCS_NOTEBOOKS": str(executed),
    }
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return out


@pytest.mark.slow  # the build: the notebooks executed, the explorer's page exported, every page rendered
def test_site_has_every_part(site):
    from attnlab.cli import COMMANDS

    for page in (
        "index.html",
        "tour.html",
        "cli.html",
        "benchmarks.html",
        "robustness.html",
        "api/attention.html",
        "notebooks/07_transformer.html",
        "explorer-web/index.html",  # the static explorer (attnlab export --format web), linked from explorer.md
        "explorer-web/model/encoder_model.onnx",
        "explorer-web/static/ort/ort-wasm-simd-threaded.wasm",
    ):
        assert (site / page).is_file(), page
    cli = (site / "cli.html").read_text(encoding="utf-8")
    for name in COMMANDS:
        assert f"attnlab {name.rstrip('_').replace('_', '-')}" in cli, name  # import_ is `attnlab import`
    api = (site / "api" / "attention.html").read_text(encoding="utf-8")
    assert "masked_softmax" in api and "MultiHeadAttention" in api  # rendered from the docstrings
    assert "explorer.png" in (site / "tour.html").read_text(encoding="utf-8")
    # Offline: no script, stylesheet or font from a CDN on any page.
    import re

    for page in site.rglob("*.html"):
        external = re.findall(r"<(?:script|link)[^>]*(?:src|href)=\"https?://[^>]*>", page.read_text(encoding="utf-8"))
        assert not external, (page.name, external[:3])


class _Page(HTMLParser):
    """The <img> sources and <details> boxes of one built page."""

    def __init__(self):
        super().__init__()
        self.images: list[str] = []
        self.details: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs.get("src") or "")
        elif tag == "details":
            self.details.append(attrs.get("class") or "")


def test_notebook_pages_show_their_outputs(site):
    """Each chapter page was executed at build time: its figures are PNG files beside it, its printed
    output is on the page, and each exercise's solution is a collapsed box."""
    for page in sorted((site / "notebooks").glob("*.html")):
        parser = _Page()
        parser.feed(page.read_text(encoding="utf-8"))
        assert parser.images, f"{page.name} shows no figure"
        for src in parser.images:
            png = (page.parent / src).resolve()
            assert png.suffix == ".png" and png.is_file(), (page.name, src)
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000, (page.name, src)
        assert len(parser.details) >= 2, f"{page.name}: {len(parser.details)} solution boxes"
    text = (site / "notebooks" / "03_scoring_functions.html").read_text(encoding="utf-8")
    assert "Var(q.k) = " in text  # what a solution printed
    assert "<table>" in text  # the scaling table, rendered from Markdown
    assert "attnlab-view" in (site / "notebooks" / "07_transformer.html").read_text(encoding="utf-8")  # head_view


def _shows(cell) -> bool:
    """A code cell whose outputs are a figure, a table or an interactive view (not plain text)."""
    kinds = ("image/png", "text/html", "text/markdown")
    return any(kind in out.get("data", {}) for out in cell.get("outputs", []) for kind in kinds)


def test_every_notebook_runs_and_explains_its_figures(site, executed):
    """Every notebook ran top to bottom in the build (all in one kernel, notebooks/build.py's `execute`,
    solutions included; a raising cell fails the build, naming its notebook); every run of cells that show a
    figure, table or view has a markdown cell before it (what to look for) and after it (what it showed)."""
    import nbformat

    stems = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert stems and sorted(p.stem for p in executed.glob("*.ipynb")) == stems
    for stem in stems:
        nb = nbformat.read(executed / f"{stem}.ipynb", as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.get("execution_count") for c in code), stem
        assert not any(o.get("output_type") == "error" for c in code for o in c.outputs), stem
        shows = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and _shows(c)]
        assert shows, f"{stem} shows nothing"
        for i in shows:
            before = next(j for j in range(i - 1, -1, -1) if j not in shows)
            after = next((j for j in range(i + 1, len(nb.cells)) if j not in shows), None)
            assert nb.cells[before].cell_type == "markdown", f"{stem}: no prose before cell {i}"
            assert after is not None and nb.cells[after].cell_type == "markdown", f"{stem}: no prose after cell {i}"


def test_strict_build_fails_on_a_broken_link(tmp_path):
    """Our strict settings really bite: a page linking to a missing page stops the build."""
    import yaml

    ours = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\n[gone](missing.md)\n", encoding="utf-8")
    (tmp_path / "mkdocs.yml").write_text(
        yaml.safe_dump({"site_name": "t", "strict": ours["strict"], "validation": ours["validation"]}), encoding="utf-8"
    )
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "-f", str(tmp_path / "mkdocs.yml")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert res.returncode != 0 and "missing.md" in res.stdout + res.stderr


@pytest.mark.browser
def test_home_and_api_pages_render(driver, until_js, site, tmp_path):
    from selenium.webdriver.common.by import By

    # Each read waits for its page: driver.get may return while the previous page is still the one shown.
    here = "return location.href === arguments[0] && document.readyState === 'complete'"
    home = (site / "index.html").as_uri()
    driver.get(home)
    until_js(here, bool, home)
    assert "attnlab" in driver.title
    assert driver.find_element(By.CSS_SELECTOR, "article h2").text.startswith("Getting started")
    driver.save_screenshot(str(tmp_path / "home.png"))
    api = (site / "api" / "attention.html").as_uri()
    driver.get(api)
    until_js(here, bool, api)
    names = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "article .doc-heading code")]
    assert any("masked_softmax" in n for n in names), names[:10]
    driver.save_screenshot(str(tmp_path / "api.png"))
    notebook = (site / "notebooks" / "02_nadaraya_watson.html").as_uri()
    driver.get(notebook)
    images = """return location.href === arguments[0] ? Array.from(document.querySelectorAll('article img'))
                  .map(i => i.complete ? i.naturalWidth : 0) : []"""
    widths = until_js(images, lambda ws: ws and all(w > 0 for w in ws), notebook, timeout=30)
    assert widths  # every figure of the notebook loads and draws
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe
