"""onnxruntime (CPU) greedy decoding of `attnlab export --format onnx` beside attnlab's own, same sentences and
threads: sentences/s, token identity with attnlab fp32, and multi-reference BLEU.

The run is exported twice (float32 and int8, onnxruntime's dynamic quantization) into a temp folder; model
loading and export are not timed. Every engine decodes the split's sentences greedily: attnlab through
`Translator.search` greedy (its default batches and workers: its best way), onnxruntime through
`attnlab.export.onnx.OnnxTranslator` in batches of --ort-batch (default attnlab's), longest first, each batch's
output capped as attnlab caps it. Rounds are interleaved; sentences/s is the median over rounds. With --ct2,
CTranslate2's float32 and int8 (ctranslate2 exported the same way) are timed as well.

Token identity counts sentences whose onnxruntime fp32 tokens equal attnlab fp32's; each sentence that differs is
explained: the step where they part and attnlab's margin between its top two logits there (a near tie that
float rounding in another matmul order flips).

    flock /tmp/attnlab-measure.lock python benchmarks/decoding/onnx_speed.py --checkpoint LAPTOP_600 --threads 2

With --page, the run's static explorer (`attnlab export --format web`) is timed too, in headless Chromium behind
a plain static server: the first translation after the page opens (navigation start to the first drawn maps,
the sentence given in the address), then each --page-sentences sentence of 10 words typed and translated
(click to drawn maps, median).

The result is one JSON object (command, cpu_features, torch, date, figures) in --out
(default benchmarks/results/onnx_speed.json).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import onnxruntime
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import add_decoding_args, table

from attnlab.decoding.batches import length_batches
from attnlab.export.onnx import OnnxTranslator
from attnlab.export.onnx.exporter import write_folder
from attnlab.inference.precision import cpu_features
from attnlab.metrics import corpus_bleu, group_by_source, reference_text
from attnlab.runs.loading import load_translator
from attnlab.training.launch import load_run_data

RESULTS = Path(__file__).resolve().parent / "results" / "onnx_speed.json"


def _ort_decode(tr: OnnxTranslator, ids: list[list[int]], batch: int) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in ids]
    for rows in length_batches([len(r) for r in ids], batch):
        for i, o in zip(rows, tr.greedy([ids[i] for i in rows])):
            out[i] = o.tokens
    return out


def _ct2_engines(run: str, tmp: Path, threads: int) -> dict:
    import ctranslate2

    from attnlab.export.ctranslate2 import export

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


PAGE_JS = """
window.__shown = [];
document.addEventListener("attn:shown", () => requestAnimationFrame(() => setTimeout(() => {
  window.__shown.push(performance.now());
}, 0)));
"""


def time_page(run: str, tmp: Path, sentences: list[str]) -> dict:
    """Seconds to the first drawn translation after open, and ms per typed sentence to its drawn maps."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import quote

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    from attnlab.export.formats import export_run

    page = export_run(run, "web", tmp / "page")
    handler = functools.partial(type("Quiet", (SimpleHTTPRequestHandler,), {"log_message": lambda *a: None}),
                                directory=str(page))  # fmt: skip
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
    ):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": PAGE_JS})
        driver.get(f"http://127.0.0.1:{httpd.server_address[1]}/index.html?text={quote(sentences[0])}")
        WebDriverWait(driver, 60).until(lambda d: d.execute_script("return window.__shown.length"))
        first = driver.execute_script("return window.__shown[0]") / 1000  # from navigation start
        times = []
        for text in sentences[1:]:
            n = driver.execute_script("return window.__shown.length")
            t0 = driver.execute_script(
                "document.getElementById('text').value = arguments[0]; const t = performance.now();"
                "document.getElementById('translate').click(); return t;",
                text,
            )
            WebDriverWait(driver, 60).until(lambda d, n=n: d.execute_script("return window.__shown.length") > n)
            times.append(driver.execute_script("return window.__shown[window.__shown.length - 1]") - t0)
    finally:
        driver.quit()
        httpd.shutdown()
    return {"first_translation_s": round(first, 3), "ten_word_ms_median": round(statistics.median(times), 1),
            "ten_word_ms_max": round(max(times), 1), "ten_word_sentences": len(times)}  # fmt: skip


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
    ap.add_argument("--page", action="store_true", help="also time the static explorer page in headless Chromium")
    ap.add_argument("--page-sentences", type=int, default=10, help="10-word sentences typed into the page")
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
        greedy = translator.options(beam=1)
        engines: dict = {
            "attnlab fp32": lambda ids: [hs[0].tokens for hs in translator.search(ids, replace(greedy, scores=False))]
        }
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
        page = None
        if args.page:
            # 10 words each, or the nearest lengths the split has
            ten = sorted(sentences, key=lambda t: (abs(len(t.split()) - 10), t))[: args.page_sentences + 1]
            page = time_page(args.checkpoint, Path(tmp), ten)
            page["words"] = sorted({len(t.split()) for t in ten[1:]})
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
        rows.append(
            [
                name,
                f"{sps:.1f}",
                f"{sps / statistics.median(speed['attnlab fp32']):.2f}x",
                f"{same}/{len(ids)}",
                f"{score:.2f}",
            ]
        )
        figures_rows.append({"engine": name, "sentences_per_s": round(sps, 2), "identical_to_attnlab_fp32": same,
                             "bleu": round(score, 2)})  # fmt: skip
    ort = outputs["onnxruntime fp32"]
    differ = [i for i, (a, b) in enumerate(zip(ort, ref_tokens)) if a != b]
    explained = [
        {"sentence": sentences[i], **explain_difference(translator, ids[i], ref_tokens[i], ort[i])} for i in differ[:20]
    ]
    identity = 1 - len(differ) / max(len(ids), 1)
    command = "python benchmarks/decoding/onnx_speed.py " + shlex.join(argv)
    print(f"command: {command}")
    print(f"## {args.checkpoint}: {len(ids)} sentences of the {args.split} split, greedy, {args.threads} threads\n")
    print(table(["engine", "sentences/s", "/ attnlab fp32", "same tokens as attnlab fp32", "BLEU"], rows))
    print(f"\ntoken identity onnxruntime fp32 vs attnlab fp32: {identity:.4%} ({len(ids) - len(differ)}/{len(ids)})")
    if page is not None:
        print(f"page: first translation {page['first_translation_s']} s after open; a 10-word sentence translated and "
              f"drawn in {page['ten_word_ms_median']} ms (median of {page['ten_word_sentences']}, max "
              f"{page['ten_word_ms_max']} ms)")  # fmt: skip
    for e in explained:
        print(f"  differs: {e['sentence']!r} at step {e['step']}, attnlab's top-two margin {e['attnlab_margin']:.2e}")
    result = {
        "command": command,
        "cpu_features": " ".join(sorted(cpu_features())),
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "figures": {
            "checkpoint": args.checkpoint,
            "split": args.split,
            "sentences": len(ids),
            "threads": args.threads,
            "rounds": args.rounds,
            "ort_batch": args.ort_batch,
            "engines": figures_rows,
            "token_identity": round(identity, 6),
            "differences": explained,
            "onnxruntime": onnxruntime.__version__,
            "page": page,
        },
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
