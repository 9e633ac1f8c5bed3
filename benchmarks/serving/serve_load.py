"""Loopback load test of `attnlab serve`: the batching gain on the plain translation path, like for like.

    single    POST /api/translations on a server started with --max-batch 1 (one sentence per decode)
    batched   POST /api/translations on a server started with --max-batch 32 --max-wait-ms 5
    explain   POST /api/explain (the explorer: decode + recorded forward + every map), for scale only

`single` and `batched` differ in --max-batch alone (same checkpoint, precision, --threads, workers), so
batched / single is what batching buys. C keep-alive clients send one sentence per request. The paths run
in interleaved rounds (single, batched, explain, single, ...) so load drifts hit all alike; it prints
sentences/s (median over rounds), the median of the per-round ratios to `single`, p50/p95/p99 latency
and the error count of each, the CPU features found, the torch threads and the load average.

    python benchmarks/serving/serve_load.py                           # runs/demo/transformer, else a tiny model
    flock /tmp/attnlab-measure.lock python benchmarks/serving/serve_load.py --checkpoint RUN --clients 32 --rounds 3
    ... --threads 2                                            # every server with 2 torch threads per decode
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import table, write_result

from attnlab.inference.precision import cpu_features
from attnlab.serve.listen import decode_threads
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
PATHS = {  # path -> (server, route, body of one sentence)
    "single": ("single", "/api/translations", lambda t: {"texts": [t]}),
    "batched": ("batched", "/api/translations", lambda t: {"texts": [t]}),
    "explain": ("batched", "/api/explain", lambda t: {"text": t}),
}
SHOWN_FEATURES = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_vnni")


def run_clients(port: int, path: str, body, clients: int, requests: int) -> tuple[float, list[float], int]:
    """`clients` threads x `requests` each; returns (wall seconds, latencies, failures)."""
    lat: list[float] = []
    fails = [0]
    lock = threading.Lock()

    def client(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
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
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
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
    ap.add_argument("--threads", type=int, help="--threads of every server (default: the server's own)")
    ap.add_argument("--precision", default="auto", help="--precision of every server (default: auto)")
    ap.add_argument("--no-explain", action="store_true", help="skip the explorer row")
    args = ap.parse_args()

    tmp = None
    ckpt = args.checkpoint
    if ckpt is None:
        ckpt = Path("runs/demo/transformer")
        if not (ckpt / "model.safetensors").is_file():
            tmp = tempfile.TemporaryDirectory()
            print("no runs/demo/transformer: training a tiny model on the sample pairs ...", flush=True)
            ckpt = train_tiny(Path(tmp.name) / "tiny")
    common = ["--workers", str(args.workers), "--precision", args.precision, "--max-wait-ms", str(args.max_wait_ms)]
    if args.threads is not None:
        common += ["--threads", str(args.threads)]
    paths = {m: v for m, v in PATHS.items() if not (args.no_explain and m == "explain")}
    servers = {
        "single": start_server(ckpt, *common, "--max-batch", "1"),
        "batched": start_server(ckpt, *common, "--max-batch", "32"),
    }
    stats: dict[str, dict] = {m: {"rates": [], "lat": [], "fails": 0} for m in paths}
    try:
        for server, route, body in paths.values():  # warm-up: lazy init, first shapes
            run_clients(servers[server][1], route, body, 4, 4)
        for _ in range(args.rounds):
            for mode, (server, route, body) in paths.items():
                wall, lat, fails = run_clients(servers[server][1], route, body, args.clients, args.requests)
                st = stats[mode]
                st["rates"].append(len(lat) / wall)
                st["lat"] += lat
                st["fails"] += fails
    finally:
        for proc, _ in servers.values():
            stop_server(proc)
        if tmp is not None:
            tmp.cleanup()

    found = cpu_features()
    features = ", ".join(f"{f}={'yes' if f in found else 'no'}" for f in SHOWN_FEATURES)
    threads = args.threads or decode_threads(args.workers, 1)
    print(
        f"checkpoint {ckpt if tmp is None else 'tiny (trained now: 2 layers, d=32)'}; {os.cpu_count()} CPUs; "
        f"CPU features: {features}; "
        f"torch {torch.__version__}, {threads} torch thread(s) per decode "
        f"({'--threads' if args.threads else 'the server default'}); --precision {args.precision}"
    )
    print(
        f"{args.clients} clients x {args.requests} requests x {args.rounds} interleaved rounds; one sentence "
        f"per request; batcher --max-wait-ms {args.max_wait_ms:g}, 1 decode thread; explorer workers {args.workers}"
    )
    base = stats["single"]["rates"]
    rows = []
    for mode, st in stats.items():
        ratio = statistics.median(r / b for r, b in zip(st["rates"], base))
        rows.append([mode, f"{statistics.median(st['rates']):.1f}", f"{ratio:.2f}x"])
        rows[-1] += [f"{pct(st['lat'], q) * 1e3:.0f}" for q in (0.5, 0.95, 0.99)] + [st["fails"]]
    heads = ["path", "sentences/s", "vs single (median of per-round ratios)", "p50 ms", "p95 ms", "p99 ms", "errors"]
    print(table(heads, rows))
    print("load average (1, 5, 15 min):", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    bad = sum(st["fails"] for st in stats.values())
    assert bad == 0, f"{bad} requests failed"
    write_result(__file__)


if __name__ == "__main__":
    main()
