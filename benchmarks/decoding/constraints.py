"""Lexically constrained beam search, n-best lists and sampling against plain beam search on the VALIDATION
split: how many of the constraint phrases appear, BLEU/chrF of the first hypothesis (multi-reference, as
`attnlab evaluate`), BLEU of the rest of each sentence (outputs and references without the phrases) and
decoding time, measured in the same run (median of interleaved rounds after a
warm-up; the time is a ratio against plain beam). n-best: the same beam returning --n-best hypotheses;
sampling: --n-best samples per source (temperature 1, seeded), no beam.

Each source gets one phrase from its first reference (one or two consecutive whole words the target
vocabulary knows), and every second source a second one (one more word): phrases a user who knows the
right terminology would give.

    flock /tmp/attnlab-measure.lock python benchmarks/decoding/constraints.py --checkpoint RUN --limit 200 --beam 5
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import table, write_result

from attnlab.decoding import DecodeOptions
from attnlab.inference.precision import cpu_features
from attnlab.metrics import corpus_bleu, corpus_chrf, group_by_source, reference_text
from attnlab.runs.loading import load_translator
from attnlab.training.launch import load_run_data

WATCHED = {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16"}


def phrases_from(reference: str, vocab, rng: random.Random, two: bool) -> list[list[int]]:
    """One phrase of 1-2 consecutive whole words of the reference (and, if `two`, one more word), as the target
    ids the options' text encodes to: words the vocabulary knows, each its word-start piece and the pieces that
    continue it (a piece alone, "ille" of "tranquille", is no phrase a user would give)."""
    ids = vocab.encode(reference)
    pieces = vocab.to_tokens(ids)
    starts = [i for i, p in enumerate(pieces) if p.startswith("\u2581")] or list(range(len(ids)))
    spans = [ids[a:b] for a, b in zip(starts, starts[1:] + [len(ids)])]  # one per word

    def known(*words: list[int]) -> bool:
        phrase = [t for w in words for t in w]
        return vocab.unk not in phrase and vocab.encode(vocab.decode(phrase)) == phrase

    words = [i for i, w in enumerate(spans) if any(c.isalpha() for c in vocab.decode(w)) and known(w)]
    if not words:
        return []
    start = rng.choice(words)
    n = 2 if start + 1 in words and known(*spans[start : start + 2]) and rng.random() < 0.5 else 1
    out = [[t for w in spans[start : start + n] for t in w]]
    rest = [i for i in words if i < start - 1 or i > start + n]
    if two and rest:
        out.append(spans[rng.choice(rest)])
    return out


def contains(tokens: list[int], phrase: list[int]) -> bool:
    return any(tokens[i : i + len(phrase)] == phrase for i in range(len(tokens) - len(phrase) + 1))


def without(tokens: list[int], phrases: list[list[int]]) -> list[int]:
    """`tokens` with the first occurrence of each phrase cut out: what the search chose beyond the phrases."""
    out = list(tokens)
    for p in phrases:
        for i in range(len(out) - len(p) + 1):
            if out[i : i + len(p)] == p:
                del out[i : i + len(p)]
                break
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True, metavar="RUN")
    ap.add_argument("--limit", type=int, default=200, help="the first N distinct validation sources")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="which reference words become phrases")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "auto"])
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds of each (median)")
    ap.add_argument("--n-best", type=int, default=5, help="hypotheses of the n-best row, samples of the sampling row")
    args = ap.parse_args(argv)

    features = " ".join(sorted(cpu_features() & WATCHED))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU features: {features}")
    print(f"load average at start: {os.getloadavg()}")
    translator = load_translator(args.checkpoint, precision=args.precision)
    data = load_run_data(translator, args.checkpoint)
    sources, references = group_by_source(data.valid)
    sources, references = sources[: args.limit], references[: args.limit]
    src_ids = [ex.src_ids for ex in sources]
    vocab = translator.tgt_vocab
    refs = [[reference_text(t, vocab) for t in rs] for rs in references]
    rng = random.Random(args.seed)
    cons = [phrases_from(rs[0], vocab, rng, two=i % 2 == 1) for i, rs in enumerate(refs)]
    n_phrases = sum(map(len, cons))
    # The rest of each sentence: references and outputs without the phrases (a constrained search gets
    # the phrases for free; this BLEU says whether the words around them got better or worse).
    rest_refs = [[vocab.decode(without(vocab.encode(r), ps)) for r in rs] for rs, ps in zip(refs, cons)]
    print(f"{args.checkpoint}: {len(sources)} validation sources, {n_phrases} phrases, beam {args.beam}")

    opts = DecodeOptions(beam=args.beam)
    phrase_texts = tuple(tuple(vocab.decode(p) for p in ps) for ps in cons)  # the options take phrases as text
    n = args.n_best
    runs = {
        "beam": (opts, None),
        "constrained beam": (DecodeOptions(beam=args.beam, constraints=phrase_texts), phrase_texts),
        f"n-best (n_best {n})": (DecodeOptions(beam=args.beam, n_best=min(n, args.beam)), None),
        f"sampling ({n} samples)": (DecodeOptions(sample=True, n_best=n, seed=args.seed), None),
    }
    for o, given in runs.values():  # warm-up
        translator.search(src_ids[:8], dataclasses.replace(o, constraints=given[:8]) if given else o)
    times: dict[str, list[float]] = {name: [] for name in runs}
    outputs = {}
    for _ in range(args.rounds):  # interleaved, so all see the same load
        for name, (o, _) in runs.items():
            start = time.perf_counter()
            outputs[name] = translator.search(src_ids, o)
            times[name].append(time.perf_counter() - start)
    rows = []
    for name in runs:
        out = [hs[0].tokens for hs in outputs[name]]
        hits = sum(contains(o, p) for o, ps in zip(out, cons) for p in ps)
        texts = [vocab.decode(o) for o in out]
        rest = [vocab.decode(without(o, ps)) for o, ps in zip(out, cons)]
        seconds = statistics.median(times[name])
        rows.append([name, f"{100 * hits / n_phrases:.1f}%", f"{corpus_bleu(texts, refs):.2f}",
                     f"{corpus_bleu(rest, rest_refs):.2f}", f"{corpus_chrf(texts, refs):.2f}",
                     f"{sum(map(len, out)) / len(out):.1f}", f"{seconds:.2f}",
                     f"{len(sources) / seconds:.1f}"])  # fmt: skip
        print(" | ".join(rows[-1]), flush=True)
    base = float(rows[0][6])
    for r in rows:
        r.append(f"{float(r[6]) / base:.2f}x")
    heads = ["search", "phrases present", "BLEU", "BLEU without the phrases", "chrF", "tokens/output", "decode s"]
    heads += ["sentences/s", "time vs beam"]
    print(table(heads, rows))
    print(f"load average at end: {os.getloadavg()}")
    write_result(__file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
