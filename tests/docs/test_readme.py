"""The Markdown pages cannot rot: every fenced Python example in the README and docs/ runs (those that need a
trained run, on a tiny one), and every dotted `attnlab.…` name the pages mention resolves to a real module or
attribute."""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest
from train_helpers import DATA, SUBPROCESS_ENV, tiny_run

import attnlab
from attnlab.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MOVED = ["library.md", "translators.md", "explorer.md", "data.md", "chapter.md", "demo.md", "testing.md"]
PAGES = [README, ROOT / "ARCHITECTURE.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```(?:python|py)\n(.*?)```", re.S)
# Examples that read a trained run: they run with runs/small a tiny trained run (runs/small-ct2 its
# CTranslate2 export, runs/small-onnx its ONNX export), a marker of each block naming it.
NEEDS_RUN = {
    "translators.md": ["ctranslate2.Translator(", "DecodeOptions(\n", "OnnxTranslator("],
}
FILE_SUFFIXES = {"py", "c", "h", "md", "json", "jsonl", "txt", "png", "yml", "toml", "zip", "pt", "html", "ipynb"}


def blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text(encoding="utf-8"))


def needs_run(page: Path, block: str) -> bool:
    return any(marker in block for marker in NEEDS_RUN.get(page.name, []))


def test_readme_python_blocks_run():
    found = blocks(README)
    assert found, "the README should show the library in a python block"
    for block in found:
        exec(compile(block, "README.md", "exec"), {})


def test_docs_python_blocks_run_and_the_readme_links_the_pages():
    text = README.read_text(encoding="utf-8")
    for name in MOVED:
        assert f"](docs/{name})" in text, f"the README does not link docs/{name}"
    for page in sorted((ROOT / "docs").glob("*.md")):
        for block in blocks(page):
            if not needs_run(page, block):
                exec(compile(block, f"docs/{page.name}", "exec"), {})


def test_every_example_that_needs_a_run_is_listed_and_runs_on_a_tiny_one(tmp_path, monkeypatch):
    listed = [(p, b) for p in PAGES for b in blocks(p) if needs_run(p, b)]
    markers = sum(len(m) for m in NEEDS_RUN.values())
    assert len(listed) == markers, f"{markers} markers in NEEDS_RUN, {len(listed)} blocks match them"
    if not DATA or not Path(DATA).is_file():
        pytest.skip("set ATTNLAB_DATA to the fra-eng.zip corpus to train the tiny run these examples read")
    runs = tmp_path / "runs"
    tiny_run(runs / "small")
    if any("ctranslate2" in b for _, b in listed):
        pytest.importorskip("ctranslate2")
        export = [sys.executable, "-m", "attnlab", "export", "--checkpoint", str(runs / "small")]
        export += ["--format", "ctranslate2", "--out", str(runs / "small-ct2")]
        env = {**SUBPROCESS_ENV, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        subprocess.run(export, check=True, capture_output=True, env=env, timeout=300)
    if any("OnnxTranslator(" in b for _, b in listed):
        pytest.importorskip("onnxruntime")
        assert (
            main(["export", "--checkpoint", str(runs / "small"), "--format", "onnx", "--out", str(runs / "small-onnx")])
            == 0
        )
    monkeypatch.chdir(tmp_path)
    for page, block in listed:
        exec(compile(block, page.name, "exec"), {})


def test_readme_opens_with_the_two_commands():
    first_block = re.search(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S).group(1)
    assert first_block.splitlines()[0].startswith("make demo")
    assert first_block.splitlines()[1].startswith("make test")


def dotted_names(text: str) -> set[str]:
    """`attnlab.a.b` anywhere, and `a.b` in backticks whose first part is a module of attnlab (`decoding.x`);
    file names (`cli.py`) are not names."""
    subpackages = {m.name for m in pkgutil.iter_modules(attnlab.__path__)}
    names = set(re.findall(r"\battnlab(?:\.[A-Za-z_]\w*)+", text))
    names |= {
        f"attnlab.{n}"
        for n in re.findall(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)", text)
        if n.split(".")[0] in subpackages
    }
    return {n for n in names if n.rsplit(".", 1)[-1] not in FILE_SUFFIXES}


def resolves(name: str) -> bool:
    """The longest importable module prefix of `name`, then attributes for the rest."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_dotted_attnlab_name_in_the_pages_resolves():
    missing = sorted(
        f"{page.relative_to(ROOT)}: {name}"
        for page in PAGES
        for name in dotted_names(page.read_text(encoding="utf-8"))
        if not resolves(name)
    )
    assert not missing, f"{len(missing)} names the pages mention do not exist:\n" + "\n".join(missing)


def test_the_name_check_can_fail():
    assert dotted_names("`decoding.pick.pick`, attnlab.utils.files and `cli.py`") == {
        "attnlab.decoding.pick.pick",
        "attnlab.utils.files",
    }
    assert resolves("attnlab.attention.masked_softmax") and not resolves("attnlab.decoding.pick.pick")
