"""`attnlab translate` in a terminal answers each line as it is typed: driven through a pseudo-terminal, each
sentence's translation (the same as the Python API's, computed in this process) is read back before the next
sentence is typed, and Ctrl-D ends the session; a line it cannot translate gets one line on stderr and the
session goes on."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest
from processes import killed_after  # tests/ is on sys.path

from attnlab.decoding.options import DecodeOptions
from attnlab.runs.loading import load_translator
from attnlab.testing import train_tiny

SENTENCES = ["i'm home .", "go .", "he's calm ."]
GREEDY = DecodeOptions(beam=1)
TIMEOUT = 60.0  # seconds any one answer may take (the model loads before the first): never hangs


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("interactive") / "tiny")


class Terminal:
    """A child process whose stdin and stdout are one pseudo-terminal (so it sees a tty), stderr a pipe."""

    def __init__(self, argv: list[str]):
        self.master, slave = pty.openpty()
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env)
        os.close(slave)
        self.seen = b""

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def read_until(self, wanted: bytes) -> bytes:
        """Everything read so far once it holds `wanted`; fails after TIMEOUT seconds without it."""
        deadline = time.monotonic() + TIMEOUT
        while wanted not in self.seen:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.master], [], [], max(left, 0))
            if not ready:
                pytest.fail(f"no {wanted!r} within {TIMEOUT} s; the terminal shows {self.seen!r}")
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # the child closed the terminal
                chunk = b""
            if not chunk:
                pytest.fail(f"the terminal closed before {wanted!r}; it showed {self.seen!r}")
            self.seen += chunk
        return self.seen

    def close(self) -> tuple[int, str]:
        self.type("\x04")  # Ctrl-D at the start of a line: end of input
        try:
            code = self.proc.wait(timeout=TIMEOUT)
        finally:
            self.proc.kill()
            os.close(self.master)
        assert self.proc.stderr is not None
        with killed_after(self.proc, TIMEOUT):  # exited or killed above: the read ends
            err = self.proc.stderr.read().decode()
        return code, err


def _translate(run, *flags) -> Terminal:
    argv = [sys.executable, "-m", "attnlab", "translate", "--checkpoint", str(run), "--beam", "1", *flags]
    return Terminal(argv)


def test_each_typed_line_is_answered_before_the_next_is_typed(tiny_run):
    """Three sentences, then one too long (its one-line reason on stderr, an empty answer), then one more."""
    translator = load_translator(tiny_run)
    expected = translator.translate(SENTENCES, options=GREEDY)
    too_long = " ".join(["go"] * (translator.max_len + 5))
    term = _translate(tiny_run, "--precision", "fp32")
    try:
        for sentence, translation in zip(SENTENCES, expected):
            before = len(term.seen)
            term.type(sentence + "\n")
            # the terminal echoes the typed line, then the answer comes on a line of its own
            shown = term.read_until(f"{sentence}\r\n{translation}\r\n".encode())
            assert shown[before:].endswith(f"{translation}\r\n".encode())
        term.type(too_long + "\n")
        term.read_until(b" go\r\n\r\n")  # its echo, then its empty answer
        term.type(SENTENCES[0] + "\n")
        term.read_until(f"{SENTENCES[0]}\r\n{expected[0]}\r\n".encode())
    finally:
        code, err = term.close()
    assert code == 0, err
    assert len(err.strip().splitlines()) == 1 and "--truncate" in err, err
