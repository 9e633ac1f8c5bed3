"""The README's Python examples run as written, and so do those of the docs pages its details moved to."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
MOVED = ["library.md", "translators.md", "explorer.md", "data.md", "chapter.md", "demo.md", "testing.md"]


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README should show the library in a python block"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})


def test_moved_pages_python_blocks_run_and_the_readme_links_them():
    text = README.read_text()
    for name in MOVED:
        page = README.parent / "docs" / name
        assert f"](docs/{name})" in text, f"the README does not link docs/{name}"
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S):
            exec(compile(block, f"docs/{name}", "exec"), {})


def test_readme_opens_with_the_two_commands():
    text = README.read_text()
    first_block = re.search(r"```bash\n(.*?)```", text, flags=re.S).group(1)
    assert first_block.splitlines()[0].startswith("make demo")
    assert first_block.splitlines()[1].startswith("make test")
