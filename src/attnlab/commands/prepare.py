"""`attnlab prepare`: turn a parallel corpus into memory-mapped token-id shards for `train --data DIR`.

    attnlab prepare --data train.de,train.en --valid dev.de,dev.en --test test.de,test.en \\
        --src-lang de --tgt-lang en --out data/de-en
    attnlab prepare --data corpus.tsv.gz --src-lang en --tgt-lang es --out data/en-es   # random split
    attnlab prepare --data train.tsv --src-lang en --tgt-lang fr --preset laptop --out data/en-fr  # one vocabulary

Bad lines (empty, over-long, undecodable, no tab) are skipped and reported per file with line numbers.
"""

from __future__ import annotations

import sys

from attnlab.commands._common import add_command, add_force

# The vocabulary settings without --preset (prepare()'s own defaults).
DEFAULTS = {"tokenizer": "auto", "vocab_size": 8000, "min_freq": 2}


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "prepare", "corpus -> token-id shards (any language pair, any size)", __doc__)
    p.add_argument(
        "--data",
        required=True,
        metavar="SPEC",
        help="a TSV (src<TAB>tgt), the book's zip, or aligned files SRC,TGT; .gz ok",
    )
    p.add_argument("--valid", metavar="SPEC", help="validation corpus (with --test; default: a random split of --data)")
    p.add_argument("--test", metavar="SPEC", help="test corpus (with --valid; default: a random split of --data)")
    p.add_argument("--src-lang", required=True, help="source language code, e.g. de")
    p.add_argument("--tgt-lang", required=True, help="target language code, e.g. en")
    p.add_argument("--out", required=True, metavar="DIR", help="new folder for the shards")
    add_force(p, "an earlier prepared corpus in --out")
    p.add_argument(
        "--preset",
        help="the transformer preset that will train on it: its tokenizer, vocabulary size and min-freq (laptop: one "
        "joint BPE vocabulary of 4,000, since it shares embeddings); the flags below override it (default: none)",
    )
    p.add_argument(
        "--tokenizer",
        choices=["auto", "word", "bpe", "unigram"],
        help="auto (default): the book's words for en-fr, BPE otherwise",
    )
    p.add_argument(
        "--vocab-size", type=int, help=f"subword vocabulary size (shared; default: {DEFAULTS['vocab_size']})"
    )
    p.add_argument(
        "--normalization",
        choices=["NFKC", "NFC"],
        default="NFKC",
        help="Unicode normalization of subword pairs, kept inside the tokenizer (default: %(default)s)",
    )
    p.add_argument(
        "--min-freq",
        type=int,
        help=f"word vocabularies: fewer occurrences become <unk> (default: {DEFAULTS['min_freq']})",
    )
    p.add_argument(
        "--max-len", type=int, help="skip (and report) pairs with more tokens on a side (default: keep every length)"
    )
    p.add_argument("--num-examples", type=int, help="use the first N training pairs (default: all)")
    p.add_argument(
        "--valid-fraction",
        type=float,
        default=0.01,
        help="held out for validation without --valid (default: %(default)s)",
    )
    p.add_argument(
        "--test-fraction", type=float, default=0.01, help="held out for testing without --test (default: %(default)s)"
    )
    p.add_argument("--seed", type=int, default=0, help="the random split")
    p.add_argument("--shard-size", type=int, default=250_000, help="pairs per shard")
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="processes that encode (default: the usable cores); the shards are the same for any N",
    )
    p.set_defaults(func=run)


def vocabulary(args) -> dict:
    """tokenizer, vocab_size and min_freq: each flag given, else the preset's, else DEFAULTS."""
    from attnlab.data.prepared.layout import resolve_tokenizer
    from attnlab.training.presets import get_preset
    from attnlab.training.settings import vocabulary_for

    preset = vocabulary_for(args.preset) if args.preset else {}
    given = {k: getattr(args, k) for k in DEFAULTS if getattr(args, k) is not None}
    chosen = {**DEFAULTS, **preset, **given}
    shared = args.preset and get_preset("transformer", args.preset)["model"].get("share_embeddings", False)
    if shared and resolve_tokenizer(chosen["tokenizer"], args.src_lang, args.tgt_lang) == "word":
        raise ValueError(
            f"--preset {args.preset} shares embeddings, so it needs one joint vocabulary, but --tokenizer "
            f"{chosen['tokenizer']} builds two word vocabularies for {args.src_lang}-{args.tgt_lang}; drop --tokenizer "
            "or give --tokenizer bpe"
        )
    return chosen


def run(args) -> int:
    from concurrent.futures.process import BrokenProcessPool

    from attnlab.data.prepared.encoders import sigterm_unwinds
    from attnlab.data.prepared.pipeline import prepare
    from attnlab.runs.outputs import claim_output, write_output

    vocab = vocabulary(args)  # checked before anything is written
    sources = [f for spec in (args.data, args.valid, args.test) if spec for f in spec.split(",")]
    claim = claim_output(args.out, "prepared", force=args.force, sources=sources)  # before any work
    # SIGTERM unwinds through write_output too, so the temp folder beside --out goes with the workers.
    try:
        with sigterm_unwinds(), write_output(claim) as tmp:
            meta = prepare(
                args.data,
                tmp,
                src_lang=args.src_lang,
                tgt_lang=args.tgt_lang,
                valid=args.valid,
                test=args.test,
                tokenizer=vocab["tokenizer"],
                vocab_size=vocab["vocab_size"],
                normalization=args.normalization,
                min_freq=vocab["min_freq"],
                max_len=args.max_len,
                num_examples=args.num_examples,
                valid_fraction=args.valid_fraction,
                test_fraction=args.test_fraction,
                seed=args.seed,
                shard_size=args.shard_size,
                workers=args.workers,
                log=print,
            )
    except BrokenProcessPool as exc:
        # Not the user's input: a worker killed from outside (the kernel's OOM killer, a signal to it alone).
        print(
            f"attnlab prepare: error: {exc}; nothing was written to {args.out} (out of memory? "
            "try again with --workers 1)",
            file=sys.stderr,
        )
        return 1
    n = meta["splits"]["train"]["pairs"]
    rate = n / max(meta["seconds"], 1e-9)
    preset = f" --preset {args.preset}" if args.preset else ""
    print(f"wrote {args.out} ({rate:.0f} pairs/s); train with: attnlab train{preset} --data {args.out}")
    if meta["settings"]["tokenizer"] == "word" and not args.preset:
        print(
            "two word vocabularies (the book's): cpu-small and d2l train on them; `--preset laptop` shares "
            "embeddings and needs one joint vocabulary: prepare with --preset laptop (into another --out)"
        )
    return 0
