"""Loopback load test of `attnlab serve`: C concurrent clients x R requests each to /api/translate.

Starts the real server (a subprocess on 127.0.0.1, a free port), checks that every request succeeds,
and prints requests/s with p50/p95/max latency. The work per request is a full decode plus the
recorded teacher-forced forward, and the JSON of every attention map.

    python benchmarks/serve_load.py                                  # runs/demo/transformer, else a tiny model
    python benchmarks/serve_load.py --checkpoint runs/d2l --workers 2 --clients 32 --requests 10
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

SENTENCES = ["i'm home .", "go .", "i lost .", "he's calm .", "we are friends .", "i'm cold ."]


def train_tiny(run_dir: Path) -> Path:
    """20 steps of a 2-layer tiny Transformer on attnlab's bundled sample pairs (seconds)."""
    from attnlab.data import sample_data_path
    from attnlab.presets import get_preset
    from attnlab.train import TrainConfig, train_run

    preset = get_preset("transformer", "tiny")
    cfg = TrainConfig.from_dict({**preset["train"], "max_steps": 20, "epochs": 100, "schedule": "constant",
                                 "lr": 1e-2, "eval_limit": 4})
    train_run("transformer", {**preset["model"], "num_layers": 2}, cfg,
              {**preset["data"], "path": str(sample_data_path())}, run_dir, progress=False)
    return run_dir


def start(checkpoint: Path, workers: int) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "attnlab", "serve", "--checkpoint", str(checkpoint),
                             "--port", str(port), "--workers", str(workers), "--log-level", "warning"])
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"attnlab serve exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"{url}/healthz", timeout=2).read()
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("attnlab serve did not start within 120 s")


def post(url: str, text: str) -> tuple[int, float]:
    req = urllib.request.Request(f"{url}/api/translate", data=json.dumps({"text": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        status = e.code
    except OSError:
        status = 0
    return status, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, help="run folder (default: runs/demo/transformer, else a tiny model)")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=10, help="requests per client")
    ap.add_argument("--workers", type=int, default=2, help="the server's inference threads")
    args = ap.parse_args()

    tmp = None
    ckpt = args.checkpoint
    if ckpt is None:
        ckpt = Path("runs/demo/transformer")
        if not (ckpt / "model.safetensors").is_file():
            tmp = tempfile.TemporaryDirectory()
            print("no runs/demo/transformer: training a tiny model on the sample pairs ...", flush=True)
            ckpt = train_tiny(Path(tmp.name) / "tiny")
    proc, url = start(ckpt, args.workers)
    try:
        for text in SENTENCES:  # warm-up: first calls pay for thread replicas and lazy init
            assert post(url, text)[0] == 200
        results: list[tuple[int, float]] = []
        lock = threading.Lock()

        def client(k: int) -> None:
            for r in range(args.requests):
                res = post(url, SENTENCES[(k + r) % len(SENTENCES)])
                with lock:
                    results.append(res)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if tmp is not None:
            tmp.cleanup()

    n = args.clients * args.requests
    bad = [s for s, _ in results if s != 200]
    lat = sorted(l for _, l in results)
    p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))]
    print(f"checkpoint {ckpt if tmp is None else 'tiny (trained now)'}, {args.workers} server worker(s), "
          f"{os.cpu_count()} CPUs")
    print(f"{len(results)}/{n} requests, {len(results) - len(bad)} OK in {wall:.2f} s: {len(results) / wall:.1f} req/s; "
          f"latency p50 {statistics.median(lat) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, max {lat[-1] * 1000:.0f} ms")
    assert len(results) == n and not bad, f"{len(bad)} requests failed: statuses {sorted(set(bad))}"


if __name__ == "__main__":
    main()
