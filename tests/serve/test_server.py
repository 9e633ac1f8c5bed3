"""The real `attnlab serve`: start-up refusals, and a live process answering concurrent requests."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from attnlab.cli import main
from attnlab.serve.listen import decode_threads


def test_refuses_without_demo_model(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no runs/demo/transformer here
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "runs/demo/transformer" in err and "make demo" in err and "--preset cpu-small" in err


def test_refuses_missing_checkpoint(tmp_path, capsys):
    assert main(["serve", "--checkpoint", str(tmp_path / "nope")]) == 2
    assert "no run folder" in capsys.readouterr().err


def test_refuses_broken_checkpoint(tiny_run, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_run, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    assert main(["serve", "--checkpoint", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "cannot serve" in err and "Traceback" not in err


def test_broken_checkpoint_subprocess_has_no_traceback(tmp_path):
    (tmp_path / "config.json").write_text("{ not json")
    r = subprocess.run(
        [sys.executable, "-m", "attnlab", "serve", "--checkpoint", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "not valid JSON" in r.stderr and "Traceback" not in r.stderr


def _post(url, body):
    req = urllib.request.Request(
        f"{url}/api/explain", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status, json.loads(r.read())


def test_live_server_concurrent_requests(server, translator):
    with urllib.request.urlopen(f"{server}/healthz", timeout=10) as r:
        assert json.loads(r.read()) == {"status": "ok"}
    texts = ["i'm home .", "go .", "he's calm .", "i lost ."] * 3
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda t: _post(server, {"text": t}), texts))
    expected = dict(zip(texts, translator.translate(texts)))
    for text, (status, body) in zip(texts, results):
        assert status == 200 and body["translation"] == expected[text]


def _one_line_refusal(capsys, argv, *words):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert "http://" not in out, "the URL was printed before the server could listen"
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for w in words:
        assert w in err


def test_busy_port_is_one_line_before_any_url(tiny_run, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["serve", "--checkpoint", str(tiny_run), "--port", str(port)]
        _one_line_refusal(capsys, argv, f"--port {port}", "already listens", "free --port")


def test_bad_host_is_one_line_before_any_url(tiny_run, capsys, monkeypatch):
    # 192.0.2.1 (TEST-NET-1) is nobody's own address: bind fails at once, no network needed.
    _one_line_refusal(capsys, ["serve", "--checkpoint", str(tiny_run), "--host", "192.0.2.1"], "--host 192.0.2.1")

    def no_dns(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)  # a name that does not resolve, without asking DNS
    _one_line_refusal(
        capsys, ["serve", "--checkpoint", str(tiny_run), "--host", "no-such-host"], "--host no-such-host", "resolve"
    )


def test_decode_threads_leave_the_event_loop_a_core():
    assert decode_threads(workers=2, batch_workers=1, cores=2) == 1
    assert decode_threads(workers=1, batch_workers=1, cores=1) == 1
    assert decode_threads(workers=2, batch_workers=1, cores=16) == 5
