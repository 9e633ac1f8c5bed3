"""`pip install attnlab` from a built wheel: a fresh virtual environment gets the library and the CLI, which run on
the slim core alone (the packages of the extras are made unimportable there), and a command that needs an
extra names it. torch and the other core packages come from this environment (a .pth line), so nothing is
downloaded."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from attnlab import __version__

ROOT = Path(__file__).resolve().parents[1]
# Import names of every package an extra brings (pyproject.toml): none may be needed by the core.
EXTRA_MODULES = [
    "fastapi",
    "starlette",
    "pydantic",
    "uvicorn",
    "transformers",
    "sentencepiece",
    "ctranslate2",
    "sklearn",
    "tensorboard",
    "jupytext",
    "nbformat",
    "nbclient",
    "ipykernel",
    "mkdocs",
]
# Loaded first by the venv's Python (PYTHONPATH): an import of one of them from attnlab's own code fails as if it
# were not installed. Imports from elsewhere (torch probes for optional packages) are left alone.
BLOCKER = f"""
import importlib.abc, sys
class _Extras(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in {EXTRA_MODULES!r}:
            return None
        frame = sys._getframe(1)
        while frame is not None and ("<frozen" in frame.f_code.co_filename or "importlib" in frame.f_code.co_filename):
            frame = frame.f_back  # importlib's own frames: the importer is the first frame past them
        if frame is not None and "/attnlab/" in frame.f_code.co_filename.replace("\\\\", "/"):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _Extras())
"""


def _run(cmd: list[str], env: dict, cwd: Path, timeout: float = 120) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False)
    assert res.returncode == 0, f"{cmd} exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
    return res.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """Build the wheel from a copy of the sources, install it (no dependencies) into a new venv."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    env.pop("PYTHONPATH", None)
    pip = [sys.executable, "-m", "pip"]
    _run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp / "dist"), str(source)], env, tmp)
    (wheel,) = (tmp / "dist").glob("attnlab-*.whl")
    target = tmp / "venv"
    venv.create(target, with_pip=False)
    python = target / "bin" / "python"
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env, tmp).strip()
    # The core's packages from this environment, as plain paths (its .pth files, editable attnlab included, are
    # not processed there): the venv's own attnlab is the wheel's.
    (Path(site) / "core_from_outside.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    _run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)], env, tmp)
    blocker = tmp / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    run_env = {**env, "PYTHONPATH": str(blocker), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    run_env.pop("ATTNLAB_DATA", None)
    return {"wheel": wheel, "bin": target / "bin", "env": run_env, "cwd": tmp, "venv": target}


def test_the_wheel_declares_a_slim_core_and_the_extras(installed):
    with zipfile.ZipFile(installed["wheel"]) as whl:
        meta = whl.read(f"attnlab-{__version__}.dist-info/METADATA").decode()
        names = whl.namelist()
    assert f"Version: {__version__}" in meta
    core = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    core = [r for r in core if "extra ==" not in r]
    assert sorted(r.split(">")[0].split("=")[0] for r in core) == [
        "matplotlib",
        "numpy",
        "sacrebleu",
        "safetensors",
        "tokenizers",
        "torch",
        "tqdm",
    ]
    for extra in ("serve", "hf", "ct2", "vision", "tensorboard", "notebooks", "docs", "dev"):
        assert f"Provides-Extra: {extra}" in meta, extra
    for data in ("attnlab/serve/static/index.html", "attnlab/data/sample/fra-eng-sample.txt", "attnlab/py.typed"):
        assert data in names, data
    # the C kernels' sources, built on the user's machine at first use
    sources = {p.name for p in (ROOT / "src" / "attnlab" / "csrc").iterdir()}
    assert sources and all(f"attnlab/csrc/{name}" in names for name in sources), sources


def test_the_installed_cli_runs_on_the_slim_core(installed):
    bin_, env, cwd = installed["bin"], installed["env"], installed["cwd"]
    where = _run([str(bin_ / "python"), "-c", "import attnlab.attention, attnlab; print(attnlab.__file__)"], env, cwd)
    assert where.startswith(str(installed["venv"])), where
    assert _run([str(bin_ / "attnlab"), "--version"], env, cwd).strip() == f"attnlab {__version__}"
    assert "63" in _run([str(bin_ / "attnlab"), "params"], env, cwd)  # the paper's base model: 63M parameters
    sample = _run(
        [str(bin_ / "python"), "-c", "from attnlab.data import sample_data_path; print(sample_data_path())"], env, cwd
    ).strip()
    train = ["train", "--preset", "tiny", "--data", sample, "--max-steps", "3", "--out", "run", "--no-progress"]
    _run([str(bin_ / "attnlab"), *train], env, cwd)
    out = _run([str(bin_ / "attnlab"), "translate", "--checkpoint", "run", "go ."], env, cwd)
    assert len(out.splitlines()) == 1
    res = subprocess.run(
        [str(bin_ / "attnlab"), "serve", "--checkpoint", "run"],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=False,
    )
    assert res.returncode == 2 and "pip install 'attnlab[serve]'" in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1
