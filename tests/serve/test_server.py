"""The real `attnlab serve`: start-up refusals, and a live process answering concurrent requests."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from attnlab.cli import main


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
        f"{url}/api/translate", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
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
