"""Loopback load test of `attnlab serve`: C concurrent clients, one sentence per request, on three paths.

    explain   POST /api/translate    today's per-request path (decode + recorded forward + every map)
    single    POST /api/translations on a server started with --max-batch 1 (plain path, no batching)
    batched   POST /api/translations (micro-batched: --max-batch 32, --max-wait-ms 5)

Starts real servers (subprocesses on 127.0.0.1, free ports), runs the paths in interleaved rounds
(explain, single, batched, explain, ...) so load drifts hit all alike, and prints sentences/s (median
over rounds), the ratio to `explain`, p50/p95/p99 latency and the error count of each. The clients keep
one HTTP/1.1 connection each. Prints the CPU features found and the load average.

    python benchmarks/serve_load.py                           # runs/demo/transformer, else a tiny model
    flock /tmp/attnlab-measure.lock python benchmarks/serve_load.py --clients 32 --requests 10 --rounds 3
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from attnlab.testing import start_server, stop_server, train_tiny

SENTENCES = [
    "i'm home .",
    "go .",
    "i lost .",
    "he's calm .",
    "we are friends .",
    "i'm cold .",
    "he is tall .",
    "i like tea .",
]
PATHS = {
    "explain": ("/api/translate", lambda t: {"text": t}),
    "single": ("/api/translations", lambda t: {"texts": [t]}),
    "batched": ("/api/translations", lambda t: {"texts": [t]}),
}


def cpu_features() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next(line for line in f if line.startswith("flags")).split())
    except (OSError, StopIteration):
        return "unknown"
    return ", ".join(f"{f}={'yes' if f in flags else 'no'}" for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16"))


def run_clients(port: int, path: str, body, clients: int, requests: int) -> tuple[float, list[float], int]:
    """`clients` threads x `requests` each; returns (wall seconds, latencies, failures)."""
    lat: list[float] = []
    fails = [0]
    lock = threading.Lock()

    def client(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        for r in range(requests):
            data = json.dumps(body(SENTENCES[(k + r) % len(SENTENCES)])).encode()
            t0 = time.perf_counter()
            try:
                conn.request("POST", path, data, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp_body = resp.read()
                ok = resp.status == 200 and resp_body
            except OSError:
                ok = False
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            dt = time.perf_counter() - t0
            with lock:
                lat.append(dt)
                fails[0] += not ok
        conn.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, lat, fails[0]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, help="run folder (default: runs/demo/transformer, else a tiny model)")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=10, help="requests per client per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2, help="the explorer's inference threads")
    ap.add_argument("--max-wait-ms", type=float, default=5.0, help="the batcher's wait for company")
    args = ap.parse_args()

    tmp = None
    ckpt = args.checkpoint
    if ckpt is None:
        ckpt = Path("runs/demo/transformer")
        if not (ckpt / "model.safetensors").is_file():
            tmp = tempfile.TemporaryDirectory()
            print("no runs/demo/transformer: training a tiny model on the sample pairs ...", flush=True)
            ckpt = train_tiny(Path(tmp.name) / "tiny")
    servers = {
        "main": start_server(ckpt, "--workers", str(args.workers), "--max-wait-ms", str(args.max_wait_ms)),
        "single": start_server(ckpt, "--workers", str(args.workers), "--max-batch", "1"),
    }
    port_of = {"explain": servers["main"][1], "single": servers["single"][1], "batched": servers["main"][1]}
    stats: dict[str, dict] = {m: {"rates": [], "lat": [], "fails": 0} for m in PATHS}
    try:
        for mode, (path, body) in PATHS.items():  # warm-up: thread replicas, lazy init
            run_clients(port_of[mode], path, body, 4, 2)
        for _ in range(args.rounds):
            for mode, (path, body) in PATHS.items():
                wall, lat, fails = run_clients(port_of[mode], path, body, args.clients, args.requests)
                st = stats[mode]
                st["rates"].append(len(lat) / wall)
                st["lat"] += lat
                st["fails"] += fails
    finally:
        for proc, _ in servers.values():
            stop_server(proc)
        if tmp is not None:
            tmp.cleanup()

    print(
        f"checkpoint {ckpt if tmp is None else 'tiny (trained now: 2 layers, d=32)'}; {os.cpu_count()} CPUs; "
        f"CPU features: {cpu_features()}; torch threads per server default"
    )
    print(
        f"{args.clients} clients x {args.requests} requests x {args.rounds} interleaved rounds; one sentence "
        f"per request; explorer workers {args.workers}; batcher --max-wait-ms {args.max_wait_ms:g}"
    )
    base = statistics.median(stats["explain"]["rates"])
    print("| path | sentences/s (median of rounds) | vs explain | p50 ms | p95 ms | p99 ms | errors |")
    print("|---|---|---|---|---|---|---|")
    for mode, st in stats.items():
        rate = statistics.median(st["rates"])
        print(
            f"| {mode} | {rate:.1f} | {rate / base:.2f}x | {pct(st['lat'], 0.5) * 1e3:.0f} | "
            f"{pct(st['lat'], 0.95) * 1e3:.0f} | {pct(st['lat'], 0.99) * 1e3:.0f} | {st['fails']} |"
        )
    print("load average (1, 5, 15 min):", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    bad = sum(st["fails"] for st in stats.values())
    assert bad == 0, f"{bad} requests failed"


if __name__ == "__main__":
    main()
