"""Data at scale: prepare throughput, size on disk, loader throughput vs what the model consumes, and
peak RSS of training, for synthetic parallel corpora of two sizes (generated here, never committed).

    flock /tmp/attnlab-measure.lock python benchmarks/data/data_scale.py --sizes 500000,5000000

or in pieces that each fit a short locked run (the same folder; delete it afterwards):

    flock ... python benchmarks/data/data_scale.py --phase prepare --sizes 500000 --workdir /tmp/ds --baseline-workers 1
    flock ... python benchmarks/data/data_scale.py --phase generate --sizes 5000000 --workdir /tmp/ds
    flock ... python benchmarks/data/data_scale.py --phase prepare --sizes 5000000 --workdir /tmp/ds
    flock ... python benchmarks/data/data_scale.py --phase measure --sizes 500000,5000000 --workdir /tmp/ds

For each size: aligned files of N pairs (20-30 tokens a side, a 4,000-word synthetic language pair)
plus fixed 500-pair dev/test files are written to the work folder; `attnlab prepare` runs in a fresh
process with `--workers` encoding processes (pairs/s, its peak RSS, bytes on disk, shards of
`--shard-size` pairs); with `--baseline-workers B` the first size is also prepared with B workers
first, and the ratio is printed. Then, in interleaved rounds (size A, size B, A, B),
fresh processes measure (a) the loader alone: token-bucketed batches planned from the lengths index
and collated from the memory-mapped shards, target tokens/s over the first `--loader-batches`
batches, and (b) `train_run` of a small Transformer for `--train-steps` steps on the prepared folder:
the tokens/s it consumes and its peak RSS (ru_maxrss). Then (c) the whole `attnlab train --preset
cpu-small --max-steps 30` process on each size, in back-to-back rounds: its exact peak RSS (ru_maxrss
from wait4, the kernel's VmHWM) and the sampled peaks of its anonymous and file-backed resident memory;
`--phases` adds one more run per size that prints RSS after each phase (data opened, model built,
epoch counted, steps, final evaluation). `--phase process` runs (c) alone. The baseline of each ratio
is named in the output.

`--heldout random` prepares without dev/test files: `prepare`'s 1% valid / 1% test split, so the
held-out splits grow with the corpus (5,000 -> 50,000 pairs each), into prep{N}-random:

    flock ... python benchmarks/data/data_scale.py --phase prepare --heldout random --sizes 500000,5000000 \\
        --workdir /tmp/ds
    flock ... python benchmarks/data/data_scale.py --phase process --heldout random --precision fp32 --phases \\
        --sizes 500000,5000000 --workdir /tmp/ds
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import cpu_features, table, write_result

ROOT = Path(__file__).resolve().parents[1]
PREPARED: list[list] = []  # one row per prepare run, printed as a table at the end


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def make_corpus(folder: Path, n: int, seed: int, name: str) -> str:
    """N aligned pairs: the target is the source's words mapped through a fixed word table, reversed
    in thirds (so it is learnable but not a copy). Written in chunks with numpy, about 1 µs/token."""
    rng = np.random.default_rng(seed)
    vocab_rng = np.random.default_rng(12345)  # the same synthetic language pair for every file
    letters = np.array(list("abcdefghijklmnopqrstuvwxyzäöüéè"))
    src_words = ["".join(vocab_rng.choice(letters, vocab_rng.integers(2, 9))) for _ in range(4000)]
    tgt_words = [w[::-1] + "x" for w in src_words]
    with (
        open(folder / f"{name}.xx", "w", encoding="utf-8") as fs,
        open(folder / f"{name}.yy", "w", encoding="utf-8") as ft,
    ):
        for start in range(0, n, 100_000):
            m = min(100_000, n - start)
            lens = rng.integers(20, 31, m)
            # Zipf-like word frequencies, as in real text.
            ids = np.minimum(rng.zipf(1.3, (m, 30)) - 1, 3999)
            s_lines, t_lines = [], []
            for row, k in zip(ids.tolist(), lens.tolist()):
                row = row[:k]
                s_lines.append(" ".join(src_words[i] for i in row))
                third = k // 3
                t_lines.append(" ".join(tgt_words[i] for i in row[third:] + row[:third]))
            fs.write("\n".join(s_lines) + "\n")
            ft.write("\n".join(t_lines) + "\n")
    return f"{folder / (name + '.xx')},{folder / (name + '.yy')}"


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def child(code: str) -> dict:
    """Run `code` in a fresh interpreter (so ru_maxrss is its own); it prints one JSON line last."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


PREPARE = """
import json, resource, time
from attnlab.data import prepare
t = time.perf_counter()
meta = prepare({data!r}, {out!r}, src_lang="xx", tgt_lang="yy", valid={valid!r}, test={test!r},
               tokenizer="bpe", vocab_size=8000, shard_size={shard_size}, workers={workers})
dt = time.perf_counter() - t
rss = lambda who: resource.getrusage(who).ru_maxrss / 1024
print(json.dumps({{"seconds": dt, "pairs": meta["splits"]["train"]["pairs"], "rss_mb": rss(resource.RUSAGE_SELF),
                  "workers_rss_mb": rss(resource.RUSAGE_CHILDREN),
                  "shards": len(meta["splits"]["train"]["shards"])}}))
"""

LOADER = """
import json, resource, time
from attnlab.data import collate, open_prepared, plan_batches
data = open_prepared({out!r})
t = time.perf_counter()
plan = plan_batches(data.train, batch_tokens=4096, seed=0, epoch=0)
plan_s = time.perf_counter() - t
t = time.perf_counter(); tokens = 0; n = 0
for idx in plan:
    tokens += collate(data.train, idx, data.src_vocab, data.tgt_vocab).num_tokens
    n += 1
    if n >= {batches}:
        break
dt = time.perf_counter() - t
print(json.dumps({{"tokens_per_s": tokens / dt, "batches": n, "plan_s": plan_s, "epoch_batches": len(plan),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""

TRAIN = """
import json, resource
import torch
torch.set_num_threads(2)
from attnlab.training import TrainConfig, train_run
cfg = TrainConfig(max_steps={steps}, batch_tokens=4096, lr=1e-3, warmup_steps=10, eval_limit=20, log_every=5)
model = {{"num_hiddens": 128, "num_layers": 2, "num_heads": 4, "ffn_num_hiddens": 256, "dropout": 0.0}}
r = train_run("transformer", model, cfg, {{"path": {out!r}}}, {run!r}, progress=False)
print(json.dumps({{"tokens_per_s": r.tokens_per_second, "loss": r.train_loss,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


PHASES = """
import functools, json, sys, threading, time
import attnlab.training.launch as launch
import attnlab.training.trainer as trainer
from attnlab.cli import main

def status():
    fields = {{}}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("VmHWM", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) / 1024
    return fields

peak = {{"RssAnon": 0.0, "RssFile": 0.0}}
def sample():
    while True:
        for key, mb in status().items():
            if key in peak:
                peak[key] = max(peak[key], mb)
        time.sleep(0.005)
threading.Thread(target=sample, daemon=True).start()
marks = [("imported", status())]
def after(owner, name, label):
    fn = getattr(owner, name)
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        out = fn(*args, **kwargs)
        marks.append((label, status()))
        return out
    setattr(owner, name, wrapped)
after(launch, "load_data", "data opened")
after(launch, "build_model", "model built")
after(trainer.Trainer, "_steps_per_epoch", "trainer set up, epoch counted")
steps = [0]
step = trainer.Trainer.train_step
def counted(self, batches):
    out = step(self, batches)
    steps[0] += 1
    if steps[0] in (1, {steps}):
        marks.append((f"step {{steps[0]}}", status()))
    return out
trainer.Trainer.train_step = counted
after(trainer.Trainer, "_evaluate_and_log", "final evaluation")
rc = main({argv!r})
marks.append(("end", status()))
print(json.dumps({{"rc": rc, "marks": marks, "peak": peak}}))
"""


def train_command(out: Path, run: Path, args) -> list[str]:
    """The `attnlab train` command line whose whole process is measured."""
    cmd = ["train", "--preset", args.preset, "--max-steps", str(args.process_steps), "--data", str(out)]
    cmd += ["--out", str(run)] + (["--precision", args.precision] if args.precision else [])
    return cmd


def watch(cmd: list[str], log: Path) -> dict:
    """Run `cmd` in a fresh process: its exact peak RSS (ru_maxrss from wait4, = VmHWM) and the peaks of
    its anonymous and file-backed resident memory (sampled every 10 ms from /proc/PID/status)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    peak = {"RssAnon": 0.0, "RssFile": 0.0}
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            try:
                for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                    key, _, value = line.partition(":")
                    if key in peak:
                        peak[key] = max(peak[key], int(value.split()[0]) / 1024)
            except OSError:
                pass  # it is exiting
            time.sleep(0.01)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}; see {log}")
    return {"rss_mb": usage.ru_maxrss / 1024, "anon_mb": peak["RssAnon"], "file_mb": peak["RssFile"]}


def measure_process(work: Path, sizes: list[int], args) -> None:
    """The whole `attnlab train` process on each size, in back-to-back rounds (A, B, A, B, ...)."""
    results: dict = {n: [] for n in sizes}
    print(f"\nwhole process: python -m attnlab {' '.join(train_command(Path('DIR'), Path('RUN'), args))}")
    for rnd in range(args.rounds):
        for n in sizes:
            run = work / f"proc{n}-{rnd}"
            shutil.rmtree(run, ignore_errors=True)
            cmd = [sys.executable, "-m", "attnlab", *train_command(prepared_folder(work, n, args), run, args)]
            r = watch(cmd, work / f"proc{n}-{rnd}.log")
            r["load"] = load()
            results[n].append(r)
            shutil.rmtree(run, ignore_errors=True)
            print(f"round {rnd}, {n:>9,} pairs: peak RSS {r['rss_mb']:.0f} MB (anonymous {r['anon_mb']:.0f} MB, "
                  f"file-backed {r['file_mb']:.0f} MB, sampled); load {r['load']}", flush=True)  # fmt: skip
    base = sizes[0]
    rows = [
        [
            rnd,
            *(
                f"{r['rss_mb']:.0f} MB ({r['anon_mb']:.0f}, {r['file_mb']:.0f})"
                for r in (results[n][rnd] for n in sizes)
            ),
        ]
        + [f"{results[sizes[-1]][rnd]['rss_mb'] / results[base][rnd]['rss_mb']:.3f}x"]
        for rnd in range(args.rounds)
    ]
    heads = ["round", *(f"{n:,} pairs: peak RSS (anon, file)" for n in sizes), f"{sizes[-1]:,} / {base:,}"]
    print(table(heads, rows, caption="The whole `attnlab train` process, peak RSS per round"))
    for n in sizes[1:]:
        per_round = [b["rss_mb"] / a["rss_mb"] for a, b in zip(results[base], results[n])]
        worst = max(x["rss_mb"] for x in results[n]) / max(x["rss_mb"] for x in results[base])
        anon = max(x["anon_mb"] for x in results[n]) / max(x["anon_mb"] for x in results[base])
        print(f"whole-process peak RSS, {n:,} vs {base:,} pairs (baseline): per round "
              f"{', '.join(f'{x:.3f}x' for x in per_round)}; max over rounds {worst:.3f}x; "
              f"anonymous {anon:.3f}x")  # fmt: skip
    if args.phases:
        measure_phases(work, sizes, args)


def measure_phases(work: Path, sizes: list[int], args) -> None:
    """Where the memory goes: RSS (anonymous + file-backed) after each phase of the same command."""
    rows: dict = {}
    for n in sizes:
        run = work / f"phases{n}"
        shutil.rmtree(run, ignore_errors=True)
        argv = train_command(prepared_folder(work, n, args), run, args)
        rows[n] = child(PHASES.format(argv=argv, steps=args.process_steps))
        shutil.rmtree(run, ignore_errors=True)
    print("\n| after | " + " | ".join(f"{n:,} pairs: RSS (anon + file)" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for label, _ in rows[sizes[0]]["marks"]:
        cells = [dict(rows[n]["marks"]).get(label) for n in sizes]
        print(f"| {label} | " + " | ".join(mb(m) if m else "-" for m in cells) + " |")
    peaks = [
        f"{r['marks'][-1][1]['VmHWM']:.0f} MB ({r['peak']['RssAnon']:.0f}, {r['peak']['RssFile']:.0f})"
        for r in rows.values()
    ]
    print("| peak: VmHWM (sampled anon, file) | " + " | ".join(peaks) + " |")


def mb(m: dict) -> str:
    return f"{m['RssAnon'] + m['RssFile']:.0f} MB ({m['RssAnon']:.0f} + {m['RssFile']:.0f})"


def prepared_folder(work: Path, n: int, args) -> Path:
    return work / (f"prep{n}" if args.heldout == "files" else f"prep{n}-random")


def prepare_size(work: Path, n: int, dev: str, test: str, args) -> dict:
    """Generate the N-pair corpus, prepare it (and with the baseline's workers first, if asked)."""
    t = time.perf_counter()
    spec = f"{work / f'train{n}.xx'},{work / f'train{n}.yy'}"
    if not (work / f"train{n}.yy").exists():  # `--phase generate` may have made it in an earlier run
        spec = make_corpus(work, n, 0, f"train{n}")
    gen_s = time.perf_counter() - t
    raw = sum(Path(p).stat().st_size for p in spec.split(","))
    runs = []
    workers = [args.baseline_workers, args.workers] if args.baseline_workers else [args.workers]
    if args.heldout == "random":  # `prepare`'s own split: 1% valid and 1% test, so they grow with N
        dev = test = None
    for w in workers:
        out = prepared_folder(work, n, args)
        shutil.rmtree(out, ignore_errors=True)
        r = child(PREPARE.format(data=spec, out=str(out), valid=dev, test=test, shard_size=args.shard_size, workers=w))
        r.update(workers=w, pairs_per_s=r["pairs"] / r["seconds"], disk=du(out), raw=raw, load=load())
        runs.append(r)
        PREPARED.append([f"{n:,}", w or "all cores", f"{r['seconds']:.0f} s", f"{r['pairs_per_s']:,.0f}"])
        PREPARED[-1] += [f"{r['rss_mb']:.0f} MB / {r['workers_rss_mb']:.0f} MB", f"{r['disk'] / 1e6:.0f} MB", r["load"]]
        print(
            f"{n:>9,} pairs, workers={w or 'all cores'}: prepare {r['seconds']:.0f} s = "
            f"{r['pairs_per_s']:,.0f} pairs/s, "
            f"{r['shards']} shards, peak RSS {r['rss_mb']:.0f} MB (largest worker {r['workers_rss_mb']:.0f} MB), "
            f"on disk {r['disk'] / 1e6:.0f} MB ({r['disk'] / raw:.2f}x the {raw / 1e6:.0f} MB of text, "
            f"generated in {gen_s:.0f} s); load {r['load']}",
            flush=True,
        )
    if len(runs) == 2:
        print(f"prepare pairs/s, workers={args.workers or 'all cores'} vs workers={args.baseline_workers} (baseline): "
              f"{runs[1]['pairs_per_s'] / runs[0]['pairs_per_s']:.2f}x")  # fmt: skip
    for p in spec.split(","):
        os.remove(p)  # the text is not needed any more; keeps the disk use down
    (work / f"prepare{n}.json").write_text(json.dumps(runs))
    return runs[-1]


def measure(work: Path, sizes: list[int], args) -> None:
    """Interleaved rounds of the loader alone and of a short training run on each prepared size."""
    results: dict = {n: {"loader": [], "train": []} for n in sizes}
    for rnd in range(args.rounds):
        for n in sizes:
            out = prepared_folder(work, n, args)
            results[n]["loader"].append(child(LOADER.format(out=str(out), batches=args.loader_batches)))
            run = work / f"run{n}-{rnd}"
            results[n]["train"].append(child(TRAIN.format(out=str(out), run=str(run), steps=args.train_steps)))
            shutil.rmtree(run, ignore_errors=True)
    print(f"\nload after the rounds: {load()}")
    med = lambda xs: float(np.median(xs))
    rows = []
    for n in sizes:
        lo, tr = results[n]["loader"], results[n]["train"]
        lt, mt = med([x["tokens_per_s"] for x in lo]), med([x["tokens_per_s"] for x in tr])
        rows.append(
            [f"{n:,}", f"{lt:,.0f}", f"{med([x['plan_s'] for x in lo]):.1f} s, {lo[0]['epoch_batches']:,} batches"]
        )
        rows[-1] += [f"{mt:,.0f}", f"{lt / mt:.1f}x", f"{max(x['rss_mb'] for x in lo):.0f} MB"]
        rows[-1] += [f"{max(x['rss_mb'] for x in tr):.0f} MB"]
    heads = ["pairs", "loader tokens/s (median)", "plan of epoch 0", "model consumes tokens/s", "loader / model"]
    print(table([*heads, "peak RSS loader", "peak RSS training"], rows, caption="The loader and a short training run"))
    base = sizes[0]
    for n in sizes[1:]:
        for what in ("train", "loader"):
            ratio = max(x["rss_mb"] for x in results[n][what]) / max(x["rss_mb"] for x in results[base][what])
            print(f"peak {what} RSS, {n:,} vs {base:,} pairs (baseline): {ratio:.3f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="500000,5000000", help="corpus sizes in pairs, comma-separated")
    ap.add_argument("--phase", choices=["all", "generate", "prepare", "measure", "process"], default="all")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--loader-batches", type=int, default=300)
    ap.add_argument("--train-steps", type=int, default=20)
    ap.add_argument("--preset", default="cpu-small", help="the preset of the whole-process `attnlab train` run")
    ap.add_argument("--process-steps", type=int, default=30, help="--max-steps of the whole-process run")
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16"], help="--precision of that run (default: its own)")
    ap.add_argument("--phases", action="store_true", help="also print RSS after each phase of that run")
    ap.add_argument("--shard-size", type=int, default=250_000, help="pairs per shard (5M pairs: 20 shards)")
    ap.add_argument("--workers", type=int, help="prepare's encoding processes (default: the usable cores)")
    ap.add_argument("--baseline-workers", type=int, help="also prepare the first size with this many, first")
    ap.add_argument(
        "--heldout",
        choices=["files", "random"],
        default="files",
        help="files: fixed 500-pair dev/test files; random: prepare's 1%%/1%% split of the corpus",
    )
    ap.add_argument("--workdir", help="where the corpora go (default: a temp folder, removed at the end)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.phase != "all" and not args.workdir:
        ap.error("--phase generate/prepare/measure/process need --workdir (the folder the phases share)")
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"platform: {platform.machine()}, {os.cpu_count()} CPUs; CPU features: {' '.join(cpu_features())}")
    print(f"load at start: {load()}", flush=True)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="attnlab-data-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if not (work / "dev.yy").exists():
            make_corpus(work, 500, 1, "dev")
            make_corpus(work, 500, 2, "test")
        if args.phase == "generate":  # only the text, for a later `--phase prepare` (long runs in pieces)
            for n in sizes:
                t = time.perf_counter()
                make_corpus(work, n, 0, f"train{n}")
                print(f"{n:,} pairs generated in {time.perf_counter() - t:.0f} s")
        if args.phase in ("all", "prepare"):
            dev, test = (f"{work / name}.xx,{work / name}.yy" for name in ("dev", "test"))
            for n in sizes:
                prepare_size(work, n, dev, test, args)
        if args.phase in ("all", "measure"):
            measure(work, sizes, args)
        if args.phase in ("all", "measure", "process"):
            measure_process(work, sizes, args)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    if PREPARED:
        heads = ["pairs", "workers", "prepare", "pairs/s", "peak RSS (main / a worker)", "on disk", "load at the end"]
        print(table(heads, PREPARED, caption="prepare"))
    print(f"load at the end: {load()}")
    write_result(__file__)


if __name__ == "__main__":
    main()
