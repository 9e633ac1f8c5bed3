"""`pip install attnlab` from a built wheel: a fresh virtual environment gets the library and the CLI, which run on
the slim core alone (the packages of the extras are made unimportable there), and a command that needs an
extra names it. torch and the other core packages come from this environment (a .pth line), so nothing is
downloaded."""

from __future__ import annotations

import importlib.util
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
# Loaded first by the venv's Python (PYTHONPATH): the packages of the extras are missing for attnlab's own modules,
# the way an uninstalled package is: `import` raises ModuleNotFoundError, `importlib.util.find_spec` returns None.
# Who asks is told by the importing module's name (its frame's __spec__ / __name__), never by a file's path: a
# checkout or a venv may sit in a folder named attnlab. Other importers (torch probing optional packages) see them.
BLOCKER = f"""
import sys
EXTRAS = {EXTRA_MODULES!r}
def _importer():
    frame = sys._getframe(2)
    while frame is not None:
        spec = frame.f_globals.get("__spec__")
        name = getattr(spec, "name", None) or frame.f_globals.get("__name__") or ""
        if not (name.startswith(("importlib", "_frozen_importlib")) or name == __name__):
            return name  # the first frame past the import machinery's own
        frame = frame.f_back
    return ""
class _Extras:
    \"\"\"Stands in for the whole meta path: finds nothing of an extra for attnlab, else asks the real finders.\"\"\"
    def __init__(self, finders):
        self.finders = finders
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in EXTRAS and _importer().split(".")[0] == "attnlab":
            return None
        for finder in self.finders:
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                return spec
        return None
    def invalidate_caches(self):
        for finder in self.finders:
            getattr(finder, "invalidate_caches", lambda: None)()
sys.meta_path[:] = [_Extras(list(sys.meta_path))]
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


# Runs in the installed venv: NAME looked up and imported by code of one module name, compiled from one file name.
PROBE = """
import importlib.util, sys
name, module, filename = sys.argv[1:4]
code = (
    "spec = importlib.util.find_spec(NAME)\\n"
    "try:\\n    __import__(NAME)\\n    got = 'imported'\\n"
    "except ModuleNotFoundError as exc:\\n    got = 'missing ' + exc.name"
)
space = {"__name__": module, "NAME": name, "importlib": importlib}
exec(compile(code, filename, "exec"), space)
print(space["spec"] is not None, space["got"])
"""


def test_the_blocker_hides_the_extras_from_attnlab_alone_by_module_name(installed):
    present = [m for m in EXTRA_MODULES if importlib.util.find_spec(m) is not None]
    if not present:
        pytest.skip("no package of an extra is installed here to hide (pip install -e '.[dev]')")
    name, bin_, env, cwd = present[0], installed["bin"], installed["env"], installed["cwd"]

    def probe(module: str, filename: str) -> str:
        return _run([str(bin_ / "python"), "-c", PROBE, name, module, filename], env, cwd).strip()

    # attnlab's module, wherever its file is: missing as an uninstalled package is (no spec, ModuleNotFoundError).
    assert probe("attnlab.probe", "/somewhere/else/probe.py") == f"False missing {name}"
    # Another package's module inside a checkout named attnlab (torch in attnlab/.venv): the package is there.
    assert probe("torch._probe", "/tmp/attnlab/.venv/lib/torch/_probe.py") == "True imported"


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
