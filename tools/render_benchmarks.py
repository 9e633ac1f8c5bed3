"""Render BENCHMARKS.md from the benchmarks' records (benchmarks/results/*.json) and a hand-written frame.

    python tools/render_benchmarks.py            # rewrite BENCHMARKS.md
    python tools/render_benchmarks.py --check    # exit 1 if BENCHMARKS.md differs from the rendering

The frame (benchmarks/frame.md) holds the headings, one paragraph per section (what it measures, its
baseline) and the "tried, not kept" list. A line `{{NAME}}` in it becomes the record NAME.json: its
command, the machine it ran on, its table (`figures`: one dict per row, keys as columns) and any further
`tables`; `{{summary}}` a table of the records' `summary` lines, each linking its section; `{{rest}}` every
record the frame does not place, under a heading of its own (its `title`, else its file name), so a new
record appears on the page without touching this script; `{{gpu}}` every record of benchmarks/results/gpu/
(what `bash benchmarks/gpu.sh` writes on a GPU), or a line naming that command when there is none.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FRAME = ROOT / "benchmarks" / "frame.md"
PAGE = ROOT / "BENCHMARKS.md"
PLACE = re.compile(r"^\{\{\s*([\w.-]+)\s*\}\}$")
TRANSCRIBED = "transcribed from the measured page"


def load_records(folder: Path) -> dict[str, dict]:
    """NAME -> record for every NAME.json in `folder` (a malformed file is an error naming it)."""
    records = {}
    for path in sorted(folder.glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise SystemExit(f"{path}: not JSON ({exc}); fix or remove it, then render again") from None
        if not isinstance(record, dict) or not isinstance(record.get("figures"), list):
            raise SystemExit(f"{path}: a record needs a 'figures' list of rows; got {type(record).__name__}")
        records[path.stem] = record
    return records


def slug(heading: str) -> str:
    """The anchor GitHub and MkDocs give a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"\s+", "-", text)


def cell(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,}"
    if isinstance(value, list):
        return " / ".join(cell(v) for v in value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(rows: list[dict]) -> list[str]:
    """Rows as a Markdown table; the columns are every key, in the order they first appear."""
    if not rows:
        return ["(no rows)"]
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]


def machine(record: dict) -> str:
    """One line: where and when the figures were measured."""
    parts = []
    if record.get("machine"):
        parts.append(str(record["machine"]))
    elif record.get("cpus"):
        parts.append(f"{record['cpus']} CPUs")
    if record.get("cpu_features"):
        parts.append("CPU features " + " ".join(record["cpu_features"]))
    if record.get("torch"):
        parts.append(f"torch {record['torch']}")
    if record.get("load") is not None:
        parts.append(f"load {record['load']}")
    where = "; ".join(parts) or "a machine not recorded"
    when = f" {record['date']}" if record.get("date") else ""
    source = f" ({record['source']})" if record.get("source") else ""
    return f"Measured{when} on {where}{source}."


def render_record(record: dict) -> list[str]:
    commands = record.get("command") or []
    commands = [commands] if isinstance(commands, str) else list(commands)
    out = ["```bash", *commands, "```", ""] if commands else []
    out.append(machine(record))
    if record.get("baseline"):
        out[-1] += f" Baseline: {record['baseline']}."
    out += ["", *table(record["figures"])]
    for extra in record.get("tables", []):
        out.append("")
        if extra.get("caption"):
            out += [f"{extra['caption']}:", ""]
        if extra.get("command"):
            out += ["```bash", extra["command"], "```", ""]
        out += table(extra["figures"])
    notes = record.get("notes") or []
    if notes:
        out += ["", *(f"- {n}" for n in notes)]
    return out


def summary(records: dict[str, dict], sections: dict[str, str]) -> list[str]:
    """One row per `summary` line of each record, in page order, linking the section the record is in."""
    rows = []
    for name, heading in sections.items():
        for line in records[name].get("summary", []):
            rows.append({**line, "section": f"[{heading}](#{slug(heading)})"})
    return table(rows)


GPU_COMMAND = "bash benchmarks/gpu.sh"


def render_gpu(records: dict[str, dict]) -> list[str]:
    """The GPU records as one table (the page stays a short reference; each record's full tables are in its
    file): what each measured, on which device, by which command; or a line naming the command to run."""
    if not records:
        return [f"No GPU run is recorded yet: `{GPU_COMMAND}` on a CUDA machine writes benchmarks/results/gpu/."]
    rows = []
    for name in sorted(records, key=lambda n: (n != "gpu", n)):
        record = records[name]
        if record.get("summary"):
            measured = "; ".join(f"{r.get('what', '')}: {r.get('measured', '')}" for r in record["summary"])
        else:
            measured = "; ".join(", ".join(f"{k} {v}" for k, v in row.items()) for row in record["figures"][:8])
        rows.append(
            {
                "record": f"[{record.get('title', name)}](benchmarks/results/gpu/{name}.json)",
                "device": record.get("device", ""),
                "measured": measured,
                "command": f"`{record.get('command', '')}`",
            }
        )
    return ["", *table(rows)]


def render(frame: str, records: dict[str, dict], gpu: dict[str, dict] | None = None) -> str:
    """The page: the frame with each `{{NAME}}` line replaced by that record (see the module docstring)."""
    records = {n: r for n, r in records.items() if r.get("page", PAGE.name) == PAGE.name}  # not another page's
    lines = frame.splitlines()
    sections, heading = {}, ""
    for line in lines:  # first pass: the section each record lands in, for the summary's links
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        m = PLACE.match(line.strip())
        if m and m.group(1) in records:
            sections[m.group(1)] = heading
    unknown = [m.group(1) for m in map(PLACE.match, (x.strip() for x in lines)) if m]
    unknown = [n for n in unknown if n not in records and n not in ("summary", "rest", "gpu")]
    if unknown:
        raise SystemExit(f"the frame places {unknown}, but benchmarks/results/ has no such record")
    rest = [n for n in records if n not in sections]
    out: list[str] = []
    for line in lines:
        m = PLACE.match(line.strip())
        if not m:
            out.append(line)
        elif m.group(1) == "summary":
            out += summary(records, {**sections, **{n: str(records[n].get("title", n)) for n in rest}})
        elif m.group(1) == "gpu":
            out += render_gpu(gpu or {})
        elif m.group(1) == "rest":  # the records the frame does not place yet, each under its own heading
            for name in rest:
                out += [f"## {records[name].get('title', name)}", "", *render_record(records[name]), ""]
            while out and out[-1] == "":
                out.pop()
        else:
            out += render_record(records[m.group(1)])
    return "\n".join(out).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare: exit 1 if BENCHMARKS.md is stale")
    ap.add_argument("--results", type=Path, default=RESULTS, help="the records' folder")
    ap.add_argument("--frame", type=Path, default=FRAME)
    ap.add_argument("--out", type=Path, default=PAGE)
    args = ap.parse_args(argv)
    gpu_folder = args.results / "gpu"
    gpu = load_records(gpu_folder) if gpu_folder.is_dir() else {}
    page = render(args.frame.read_text(encoding="utf-8"), load_records(args.results), gpu)
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else ""
        if current != page:
            print(f"{args.out} differs from its rendering: run python tools/render_benchmarks.py", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(page, encoding="utf-8")
    print(f"wrote {args.out} ({page.count(chr(10))} lines from {len(load_records(args.results))} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
