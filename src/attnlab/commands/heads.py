"""`attnlab heads`: what each attention head does and how much it matters (Voita et al. 2019, Michel et
al. 2019), on a split of the run's data.

    attnlab heads --checkpoint runs/demo/transformer --out runs/demo/heads --limit 200

Writes heads.json (every number), importance.png/svg (layers x heads per attention kind) and
pruning.png/svg (validation BLEU as heads are removed, least important first). With --prune it also
writes a pruned copy of the model (a complete run folder) to OUT/pruned.

It also chooses the cross-attention head word alignments read: the one with the highest word confidence
(the mean, over real target tokens, of the head's largest weight on a real source token, <eos> and
padding left out; the table's `wconf` column), saved as RUN/alignment.json, the default of `translate
--align`, the explorer's alignment and the CTranslate2 export (--no-save-alignment: heads.json only).
"""

from __future__ import annotations

import sys

from attnlab.commands._common import add_checkpoint_args, add_command, add_force, refuse_model_types


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "heads", "head analysis: behaviour, importance, pruning curves", __doc__)
    add_checkpoint_args(p)
    p.add_argument("--out", metavar="DIR", required=True, help="folder for heads.json and the figures")
    add_force(p, "an earlier head analysis in --out")
    p.add_argument(
        "--split",
        choices=["train", "valid", "test"],
        help="the split to analyse (default valid; a run that holds none out, like the d2l preset, uses its largest)",
    )
    p.add_argument(
        "--limit",
        type=int,
        metavar="N",
        default=200,
        help="analyse the first N sentences of the split (default 200; decoding is repeated per head)",
    )
    p.add_argument(
        "--beam",
        type=int,
        default=1,
        help="beam size for the BLEU measurements (default 1: greedy, as each head is measured many times)",
    )
    p.add_argument("--no-bleu", action="store_true", help="measure validation loss only (much faster)")
    p.add_argument("--no-curve", action="store_true", help="skip the pruning curves")
    p.add_argument(
        "--prune",
        metavar="MODULE:H[,H...]",
        action="append",
        default=[],
        help="also write OUT/pruned: the model without these heads (repeatable), e.g. "
        "--prune decoder.blocks.0.cross_attention:1,3 (default: prune nothing)",
    )
    p.add_argument(
        "--no-save-alignment",
        action="store_true",
        help="do not write RUN/alignment.json (default: save the chosen alignment head into the run folder)",
    )
    p.add_argument(
        "--data",
        metavar="PATH",
        help="the corpus file, if it moved since training; for an imported run (attnlab import hf), the corpus to use "
        "(default: the file the run's config.json names)",
    )
    p.set_defaults(func=run)


def parse_prune(specs: list[str]) -> dict[str, list[int]]:
    """["name:1,3", ...] -> {"name": [1, 3]}; malformed specs are one clear error."""
    out: dict[str, list[int]] = {}
    for spec in specs:
        name, sep, idx = spec.rpartition(":")
        try:
            heads = [int(h) for h in idx.split(",") if h.strip()]
        except ValueError:
            heads = []
        if not sep or not name or not heads:
            raise ValueError(f"--prune expects MODULE:H[,H...] such as encoder.blocks.0.attention:1,3, got {spec!r}")
        out.setdefault(name, []).extend(heads)
    return out


def run(args) -> int:
    from attnlab.analysis import analyze_heads, save_pruned_run
    from attnlab.analysis.figures import plot_importance, plot_pruning_curves
    from attnlab.analysis.heads import attention_kinds, check_precision, choose_split, head_masks_check
    from attnlab.runs.alignment import alignment_target, save_alignment
    from attnlab.runs.loading import imported_source, load_imported_data, open_translator
    from attnlab.runs.outputs import claim_output, write_output
    from attnlab.training.launch import load_run_data
    from attnlab.utils.files import write_json
    from attnlab.viz.files import save_figure

    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be a positive number of sentences, got {args.limit}")
    if args.beam < 1 or args.beam > 64:
        raise ValueError(f"--beam must lie in [1, 64], got {args.beam}")
    check_precision(args.precision)
    prune = parse_prune(args.prune)
    refuse_model_types(args.checkpoint, {"decoder-only": "translate, evaluate and attention do"}, "heads")
    claim = claim_output(args.out, "heads", force=args.force, sources=[args.checkpoint])
    target, why = None, None
    if args.weights and not args.no_save_alignment:
        why = "--weights are not the run's own; the alignment choice is not saved (see heads.json)"
    elif not args.no_save_alignment:  # checked before any work: a user's alignment.json is never replaced
        target, why = alignment_target(args.checkpoint)
    translator = open_translator(args.checkpoint, args.device, args.weights, args.precision)
    attention_kinds(translator.model)  # a Bahdanau model fails here, before any work
    head_masks_check(translator.model, prune)  # bad module names / head indices, before any work
    if imported_source(translator.config):
        data = load_imported_data(translator, args.checkpoint, args.data)
    else:
        data = load_run_data(translator, args.checkpoint, args.data)
    split, examples, note = choose_split(data, args.split)
    if note:
        print(f"attnlab heads: {note}", file=sys.stderr)
    examples = examples[: args.limit]
    report = analyze_heads(translator, examples, bleu=not args.no_bleu, beam=args.beam, curve=not args.no_curve)

    names = ["heads.json", "importance"] + (["pruning"] if "pruning_curves" in report else [])
    with write_output(claim) as tmp:  # every file appears at once, after the last check passed
        write_json(tmp / "heads.json", {"checkpoint": str(args.checkpoint), "split": split, **report})
        save_figure(plot_importance(report), tmp / "importance")
        if "pruning_curves" in report:
            save_figure(plot_pruning_curves(report), tmp / "pruning")
        if prune:
            save_pruned_run(args.checkpoint, prune, tmp / "pruned")
            names.append("pruned")
    print_table(report)
    print(f"wrote {claim.path}: " + ", ".join(names))
    choice = report.get("alignment")
    if choice is not None:
        layer, head = choice["layer"], choice["heads"][0]
        said = f"alignment head: decoder layer {layer}, head {head} (word confidence {choice['score']:.3f})"
        if target is not None:
            save_alignment(target, choice, split, len(examples))
            said += f"; wrote {target}"
        print(said)
    if why is not None:
        print(f"attnlab heads: {why}", file=sys.stderr)
    return 0


def print_table(report: dict) -> None:
    base = report["baseline"]
    metric = "bleu" if base["bleu"] is not None else "loss"
    print(
        f"{report['sentences']} sentences; full model: loss {base['loss']:.3f}"
        + (f", BLEU {base['bleu']:.2f}" if base["bleu"] is not None else "")
    )
    print(
        f"{'module':<34} {'head':>4} {'conf':>5} {'entr':>5} {'same':>5} {'prev':>5} {'next':>5} {'eos':>5} "
        f"{'bos':>5} {'first':>5} {'punct':>5} {'wconf':>5} {'|dL/dg|':>8} {'masked ' + metric:>12}"
    )
    words = report.get("word_confidence", {})
    for names in report["kinds"].values():
        for name in names:
            s = report["statistics"][name]
            for h, g in enumerate(report["gradient_importance"][name]):
                masked = report["masked"][name][h][metric]
                wconf = f"{words[name][h]:5.2f}" if name in words else f"{'':5}"
                print(
                    f"{name:<34} {h:>4} {s['confidence'][h]:5.2f} {s['entropy'][h]:5.2f} {s['same'][h]:5.2f} "
                    f"{s['previous'][h]:5.2f} {s['next'][h]:5.2f} {s['eos'][h]:5.2f} {s['bos'][h]:5.2f} "
                    f"{s['first'][h]:5.2f} {s['punctuation'][h]:5.2f} {wconf} "
                    f"{g:8.4f} {masked:12.3f}"
                )
    for kind, curve in report.get("pruning_curves", {}).items():
        print(f"pruning {kind}: " + " ".join(f"{p[metric]:.2f}" for p in curve))
