"""`attnlab export`: write a trained run in another engine's format.

attnlab export --checkpoint runs/demo/transformer --format ctranslate2 --out ct2-model
attnlab export --checkpoint runs/demo/transformer --format ctranslate2 --out ct2-int8 --quantization int8
attnlab export --checkpoint runs/demo/transformer --format onnx --out onnx-model [--quantization int8]
attnlab export --checkpoint runs/demo/transformer --format web --out explorer   # python -m http.server -d explorer
"""

from __future__ import annotations

from attnlab.commands._common import add_checkpoint_arg, add_command, add_force, add_weights_arg, refuse_model_types


def add_parser(subparsers) -> None:
    from attnlab.export.formats import FORMATS

    formats = "; ".join(f"{name}: {desc}" for name, (_, desc) in sorted(FORMATS.items()))
    p = add_command(
        subparsers,
        "export",
        "export a trained model to another engine (CTranslate2, transformers, ONNX, a web page)",
        __doc__,
    )
    add_checkpoint_arg(p)
    add_weights_arg(p)
    p.add_argument("--format", required=True, choices=sorted(FORMATS), help=formats)
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write (a new one)")
    p.add_argument(
        "--quantization",
        default="float32",
        choices=["float32", "int8", "int8_float32"],
        help="weight type: ctranslate2 takes all three, onnx and web float32 or int8 (onnxruntime's dynamic "
        "quantization); default float32",
    )
    p.add_argument(
        "--runtime",
        metavar="DIR",
        help="web: a folder holding onnxruntime-web's dist files (default: $ATTNLAB_ORT_WEB, else `npm ci` "
        "fetches the pinned package into attnlab's cache)",
    )
    add_force(p, "an earlier export of the same format in --out")
    p.set_defaults(func=run)


def run(args) -> int:
    from attnlab.export.formats import export_run

    options = {"weights": args.weights, "force": args.force}
    if args.format in ("ctranslate2", "onnx", "web"):
        options["quantization"] = args.quantization
    elif args.quantization != "float32":
        raise ValueError(f"--quantization applies to --format ctranslate2, onnx and web, got --format {args.format}")
    if args.format == "web":
        options["runtime"] = args.runtime
    elif args.runtime is not None:
        raise ValueError(f"--runtime applies to --format web only, got --format {args.format}")
    refuse_model_types(args.checkpoint, {"decoder-only": "translate, evaluate and attention do"}, "export")
    out = export_run(args.checkpoint, args.format, args.out, **options)
    print(f"exported {args.checkpoint} as {args.format} to {out}")
    if args.format == "web":  # a page opened from disk (file://) cannot load its model: it must be served
        print(f"serve it with: python -m http.server -d {out} 8000   # then open http://localhost:8000/")
    return 0
