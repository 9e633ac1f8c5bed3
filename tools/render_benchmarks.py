"""Render BENCHMARKS.md from the benchmarks' records (benchmarks/results/*.json) and a hand-written frame.

    python tools/render_benchmarks.py            # rewrite BENCHMARKS.md, README.md's figures, src/attnlab/measured/
    python tools/render_benchmarks.py --check    # exit 1 if any of them differs from its rendering

The frame (benchmarks/frame.md) holds the headings and one paragraph per section (what it measures, its
baseline). A line `{{NAME}}` in it becomes the record NAME.json: its command, the machine it ran on, its table
(`figures`: one dict per row, keys as columns) and any further `tables` (a record with `"list": true` prints
one line a row instead, its cells joined by ": ": the "tried, not kept" ideas; a table with
`"file_only": true` stays in the record, named on the page by one note linking the file, so that the page
stays a short reference); `{{summary}}` a table of the records' `summary` lines, each linking its section;
`{{rest}}` every record the frame does not place, under a heading of its own (its `title`, else its file name),
so a new record appears on the page without touching this script; `{{gpu}}` every record of
benchmarks/results/gpu/ (what `bash benchmarks/gpu/gpu.sh` writes on a GPU), or a line naming that command
when there is none.

Figures are numbers; a table's `formats` (`formats` beside `figures`, `summary_formats` beside `summary`) maps
a column to the format that prints them with their unit: `"{:.2f}×"` for a number, `"{0:,} ({1:.2f}×)"` for
a list of numbers, or a list of such formats, one per row (null: the plain cell). Without one a number
prints as is (thousands separated) and a list as its items joined by " / ".

README.md quotes a figure as `<!-- figure NAME -->text<!-- /figure -->`: the text is the record NAME's `readme`,
a format of the record's own fields (`"[{figures[1][test BLEU]:.1f} test BLEU](BENCHMARKS.md#...)"`).
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
README = ROOT / "README.md"
# What attnlab reads at run time ships in the package, generated here: a record named in SHIPPED as a copy (the
# chapter's time-to-quality curves), and the `ships` object of any record (the demo's quiet-machine stages, the
# position schemes' full curves) as src/attnlab/measured/NAME.json.
MEASURED, SHIPPED = ROOT / "src" / "attnlab" / "measured", ("time_to_quality",)
FIGURE = re.compile(r"<!-- figure ([\w.-]+) -->(.*?)<!-- /figure -->", re.S)
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


def formatted(rows: list[dict], formats: dict | None, where: str = "a table") -> list[dict]:
    """`rows` with each column that `formats` names printed by its format (see the module docstring)."""
    if not formats:
        return rows
    out = [dict(row) for row in rows]
    for column, fmt in formats.items():
        per_row = fmt if isinstance(fmt, list) else [fmt] * len(rows)
        if len(per_row) != len(rows):
            raise SystemExit(f"{where}: formats[{column!r}] has {len(per_row)} entries for {len(rows)} rows")
        for row, f in zip(out, per_row):
            value = row.get(column)
            if f is None or value is None or isinstance(value, str):
                continue
            try:
                row[column] = f.format(*value) if isinstance(value, list) else f.format(value)
            except (IndexError, KeyError, ValueError, TypeError) as exc:
                raise SystemExit(f"{where}: {column!r} cannot print {value!r} with {f!r} ({exc})") from None
    return out


def table(rows: list[dict], formats: dict | None = None, where: str = "a table") -> list[str]:
    """Rows as a Markdown table; the columns are every key, in the order they first appear."""
    if not rows:
        return ["(no rows)"]
    rows = formatted(rows, formats, where)
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


def render_record(record: dict, where: str = "a record", path: str = "") -> list[str]:
    """The record's commands, machine, table, further tables and notes; a `file_only` table is named in one
    note linking `path` (the record's file) instead."""
    commands = record.get("command") or []
    commands = [commands] if isinstance(commands, str) else list(commands)
    out = ["```bash", *commands, "```", ""] if commands else []
    out.append(machine(record))
    if record.get("baseline"):
        out[-1] += f" Baseline: {record['baseline']}."
    out += ["", *table(record["figures"], record.get("formats"), where)]
    elsewhere = []
    for extra in record.get("tables", []):
        if extra.get("file_only"):
            first = next(iter(extra["figures"][0]), "a table") if extra["figures"] else "a table"
            elsewhere.append(str(extra.get("caption") or first).rstrip(":"))
            continue
        out.append("")
        if extra.get("caption"):
            out += [f"{extra['caption']}:", ""]
        if extra.get("command"):
            out += ["```bash", extra["command"], "```", ""]
        out += table(extra["figures"], extra.get("formats"), where)
    notes = list(record.get("notes") or [])
    if elsewhere:
        notes.append(f"Further tables in [{path}]({path}): " + "; ".join(elsewhere) + ".")
    if notes:
        out += ["", *(f"- {n}" for n in notes)]
    return out


def summary(records: dict[str, dict], sections: dict[str, str]) -> list[str]:
    """One row per `summary` line of each record, in page order, linking the section the record is in."""
    rows = []
    for name, heading in sections.items():
        lines = formatted(records[name].get("summary", []), records[name].get("summary_formats"), f"{name}.json")
        rows += [{**line, "section": f"[{heading}](#{slug(heading)})"} for line in lines]
    return table(rows)


def shipped(folder: Path) -> dict[Path, str]:
    """src/attnlab/measured/NAME.json -> its text: a copy of each SHIPPED record, each record's `ships` object."""
    out = {MEASURED / f"{name}.json": (folder / f"{name}.json").read_text(encoding="utf-8") for name in SHIPPED}
    for name, record in load_records(folder).items():
        if "ships" in record:
            out[MEASURED / f"{name}.json"] = json.dumps(record["ships"], indent=1, ensure_ascii=False) + "\n"
    return out


def readme(text: str, records: dict[str, dict]) -> str:
    """README.md with each `<!-- figure NAME -->` quote filled from the record NAME's `readme` format."""

    def fill(m: re.Match) -> str:
        record = records.get(m.group(1), {})
        if "readme" not in record:
            raise SystemExit(f"README.md quotes {m.group(1)}.json, which has no 'readme' format; add one")
        try:
            quote = record["readme"].format(**record)
        except (IndexError, KeyError, ValueError, TypeError) as exc:
            raise SystemExit(f"{m.group(1)}.json: its 'readme' format cannot print ({exc!r})") from None
        return f"<!-- figure {m.group(1)} -->{quote}<!-- /figure -->"

    return FIGURE.sub(fill, text)


GPU_COMMAND = "bash benchmarks/gpu/gpu.sh"


def load_gpu(results: Path) -> dict[str, dict]:
    """The records of results/gpu/ (what gpu.sh writes on a GPU), or none."""
    return load_records(results / "gpu") if (results / "gpu").is_dir() else {}


def render_gpu(records: dict[str, dict]) -> list[str]:
    """The GPU records as one table (the page stays a short reference; each record's full tables are in its
    file): what each measured, on which device, by which command; or a line naming the command to run."""
    if not records:
        return [f"No GPU run is recorded yet: `{GPU_COMMAND}` on a CUDA machine writes benchmarks/results/gpu/."]
    rows = []
    for name in sorted(records, key=lambda n: (n != "gpu", n)):
        record = records[name]
        if record.get("summary"):
            lines = formatted(record["summary"], record.get("summary_formats"), f"gpu/{name}.json")
            measured = "; ".join(f"{r.get('what', '')}: {r.get('measured', '')}" for r in lines)
        else:
            rows8 = formatted(record["figures"], record.get("formats"), f"gpu/{name}.json")[:8]
            measured = "; ".join(", ".join(f"{k} {v}" for k, v in row.items()) for row in rows8)
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
                record = render_record(records[name], name, f"benchmarks/results/{name}.json")
                out += [f"## {records[name].get('title', name)}", "", *record, ""]
            while out and out[-1] == "":
                out.pop()
        elif records[m.group(1)].get("list"):  # one line a row ("tried, not kept"): its cells joined by ": "
            rows = formatted(records[m.group(1)]["figures"], records[m.group(1)].get("formats"), m.group(1))
            out += ["- " + ": ".join(cell(v) for v in row.values()) for row in rows]
        else:
            out += render_record(records[m.group(1)], f"{m.group(1)}.json", f"benchmarks/results/{m.group(1)}.json")
    return "\n".join(out).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare: exit 1 if BENCHMARKS.md is stale")
    ap.add_argument("--results", type=Path, default=RESULTS, help="the records' folder")
    ap.add_argument("--frame", type=Path, default=FRAME)
    ap.add_argument("--out", type=Path, default=PAGE)
    ap.add_argument("--readme", type=Path, help="a README whose figures to fill (default: README.md, from the "
                    "repository's own records only)")  # fmt: skip
    args = ap.parse_args(argv)
    gpu = load_gpu(args.results)
    records = load_records(args.results)
    outputs = {args.out: render(args.frame.read_text(encoding="utf-8"), records, gpu)}
    own = args.results.resolve() == RESULTS.resolve()  # the repository's records: its README and package too
    if args.readme or own:
        path = args.readme or README
        outputs[path] = readme(path.read_text(encoding="utf-8"), records)
    if own:
        outputs.update(shipped(args.results))
    if args.check:
        stale = [p for p, text in outputs.items() if (p.read_text(encoding="utf-8") if p.is_file() else "") != text]
        for path in stale:
            print(f"{path} differs from its rendering: run python tools/render_benchmarks.py", file=sys.stderr)
        return 1 if stale else 0
    page = outputs[args.out]
    for path, text in outputs.items():
        path.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({page.count(chr(10))} lines from {len(records)} records) and {len(outputs) - 1} more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
