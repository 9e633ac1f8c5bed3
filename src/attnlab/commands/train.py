"""`attnlab train`: train a translator or a Vision Transformer from a preset, overriding any field by flag.

attnlab train --model transformer --preset d2l --out runs/d2l
attnlab train --resume runs/d2l                 # continue from the newest checkpoint
attnlab train --preset cpu-small --nproc 2      # the same through torchrun (DDP, gloo on CPU)
attnlab train --preset laptop --lr 2e-3 --print-config > my.json   # the resolved settings, nothing trained
attnlab train --config my.json --out runs/mine --tensorboard runs/mine-tb   # train them; curves in TensorBoard
attnlab train --model decoder-only --set model.prefix_lm=true   # one stack over source + target
attnlab train --model vit --out runs/vit        # a Vision Transformer on scikit-learn's 8x8 digits
attnlab train --model vit --data images/ --set model.patch_size=4   # images/<class>/*.png, one size
"""

from __future__ import annotations

import json
import os
import sys

from attnlab.commands._common import add_command, add_force

_PRESET = "(default: the preset's; --print-config shows it)"
# TrainConfig's schedules (attnlab.training.config.SCHEDULES), spelled out: importing it here would load torch.
SCHEDULES = ("inverse_sqrt", "constant", "linear", "cosine")
# flag -> (section, key): the common overrides get their own flags; `--set` reaches every field.
FLAGS = {
    "seed": ("train", "seed"),
    "epochs": ("train", "epochs"),
    "max_steps": ("train", "max_steps"),
    "time_budget": ("train", "time_budget"),
    "batch_tokens": ("train", "batch_tokens"),
    "batch_size": ("train", "batch_size"),
    "grad_accum": ("train", "grad_accum"),
    "lr": ("train", "lr"),
    "warmup_steps": ("train", "warmup_steps"),
    "schedule": ("train", "schedule"),
    "label_smoothing": ("train", "label_smoothing"),
    "eval_every": ("train", "eval_every"),
    "checkpoint_every": ("train", "checkpoint_every"),
    "keep_best": ("train", "keep_best"),
    "keep_last": ("train", "keep_last"),
    "average_last": ("train", "average_last"),
    "patience": ("train", "patience"),
    "device": ("train", "device"),
    "log_every": ("train", "log_every"),
    "threads": ("train", "threads"),
    "data": ("data", "path"),
    "num_examples": ("data", "num_examples"),
    "max_len": ("data", "max_len"),
    "tokenizer": ("data", "tokenizer"),
    "precision": ("train", "precision"),
    "compile": ("train", "compile"),
    "src_lang": ("data", "src_lang"),
    "tgt_lang": ("data", "tgt_lang"),
    "valid": ("data", "valid"),
    "test": ("data", "test"),
}
# Data keys by the flag that sets them, for messages about a data setting.
DATA_FLAGS = {key: f"--{flag.replace('_', '-')}" for flag, (section, key) in FLAGS.items() if section == "data"}
_AVERAGE_LAST = ("at a run's end, its final weights become the mean of them and the K-1 newest checkpoints (0: "
                 "off; the final checkpoint keeps the weights as trained, for --resume)")  # fmt: skip
_THREADS = ("torch intra-op threads while training (default: the preset's pin, else the cores free when training "
            "starts: two threads fighting another process run many times slower than one)")  # fmt: skip
# (flag, type, metavar, what it sets): the numeric overrides of a preset's train and data fields.
_NUMBERS = (
    ("--seed", int, "N", "one seed for every generator: weights, dropout, batch order, the data split"),
    ("--epochs", int, "N", "passes over the training split"),
    ("--max-steps", int, "N", "stop after N optimizer updates"),
    ("--time-budget", float, "SECONDS", "stop after this much training time per invocation"),
    ("--batch-tokens", int, "N", "target tokens per batch (token-count batching)"),
    ("--batch-size", int, "N", "sentences per batch (the book's fixed-size batches)"),
    ("--grad-accum", int, "N", "batches whose gradients add up to one update"),
    ("--lr", float, "RATE", "peak learning rate (after warmup), or the constant rate"),
    ("--warmup-steps", int, "N", "linear warmup length of the learning-rate schedule (all but constant)"),
    ("--label-smoothing", float, "EPS", "probability mass spread over the vocabulary (the paper's 0.1)"),
    ("--eval-every", int, "STEPS", "steps between validation loss + BLEU (0: only at the end)"),
    ("--checkpoint-every", int, "STEPS", "steps between checkpoints (0: only at the end)"),
    ("--keep-best", int, "N", "checkpoints kept for the best validation BLEU"),
    ("--keep-last", int, "N", "newest checkpoints kept (for `attnlab average --last K`)"),
    ("--average-last", int, "K", _AVERAGE_LAST),
    ("--patience", int, "EVALS", "stop after this many evaluations without a better validation BLEU"),
    ("--log-every", int, "STEPS", "steps between 'train' lines in log.jsonl (and TensorBoard points)"),
    ("--threads", int, "N", _THREADS),
    ("--num-examples", int, "N", "use the first N pairs of the corpus"),
    ("--max-len", int, "N", "drop pairs longer than N tokens on a side"),
)


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "train",
        "train a translator (Transformer, Bahdanau) or a Vision Transformer (checkpoints, resume, DDP)",
        __doc__,
    )
    _add_run_args(p.add_argument_group("what to train and where"))
    _add_data_args(p.add_argument_group("data"))
    g = p.add_argument_group("overrides of the preset's fields")
    for flag, kind, metavar, what in _NUMBERS:
        g.add_argument(flag, type=kind, metavar=metavar, help=f"{what} {_PRESET}")
    g.add_argument(
        "--schedule",
        choices=SCHEDULES,
        help="learning rate after warmup: inverse_sqrt (lr * sqrt(warmup / step)), constant, or linear / cosine "
        f"(decay to zero at the end of the run: its --time-budget or --max-steps) {_PRESET}",
    )
    _add_machine_args(p.add_argument_group("machine and output"))
    p.set_defaults(func=run)


def _add_run_args(g) -> None:
    g.add_argument(
        "--model",
        choices=["transformer", "bahdanau", "decoder-only", "vit"],
        help="the architecture (default: transformer, or the model_type of --config)",
    )
    g.add_argument(
        "--preset",
        help="d2l, cpu-small, laptop or tiny (default: cpu-small for the Transformer, d2l for Bahdanau); "
        "vit: digits (default) or tiny",
    )
    g.add_argument(
        "--config",
        metavar="FILE",
        help="start from a saved config.json (a run's, or --print-config's) instead of a preset; flags still "
        "override it (default: use --preset)",
    )
    g.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config (preset or --config, then the flags) as JSON, in the sections of a "
        "run's config.json, and exit without training; the vocabulary sizes come from the data when it trains",
    )
    g.add_argument(
        "--out", help="run folder (default: runs/<model>-<preset>, or runs/<model>-<FILE's name> with --config)"
    )
    g.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the run in DIR from its newest checkpoint, or from step 0 if none (default: start a new run)",
    )
    add_force(g, "an earlier run in --out (its checkpoints are deleted) and earlier event files in --tensorboard")
    g.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override any preset field, e.g. --set model.num_layers=3 (VALUE is JSON; repeatable; default: none)",
    )


def _add_data_args(g) -> None:
    g.add_argument(
        "--data",
        metavar="PATH",
        help="fra-eng.zip, a TSV, SRC,TGT aligned files (.gz ok) or an `attnlab prepare` folder; vit: a folder "
        "of images, one subfolder per class (default: $ATTNLAB_DATA, then the cache; vit: the digits)",
    )
    g.add_argument(
        "--tokenizer",
        choices=["auto", "word", "bpe", "unigram"],
        help="auto (default): the book's word vocabularies for en-fr, one shared BPE for other pairs",
    )
    g.add_argument(
        "--src-lang",
        help="source language code of --data (e.g. de); pairs other than en-fr get subwords (default: the "
        "prepared folder's, or en for the book's corpus)",
    )
    g.add_argument(
        "--tgt-lang",
        help="target language code of --data (e.g. en; default: the prepared folder's, or fr for the book's corpus)",
    )
    g.add_argument(
        "--valid", metavar="SPEC", help="validation corpus (TSV or SRC,TGT files; default: a random split of --data)"
    )
    g.add_argument(
        "--test", metavar="SPEC", help="test corpus (TSV or SRC,TGT files; default: a random split of --data)"
    )


def _add_machine_args(g) -> None:
    g.add_argument(
        "--device",
        help="auto (default: cuda if there is one, else cpu; translate, evaluate and serve default to cpu), "
        "cpu, cuda, cuda:1 ...",
    )
    g.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16"],
        help="fp32 (default), bf16 (autocast), or auto: bf16 where native and measured to pay",
    )
    g.add_argument(
        "--compile",
        action="store_const",
        const=True,
        help="run forward and backward through torch.compile (default: the preset's, off in every preset: it did not "
        'pay for Transformer-base on an H200, BENCHMARKS.md "GPU"; the first steps compile)',
    )
    g.add_argument(
        "--tensorboard",
        metavar="DIR",
        help="also write log.jsonl's numbers (loss, lr, tokens/s, validation BLEU and loss) as TensorBoard "
        "scalars into DIR, a new folder; needs the [tensorboard] extra (default: log.jsonl only)",
    )
    g.add_argument("--nproc", type=int, default=1, help="processes (DDP through torchrun; gloo on CPU; default: 1)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")


def overrides(args) -> dict[str, dict]:
    """The flags and --set items given, as settings overrides ({"model", "train", "data"} sections)."""
    from attnlab.training.settings import no_overrides, parse_set

    out = no_overrides()
    for flag, (section, key) in FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            out[section][key] = value
    return parse_set(args.set, out)


def _argv(args) -> list[str]:
    """These parsed arguments as a `train` command line, without --nproc (for torchrun's workers)."""
    argv = (
        ["train"] + (["--model", args.model] if args.model else []) + (["--preset", args.preset] if args.preset else [])
    )
    for name in ("out", "resume", "config", "tensorboard", *FLAGS):
        value = getattr(args, name)
        if value is True:  # a switch (--compile)
            argv += [f"--{name.replace('_', '-')}"]
        elif value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    for item in args.set:
        argv += ["--set", item]
    return argv + (["--no-progress"] if args.no_progress else []) + (["--force"] if args.force else [])


def _launch_torchrun(args) -> int:
    """Re-run this command under torchrun with --nproc processes on this machine."""
    from torch.distributed.run import main as torchrun

    torchrun(["--standalone", f"--nproc-per-node={args.nproc}", "-m", "attnlab", *_argv(args)])
    return 0


def run(args) -> int:
    from attnlab.training.config import check_resumable
    from attnlab.training.launch import claim_run_dir, claim_tensorboard_dir
    from attnlab.training.settings import resolve, resumed_config
    from attnlab.training.tasks import task_for
    from attnlab.utils.runtime import check_nproc, distributed_info, init_distributed, intra_op_threads

    check_nproc(args.nproc)
    over = overrides(args)
    if args.resume and args.config:
        raise ValueError("--config starts a new run and --resume continues one; give one of them")
    settings, resumed = None, None
    if args.resume:
        check_resumable(over)
        resumed = resumed_config(args.resume, over["train"])  # the limits asked for, checked
        model_type = resumed["model_type"]
    else:
        settings = resolve(args.model, args.preset, args.config, over, names=DATA_FLAGS)
        model_type = settings.model_type
    if args.print_config:
        print(json.dumps(resumed if settings is None else settings.described(), indent=2, ensure_ascii=False))
        return 0
    launching = args.nproc > 1
    if launching and not task_for(model_type).multi_process:
        raise ValueError(f"--nproc {args.nproc}: a {model_type} run trains in one process; drop --nproc")
    if launching and "WORLD_SIZE" in os.environ:
        raise ValueError("--nproc given inside a torchrun launch; drop --nproc (torchrun sets the processes)")
    main_rank = "RANK" not in os.environ or os.environ["RANK"] == "0"
    out = args.resume or args.out or settings.default_run_dir()  # type: ignore[union-attr]
    tensorboard = (
        claim_tensorboard_dir(args.tensorboard, out, force=args.force, resume=bool(args.resume)) if main_rank else None
    )
    if main_rank and settings is not None:
        claim_run_dir(out, force=args.force)
    if launching:  # everything checked once here, not once per process
        return _launch_torchrun(args)
    init_distributed()
    rank, world = distributed_info()
    # The threads this invocation trains on; config.json keeps what was asked (None: the cores free at start).
    threads = _threads(args, settings, resumed) if world == 1 else over["train"].get("threads")
    if args.device is None and world > 1:
        import torch

        if torch.cuda.is_available():
            over["train"]["device"] = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"

    if rank == 0:  # stdout, as the closing line: stderr stays for progress and the one line of an error
        print(_header(args, model_type, settings, over, threads), flush=True)
    with intra_op_threads(threads):
        result = _train(args, model_type, settings, over, out, tensorboard)
    if isinstance(result, str):
        if rank == 0:
            print(
                f"{args.resume}: training already finished ({result}); nothing to do. "
                f"Raise --max-steps or --epochs to train further."
            )
        return 0
    return _report(result, out, task_for(model_type)) if rank == 0 else result.exit_code


def _train(args, model_type: str, settings, over, out, tensorboard):
    """Resume the run of --resume, or train the settled one: the TrainResult, or why a resumed run had finished."""
    from attnlab.training.config import TrainConfig
    from attnlab.training.launch import resume_run, train_run

    if settings is None:
        return resume_run(args.resume, over["train"], progress=not args.no_progress, tensorboard=tensorboard)
    train = TrainConfig.from_dict({**settings.train.to_dict(), **over["train"]})  # with a rank's own GPU
    sections = settings.sections
    return train_run(
        model_type,
        sections["model"],
        train,
        sections["data"],
        out,
        progress=not args.no_progress,
        force=args.force,
        tensorboard=tensorboard,
    )


def _threads(args, settings, resumed) -> int | None:
    """The threads this invocation trains on (`training_threads`: --threads, the pin, the cores free now)."""
    from attnlab.utils.runtime import training_threads

    train = settings.train.to_dict() if settings is not None else resumed["train"]
    return training_threads(args.threads, train.get("threads"), args.device or train.get("device", "auto"))


def _header(args, model_type: str, settings, over, threads: int | None) -> str:
    """`run_header` for this run: its data, preset, the precision that will run, threads and time budget."""
    from attnlab.inference.precision import resolve_precision
    from attnlab.training.config import TrainConfig
    from attnlab.training.progress import run_header
    from attnlab.training.settings import resumed_config
    from attnlab.utils.runtime import resolve_device, usable_cores

    if settings is None:
        cfg = resumed_config(args.resume, over["train"])
        data, train, preset = cfg.get("data", {}), TrainConfig.from_dict(cfg["train"]), f"resumed from {args.resume}"
    else:
        data, preset = settings.sections["data"], settings.name
        train = TrainConfig.from_dict({**settings.train.to_dict(), **over["train"]})
    where = data.get("path") or ("the digits" if data.get("loader") == "digits" else _default_corpus())
    precision = resolve_precision(train.precision, resolve_device(train.device), training=True, model_type=model_type)
    return run_header(where, preset, precision, threads, train.time_budget, usable_cores())


def _default_corpus() -> str:
    """Where a translator without --data finds its corpus, as the loader will (no download tried here)."""
    from attnlab.data.corpus import resolve_data_path

    try:
        return str(resolve_data_path(None, download=False))
    except (FileNotFoundError, ValueError):
        return "the book's corpus (downloaded, else the bundled sample)"


def _report(result, run_dir, task) -> int:
    """Print how the run ended; the exit status says it too (0, 1 diverged, 128+N signal N)."""
    loss = "n/a" if result.train_loss is None else f"{result.train_loss:.4f}"
    best = "" if result.best_bleu is None else f", best {task.metric_label} {result.best_bleu:{task.metric_format}}"
    print(
        f"final training loss {loss} after {result.step} steps ({result.epoch} epochs, "
        f"stopped by {result.stop_reason}, {result.seconds:.1f} s, "
        f"{result.tokens_per_second:.0f} {task.unit}/s{best})"
    )
    if result.stop_reason == "signal":
        print(
            f"attnlab train: interrupted at step {result.step}; saved {result.checkpoint}; continue with "
            f"`attnlab train --resume {run_dir}`",
            file=sys.stderr,
        )
    elif result.stop_reason == "non_finite_loss":
        from attnlab.runs.checkpoints import list_checkpoints

        kept = list_checkpoints(run_dir)
        where = (
            f"the newest checkpoint, {kept[-1]}, holds the last finite weights" if kept else "no checkpoint was saved"
        )
        print(
            f"attnlab train: error: the training loss became non-finite (NaN/inf) after step {result.step}; "
            f"stopped without saving these weights ({where}). Lower --lr and train again",
            file=sys.stderr,
        )
    else:
        if result.average is not None:
            steps = result.average["steps"]
            note = f" ({result.average['note']})" if "note" in result.average else ""
            print(f"final weights: the average of steps {', '.join(map(str, steps))}{note}")
        print(f"saved the model to {result.run_dir / 'model.safetensors'}")
    return result.exit_code
