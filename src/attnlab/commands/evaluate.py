"""`attnlab evaluate`: corpus BLEU and chrF (sacreBLEU, detokenized text) on a split of the run's
data, the book's per-sentence BLEU (k=2) on its four sentences, and decoding speed.

    attnlab evaluate --checkpoint runs/demo/transformer --split test --beam 4

The split is rebuilt from the data settings and seed saved in the run's config.json, so it is the
same test set the run held out.
"""

from __future__ import annotations

import argparse
import time

from attnlab.commands.translate import add_checkpoint_args, open_translator

BOOK_SENTENCES = [("go .", "va !"), ("i lost .", "j'ai perdu ."), ("he's calm .", "il est calme ."),
                  ("i'm home .", "je suis chez moi .")]


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("evaluate", help="BLEU / chrF of a trained model on a data split",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_checkpoint_args(p)
    p.add_argument("--split", choices=["train", "valid", "test"], default="test")
    p.add_argument("--beam", type=int, default=4, help="beam size (default 4; 1 = greedy)")
    p.add_argument("--data", metavar="PATH", help="the corpus file, if it moved since training")
    p.add_argument("--limit", type=int, metavar="N", help="evaluate the first N sentences of the split")
    p.set_defaults(func=run)


def book_bleu(translator, beam: int = 1) -> list[tuple[str, str, float]]:
    """(source, translation, BLEU k=2) for the book's four sentences, the book's way (space tokens)."""
    from attnlab.data import tokenize
    from attnlab.metrics import bleu

    outs = translator.translate([src for src, _ in BOOK_SENTENCES], beam=beam)
    return [(src, out, bleu(" ".join(tokenize(out)), ref, k=2)) for (src, ref), out in zip(BOOK_SENTENCES, outs)]


def run(args) -> int:
    from attnlab.checkpoint import reference_text
    from attnlab.metrics import corpus_bleu, corpus_chrf
    from attnlab.train import load_data

    translator = open_translator(args)
    data_cfg = dict(translator.config.get("data", {}))
    if args.data:
        data_cfg["path"] = args.data
    data = load_data(data_cfg)
    if data.src_vocab != translator.src_vocab or data.tgt_vocab != translator.tgt_vocab:
        raise ValueError(f"the data rebuilt from {args.checkpoint}/config.json does not give the run's vocabularies; "
                         f"pass the corpus the run was trained on with --data")
    examples = getattr(data, args.split)
    if args.limit is not None:
        examples = examples[: args.limit]
    if not examples:
        raise ValueError(f"the {args.split} split of this run is empty; try --split valid or --split train")

    start = time.perf_counter()
    out_ids = translator.decode_ids([ex.src_ids for ex in examples], beam=args.beam)
    seconds = time.perf_counter() - start
    hyps = [translator.tgt_vocab.decode(ids) for ids in out_ids]
    refs = [reference_text(ex.tgt_text, translator.tgt_vocab) for ex in examples]
    tokens = sum(len(ids) + 1 for ids in out_ids)  # + the <eos> each sentence also produced

    print(f"{args.checkpoint}: {args.split} split, {len(examples)} sentences, beam {args.beam}")
    print(f"BLEU {corpus_bleu(hyps, refs):.2f}  chrF {corpus_chrf(hyps, refs):.2f}  (sacreBLEU, detokenized)")
    print("the book's sentences, BLEU k=2:")
    for src, out, score in book_bleu(translator, beam=args.beam):
        print(f"  {src} => {out}, bleu {score:.3f}")
    picked = getattr(getattr(translator, "precision", None), "picked", "fp32")  # what --precision ran
    print(f"decoding: {tokens / seconds:.0f} tokens/s, {len(examples) / seconds:.1f} sentences/s "
          f"({translator.device}, {picked}, batch 128)")
    return 0
