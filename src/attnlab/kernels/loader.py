"""The loader of attnlab's C kernels (`src/attnlab/csrc/*.c`, sharing `*.h`): built at first use with the
machine's C compiler, cached, and verified before every load.

    load("few_queries")   -> the ctypes library, or None (no compiler, a failed build, ATTNLAB_NATIVE=0)
    takes(torch.float32, x, y) -> whether a kernel can read those tensors as they are
    function("few_queries", "attnlab_few_queries_f32", argtypes) -> that C function, or None
    status("few_queries") -> one line: where the library lies, or why there is none

A kernel is plain C with no PyTorch headers, so a build takes a fraction of a second (a PyTorch C++
extension compiles for a minute). It is compiled for this CPU (`-march=native`) and kept under
`$ATTNLAB_CACHE` (default `~/.cache/attnlab`)/native, in a file named by a hash of the source and headers,
the flags, the compiler and the CPU's features, so a changed kernel, compiler or machine gets its own build.

The cache is checked, not trusted: a library is written under a temporary name and renamed into place, with
its SHA-256 beside it (`NAME-HASH.so.sha256`); before loading, the file's digest must match, so a library
cut short (a partial copy or restore of the cache) is rebuilt instead of crashing the process on first use
(SIGBUS). A library that lacks a function its wrapper asks for is dropped from the cache and skipped with
one warning line; every caller then takes its PyTorch path. ctypes releases the GIL during a call, so the
batch workers run the kernels in parallel.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from .switches import ENV, Switch, native_enabled

__all__ = [
    "FLAGS",
    "I64",
    "KERNELS",
    "PTR",
    "active",
    "cache_dir",
    "cached_library",
    "function",
    "load",
    "off",
    "reset",
    "status",
    "switched_off",
    "takes",
]

log = logging.getLogger(__name__)

SOURCES = Path(__file__).resolve().parents[1] / "csrc"
KERNELS = tuple(sorted(p.stem for p in SOURCES.glob("*.c")))  # one library per C file
# Vectorised for this CPU; `omp simd` loops without the OpenMP runtime (torch ships its own).
# -fno-strict-aliasing: int8's rescale pass reads int32 sums and writes floats in the same buffer.
FLAGS = (
    "-O3",
    "-march=native",
    "-ffp-contract=fast",
    "-fno-strict-aliasing",
    "-fopenmp-simd",
    "-fPIC",
    "-shared",
    "-std=c11",
)
_LIBS = ("-lm",)
# The kernels' argument types for a pointer (a tensor's data_ptr, or None) and a size or stride.
PTR, I64 = ctypes.c_void_p, ctypes.c_int64

_lock = threading.Lock()  # builds (a fraction of a second each, first use only) and the tables below
_loaded: dict[str, ctypes.CDLL | None] = {}
_why: dict[str, str] = {}
_files: dict[str, Path] = {}  # kernel -> the cached library it was loaded from
_functions: dict[tuple[str, str], Callable | None] = {}
_versions: dict[tuple[str, ...], str] = {}  # compiler -> its --version output
_kernels = Switch("native")  # off inside `off()`
_warned = False  # a kernel that could not be had was reported (one line per process)


def cache_dir() -> Path:
    """Where built kernels are kept: $ATTNLAB_CACHE/native, else ~/.cache/attnlab/native."""
    root = os.environ.get("ATTNLAB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "attnlab"
    )
    return Path(root) / "native"


def load(name: str) -> ctypes.CDLL | None:
    """The built library of csrc/NAME.c (built now if needed), or None when it cannot be had here."""
    if name in _loaded:
        return _loaded[name]
    with _lock:
        if name not in _loaded:
            _loaded[name], _why[name] = _build_and_load(name)
        return _loaded[name]


def takes(dtype: torch.dtype, *tensors: Tensor | None) -> bool:
    """Whether a C kernel can read these tensors as they are (None: an operand left out): on the CPU, of
    `dtype`, the last dimension contiguous, and none that autograd would need a gradient for."""
    grad = torch.is_grad_enabled()
    for t in tensors:  # a plain loop: this runs several times per decoding step
        if t is not None and (t.dtype is not dtype or not t.is_cpu or t.stride(-1) != 1 or (grad and t.requires_grad)):
            return False
    return True


def function(name: str, symbol: str, argtypes: list, restype=None) -> Callable | None:
    """The C function `symbol` of csrc/NAME.c with its ctypes signature, or None (see `load`, `off`);
    looked up once: every caller of a symbol passes its one signature (the kernel's wrapper keeps it)."""
    if not _kernels:
        return None
    key = (name, symbol)
    if key in _functions:  # the hot path: a dict read, no lock
        return _functions[key]
    lib = load(name)
    fn = None
    if lib is not None:
        try:
            fn = getattr(lib, symbol)
        except AttributeError:
            _drop(name, f"{_paths(name)[0].name} lacks {symbol}")
        else:
            fn.argtypes, fn.restype = argtypes, restype
    with _lock:
        _functions[key] = fn
    return fn


def off() -> contextlib.AbstractContextManager[None]:
    """Inside the block every caller takes its PyTorch path (benchmarks measure what the kernels give)."""
    return _kernels.off()


def reset() -> None:
    """Forget what was loaded, so the next call looks again (after ATTNLAB_NATIVE or CC changed; tests)."""
    global _warned
    with _lock:
        _warned = False
        _loaded.clear()
        _functions.clear()
        _why.clear()
        _files.clear()
        _versions.clear()


def status(name: str) -> str:
    """What `load(name)` gave, in one line (benchmarks print it)."""
    load(name)
    return _why[name]


def _compiler() -> list[str] | None:
    if os.environ.get("CC"):
        return shlex.split(os.environ["CC"])
    for cc in ("cc", "gcc", "clang"):
        if path := shutil.which(cc):
            return [path]
    return None


def _cpu_features() -> str:
    """The CPU's identity as -march=native sees it (a build for one CPU may not run on another)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def active() -> bool:
    """Whether the C kernels may run now: not switched off (ATTNLAB_NATIVE=0) and not inside `off()`."""
    return bool(_kernels) and not switched_off()


def switched_off() -> bool:
    """Whether the user turned the kernels off (ATTNLAB_NATIVE=0, false, no or off): then every caller takes
    its PyTorch path (`attnlab.kernels.switches.native_enabled`)."""
    return not native_enabled()


def cached_library(name: str) -> Path | None:
    """The cached library of csrc/NAME.c this machine builds and loads (it may not exist yet), or None where
    no compiler answers."""
    cc = _compiler()
    version = None if cc is None else _version(cc)
    return None if cc is None or version is None else _target(name, cc, version)


def _build_and_load(name: str) -> tuple[ctypes.CDLL | None, str]:
    """The library of csrc/NAME.c, built if needed, and one line on what happened (`status`)."""
    if switched_off():
        return None, f"off ({ENV}={os.environ.get(ENV, '')})"
    source = SOURCES / f"{name}.c"
    cc = _compiler()
    if cc is None:
        return None, "no C compiler found (set CC, or install gcc): PyTorch's kernels run instead"
    version = _version(cc)
    if version is None:
        why = f"the C compiler {shlex.join(cc)!r} did not run (set CC to one that does): PyTorch's kernels run instead"
        _warn_once(why)
        return None, why
    target = _files[name] = _target(name, cc, version)
    if not _verified(target):  # absent, cut short, or without its digest: built again
        error = _compile(cc, source, target)
        if error:
            why = f"building {source.name} failed ({error}): PyTorch's kernels run instead"
            _warn_once(why)
            return None, why
        if not _verified(target):
            why = f"{target} does not match its digest after building it: PyTorch's kernels run instead"
            _warn_once(why)
            return None, why
    try:
        lib = ctypes.CDLL(str(target))
    except OSError as e:
        why = f"loading {target} failed ({e}): PyTorch's kernels run instead"
        _warn_once(why)
        return None, why
    return lib, f"built with {Path(cc[0]).name} {' '.join(FLAGS)}: {target}"


def _target(name: str, cc: list[str], version: str) -> Path:
    source = SOURCES / f"{name}.c"
    headers = [h.read_text() for h in sorted(SOURCES.glob("*.h"))]  # what a source may include
    key = "\0".join([source.read_text(), *headers, *FLAGS, *cc, version, _cpu_features(), platform.machine()])
    return cache_dir() / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.so"


def _paths(name: str) -> tuple[Path, Path]:
    """(library, digest) of a loaded kernel."""
    return _files[name], _digest_path(_files[name])


def _digest_path(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def _digest(path: Path | str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _verified(target: Path) -> bool:
    """Whether the cached library is whole: its SHA-256 equals the one written beside it at build time."""
    try:
        return _digest(target) == _digest_path(target).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return False


def _drop(name: str, why: str) -> None:
    """A loaded library that is not what its wrappers expect: one warning, none of its functions used again in
    this process, and the cached files removed so that the next process builds it again."""
    target, digest = _paths(name)
    for path in (target, digest):
        with contextlib.suppress(OSError):
            path.unlink()
    with _lock:
        _loaded[name] = None
        for key in [k for k in _functions if k[0] == name]:
            _functions[key] = None
        _why[name] = f"{why} (removed from the cache, built again next run): PyTorch's kernels run instead"
        _warn_once(_why[name])


def _warn_once(why: str) -> None:
    """One line per process for a kernel that could not be had: the others most likely fail alike."""
    global _warned
    if not _warned:
        _warned = True
        log.warning("attnlab: %s (`attnlab.kernels.loader.status(name)` tells each kernel's)", why)


def _version(cc: list[str]) -> str | None:
    """`cc --version` (part of each build's hash), asked once per process once it has answered."""
    key = tuple(cc)
    if key not in _versions:
        try:
            res = subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None  # not kept: a compiler that timed out under load may answer next time
        _versions[key] = res.stdout
    return _versions[key]


def _compile(cc: list[str], source: Path, target: Path) -> str | None:
    """Build into a temporary file beside `target`, write its digest likewise, then rename both into place: a
    concurrent build or an interrupted one never leaves a half-written library under the final name, and a
    library damaged later fails `_verified`. Returns None, or the compiler's complaint."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}-", suffix=".so", dir=target.parent)
        os.close(fd)
    except OSError as e:
        return f"cannot write {target.parent}: {e}"
    tmp_digest = tmp + ".sha256"
    try:
        res = subprocess.run([*cc, *FLAGS, "-o", tmp, str(source), *_LIBS], capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            lines = (res.stderr or res.stdout).strip().splitlines()
            return lines[0] if lines else f"exit status {res.returncode}"
        with open(tmp_digest, "w") as f:
            f.write(_digest(tmp) + "\n")
        os.replace(tmp, target)
        os.replace(tmp_digest, _digest_path(target))
        return None
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    finally:
        for path in (tmp, tmp_digest):
            if os.path.exists(path):
                os.unlink(path)
