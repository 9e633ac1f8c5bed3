"""A finished run's quality and speed, the way the time-to-quality benchmark measures them: held-out
sources of 3-10 words with all their references (`held_out_sources`), multi-reference BLEU on them
(`score_sources`), each kept checkpoint scored at the training seconds its log gives (`run_curve`), what a
run was trained with (`run_settings`), `decode_speed`, and `averaged_translator` (its last K checkpoints
averaged, judged without retraining).

No figure is drawn here (the chapter's `time_to_quality` draws them), so a GPU machine without matplotlib
scores runs too.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from attnlab.data import load_data
from attnlab.metrics import corpus_bleu, group_by_source, reference_text
from attnlab.runs.checkpoints import average_checkpoints, list_checkpoints, save_tensors
from attnlab.runs.config import read_run_config
from attnlab.runs.layout import META_FILE
from attnlab.runs.loading import load_translator
from attnlab.utils.files import read_json

PLAIN_RECIPE = "torch-tutorial"  # the benchmark's name for the plain nn.Transformer recipe


def held_out_sources(examples, vocab, limit: int, min_words: int = 3, max_words: int = 10):
    """Distinct sources of `min_words`..`max_words` words, each with all of its references, first `limit`:
    [(source text, source ids, [reference texts as hypotheses are written])]."""
    sources, refs = group_by_source(examples)
    keep = [
        (ex.src_text, ex.src_ids, [reference_text(t, vocab) for t in rs])
        for ex, rs in zip(sources, refs)
        if min_words <= len(ex.src_text.split()) <= max_words
    ]
    return keep[:limit]


def score_sources(translator, sources, beam: int = 1) -> float:
    """Multi-reference corpus BLEU of `translator` on `held_out_sources` output."""
    found = translator.search([ids for _, ids, _ in sources], translator.options(beam=beam, scores=False))
    hyps = [translator.tgt_vocab.decode(hs[0].tokens) for hs in found]
    return corpus_bleu(hyps, [refs for _, _, refs in sources])


def training_seconds(run_dir: str | os.PathLike) -> dict[int, float]:
    """step -> seconds of training up to that step, from the run's log.jsonl ('train' and 'end' events).
    Each invocation's clock starts at 0, so a resumed run adds the seconds spent up to its resume step."""
    seconds: dict[int, float] = {}
    offset = 0.0
    log = Path(run_dir) / "log.jsonl"
    for line in log.read_text().splitlines() if log.is_file() else []:
        event = json.loads(line)
        if event.get("event") == "resume":
            offset = seconds.get(event["step"], offset)
        elif event.get("event") in ("train", "end") and "elapsed_s" in event:
            seconds[event["step"]] = offset + event["elapsed_s"]
    return seconds


def run_settings(run_dir: str | os.PathLike) -> dict:
    """What a run was trained with and how far it got, as one table row: 'run' (the folder's name),
    'precision' (what training ran: `auto`'s pick), 'schedule', 'layers' ("encoder + decoder"), 'd',
    'steps' and 'seconds' (from its log; None before its end), and 'averaged in run' where its
    config sets `train.average_last`."""
    cfg = read_run_config(run_dir)
    model, train = cfg.get("model", {}), cfg.get("train", {})
    encoder = model.get("num_layers")
    decoder = model.get("decoder_layers") or encoder  # unset: as deep as the encoder
    seconds = training_seconds(run_dir)
    final = max(seconds, default=None)
    row = {
        "run": Path(run_dir).name,
        "precision": (cfg.get("precision") or {}).get("picked", train.get("precision", "fp32")),
        "schedule": train.get("schedule"),
        "layers": f"{encoder} + {decoder}",
        "d": model.get("num_hiddens"),
        "steps": final,
        "seconds": None if final is None else round(seconds[final], 1),
    }
    if "average_last" in train:
        row["averaged in run"] = train["average_last"]
    return row


def decode_speed(translator, sources, beam: int = 4) -> float:
    """Sentences per second of `translator.search` on `sources` (`held_out_sources` output) at `beam`, the
    run's other decoding defaults kept. Timed as the difference of the sources twice over and once, after
    a warm-up: what stays is the cost of the sentences, not that of the first call (kernels built on
    first use, caches grown)."""
    ids = [s for _, s, _ in sources]
    opts = translator.options(beam=beam, scores=False)
    translator.search(ids, opts)  # warm-up
    took = []
    for copies in (1, 2):
        start = time.perf_counter()
        translator.search(ids * copies, opts)
        took.append(time.perf_counter() - start)
    extra = took[1] - took[0]
    return len(ids) / extra if extra > 0 else 2 * len(ids) / took[1]  # noise beat a tiny input: the mean


def averaged_translator(run_dir: str | os.PathLike, last: int, folder: str | os.PathLike):
    """The run's translator with the mean of its newest `last` checkpoints as weights, written as a
    .safetensors file into `folder` (a scratch folder of the caller's). ValueError (one line) when the
    run kept fewer checkpoints."""
    ckpts = list_checkpoints(run_dir)
    if last < 1 or len(ckpts) < last:
        raise ValueError(
            f"averaging the last {last} checkpoints of {run_dir} needs at least {max(last, 1)}, found "
            f"{len(ckpts)}; pass a smaller --average, or train with a larger keep_last / smaller checkpoint_every"
        )
    path = Path(folder) / f"{Path(run_dir).name}_averaged_last{last}.safetensors"
    save_tensors(average_checkpoints(ckpts[-last:]), path)
    return load_translator(run_dir, weights=path)


def run_curve(run_dir: str | os.PathLike, limit: int = 500, split: str = "valid") -> list[dict]:
    """[{'seconds', 'steps', 'valid_bleu'}] of a finished run: each kept checkpoint whose step the log
    timed, then the final weights, scored greedily on its `split` (`held_out_sources`, `limit` of them).
    Empty when the split has no 3-10-word source."""

    run_dir = Path(run_dir)
    seconds = training_seconds(run_dir)
    data = load_data(read_run_config(run_dir)["data"])
    translator = load_translator(run_dir)
    sources = held_out_sources(getattr(data, split), translator.tgt_vocab, limit)
    if not sources:
        return []
    points = []
    for ckpt in list_checkpoints(run_dir):
        step = read_json(ckpt / META_FILE)["step"]
        if step in seconds:
            bleu = score_sources(load_translator(run_dir, weights=ckpt), sources)
            points.append({"seconds": round(seconds[step], 2), "steps": step, "valid_bleu": bleu})
    final = max(seconds, default=None)  # the end event: the final weights at the run root
    if final is not None and all(p["steps"] != final for p in points):
        points.append(
            {"seconds": round(seconds[final], 2), "steps": final, "valid_bleu": score_sources(translator, sources)}
        )
    return sorted(points, key=lambda p: p["seconds"])
