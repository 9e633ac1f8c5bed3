"""`attnlab prepare`: turn a parallel corpus into memory-mapped token-id shards for `train --data DIR`.

    attnlab prepare --data train.de,train.en --valid dev.de,dev.en --test test.de,test.en \\
        --src-lang de --tgt-lang en --out data/de-en
    attnlab prepare --data corpus.tsv.gz --src-lang en --tgt-lang es --out data/en-es   # random split

Bad lines (empty, over-long, undecodable, no tab) are skipped and reported per file with line numbers.
"""

from __future__ import annotations

from attnlab.commands._common import add_command, add_force


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
        "--tokenizer",
        choices=["auto", "word", "bpe", "unigram"],
        default="auto",
        help="auto (default): the book's words for en-fr, BPE otherwise",
    )
    p.add_argument("--vocab-size", type=int, default=8000, help="subword vocabulary size (shared)")
    p.add_argument(
        "--normalization",
        choices=["NFKC", "NFC"],
        default="NFKC",
        help="Unicode normalization of subword pairs, kept inside the tokenizer (default: %(default)s)",
    )
    p.add_argument(
        "--min-freq",
        type=int,
        default=2,
        help="word vocabularies: fewer occurrences become <unk> (default: %(default)s)",
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


def run(args) -> int:
    from attnlab.data.prepared.encoders import sigterm_unwinds
    from attnlab.data.prepared.pipeline import prepare
    from attnlab.runs.outputs import claim_output, write_output

    sources = [f for spec in (args.data, args.valid, args.test) if spec for f in spec.split(",")]
    claim = claim_output(args.out, "prepared", force=args.force, sources=sources)  # before any work
    # SIGTERM unwinds through write_output too, so the temp folder beside --out goes with the workers.
    with sigterm_unwinds(), write_output(claim) as tmp:
        meta = prepare(
            args.data,
            tmp,
            src_lang=args.src_lang,
            tgt_lang=args.tgt_lang,
            valid=args.valid,
            test=args.test,
            tokenizer=args.tokenizer,
            vocab_size=args.vocab_size,
            normalization=args.normalization,
            min_freq=args.min_freq,
            max_len=args.max_len,
            num_examples=args.num_examples,
            valid_fraction=args.valid_fraction,
            test_fraction=args.test_fraction,
            seed=args.seed,
            shard_size=args.shard_size,
            workers=args.workers,
            log=print,
        )
    n = meta["splits"]["train"]["pairs"]
    rate = n / max(meta["seconds"], 1e-9)
    print(f"wrote {args.out} ({rate:.0f} pairs/s); train with: attnlab train --data {args.out}")
    return 0
