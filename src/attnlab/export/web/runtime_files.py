"""onnxruntime-web's files for the static page: found in a folder the user names, or fetched once by `npm ci`
from the pinned package.json + package-lock.json beside this module into attnlab's cache.

    files = runtime_files(None)   # {name: path} of ort.wasm.min.js and its WebAssembly, fetched when missing

Order: the folder given (`attnlab export --format web --runtime DIR`), else $ATTNLAB_ORT_WEB, else the cache
($XDG_CACHE_HOME or ~/.cache, then attnlab/onnxruntime-web-VERSION), filled by `npm ci` when empty. Each may
be the package's dist folder, the package folder or a folder holding node_modules/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = "onnxruntime-web"
# The wasm-only build (no WebGPU/WebGL) and the single WebAssembly binary it loads, with its loader.
FILES = ("ort.wasm.min.js", "ort-wasm-simd-threaded.wasm", "ort-wasm-simd-threaded.mjs")
ENV = "ATTNLAB_ORT_WEB"


def pinned_version() -> str:
    """The onnxruntime-web version package.json pins."""
    return str(json.loads((HERE / "package.json").read_text())["dependencies"][PACKAGE])


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "attnlab" / f"{PACKAGE}-{pinned_version()}"


def _dist(folder: Path) -> Path | None:
    """The folder under `folder` that holds every file of FILES, or None."""
    for cand in (folder, folder / "dist", folder / "node_modules" / PACKAGE / "dist"):
        if all((cand / f).is_file() for f in FILES):
            return cand
    return None


def _npm_ci(target: Path) -> None:
    """Fetch the pinned package into `target` (built in a temp folder beside it, then renamed)."""
    npm = shutil.which("npm")
    if npm is None:
        raise ValueError(
            f"the web format needs onnxruntime-web {pinned_version()}, and npm (to fetch it) is not installed; "
            f"install Node.js, or run `npm pack {PACKAGE}@{pinned_version()}`, unpack it elsewhere and pass "
            f"--runtime DIR (or set {ENV})"
        )
    print(
        f"attnlab export: fetching {PACKAGE} {pinned_version()} once with `npm ci` into {target} "
        f"(--runtime DIR or ${ENV} uses a copy you have)",
        file=sys.stderr,
        flush=True,
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".npm-", dir=target.parent))
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(HERE / name, tmp / name)
        cmd = [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]
        done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise ValueError(
                f"`npm ci` could not fetch {PACKAGE} {pinned_version()} ({last[:160]}); check the network "
                f"or pass --runtime DIR holding its dist files (or set {ENV})"
            )
        try:
            os.rename(tmp, target)
        except OSError:  # another export filled the cache meanwhile: use that one
            if _dist(target) is None:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def runtime_files(folder: str | os.PathLike | None = None) -> dict[str, Path]:
    """{file name: path} of onnxruntime-web's FILES, from `folder`, $ATTNLAB_ORT_WEB or the cache (fetching
    it with `npm ci` when empty). One-line ValueError when a given folder lacks them or npm cannot help."""
    given = folder if folder is not None else os.environ.get(ENV)
    if given:
        dist = _dist(Path(given))
        if dist is None:
            raise ValueError(
                f"{given} holds no onnxruntime-web dist files ({', '.join(FILES)}); pass the package's dist "
                f"folder (e.g. node_modules/{PACKAGE}/dist) or leave --runtime and {ENV} unset to fetch it"
            )
        return {f: dist / f for f in FILES}
    target = cache_dir()
    dist = _dist(target)
    if dist is None:
        if target.exists():
            shutil.rmtree(target)  # a partial cache from an interrupted fetch
        _npm_ci(target)
        dist = _dist(target)
        if dist is None:
            raise ValueError(f"`npm ci` installed {PACKAGE} without {', '.join(FILES)}; pass --runtime DIR instead")
    return {f: dist / f for f in FILES}


__all__ = ["ENV", "FILES", "cache_dir", "pinned_version", "runtime_files"]
