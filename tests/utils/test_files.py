"""Atomic writes: the modes a plain mkdir/open would give, and the temp leftovers of killed writers."""

import os
import subprocess
import sys

import pytest

from attnlab.utils.files import _temp_name, atomic_dir, atomic_path, clean_stale_temps


@pytest.fixture(params=[0o022, 0o027, 0o002])
def umask(request):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_atomic_dir_and_path_respect_the_umask(tmp_path, umask):
    with atomic_dir(tmp_path / "folder") as tmp:
        (tmp / "x").write_text("x")
    os.mkdir(tmp_path / "plain")
    assert (tmp_path / "folder").stat().st_mode & 0o777 == 0o777 & ~umask
    assert (tmp_path / "folder").stat().st_mode == (tmp_path / "plain").stat().st_mode
    with atomic_path(tmp_path / "file.txt") as tmp, open(tmp, "w") as f:
        f.write("x")
    (tmp_path / "plain.txt").write_text("x")
    assert (tmp_path / "file.txt").stat().st_mode & 0o777 == 0o666 & ~umask
    assert (tmp_path / "file.txt").stat().st_mode == (tmp_path / "plain.txt").stat().st_mode


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)  # reaped: its pid names no process now
    return child.pid


def test_temp_folders_of_dead_writers_are_removed_live_ones_kept(tmp_path):
    dead = _temp_name("out").replace(f"-{os.getpid()}-", f"-{_dead_pid()}-")
    live_child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        live = _temp_name("out").replace(f"-{os.getpid()}-", f"-{live_child.pid}-")
        mine = _temp_name("other")  # this process: a writer still at work
        stale_file = _temp_name("report.json").replace(f"-{os.getpid()}-", f"-{_dead_pid()}-") + ".tmp"
        foreign = dead.replace(dead.split("-")[2], "00000000")  # another host's: its pid means nothing here
        for name in (dead, live, mine, foreign, ".out.tmp-legacy", ".user-notes"):
            (tmp_path / name).mkdir()
            (tmp_path / name / "shard").write_bytes(b"x")
        (tmp_path / stale_file).write_bytes(b"half")
        with atomic_dir(tmp_path / "out") as tmp:
            (tmp / "meta.json").write_text("{}")
        left = sorted(p.name for p in tmp_path.iterdir())
        assert left == sorted([live, mine, foreign, ".out.tmp-legacy", ".user-notes", "out"])
    finally:
        live_child.communicate(b"")
    assert clean_stale_temps(tmp_path) == [tmp_path / live]  # once its writer is gone
