"""How `attnlab train` settles a translator's settings: the preset or a saved config (`--config FILE`), then the
flags (`FLAGS`, `--set`); `--print-config` shows the result; `--tensorboard DIR` is checked before any work."""

from __future__ import annotations

import json
import os
from pathlib import Path

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
RESUMABLE = {
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


def overrides(args) -> dict[str, dict]:
    out: dict[str, dict] = {"model": {}, "train": {}, "data": {}}
    for flag, (section, key) in FLAGS.items():
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


def resolve_configs(args, over: dict[str, dict]):
    """The preset (or --config FILE) with the flags applied, every part validated (nothing written, no data
    read). Sets args.model to the model type it trains."""
    from attnlab.data import check_data_config, check_prepared_overrides
    from attnlab.training.config import TrainConfig
    from attnlab.training.launch import check_model_config
    from attnlab.training.presets import get_preset, load_config_file

    if args.config:
        if args.preset:
            raise ValueError("--config replaces --preset; give one of them")
        model_type, preset = load_config_file(args.config)
        if args.model not in (None, model_type):
            raise ValueError(
                f"--model {args.model} disagrees with {args.config} (model_type {model_type!r}); drop --model"
            )
        args.model = model_type
    else:
        args.model = args.model or "transformer"
        preset = get_preset(args.model, args.preset)
    for section in preset:
        preset[section].update(over[section])
    train_config = TrainConfig.from_dict(preset["train"])
    if args.model == "vit":
        from attnlab.training.images import check_image_configs

        if "path" in preset["data"]:  # --data DIR: a folder of images, one subfolder per class
            preset["data"] = {"loader": "folder", "path": preset["data"]["path"]}
        check_image_configs(args.model, preset["model"], preset["data"])
        return preset, train_config
    check_model_config(args.model, preset["model"])
    check_data_config(preset["data"])
    # A prepared folder fixed its data settings: a data flag must agree with them (preset defaults are not asked).
    flags = {key: f"--{flag.replace('_', '-')}" for flag, (section, key) in FLAGS.items() if section == "data"}
    check_prepared_overrides(preset["data"].get("path"), over["data"], flags)
    return preset, train_config


def default_out(args) -> str:
    from attnlab.training.presets import DEFAULT_PRESET

    name = Path(args.config).stem if args.config else (args.preset or DEFAULT_PRESET[args.model])
    return os.path.join("runs", f"{args.model}-{name}")


def print_config(args, over: dict[str, dict]) -> int:
    """--print-config: the resolved config as JSON on stdout (a new run's, or the resumed run's with its limits)."""
    from attnlab.runs.config import read_run_config
    from attnlab.training.config import TrainConfig
    from attnlab.training.presets import resolved_config

    if args.resume:
        cfg = read_run_config(args.resume)
        cfg["train"] = TrainConfig.from_dict({**cfg.get("train", {}), **over["train"]}).to_dict()
    else:
        preset, train_config = resolve_configs(args, over)
        if args.model == "vit":  # the image sizes and classes come from the data: the preset's fields as given
            cfg = {"model_type": "vit", **preset, "train": train_config.to_dict()}
        else:
            cfg = resolved_config(args.model, preset, train_config.to_dict())
    print(json.dumps(cfg, indent=2, ensure_ascii=False))
    return 0


def claim_tensorboard_dir(args, out: str | None):
    """--tensorboard DIR, checked before any work: the extra is installed and DIR may be written."""
    if args.tensorboard is None:
        return None
    from attnlab.training.tensorboard import claim_tensorboard
    from attnlab.utils.extras import require

    require("tensorboard", "attnlab train --tensorboard")
    if out is not None and Path(args.tensorboard).resolve() == Path(out).resolve():
        raise ValueError(
            f"--tensorboard {args.tensorboard} is the run folder; give it a folder of its own (e.g. DIR/tb)"
        )
    return claim_tensorboard(args.tensorboard, force=args.force, resume=bool(args.resume))
