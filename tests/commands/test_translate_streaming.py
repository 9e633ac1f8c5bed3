"""`attnlab translate` writes its lines as they finish: `| head -1` ends quietly, a SIGTERM mid-run keeps
every finished line (the first lines of a full run) in --out, --out is a new file only, and a request
this machine's memory cannot hold is one line before any decoding."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from processes import killed_after  # tests/ is on sys.path

from attnlab.cli import main
from attnlab.data.corpus import sample_data_path
from attnlab.testing import train_tiny

LINES = 3500  # several paced windows: the first of 8 lines, the next growing with the measured speed


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("stream") / "tiny")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    english = [line.split("\t")[0].lower() for line in sample_data_path().read_text(encoding="utf-8").splitlines()]
    path = tmp_path_factory.mktemp("stream") / "in.txt"
    path.write_text("".join(english[i % len(english)] + "\n" for i in range(LINES)), encoding="utf-8")
    return path


def _translate(run, *flags, **kw) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "attnlab", "translate", "--checkpoint", str(run), "--beam", "1", *flags]
    return subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, **kw)


def test_head_ends_quietly(tiny_run, source):
    with source.open("rb") as stdin:
        proc = _translate(tiny_run, stdin=stdin, stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        with killed_after(proc, 120):
            first = proc.stdout.readline()
            proc.stdout.close()  # what `head -1` does after its line
            err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 0
    assert first.strip() and err == "", err


def test_sigterm_keeps_every_finished_line(tiny_run, source, tmp_path):
    full = tmp_path / "full.txt"
    with source.open("rb") as stdin:
        assert _translate(tiny_run, "--out", str(full), stdin=stdin).wait(timeout=300) == 0
    expected = full.read_text(encoding="utf-8").splitlines()
    assert len(expected) == LINES
    part = tmp_path / "part.txt"
    with source.open("rb") as stdin:
        proc = _translate(tiny_run, "--out", str(part), stdin=stdin)
        deadline = time.monotonic() + 120
        while not (part.exists() and part.read_text(encoding="utf-8").count("\n")) and time.monotonic() < deadline:
            assert proc.poll() is None, "finished before a line was seen"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.stderr is not None
        with killed_after(proc, 60):
            err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == -signal.SIGTERM
    kept = part.read_text(encoding="utf-8").splitlines()
    assert 0 < len(kept) < LINES and kept == expected[: len(kept)]
    assert f"stopped after {len(kept)} of {LINES} lines" in err and "Traceback" not in err


def test_out_is_a_new_file_only(tiny_run, tmp_path, capsys):
    mine = tmp_path / "mine.txt"
    mine.write_text("my notes\n")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    for out in (mine, dangling):
        assert main(["translate", "--checkpoint", str(tiny_run), "--out", str(out), "go ."]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "writes a new file only" in err
    assert mine.read_text() == "my notes\n" and not (tmp_path / "nowhere").exists()


def test_an_empty_line_keeps_its_nbest_row(tiny_run, monkeypatch, capsys):
    import io

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"go .\n\ni'm home .\n")))
    assert main(["translate", "--checkpoint", str(tiny_run), "--beam", "2", "--n-best", "2"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert [r.split(" ||| ")[0] for r in rows] == ["0", "0", "1", "2", "2"]
    assert rows[2] == "1 |||  ||| nan"


def test_what_memory_cannot_hold_is_one_line_before_decoding(tiny_run, monkeypatch, capsys):
    monkeypatch.setattr("attnlab.utils.runtime.memory_bytes", lambda: 64 * 2**20)
    monkeypatch.setattr(
        "attnlab.decoding.translator.Translator.translate_tokens", lambda *a, **k: pytest.fail("decoded")
    )
    argv = ["translate", "--checkpoint", str(tiny_run), "--beam", "8", "--n-best", "8", "--max-len", "1024"]
    assert main([*argv, "--align", *["i'm home ."] * 20]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "this machine's memory" in err and "lower max_len (1024) first" in err


def test_warnings_are_one_line_without_paths(tiny_run, capsys):
    long = " ".join(["go"] * 40) + " ."
    assert main(["translate", "--checkpoint", str(tiny_run), "--beam", "1", "--truncate", long]) == 0
    err = capsys.readouterr().err
    assert "attnlab translate: warning: truncating" in err and ".py:" not in err


def test_each_line_is_encoded_once_and_the_model_thawed_after(tiny_run, source, monkeypatch, capsys):
    import gc
    import io

    from attnlab.decoding.translator import Translator

    encodes, frozen, search = [], [], Translator.search
    real_encode = Translator.encode

    def encode(self, sentences, truncate=False):
        encodes.append(len(sentences))
        return real_encode(self, sentences, truncate)

    def searched(self, *args, **kwargs):
        frozen.append(gc.get_freeze_count())
        return search(self, *args, **kwargs)

    monkeypatch.setattr(Translator, "encode", encode)
    monkeypatch.setattr(Translator, "search", searched)
    lines = source.read_text(encoding="utf-8").splitlines()[:300]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("".join(f"{s}\n" for s in lines).encode())))
    assert main(["translate", "--checkpoint", str(tiny_run), "--beam", "1"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(lines)
    # the whole input checked in one call; the windows decode its ids (several windows: 8 lines first)
    assert encodes == [len(lines)] and len(frozen) > 1
    # what was loaded sat out of the collector's passes while decoding, and is back in it afterwards
    assert min(frozen) > 0 and gc.get_freeze_count() == 0


def test_plain_output_builds_no_translation_and_n_best_does(tiny_run, source, monkeypatch, capsys):
    """Text alone (no --n-best, no --align): the workers' detokenized hypotheses are written as they are, with no
    Translation (token lists, a copy of the best) built per line; --n-best still gets them, with the same text."""
    import io

    from attnlab.decoding.translator import Translator

    built, translate_tokens = [], Translator.translate_tokens

    def spy(self, *args, **kwargs):
        found = translate_tokens(self, *args, **kwargs)
        built.append(len(found))
        return found

    monkeypatch.setattr(Translator, "translate_tokens", spy)
    lines = source.read_text(encoding="utf-8").splitlines()[:40]
    outputs = []
    for flags in ([], ["--n-best", "1"]):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("".join(f"{s}\n" for s in lines).encode())))
        assert main(["translate", "--checkpoint", str(tiny_run), "--beam", "2", *flags]) == 0
        outputs.append(capsys.readouterr().out.splitlines())
    assert sum(built) == len(lines)  # the --n-best run's alone
    assert outputs[0] == [row.split(" ||| ")[1] for row in outputs[1]]
