"""Where a run executes: seeds and generator states, the device, the distributed group, threads and cores, and
what the machine can hold (`memory_bytes`: the memory a process may use, which the cost checks compare with).

Training (`attnlab.training`) and the commands import these; nothing here knows about models or data.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import numpy as np
import torch
import torch.distributed as dist

try:
    import resource
except ImportError:  # Windows: no address-space limits to read
    resource = None  # type: ignore[assignment]

# Where a container's memory limit is read: cgroup v2, then v1.
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def seed_everything(seed: int) -> None:
    """One seed for every generator training touches (python, numpy, torch CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """Generator states as tensors / plain values (loadable with torch.load(weights_only=True))."""
    py = random.getstate()
    np_state = cast(tuple, np.random.get_state())  # the legacy tuple form (legacy=True, the default)
    state = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what `rng_state` returned."""
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    np_state = state["numpy"]
    np.random.set_state((np_state[0], np_state[1].numpy().astype(np.uint32), *np_state[2:]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextmanager
def intra_op_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to `n` inside the block (None: left alone), restored after.

    A matmul splits its sums across threads, so the same seed gives slightly different floats at
    different thread counts, and over thousands of steps a different model; a run that must give the
    same result on every machine (the d2l preset) pins its count."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside the block, as it was after (reference counting still
    frees every object that is not in a cycle). A decoding step makes hundreds of tensor objects, so the
    collector runs often, and every so often it walks all ~300,000 objects a loaded model and torch keep
    (a pause of tens of milliseconds for a small translator); a decode makes no cycles for it to find."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextmanager
def gc_frozen() -> Iterator[None]:
    """Every object that exists now (a loaded model, torch's own) out of the collector's passes inside the block
    (`gc.freeze`), and back in them after: a command that decodes window after window would otherwise have a
    full collection walk them all after each (~20 ms for the laptop model). Back before the interpreter exits,
    whose last collection extension modules count on (nanobind reports what it never freed as leaks).

    Examples:
        >>> with gc_frozen():
        ...     gc.get_freeze_count() > 0
        True
        >>> gc.get_freeze_count()
        0
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def distributed_info() -> tuple[int, int]:
    """(rank, world_size) from an initialised torch.distributed group, else (0, 1)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def init_distributed() -> None:
    """Join the process group torchrun describes in the environment (gloo on CPU, nccl on GPUs); nothing
    for a single process."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)


def check_nproc(nproc: int) -> None:
    """ValueError unless 1 <= nproc <= the GPUs (or else the CPU cores) of this machine."""
    most = torch.cuda.device_count() if torch.cuda.is_available() else (os.cpu_count() or 1)
    if not 1 <= nproc <= most:
        units = "GPUs" if torch.cuda.is_available() else "CPU cores"
        raise ValueError(f"--nproc must be between 1 and {most} (the {units} of this machine), got {nproc}")


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's count where they differ)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def free_threads(cores: int | None = None, load: float | None = None) -> int:
    """Intra-op threads a trainer may use now: the usable cores less those other runnable processes hold
    (`load_now()` less this process itself), at least 1.

    Examples:
        >>> free_threads(cores=2, load=1.1)   # only this process: both cores
        2
        >>> free_threads(cores=2, load=5.5)   # a busy laptop: one thread, not two fighting the others
        1

    On a shared machine two OpenMP threads that fight other processes run many times slower than one, so a
    trainer (the demo's, `attnlab train`'s) gets the cores that are free now, not the machine's count.
    """
    cores = usable_cores() if cores is None else cores
    load = load_now() if load is None else load
    others = max(0.0, load - 1.0)
    return max(1, min(cores, math.floor(cores - others + 0.5)))


def training_threads(requested: int | None, pinned: int | None, device: str) -> int | None:
    """The threads a training run takes: `requested` (a flag), else `pinned` (a preset's or config's), else on a
    CPU `free_threads()`; None (torch's default) on a GPU, where the host threads only launch kernels.

    Examples:
        >>> training_threads(3, 1, "cpu"), training_threads(None, 1, "cpu")
        (3, 1)
    """
    if requested is not None:
        return requested
    if pinned is not None:
        return pinned
    return free_threads() if resolve_device(device).type == "cpu" else None


def load_now(samples: int = 5, every_s: float = 0.02) -> float:
    """Runnable processes now, this one included: the larger of the 1-minute load average and the median of a
    few reads of the kernel's count of running tasks (/proc/loadavg's 4th field). The average lags a
    minute behind a process that just started; the count sees it at once. 1.0 where neither can be read."""
    try:
        average = os.getloadavg()[0]
    except (OSError, AttributeError):  # no load average on this system: trust the affinity mask alone
        average = 1.0
    counts = []
    for i in range(samples):
        try:
            with open("/proc/loadavg", encoding="ascii") as f:
                counts.append(int(f.read().split()[3].split("/")[0]))
        except (OSError, IndexError, ValueError):  # not Linux
            break
        if i + 1 < samples:
            time.sleep(every_s)
    return max(average, float(statistics.median(counts))) if counts else average


def resolve_device(name: str) -> torch.device:
    """'auto' -> cuda if available else cpu; anything else must name a device this machine has.

    Raises ValueError (one line, with what to pass instead) for a malformed name or a missing device.
    """
    if not isinstance(name, str):
        raise ValueError(f"device must be a string such as 'auto', 'cpu' or 'cuda:0', got {name!r}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"unknown device {name!r}; expected 'auto', 'cpu', 'cuda' or 'cuda:N'") from exc
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device {name!r} is not supported; use 'auto', 'cpu' or 'cuda[:N]'")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {name!r} asked for, but CUDA is not available here; use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                f"device {name!r} asked for, but this machine has {torch.cuda.device_count()} "
                f"CUDA device(s) (cuda:0..cuda:{torch.cuda.device_count() - 1})"
            )
    return device


def interactive(stream=None) -> bool:
    """True when `stream` (default stderr, where progress goes) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def memory_bytes() -> int | None:
    """Bytes of memory this process may use: physical memory, within a cgroup's limit (containers) and
    RLIMIT_AS where one is set (`ulimit -v`); None where none can be read (the checks then pass)."""
    sizes = []
    with contextlib.suppress(ValueError, OSError, AttributeError):  # not POSIX (Windows): no sysconf
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    for path in _CGROUP_LIMITS:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:  # "max", or cgroup v1's "no limit" (2^63 - page)
            sizes.append(int(text))
    if resource is not None:
        with contextlib.suppress(ValueError, OSError):
            soft, _ = resource.getrlimit(resource.RLIMIT_AS)
            if soft != resource.RLIM_INFINITY and soft > 0:
                sizes.append(soft)
    return min(sizes) if sizes else None
