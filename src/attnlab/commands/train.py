"""`attnlab train`: train a translator from a preset, overriding any field by flag.

attnlab train --model transformer --preset d2l --out runs/d2l
attnlab train --resume runs/d2l                 # continue from the newest checkpoint
attnlab train --preset cpu-small --nproc 2      # the same through torchrun (DDP, gloo on CPU)
"""

from __future__ import annotations

import json
import os

from attnlab.commands._common import add_command, add_force

# flag -> (section, key): the common overrides get their own flags; `--set` reaches every field.
_FLAGS = {
    "seed": ("train", "seed"),
    "epochs": ("train", "epochs"),
    "max_steps": ("train", "max_steps"),
    "time_budget": ("train", "time_budget"),
    "batch_tokens": ("train", "batch_tokens"),
    "batch_size": ("train", "batch_size"),
    "grad_accum": ("train", "grad_accum"),
    "lr": ("train", "lr"),
    "warmup_steps": ("train", "warmup_steps"),
    "label_smoothing": ("train", "label_smoothing"),
    "eval_every": ("train", "eval_every"),
    "checkpoint_every": ("train", "checkpoint_every"),
    "keep_best": ("train", "keep_best"),
    "keep_last": ("train", "keep_last"),
    "patience": ("train", "patience"),
    "device": ("train", "device"),
    "log_every": ("train", "log_every"),
    "data": ("data", "path"),
    "num_examples": ("data", "num_examples"),
    "max_len": ("data", "max_len"),
    "tokenizer": ("data", "tokenizer"),
    "precision": ("train", "precision"),
    "src_lang": ("data", "src_lang"),
    "tgt_lang": ("data", "tgt_lang"),
    "valid": ("data", "valid"),
    "test": ("data", "test"),
}
# Fields a resumed run may change (its limits); the rest must stay as the run was started.
_RESUMABLE = {
    "epochs",
    "max_steps",
    "time_budget",
    "eval_every",
    "checkpoint_every",
    "keep_best",
    "keep_last",
    "patience",
    "device",
    "log_every",
    "precision",
}


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers, "train", "train a Transformer or Bahdanau translator (checkpoints, resume, DDP)", __doc__
    )
    p.add_argument("--model", choices=["transformer", "bahdanau"], default="transformer")
    p.add_argument(
        "--preset", help="d2l, cpu-small, laptop or tiny (default: cpu-small for the Transformer, d2l for Bahdanau)"
    )
    p.add_argument("--out", help="run folder (default: runs/<model>-<preset>)")
    p.add_argument(
        "--resume", metavar="DIR", help="continue the run in DIR from its newest checkpoint (or from step 0 if none)"
    )
    add_force(p, "an earlier run in --out (its checkpoints are deleted)")
    p.add_argument(
        "--data",
        metavar="PATH",
        help="fra-eng.zip, a TSV, SRC,TGT aligned files (.gz ok) or an `attnlab prepare` folder "
        "(default: $ATTNLAB_DATA, then the cache)",
    )
    p.add_argument("--seed", type=int)
    p.add_argument("--epochs", type=int)
    p.add_argument("--max-steps", type=int)
    p.add_argument("--time-budget", type=float, metavar="SECONDS")
    p.add_argument("--batch-tokens", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--grad-accum", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--warmup-steps", type=int)
    p.add_argument("--label-smoothing", type=float)
    p.add_argument("--eval-every", type=int, metavar="STEPS")
    p.add_argument("--checkpoint-every", type=int, metavar="STEPS")
    p.add_argument("--keep-best", type=int, metavar="N")
    p.add_argument("--keep-last", type=int, metavar="N")
    p.add_argument("--patience", type=int, metavar="EVALS", help="early stopping on validation BLEU")
    p.add_argument("--log-every", type=int, metavar="STEPS")
    p.add_argument("--device", help="auto (default), cpu, cuda, cuda:1 ...")
    p.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16"],
        help="fp32 (default), bf16 (autocast), or auto: bf16 where native and measured to pay",
    )
    p.add_argument("--num-examples", type=int, help="use the first N pairs of the corpus")
    p.add_argument("--max-len", type=int, help="drop pairs longer than this many words")
    p.add_argument("--tokenizer", choices=["auto", "word", "bpe", "unigram"])
    p.add_argument("--src-lang", help="source language code of --data (e.g. de); other pairs than en-fr get subwords")
    p.add_argument("--tgt-lang", help="target language code of --data (e.g. en)")
    p.add_argument("--valid", metavar="SPEC", help="validation corpus (TSV or SRC,TGT files) instead of a random split")
    p.add_argument("--test", metavar="SPEC", help="test corpus (TSV or SRC,TGT files) instead of a random split")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override any preset field, e.g. --set model.num_layers=3 (VALUE is JSON)",
    )
    p.add_argument("--nproc", type=int, default=1, help="processes (DDP through torchrun; gloo on CPU)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _overrides(args) -> dict[str, dict]:
    out: dict[str, dict] = {"model": {}, "train": {}, "data": {}}
    for flag, (section, key) in _FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            out[section][key] = value
    for item in args.set:
        target, sep, raw = item.partition("=")
        section, dot, key = target.partition(".")
        if not sep or not dot or section not in out:
            raise ValueError(f"--set expects SECTION.KEY=VALUE with SECTION in model/train/data, got {item!r}")
        try:
            out[section][key] = json.loads(raw)
        except json.JSONDecodeError:
            out[section][key] = raw  # a bare word such as --set data.tokenizer=bpe
    return out


def _argv(args) -> list[str]:
    """These parsed arguments as a `train` command line, without --nproc (for torchrun's workers)."""
    argv = ["train", "--model", args.model] + (["--preset", args.preset] if args.preset else [])
    for name in ("out", "resume", *_FLAGS):
        value = getattr(args, name)
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    for item in args.set:
        argv += ["--set", item]
    return argv + (["--no-progress"] if args.no_progress else []) + (["--force"] if args.force else [])


def _launch_torchrun(args) -> int:
    """Re-run this command under torchrun with --nproc processes on this machine."""
    from torch.distributed.run import main as torchrun

    torchrun(["--standalone", f"--nproc-per-node={args.nproc}", "-m", "attnlab", *_argv(args)])
    return 0


def _init_distributed() -> None:
    """Join the process group torchrun describes in the environment (gloo on CPU, nccl on GPUs)."""
    import torch
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)


def _check_nproc(nproc: int) -> None:
    import torch

    most = torch.cuda.device_count() if torch.cuda.is_available() else (os.cpu_count() or 1)
    if not 1 <= nproc <= most:
        units = "GPUs" if torch.cuda.is_available() else "CPU cores"
        raise ValueError(f"--nproc must be between 1 and {most} (the {units} of this machine), got {nproc}")


def _configs(args, over: dict[str, dict]):
    """The preset with the flags applied, every part validated (nothing written, no data read)."""
    from attnlab.data import check_data_config
    from attnlab.training.config import TrainConfig
    from attnlab.training.launch import check_model_config
    from attnlab.training.presets import get_preset

    preset = get_preset(args.model, args.preset)
    for section in preset:
        preset[section].update(over[section])
    train_config = TrainConfig.from_dict(preset["train"])
    check_model_config(args.model, preset["model"])
    check_data_config(preset["data"])
    return preset, train_config


def run(args) -> int:
    from attnlab.runs.config import read_run_config
    from attnlab.training.config import TrainConfig
    from attnlab.training.launch import claim_run_dir, resume_run, train_run
    from attnlab.utils.runtime import distributed_info

    _check_nproc(args.nproc)
    over = _overrides(args)
    launching = args.nproc > 1
    if launching and "WORLD_SIZE" in os.environ:
        raise ValueError("--nproc given inside a torchrun launch; drop --nproc (torchrun sets the processes)")
    if args.resume:
        bad = sorted(k for k in over["train"] if k not in _RESUMABLE) + sorted(over["data"]) + sorted(over["model"])
        if bad:
            raise ValueError(
                f"--resume continues a run as it was started; these cannot change: {bad}. Allowed: {sorted(_RESUMABLE)}"
            )
        TrainConfig.from_dict({**read_run_config(args.resume).get("train", {}), **over["train"]})
    else:
        preset, train_config = _configs(args, over)
        from attnlab.training.presets import DEFAULT_PRESET

        out = args.out or os.path.join("runs", f"{args.model}-{args.preset or DEFAULT_PRESET[args.model]}")
        if "RANK" not in os.environ or os.environ["RANK"] == "0":
            claim_run_dir(out, force=args.force)
    if launching:  # everything checked once here, not once per process
        return _launch_torchrun(args)
    _init_distributed()
    rank, world = distributed_info()
    if args.device is None and world > 1:
        import torch

        if torch.cuda.is_available():
            over["train"]["device"] = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"

    if args.resume:
        result = resume_run(args.resume, over["train"], progress=not args.no_progress)
        if isinstance(result, str):
            if rank == 0:
                print(
                    f"{args.resume}: training already finished ({result}); nothing to do. "
                    f"Raise --max-steps or --epochs to train further."
                )
            return 0
    else:
        train_config = TrainConfig.from_dict({**train_config.to_dict(), **over["train"]})
        result = train_run(
            args.model,
            preset["model"],
            train_config,
            preset["data"],
            out,
            progress=not args.no_progress,
            force=args.force,
        )
    return _report(result, args.resume or out) if rank == 0 else result.exit_code


def _report(result, run_dir) -> int:
    """Print how the run ended; the exit status says it too (0, 1 diverged, 128+N signal N)."""
    import sys

    loss = "n/a" if result.train_loss is None else f"{result.train_loss:.4f}"
    bleu = "" if result.best_bleu is None else f", best valid BLEU {result.best_bleu:.2f}"
    print(
        f"final training loss {loss} after {result.step} steps ({result.epoch} epochs, "
        f"stopped by {result.stop_reason}, {result.seconds:.1f} s, "
        f"{result.tokens_per_second:.0f} tokens/s{bleu})"
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
        print(f"saved the model to {result.run_dir / 'model.safetensors'}")
    return result.exit_code
