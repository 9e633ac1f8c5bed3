"""`attnlab evaluate`: corpus BLEU and chrF (sacreBLEU, detokenized text) on a split of the run's
data, scored by source sentence against all of its references, by source length, the book's
per-sentence BLEU (k=2) on its four sentences, and decoding speed.

    attnlab evaluate --checkpoint runs/demo/transformer --split test --beam 4

The split is rebuilt from the data settings and seed saved in the run's config.json, so it is the
same test set the run held out. An imported run (`attnlab import hf`) has no data of its own: pass
`--data PATH` and the corpus is split as `attnlab train --data PATH` splits it by default, encoded with
the run's own vocabularies. Many source sentences have several translations in a corpus (the
book's English–French pairs do); each distinct source is translated once and scored against every
reference it has in the split (sacreBLEU's multi-reference BLEU).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from attnlab.commands._common import (
    add_checkpoint_args,
    add_command,
    add_option_flags,
    decode_options,
    run_defaults,
    run_model_type,
)


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "evaluate", "BLEU / chrF of a trained model on a data split", __doc__)
    add_checkpoint_args(p)
    p.add_argument(
        "--split", choices=["train", "valid", "test"], default="test", help="the split to score (default: test)"
    )
    # the README's test BLEU is measured with the run's defaults (beam 4)
    add_option_flags(p.add_argument_group("decoding options (default: the run's)"), only=("beam", "length_penalty"))
    p.add_argument(
        "--data",
        metavar="PATH",
        help="the corpus file, if it moved since training; for an imported run (import hf), the corpus to score "
        "(default: the file the run's config.json names)",
    )
    p.add_argument(
        "--limit", type=int, metavar="N", help="evaluate the first N distinct sources of the split (>= 1; default: all)"
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from attnlab.metrics import book_bleu, corpus_bleu, corpus_chrf, group_by_source, reference_text, scores_by_length
    from attnlab.runs.loading import imported_source, load_imported_data, open_translator
    from attnlab.training.launch import load_run_data
    from attnlab.utils.checks import all_empty_warning, check_range

    check_range("--limit", args.limit, 1, integer=True, none_ok=True)
    if _image_accuracy(args):
        return 0
    # the flags given, over the run's decoding defaults: checked before the model loads
    options = decode_options(args, run_defaults(args))
    translator = open_translator(args.checkpoint, args.device, args.weights, args.precision)
    if imported_source(translator.config):
        data = load_imported_data(translator, args.checkpoint, args.data)
    else:
        data = load_run_data(translator, args.checkpoint, args.data)
    examples = getattr(data, args.split)
    sources, references = group_by_source(examples)
    if args.limit is not None:
        sources, references = sources[: args.limit], references[: args.limit]
    if not sources:
        raise ValueError(f"the {args.split} split of this run is empty; try --split valid or --split train")

    start = time.perf_counter()
    out_ids = [hs[0].tokens for hs in translator.search([ex.src_ids for ex in sources], replace(options, scores=False))]
    seconds = time.perf_counter() - start
    hyps = [translator.tgt_vocab.decode(ids) for ids in out_ids]
    empty = all_empty_warning(len(hyps), sum(not h.strip() for h in hyps), "hypothesis")
    if empty:
        print(empty + "; the scores below are 0", file=sys.stderr)
    refs = [[reference_text(t, translator.tgt_vocab) for t in rs] for rs in references]
    tokens = sum(len(ids) + 1 for ids in out_ids)  # + the <eos> each sentence also produced
    pairs = sum(len(rs) for rs in references)

    beam = f"beam {options.beam}" + (f", length penalty {options.length_penalty:g}" if options.beam > 1 else "")
    print(f"{args.checkpoint}: {args.split} split, {len(sources)} distinct sources ({pairs} pairs), {beam}")
    print(
        f"BLEU {corpus_bleu(hyps, refs):.2f}  chrF {corpus_chrf(hyps, refs):.2f}  "
        f"(sacreBLEU, detokenized, every reference of a source)"
    )
    print("by source length (words):")
    for row in scores_by_length([ex.src_text for ex in sources], hyps, refs):
        scores = f"BLEU {row['bleu']:6.2f}  chrF {row['chrf']:6.2f}" if row["sentences"] else "-"
        print(f"  {row['bucket']:>5}: {row['sentences']:5d} sources  {scores}")
    if (translator.src_vocab.lang, translator.tgt_vocab.lang) in (("en", "fr"), (None, None)):  # English-French runs
        print("the book's sentences, BLEU k=2:")
        for src, out, score in book_bleu(translator, options):
            print(f"  {src} => {out}, bleu {score:.3f}")
    picked = getattr(getattr(translator, "precision", None), "picked", "fp32")  # what --precision ran
    print(
        f"decoding: {tokens / seconds:.0f} tokens/s, {len(sources) / seconds:.1f} sentences/s "
        f"({translator.device}, {picked}, batch 128)"
    )
    return 0


def _image_accuracy(args) -> bool:
    """An image classifier's run (a ViT): print the split's accuracy and return True; a translator's: False."""
    from attnlab.runs.loading import load_model
    from attnlab.training.tasks import IMAGES, accuracy, run_images, task_for

    model_type = run_model_type(args.checkpoint)
    if model_type is None or task_for(model_type) is not IMAGES:
        return False
    model, cfg = load_model(args.checkpoint, args.device)
    split = run_images(args.checkpoint, cfg, args.data).split(args.split)
    if args.limit is not None:
        split = type(split)(split.images[: args.limit], split.labels[: args.limit])
    print(f"{args.checkpoint}: {args.split} split, {len(split)} images")
    print(f"accuracy {accuracy(model, split, args.device):.3f}")
    return True
