"""`attnlab serve`: the attention explorer, a web page showing a trained translator's attention live.

    attnlab serve                                   # the model `attnlab demo` saved (runs/demo/transformer)
    attnlab serve --checkpoint runs/d2l --port 8080 --workers 2
    attnlab serve --checkpoint runs/do              # a decoder-only run: its self-attention cut in three views

Then open http://127.0.0.1:8000/ (API reference at /docs, schema at /openapi.json). It binds to
localhost unless --host says otherwise.
Programs translating many sentences use POST /api/translations (micro-batched, no attention maps).
Every bound has a default, shown with its flag under "limits" below; docs/explorer.md says what each
answers, and BENCHMARKS.md what they hold against.
"""

from __future__ import annotations

from pathlib import Path

from attnlab.commands._common import add_checkpoint_arg, add_command, add_device_arg, add_precision_arg
from attnlab.runs.layout import DEFAULT_RUN
from attnlab.serve.guard import Limits

_AT_ONCE = "{} allowed to wait or {} at once; more get HTTP 503 (default: {})"

# flag -> (Limits field, type, what it bounds): one place names each bound, its flag and its help.
LIMIT_FLAGS = {
    "--max-body-bytes": ("max_body_bytes", int, "largest request body; larger gets 413 before it is read"),
    "--body-timeout": ("body_timeout_s", float, "seconds to receive a request body, else 408"),
    "--header-timeout": ("header_timeout_s", float, "seconds to receive a request's head, else the connection closes"),
    "--keep-alive": ("keep_alive_s", int, "seconds an idle connection stays open"),
    "--max-header-bytes": ("max_header_bytes", int, "largest request head"),
    "--max-connections": ("max_connections", int, "open connections; more get 503"),
    "--max-response-bytes": (
        "max_response_bytes",
        int,
        "the explorer refuses (413) sentences whose attention maps could exceed this",
    ),
    "--max-texts": ("max_texts", int, "most texts in one POST /api/translations"),
    "--max-beam": ("max_beam", int, "largest beam and n_best a request may ask (at most 16)"),
    "--max-request-mb": (
        "max_request_mb",
        int,
        "estimated peak memory (MB) of one request's decoding; more gets 413 naming the option to lower",
    ),
    "--max-request-work": (
        "max_request_work",
        float,
        "estimated cost of one request in G multiply-adds (attnlab.decoding.cost); more gets 413",
    ),
}


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "serve", "web page + JSON API showing a translator's attention", __doc__)
    add_checkpoint_arg(p, default=None)  # None: "no demo model" where DEFAULT_RUN is missing
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default: 8000)")
    p.add_argument("--workers", type=int, default=2, help="inference threads; more requests queue (default: 2)")
    p.add_argument("--max-pending", type=int, default=128, help=_AT_ONCE.format("requests", "run", 128))
    p.add_argument(
        "--threads",
        type=int,
        help="torch intra-op threads per decode (default: the cores less one, shared among --workers + "
        "--batch-workers, at least 1)",
    )
    b = p.add_argument_group("batching (POST /api/translations)")
    b.add_argument("--max-batch", type=int, default=32, help="most sentences decoded in one batch (default: 32)")
    b.add_argument(
        "--max-wait-ms",
        type=float,
        default=5.0,
        help="longest a sentence waits for others to join its batch (default: 5)",
    )
    b.add_argument("--batch-workers", type=int, default=1, help="batches decoded at once (default: 1)")
    b.add_argument("--max-batch-pending", type=int, default=1024, help=_AT_ONCE.format("sentences", "decode", 1024))
    g = p.add_argument_group("limits (slow, large or hostile clients)")
    d = Limits()
    for flag, (field, kind, what) in LIMIT_FLAGS.items():
        default = getattr(d, field)
        shown = f"{default:g}" if kind is float and default is not None else default  # 10, not 10.0
        if default is None:  # the work budget: sized to the model served (attnlab.serve.budget)
            shown = "4 x the cost of the largest plain request"
        metavar = flag[2:].upper().replace("-", "_")
        g.add_argument(flag, dest=field, metavar=metavar, type=kind, default=default, help=f"{what} (default: {shown})")
    p.add_argument(
        "--heads",
        metavar="FILE",
        help="heads.json from `attnlab heads` for the page's head-importance strip (default: "
        "CHECKPOINT/heads/heads.json if present, else each translation's own head confidence)",
    )
    add_device_arg(p)
    add_precision_arg(p)
    p.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn's log level (default: %(default)s)",
    )
    p.set_defaults(func=run)


def load_checkpoint(checkpoint: str | None, device: str = "cpu", precision: str = "fp32"):
    """load_translator, with every failure turned into one ValueError/FileNotFoundError line."""
    from attnlab.runs.loading import load_translator

    run_dir = Path(checkpoint) if checkpoint else DEFAULT_RUN
    if not run_dir.exists():
        what = "no demo model" if checkpoint is None else "no run folder"
        raise FileNotFoundError(
            f"{what} at {run_dir}; make one with `make demo` (or `attnlab demo`), or train one with "
            f"`attnlab train --model transformer --preset cpu-small --out DIR` and pass --checkpoint DIR"
        )
    try:
        return load_translator(run_dir, device=device, precision=precision)
    except (ValueError, FileNotFoundError) as exc:
        raise ValueError(f"cannot serve {run_dir}: {exc}") from exc
    except Exception as exc:  # corrupt weights (safetensors), unreadable files, ...: a reason, not a traceback
        raise ValueError(f"cannot serve {run_dir}: the checkpoint is broken ({type(exc).__name__}: {exc})") from exc


def load_importance(heads: str | None, run_dir: Path, model) -> dict | None:
    """The strip's {"source", "values"} from --heads, else RUN/heads/heads.json, else None."""
    from attnlab.analysis.heads import load_head_importance

    path = Path(heads) if heads else run_dir / "heads" / "heads.json"
    if not path.is_file():
        if heads:
            raise FileNotFoundError(
                f"--heads {path}: no such file; write one with `attnlab heads --checkpoint "
                f"{run_dir} --out DIR` (DIR/heads.json)"
            )
        return None
    return {
        "source": f"{path} (Michel et al. 2019: |d loss / d head gate| on validation data)",
        "values": load_head_importance(path, model),
    }


def run(args) -> int:
    import torch

    from attnlab.utils.extras import require

    require("serve", "attnlab serve")  # before any work: the slim core has no web server
    import uvicorn

    from attnlab.serve.app import create_app
    from attnlab.serve.listen import bind_listener, decode_threads, server_config
    from attnlab.utils.checks import check_range

    check_range("--port", args.port, 0, 65535, integer=True)
    for flag in ("--workers", "--max-pending", "--max-batch", "--batch-workers", "--max-batch-pending"):
        check_range(flag, getattr(args, flag[2:].replace("-", "_")), 1, integer=True)
    check_range("--max-wait-ms", args.max_wait_ms, 0, 10_000)
    if args.threads is not None:
        check_range("--threads", args.threads, 1, integer=True)
    try:
        limits = Limits(**{field: getattr(args, field) for field, _, _ in LIMIT_FLAGS.values()})
    except ValueError as exc:  # name the flag, not the field
        field, _, rest = str(exc).partition(" ")
        raise ValueError(" ".join([next(f for f, v in LIMIT_FLAGS.items() if v[0] == field), rest])) from None
    translator = load_checkpoint(args.checkpoint, args.device, args.precision)
    app = create_app(
        translator,
        workers=args.workers,
        max_pending=args.max_pending,
        limits=limits,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        batch_workers=args.batch_workers,
        max_batch_pending=args.max_batch_pending,
        importance=load_importance(args.heads, Path(args.checkpoint or DEFAULT_RUN), translator.model),
    )
    threads = args.threads or decode_threads(args.workers, args.batch_workers)
    torch.set_num_threads(threads)
    sock = bind_listener(args.host, args.port)  # a busy port or a bad host: one line, before any URL
    port = sock.getsockname()[1]
    where = "this machine only" if args.host in ("127.0.0.1", "localhost", "::1") else "reachable from the network"
    print(
        f"attnlab explorer: http://{args.host}:{port}/ ({where}; {args.checkpoint or DEFAULT_RUN}, "
        f"{args.workers} worker(s), {threads} torch thread(s) each); Ctrl-C to stop",
        flush=True,
    )
    with sock:
        uvicorn.Server(server_config(app, limits, args.log_level)).run(sockets=[sock])
    return 0
