"""onnxruntime (CPU) greedy decoding of `attnlab export --format onnx` beside attnlab's own, same sentences and
threads: sentences/s, token identity with attnlab fp32, and multi-reference BLEU.

The run is exported twice (float32 and int8, onnxruntime's dynamic quantization) into a temp folder; model
loading and export are not timed. Every engine decodes the split's sentences greedily: attnlab through
`Translator.decode_ids` (its default batches and workers: its best way), onnxruntime through
`attnlab.export.onnx.OnnxTranslator` in batches of --ort-batch (default attnlab's), longest first, each batch's output capped as
attnlab caps it. Rounds are interleaved; sentences/s is the median over rounds. With --ct2, CTranslate2's
float32 and int8 (ctranslate2 exported the same way) are timed as well.

Token identity counts sentences whose onnxruntime fp32 tokens equal attnlab fp32's; each sentence that differs is
explained: the step where they part and attnlab's margin between its top two logits there (a near tie that
float rounding in another matmul order flips).

    flock /tmp/attnlab-measure.lock python benchmarks/onnx_speed.py --checkpoint /work/runs/laptop600 --threads 2

The result is one JSON object (command, cpu_features, torch, date, figures) in --out
(default benchmarks/results/onnx_speed.json).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnxruntime
import torch
from common import add_decoding_args, table

from attnlab.decoding.batches import length_batches
from attnlab.export.onnx import OnnxTranslator
from attnlab.export.onnx.exporter import write_folder
from attnlab.metrics import corpus_bleu, group_by_source, reference_text
from attnlab.runs.loading import load_translator
from attnlab.training.launch import load_run_data
from attnlab.utils.precision import cpu_features

RESULTS = Path(__file__).resolve().parent / "results" / "onnx_speed.json"


def _ort_decode(tr: OnnxTranslator, ids: list[list[int]], batch: int) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in ids]
    for rows in length_batches([len(r) for r in ids], batch):
        for i, o in zip(rows, tr.greedy([ids[i] for i in rows])):
            out[i] = o.tokens
    return out


def _ct2_engines(run: str, tmp: Path, threads: int) -> dict:
    from attnlab.export.ctranslate2 import export

    import ctranslate2  # noqa: I001 -- optional, after attnlab's own

    folder = export(run, tmp / "ct2")
    engines = {}
    for compute in ("float32", "int8"):
        tr = ctranslate2.Translator(str(folder), device="cpu", compute_type=compute, intra_threads=threads)
        engines[f"CTranslate2 {compute}"] = tr
    return engines


def _ct2_decode(tr, translator, ids: list[list[int]]) -> list[list[int]]:
    toks = [translator.src_vocab.to_tokens(r) for r in ids]
    limit = max(translator.output_limit(len(r) + 1) for r in ids)
    res = tr.translate_batch(toks, beam_size=1, max_batch_size=64, min_decoding_length=0, max_decoding_length=limit)
    return [translator.tgt_vocab.to_indices(r.hypotheses[0]) for r in res]


def explain_difference(translator, src: list[int], want: list[int], got: list[int]) -> dict:
    """Where two greedy outputs part, and attnlab's top-two logit margin at that step."""
    step = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
    prefix = [translator.bos] + want[:step]
    src_t = torch.tensor([src + [translator.src_vocab.eos]])
    with torch.inference_mode():
        logits = translator.model(src_t, torch.tensor([prefix]), torch.tensor([len(src) + 1]))[0, -1]
    top = torch.topk(logits, 2).values
    return {"step": step, "attnlab_margin": float(top[0] - top[1])}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_decoding_args(ap, "run folder (a Transformer)")
    ap.add_argument(
        "--ort-batch", type=int, help="sentences per onnxruntime batch (default: attnlab's, so both cap alike)"
    )
    ap.add_argument("--ct2", action="store_true", help="also time CTranslate2 float32 and int8")
    ap.add_argument("--out", default=str(RESULTS), help="the JSON result (default benchmarks/results/onnx_speed.json)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    translator = load_translator(args.checkpoint)
    args.ort_batch = args.ort_batch or translator.batch_size
    examples = getattr(load_run_data(translator, args.checkpoint), args.split)[: args.limit]
    sources, refs = group_by_source(examples)
    sentences = [ex.src_text for ex in sources]
    ids = translator.encode(sentences)
    refs = [[reference_text(r, translator.tgt_vocab) for r in rs] for rs in refs]
    with tempfile.TemporaryDirectory() as tmp:
        engines: dict = {"attnlab fp32": lambda ids: translator.decode_ids(ids)}
        for q in ("float32", "int8"):
            folder = Path(tmp) / q
            folder.mkdir()
            write_folder(translator, Path(args.checkpoint), folder, q)
            ort_tr = OnnxTranslator(folder, threads=args.threads)
            engines[f"onnxruntime {'fp32' if q == 'float32' else q}"] = lambda ids, t=ort_tr: _ort_decode(
                t, ids, args.ort_batch
            )
        if args.ct2:
            for name, ct in _ct2_engines(args.checkpoint, Path(tmp), args.threads).items():
                engines[name] = lambda ids, c=ct: _ct2_decode(c, translator, ids)
        speed: dict[str, list[float]] = {n: [] for n in engines}
        outputs: dict[str, list[list[int]]] = {}
        names = list(engines)
        for name in names:  # warm-up, not timed: first-call allocations, attnlab's worker processes
            engines[name](ids[:16])
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:  # rotating order
                t0 = time.perf_counter()
                outputs[name] = engines[name](ids)
                speed[name].append(len(ids) / (time.perf_counter() - t0))
    ref_tokens = outputs["attnlab fp32"]
    rows, figures_rows = [], []
    for name in names:
        same = sum(a == b for a, b in zip(outputs[name], ref_tokens))
        hyps = [translator.tgt_vocab.decode(o) for o in outputs[name]]
        score = corpus_bleu(hyps, refs)
        sps = statistics.median(speed[name])
        rows.append([name, f"{sps:.1f}", f"{sps / statistics.median(speed['attnlab fp32']):.2f}x", f"{same}/{len(ids)}", f"{score:.2f}"])
        figures_rows.append({"engine": name, "sentences_per_s": round(sps, 2), "identical_to_attnlab_fp32": same,
                             "bleu": round(score, 2)})  # fmt: skip
    ort = outputs["onnxruntime fp32"]
    differ = [i for i, (a, b) in enumerate(zip(ort, ref_tokens)) if a != b]
    explained = [
        {"sentence": sentences[i], **explain_difference(translator, ids[i], ref_tokens[i], ort[i])} for i in differ[:20]
    ]
    identity = 1 - len(differ) / max(len(ids), 1)
    command = "python benchmarks/onnx_speed.py " + shlex.join(argv)
    print(f"command: {command}")
    print(f"## {args.checkpoint}: {len(ids)} sentences of the {args.split} split, greedy, {args.threads} threads\n")
    print(table(["engine", "sentences/s", "/ attnlab fp32", "same tokens as attnlab fp32", "BLEU"], rows))
    print(f"\ntoken identity onnxruntime fp32 vs attnlab fp32: {identity:.4%} ({len(ids) - len(differ)}/{len(ids)})")
    for e in explained:
        print(f"  differs: {e['sentence']!r} at step {e['step']}, attnlab's top-two margin {e['attnlab_margin']:.2e}")
    result = {
        "command": command,
        "cpu_features": " ".join(sorted(cpu_features())),
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "figures": {"checkpoint": args.checkpoint, "split": args.split, "sentences": len(ids), "threads": args.threads,
                    "rounds": args.rounds, "ort_batch": args.ort_batch, "engines": figures_rows,
                    "token_identity": round(identity, 6), "differences": explained,
                    "onnxruntime": onnxruntime.__version__},  # fmt: skip
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
