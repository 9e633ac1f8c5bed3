"""Imported Marian model: attnlab's decoding vs `transformers.generate`, and the import time of attnlab
with and without the [hf] extra.

    python benchmarks/decoding/hf_decode.py

A tiny randomly initialised MarianMTModel (d_model 64, 2+2 layers, SentencePiece vocabulary trained on
generated sentences) is saved, imported with `attnlab import hf`, and both decode the same 32 sentences
(greedy and beam 4, same length limits, <pad> forbidden), rounds interleaved; the outputs are checked equal.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import print_machine, table, write_result

from attnlab.testing import sentences, tiny_marian


def build(d: Path):
    # Larger than the tests' model; plain sentences, SentencePiece's default coverage, no perturbation.
    size = dict(d_model=64, encoder_ffn_dim=256, decoder_ffn_dim=256, max_position_embeddings=256, init_std=0.15)
    tiny_marian(d, lively=False, marks=".", spm_options={"character_coverage": 0.9995}, **size)


def import_time(code: str, rounds: int = 5) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--imports-only", action="store_true", help="only measure the import times")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved decoding rounds")
    ap.add_argument("--import-rounds", type=int, default=5, help="fresh interpreters per import time (0: none)")
    args = ap.parse_args()
    from transformers import MarianMTModel, MarianTokenizer

    from attnlab.export.marian import import_hf
    from attnlab.runs.loading import load_translator

    torch.set_num_threads(2)
    print_machine()
    rows = []
    print("uptime:", os.popen("uptime").read().strip())
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "marian"
        d.mkdir()
        build(d)
        tr = load_translator(import_hf(d, Path(tmp) / "run"))
        hf, tok = MarianMTModel.from_pretrained(d).eval(), MarianTokenizer.from_pretrained(d)
        texts = sentences(32, seed=7, marks=".")
        src_ids = [tr.src_vocab.encode(t) for t in texts]
        enc = tok(texts, padding=True, return_tensors="pt")
        limit = tr.output_limit(enc["input_ids"].shape[1])
        for beam in (1, 4) if not args.imports_only else ():
            ours = lambda: [hs[0].tokens for hs in tr.search(src_ids, tr.options(beam=beam, scores=False))]
            theirs = lambda: hf.generate(  # the settings tests/export/test_hf.py proves identical outputs with
                **enc,
                num_beams=beam,
                do_sample=False,
                max_new_tokens=limit,
                length_penalty=1.0,
                early_stopping=True,
                forced_eos_token_id=None,  # Marian configs force <eos> at the limit; attnlab cuts there instead
            )
            with torch.no_grad():
                ours(), theirs()  # warm-up
                t_ours, t_theirs = [], []
                for _ in range(args.rounds):  # interleaved rounds
                    t0 = time.perf_counter()
                    out = ours()
                    t_ours.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    ref = theirs()
                    t_theirs.append(time.perf_counter() - t0)
            eos, pad = tr.tgt_vocab.eos, tr.tgt_vocab.pad
            ref_rows = [[t for t in (r[: r.index(eos)] if eos in r else r) if t != pad] for r in ref[:, 1:].tolist()]
            a, b = statistics.median(t_ours), statistics.median(t_theirs)
            same = sum(o == r for o, r in zip(out, ref_rows))
            print(
                f"beam {beam}: 32 sentences, attnlab {a * 1e3:.0f} ms, transformers.generate {b * 1e3:.0f} ms, "
                f"attnlab/generate time ratio {a / b:.2f}, identical outputs: {same}/{len(out)}, "
                f"mean output length {sum(map(len, out)) / len(out):.1f}"
            )
            name = "greedy" if beam == 1 else f"beam {beam}"
            rows.append([name, f"{a * 1e3:.0f} ms", f"{b * 1e3:.0f} ms", f"{a / b:.2f}", f"{same}/{len(out)}"])
    print(table(["decoding", "attnlab", "`generate`", "attnlab time / generate's", "identical outputs"], rows))
    if not args.import_rounds:
        write_result(__file__)
        return
    core = import_time("import attnlab, attnlab.cli; attnlab.cli.build_parser()", args.import_rounds)
    extra = import_time(
        "import attnlab, attnlab.cli; attnlab.cli.build_parser(); import attnlab.export.marian; "
        "from transformers import MarianMTModel; import sentencepiece",
        args.import_rounds,
    )
    base = import_time("import torch", args.import_rounds)
    print(
        f"import time (median of 5 subprocesses): attnlab core {core:.2f} s, with the [hf] extra loaded "
        f"{extra:.2f} s ({extra / core:.2f}x); python + torch alone {base:.2f} s"
    )
    print("uptime:", os.popen("uptime").read().strip())
    imports = {"attnlab core s": round(core, 2), "with [hf] s": round(extra, 2), "python + torch s": round(base, 2)}
    write_result(__file__, import_times=imports)


if __name__ == "__main__":
    main()
