"""BENCHMARKS.md is rendered from benchmarks/results/*.json and benchmarks/frame.md: the committed page is the
rendering, every record carries its context, and a record the frame does not name still reaches the page."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import render_benchmarks  # noqa: E402

KEYS = ("command", "cpu_features", "torch", "date", "figures")


def test_committed_page_is_the_rendering_of_the_records():
    results = render_benchmarks.RESULTS
    page = render_benchmarks.render(
        render_benchmarks.FRAME.read_text(encoding="utf-8"),
        render_benchmarks.load_records(results),
        render_benchmarks.load_gpu(results),
    )
    committed = render_benchmarks.PAGE.read_text(encoding="utf-8")
    assert committed == page, "BENCHMARKS.md is stale or edited by hand: run python tools/render_benchmarks.py"


def test_page_is_a_reference_of_at_most_600_lines():
    assert len(render_benchmarks.PAGE.read_text(encoding="utf-8").splitlines()) <= 600


def test_every_record_names_its_command_machine_and_figures():
    records = render_benchmarks.load_records(render_benchmarks.RESULTS)
    assert len(records) >= 20
    for name, record in records.items():
        missing = [k for k in KEYS if k not in record]
        assert not missing, f"{name}.json lacks {missing}"
        assert record["command"], name
        assert record["figures"] and all(isinstance(row, dict) for row in record["figures"]), name
        if not record["date"]:  # measured before records existed: say so instead of inventing a date
            assert record.get("source") == render_benchmarks.TRANSCRIBED, name


def test_summary_links_point_at_headings_of_the_page():
    page = render_benchmarks.PAGE.read_text(encoding="utf-8")
    anchors = {render_benchmarks.slug(h) for h in re.findall(r"^#+ (.+)$", page, re.M)}
    links = re.findall(r"\]\(#([^)]+)\)", page)
    assert links and set(links) <= anchors, set(links) - anchors


def _folder_with(tmp_path, **new) -> Path:
    folder = tmp_path / "results"
    shutil.copytree(render_benchmarks.RESULTS, folder)
    for name, record in new.items():
        (folder / f"{name}.json").write_text(json.dumps(record), encoding="utf-8")
    return folder


def test_a_new_record_appears_without_touching_the_renderer(tmp_path):
    record = {
        "title": "ONNX Runtime against attnlab",
        "command": "python benchmarks/decoding/onnx_speed.py --rounds 3",
        "cpu_features": ["avx2"],
        "torch": "2.13.0",
        "date": "2026-12-01 10:00 UTC",
        "figures": [{"engine": "onnxruntime", "sentences/s": 1234.5, "vs attnlab fp32": "1.10×"}],
        "summary": [{"what": "ONNX export", "baseline": "attnlab fp32", "measured": "1.10×"}],
    }
    folder = _folder_with(tmp_path, onnx_speed=record)
    frame = render_benchmarks.FRAME.read_text(encoding="utf-8")
    page = render_benchmarks.render(frame, render_benchmarks.load_records(folder), render_benchmarks.load_gpu(folder))
    assert "## ONNX Runtime against attnlab" in page
    assert "python benchmarks/decoding/onnx_speed.py --rounds 3" in page
    assert "| engine | sentences/s | vs attnlab fp32 |" in page and "| onnxruntime | 1,234.5 | 1.10× |" in page
    assert "Measured 2026-12-01 10:00 UTC on " in page
    assert "[ONNX Runtime against attnlab](#onnx-runtime-against-attnlab)" in page  # the summary links it
    # And the page as the tool writes it, from the command line.
    out = tmp_path / "B.md"
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "render_benchmarks.py"), "--results", str(folder), "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert out.read_text(encoding="utf-8") == page
    check = [sys.executable, str(ROOT / "tools" / "render_benchmarks.py"), "--results", str(folder), "--check"]
    # the committed page lacks the new record
    assert subprocess.run(check, capture_output=True, timeout=120).returncode == 1


def test_a_frame_naming_a_missing_record_or_a_broken_record_is_refused(tmp_path):
    records = render_benchmarks.load_records(render_benchmarks.RESULTS)
    with pytest.raises(SystemExit, match="no_such_bench"):
        render_benchmarks.render("# B\n\n{{no_such_bench}}\n", records)
    folder = _folder_with(tmp_path)
    (folder / "bad.json").write_text('{"command": "x"}', encoding="utf-8")
    with pytest.raises(SystemExit, match=r"bad\.json: a record needs a 'figures' list"):
        render_benchmarks.load_records(folder)


def test_cells_keep_numbers_readable():
    assert render_benchmarks.table([{"a": 1234, "b": 0.985, "c": None, "d": "x|y"}]) == [
        "| a | b | c | d |",
        "|---|---|---|---|",
        "| 1,234 | 0.985 | — | x\\|y |",
    ]
    assert render_benchmarks.slug("Decoder-only vs encoder–decoder") == "decoder-only-vs-encoderdecoder"


RATIO = re.compile(r"[0-9]\.[0-9]+([–-][0-9]\.[0-9]+)? ?[x×](?![A-Za-z0-9])")
# Files whose measured ratios are still to move to BENCHMARKS.md; empty this as they go.


def test_no_measured_ratio_in_the_sources():
    """A figure lives once, in BENCHMARKS.md: docstrings, comments and C sources say why, not how fast."""
    src = ROOT / "src" / "attnlab"
    found = [
        f"{path.relative_to(src)}:{n}: {line.strip()}"
        for path in sorted(p for p in src.rglob("*") if p.suffix in (".py", ".c", ".h"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if RATIO.search(line)
    ]
    assert not found, "measured ratios in src/ (move them to BENCHMARKS.md, name its section):\n" + "\n".join(found)


def test_readme_quotes_at_most_six_figures_each_linking_its_section():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    headline = re.findall(r"\[([^\]]*\d[^\]]*)\]\(BENCHMARKS\.md#([\w-]+)\)", text)
    assert 1 <= len(headline) <= 6, headline
    anchors = {render_benchmarks.slug(h) for h in re.findall(r"^#+ (.+)$", render_benchmarks.PAGE.read_text(), re.M)}
    assert {a for _, a in headline} <= anchors, "a headline figure links a section BENCHMARKS.md does not have"
    outside = re.sub(r"\[[^\]]*\]\(BENCHMARKS\.md#[\w-]+\)", "", text)
    assert not re.findall(r"\d(?:\.\d+)?(?:–\d+(?:\.\d+)?)?×", outside), (
        "a ratio in the README outside its headline links"
    )


def test_formats_print_numbers_with_their_units():
    rows = [{"x": 1.3, "y": [2.35, 2.36], "z": 4877}, {"x": "—", "y": [1.27, 1.3], "z": 12}]
    formats = {"x": "{:.2f}×", "y": "{0:.2f}–{1:.2f}×", "z": ["{:,}/s", None]}
    assert render_benchmarks.table(rows, formats)[2:] == ["| 1.30× | 2.35–2.36× | 4,877/s |", "| — | 1.27–1.30× | 12 |"]
    with pytest.raises(SystemExit, match=r"r\.json: 'x' cannot print 1\.3"):
        render_benchmarks.table(rows, {"x": "{0:.2f} / {1:.2f}"}, "r.json")
    with pytest.raises(SystemExit, match="2 entries for 1 rows"):
        render_benchmarks.table(rows[:1], {"z": ["{}", "{}"]})


# A cell that is only a number and its unit, held as text: what a record's `formats` are for.
FIGURE_AS_TEXT = re.compile(r"^[~+]?\d[\d,]*(\.\d+)?( ?(×|%|ms|µs|s|MB|MiB|GB))?$")


def test_records_hold_figures_as_numbers():
    """Every record, measured or transcribed, CPU or GPU: its tables and summary hold numbers, not their text."""
    texts = []
    records = render_benchmarks.load_records(render_benchmarks.RESULTS)
    gpu = render_benchmarks.RESULTS / "gpu"
    if gpu.is_dir():
        records |= {f"gpu/{n}": r for n, r in render_benchmarks.load_records(gpu).items()}
    for name, record in records.items():
        tables = [record["figures"], record.get("summary", [])] + [t["figures"] for t in record.get("tables", [])]
        texts += [f"{name}: {k} = {v!r}" for rows in tables for row in rows for k, v in row.items()
                  if isinstance(v, str) and FIGURE_AS_TEXT.match(v)]  # fmt: skip
    assert not texts, "figures held as text (store the number, print it with `formats`):\n" + "\n".join(texts)


def test_readme_quotes_are_filled_from_the_records(tmp_path):
    records = render_benchmarks.load_records(render_benchmarks.RESULTS)
    text = render_benchmarks.README.read_text(encoding="utf-8")
    assert render_benchmarks.readme(text, records) == text, "README.md's figures are stale: run --readme"
    assert text.count("<!-- figure ") >= 3
    records["serve_load"]["summary"][0]["measured"][0] = 7.01  # a new measurement reaches the README
    assert "[7.01× one sentence per decode" in render_benchmarks.readme(text, records)
    with pytest.raises(SystemExit, match=r"no_such\.json, which has no 'readme'"):
        render_benchmarks.readme("<!-- figure no_such -->x<!-- /figure -->", records)
    folder = _folder_with(tmp_path)
    record = json.loads((folder / "serve_load.json").read_text(encoding="utf-8"))
    record["summary"][0]["measured"][0] = 7.01
    (folder / "serve_load.json").write_text(json.dumps(record), encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text(text, encoding="utf-8")
    tool = [sys.executable, str(ROOT / "tools" / "render_benchmarks.py"), "--results", str(folder)]
    out = tmp_path / "B.md"
    subprocess.run([*tool, "--out", str(out), "--readme", str(readme)], check=True, capture_output=True, timeout=120)
    assert "[7.01× one sentence" in readme.read_text(encoding="utf-8")
    assert "| 7.01× (p99 39 vs 178 ms, 0 errors) |" in out.read_text(encoding="utf-8")


def test_a_file_only_table_is_named_by_one_note_linking_its_record():
    record = {
        "command": "python benchmarks/decoding/x.py",
        "figures": [{"search": "greedy", "vs best": 1.02}],
        "formats": {"vs best": "{:.2f}×"},
        "tables": [
            {"caption": None, "figures": [{"n-best (beam 4)": "a", "vs best": 0.99}], "file_only": True},
            {"caption": "Checkpoint averaging:", "figures": [{"weights": "final", "BLEU": 42.84}], "file_only": True},
            {"caption": None, "figures": [{"sampling": "b", "vs best": 0.68}], "formats": {"vs best": "{:.2f}×"}},
        ],
        "notes": ["a note"],
    }
    page = render_benchmarks.render("# B\n\n{{x}}\n", {"x": record})
    assert "| greedy | 1.02× |" in page and "| b | 0.68× |" in page  # on the page
    assert "0.99" not in page and "42.84" not in page  # in the file only
    assert page.rstrip().endswith(
        "- a note\n- Further tables in [benchmarks/results/x.json](benchmarks/results/x.json): "
        "n-best (beam 4); Checkpoint averaging."
    )
    gpu = render_benchmarks.render_gpu({"x": {**record, "device": "H200"}})  # the GPU table prints units too
    assert "search greedy, vs best 1.02×" in gpu[-1]


def test_tried_ideas_are_a_record_and_shipped_records_are_copies():
    records = render_benchmarks.load_records(render_benchmarks.RESULTS)
    lines = render_benchmarks.render("{{tried}}\n", {"tried": records["tried"]}).splitlines()
    assert len(lines) == len(records["tried"]["figures"]) >= 20 and all(line.startswith("- ") for line in lines)
    first = records["tried"]["figures"][0]  # the idea, then its figures printed by the row's format
    assert lines[0].startswith(f"- {first['idea']}: {first['result'][0]:.2f} against {first['result'][1]:.2f} ms")
    for path, text in render_benchmarks.shipped(render_benchmarks.RESULTS).items():
        assert path.read_text(encoding="utf-8") == text, f"{path} is not its record: run the renderer"
