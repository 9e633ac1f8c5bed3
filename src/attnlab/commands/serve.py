"""`attnlab serve`: the attention explorer, a web page showing a trained translator's attention live.

    attnlab serve                                   # the model `attnlab demo` saved (runs/demo/transformer)
    attnlab serve --checkpoint runs/d2l --port 8080 --workers 2

Then open http://127.0.0.1:8000/ (API schema at /docs). It binds to localhost unless --host says otherwise.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnlab.checkpoint import DEFAULT_RUN


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("serve", help="web page + JSON API showing a translator's attention",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", metavar="DIR", help=f"run folder (default: {DEFAULT_RUN}, made by `attnlab demo`)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default: 8000)")
    p.add_argument("--workers", type=int, default=2, help="inference threads; more requests queue (default: 2)")
    p.add_argument("--max-pending", type=int, default=128,
                   help="requests allowed to wait or run at once; more get HTTP 503 (default: 128)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, ...")
    p.add_argument("--precision", choices=["auto", "fp32", "bf16", "int8"], default="auto",
                   help="auto (default): bf16 where the hardware has it natively, else fp32; int8: CPU, Transformer")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=run)


def load_checkpoint(checkpoint: str | None, device: str = "cpu", precision: str = "fp32"):
    """load_translator, with every failure turned into one ValueError/FileNotFoundError line."""
    from attnlab.checkpoint import load_translator

    run_dir = Path(checkpoint) if checkpoint else DEFAULT_RUN
    if not run_dir.exists():
        what = "no demo model" if checkpoint is None else "no run folder"
        raise FileNotFoundError(
            f"{what} at {run_dir}; make one with `make demo` (or `attnlab demo`), or train one with "
            f"`attnlab train --model transformer --preset cpu-small --out DIR` and pass --checkpoint DIR")
    try:
        return load_translator(run_dir, device=device, precision=precision)
    except (ValueError, FileNotFoundError) as exc:
        raise ValueError(f"cannot serve {run_dir}: {exc}") from exc
    except Exception as exc:  # corrupt weights (safetensors), unreadable files, ...: a reason, not a traceback
        raise ValueError(f"cannot serve {run_dir}: the checkpoint is broken ({type(exc).__name__}: {exc})") from exc


def run(args) -> int:
    import uvicorn

    from attnlab.serve import create_app

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in 0..65535, got {args.port}")
    if args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")
    if args.max_pending < 1:
        raise ValueError(f"--max-pending must be at least 1, got {args.max_pending}")
    translator = load_checkpoint(args.checkpoint, args.device, args.precision)
    app = create_app(translator, workers=args.workers, max_pending=args.max_pending)
    where = "this machine only" if args.host in ("127.0.0.1", "localhost", "::1") else "reachable from the network"
    print(f"attnlab explorer: http://{args.host}:{args.port}/ ({where}; {args.checkpoint or DEFAULT_RUN}, "
          f"{args.workers} worker(s)); Ctrl-C to stop", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
