"""benchmarks/decoding/precision.py and benchmarks/decoding/ct2_speed.py run end to end on a tiny run and print
their tables."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from bench_records import check_record, results_folder
from train_helpers import SUBPROCESS_ENV, needs_data, tiny_run

from attnlab.data import load_data
from attnlab.runs.loading import load_translator

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks" / "decoding"), str(ROOT / "benchmarks")]
from precision import NO_FUSED, NO_NATIVE, THREADS, native_pairs, parse_variant, same_as_baseline  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def _row(out: str, name: str) -> list[str]:
    """The cells of the table row whose first cell is exactly `name`."""
    rows = (
        [c.strip() for c in line.strip().strip("|").split("|")] for line in out.splitlines() if line.startswith("|")
    )
    return next(cells for cells in rows if cells[0] == name)


def test_variant_names_take_their_suffixes_in_any_order_and_a_batch_size():
    assert parse_variant("int8") == ("int8", frozenset(), None)
    assert parse_variant("int8 on worker threads without C kernels:b64") == ("int8", {THREADS, NO_NATIVE}, 64)
    both = parse_variant("int8 (fbgemm) without C kernels on worker threads")
    assert both == ("int8 (fbgemm)", {NO_NATIVE, THREADS}, None)
    assert parse_variant("int8 without the fused step on worker threads") == ("int8", {NO_FUSED, THREADS}, None)


@needs_data
def test_precision_benchmark_variants_on_worker_threads_and_batch_sizes(run_dir):
    # Batches of 2 (of 3) over 8 sentences, so that two workers decode at once: processes and threads.
    names = "int8,int8 on worker threads,int8 on worker threads without C kernels:b3,int8 without the fused step"
    out = _bench("decoding/precision.py", run_dir, "--precisions", names, "--workers", "2", "--batch-size", "2")
    assert "batch 2, 2 worker(s)" in out
    same = {_row(out, n)[-1] for n in names.split(",")}
    assert len(same) == 1 and re.fullmatch(r"\d/8", same.pop()), out  # the same outputs however decoded


def test_each_variant_is_paired_with_itself_without_c_kernels():
    names = ["fp32", "int8", "int8 without C kernels", "int8:b8", "int8 on worker threads without C kernels:b8"]
    assert native_pairs(names) == [("int8", "int8 without C kernels")]
    assert native_pairs([*names, "int8 on worker threads:b8"])[1] == (
        "int8 on worker threads:b8",
        "int8 on worker threads without C kernels:b8",
    )


def test_agreement_is_counted_against_the_baseline():
    hyps = {"fp32": [[1, 2], [3]], "int8": [[1, 2], [4]], "bf16": [[9], [4]]}
    assert same_as_baseline(hyps, "fp32") == {"fp32": "baseline", "int8": "1/2", "bf16": "0/2"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, one_thread):
    run = tmp_path_factory.mktemp("bench") / "run"
    tiny_run(run)
    return run


def _bench(script, run_dir, *extra):
    env = {**SUBPROCESS_ENV, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [
            sys.executable,
            f"benchmarks/{script}",
            "--checkpoint",
            str(run_dir),
            "--limit",
            "8",
            "--rounds",
            "1",
            "--threads",
            "1",
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@needs_data
def test_precision_benchmark_prints_speed_and_bleu(run_dir):
    out = _bench("decoding/precision.py", run_dir, "--precisions", "bf16,int8")
    assert "CPU features:" in out and "native bf16:" in out
    assert _row(out, "fp32")[-1] == "baseline"  # fp32 is run even when not asked for, and not compared with itself
    record = check_record(results_folder(), "decoding/precision.py", ["--checkpoint", "--precisions"])
    assert [row["precision"] for row in record["figures"]][:3] == ["fp32", "bf16", "int8"], record["figures"]
    base = load_translator(run_dir, precision="fp32")
    src = [ex.src_ids for ex in load_data(base.config["data"]).test[:8]]
    ref = [
        base.tgt_vocab.decode(hs[0].tokens)
        for hs in base.search(src, base.options(beam=1, scores=False), batch_size=256)
    ]
    for precision in ("bf16", "int8"):  # each row counts that precision's outputs equal to fp32's
        tr = load_translator(run_dir, precision=precision)
        ours = [tr.tgt_vocab.decode(hs[0].tokens) for hs in tr.search(src, tr.options(beam=1), batch_size=256)]
        assert _row(out, precision)[-1] == f"{sum(a == b for a, b in zip(ours, ref))}/8", out


@needs_data
def test_precision_floors_replay_each_precisions_linear_kernels(run_dir):
    out = _bench("decoding/precision.py", run_dir, "--precisions", "int8,int8 (fbgemm)", "--floors")
    assert "linear layers alone (floor)" in out
    for name in ("fp32", "int8", "int8 (fbgemm)"):
        cells = _row(out, name)
        assert re.fullmatch(r"[\d.]+ \(\d+ calls\)", cells[-2]) and int(cells[-2].split("(")[1].split()[0]) > 0, out
    assert _row(out, "fp32")[-1] == "1.00x"


def test_kernel_benchmark_prints_every_kernel():
    out = subprocess.run(
        [
            sys.executable,
            "benchmarks/kernels/precision_kernels.py",
            "--rounds",
            "1",
            "--rows",
            "1,8",
            "--shapes",
            "16x24",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**SUBPROCESS_ENV, "PYTHONPATH": str(ROOT / "src")},
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "CPU features:" in out.stdout
    for kernel in ("bf16", "int8 dyn (tensor)", "int8 dyn (channel)", "int8 _int_mm (row)"):
        assert f"{kernel} vs fp32" in out.stdout
    assert _row(out.stdout, "8x16->24")
    check_record(results_folder(), "kernels/precision_kernels.py", ["--rounds", "--rows", "--shapes"])


@needs_data
def test_ctranslate2_benchmark_compares_engines_on_every_search(run_dir):
    """One invocation, five tables (greedy, beam, n-best, sampling, constrained), CTranslate2 beside attnlab in
    each but the constrained one ("—"); one record holding them all."""
    pytest.importorskip("ctranslate2")
    extra = ("--threads", "2", "--beam", "2", "--attnlab", "fp32:b4,fp32:b4:w2", "--ct2", "float32:b4,int8:b4:w2")
    out = _bench("decoding/ct2_speed.py", run_dir, *extra)
    engines = {"attnlab fp32:b4", "attnlab fp32:b4:w2", "CTranslate2 float32:b4", "CTranslate2 int8:b4:w2"}
    titles = ["greedy", "beam 2", "n-best (beam 2, 2 hypotheses)", "sampling (top-k 10, temperature 1)"]
    tables = {}
    for title in [*titles, "constrained beam 2"]:
        lines = out.splitlines()
        start = lines.index(next(line for line in lines if line.startswith(f"| {title} ")))
        tables[title] = [[c.strip() for c in line.strip("|").split("|")] for line in lines[start + 2 : start + 6]]
        tables[title] = [r for r in tables[title] if len(r) == 5]
    for title in titles:
        rows = {r[0]: r for r in tables[title]}
        assert set(rows) == engines
        assert all(float(r[1]) > 0 and r[2].endswith("×") and 0 <= float(r[3]) <= 100 for r in rows.values()), rows
        if title.startswith("sampling"):
            assert {r[4] for r in rows.values()} == {"—"}  # draws are not compared
        elif title == "greedy":  # the export, and attnlab's workers, decode like attnlab fp32
            assert rows["CTranslate2 float32:b4"][4] == rows["attnlab fp32:b4:w2"][4] == "8/8", rows
        else:  # beams: attnlab's workers as attnlab; CTranslate2 stops its beams by a rule of its own
            assert rows["attnlab fp32:b4:w2"][4] == "8/8" and re.fullmatch(r"\d/8", rows["CTranslate2 int8:b4:w2"][4])
        assert "best attnlab (attnlab fp32:b4" in out and f"), {title}: " in out
    constrained = tables["constrained beam 2"]
    assert [r[0] for r in constrained] == ["attnlab fp32:b4", "attnlab fp32:b4:w2", *sorted(engines)[:2]]
    assert constrained[0][2] == "—" and float(constrained[0][1]) > 0
    assert all(set(r[1:]) == {"—"} for r in constrained[2:])  # CTranslate2's rows: no equivalent
    assert "constrained beam 2: CTranslate2 has no equivalent" in out
    record = check_record(results_folder(), "decoding/ct2_speed.py", ["--attnlab", "--ct2", "--beam"])
    assert "greedy" in record["figures"][0]
    assert [next(iter(t["figures"][0])) for t in record["tables"]] == [*titles[1:], "constrained beam 2"]
    assert [s["what"] for s in record["summary"]] == [f"best attnlab / best CTranslate2, {t}" for t in titles[:2]]
    # Numbers, printed by the record's formats; n-best and constrained stay in the file, off the page.
    assert all(isinstance(s["measured"][0], float) for s in record["summary"]) and "{0:.2f}×" in str(record)
    assert [t.get("file_only", False) for t in record["tables"]] == [False, True, False, True]
    assert "with beam 2](BENCHMARKS.md#against-ctranslate2)" in record["readme"]


def test_ctranslate2_benchmark_refuses_unknown_searches():
    out = subprocess.run(
        [sys.executable, "benchmarks/decoding/ct2_speed.py", "--checkpoint", "x", "--searches", "beam,top"],
        cwd=ROOT,
        capture_output=True, text=True, timeout=120, env={**SUBPROCESS_ENV, "PYTHONPATH": str(ROOT / "src")},
        check=False,
    )  # fmt: skip
    if "No module named 'ctranslate2'" in out.stderr:
        pytest.skip("ctranslate2 is not installed")
    assert out.returncode == 2 and "--searches: expected some of greedy,beam,nbest,sampling,constrained" in out.stderr


@needs_data
def test_ctranslate2_benchmark_floors(run_dir):
    """--floors adds, per attnlab engine, the replay of its linear layers (and with attention) as rows, and
    prints what each captured: an int8 engine's floor holds quantized linears, an fp32 one's matmuls."""
    pytest.importorskip("ctranslate2")
    extra = (
        "--threads",
        "2",
        "--floors",
        "--searches",
        "greedy",
        "--attnlab",
        "fp32:b4:w2,int8:b4",
        "--ct2",
        "float32:b4",
    )
    out = _bench("decoding/ct2_speed.py", run_dir, *extra)
    lines = out.splitlines()
    captured = {}
    for engine in ("fp32:b4:w2", "int8:b4"):
        line = next(line for line in lines if line.startswith(f"floor of attnlab {engine}, greedy: captured "))
        captured[engine] = {k: int(v) for v, k in re.findall(r"(\d+) ([a-z ]+?)(?:,|$)", line)}
        assert set(captured[engine]) == {"matmuls", "quantized linears", "attention kernels"}, line
        assert captured[engine]["attention kernels"] > 0, line
        for what in ("its linear layers only (floor)", "its linear layers + attention (floor)"):
            row = next(line for line in lines if line.startswith(f"| attnlab {engine}, {what}"))
            cells = [c.strip() for c in row.strip("|").split("|")]
            assert float(cells[1]) > 0 and cells[-1] == cells[-2] == "—", row  # timed; no tokens, no BLEU
    assert captured["fp32:b4:w2"]["matmuls"] > 0 and captured["fp32:b4:w2"]["quantized linears"] == 0
    int8 = captured["int8:b4"]
    assert int8["quantized linears"] > 0 and int8["matmuls"] == 0, int8  # every Linear quantized: no fp32 matmul
    best = next(line for line in lines if line.startswith("best floor"))
    assert "its linear layers only (floor)" in best and "CTranslate2 float32:b4" in best
