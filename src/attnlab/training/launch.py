"""Whole training runs: start one in a new folder (`train_run`) or continue one (`resume_run`).

Everything a user asked for is checked before anything is written: the configs, the data settings,
the device and the output folder. A folder that holds something other than an attnlab run is never
written into.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from attnlab.data import check_data_config, load_data, load_vocab
from attnlab.models import CONFIGS, build_model
from attnlab.runs.checkpoints import clean_temp_checkpoints, list_checkpoints, load_trainer_state, verify_checkpoint
from attnlab.runs.config import read_run_config, write_run_config
from attnlab.runs.layout import CHECKPOINTS, CONFIG_FILE, SRC_VOCAB_FILE, TGT_VOCAB_FILE, WEIGHTS_FILE
from attnlab.runs.outputs import Claim, claim_output, start_in_place
from attnlab.runs.weights import load_weights
from attnlab.training.config import TrainConfig
from attnlab.training.sizes import check_fits
from attnlab.training.tensorboard import TensorBoardScalars
from attnlab.training.trainer import Trainer, TrainResult
from attnlab.utils.files import write_json
from attnlab.utils.runtime import distributed_info, seed_everything

Say = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def claim_run_dir(run_dir: str | os.PathLike, *, force: bool = False) -> Claim:
    """The folder a new run may be written to (see `attnlab.runs.outputs`): new, or an earlier run with
    `force`. Raises ValueError otherwise, saying what is there and what to do."""
    return claim_output(run_dir, "run", force=force, hint=f"; continue it with --resume {run_dir}")


def check_model_config(model_type: str, model_config: Mapping[str, Any]) -> None:
    """Validate a model config before the data gives the vocabulary sizes (placeholders stand in)."""

    if model_type not in CONFIGS:
        raise ValueError(f"unknown model type {model_type!r}; expected one of {sorted(CONFIGS)}")
    CONFIGS[model_type].from_dict({"src_vocab_size": 1, "tgt_vocab_size": 1, **model_config})


def train_run(
    model_type: str,
    model_config: Mapping[str, Any],
    train_config: TrainConfig,
    data_config: Mapping[str, Any],
    run_dir: str | os.PathLike | None,
    *,
    progress: bool = True,
    force: bool = False,
    tensorboard: Claim | None = None,
) -> TrainResult:
    """Check everything, load data, build the model (vocabulary sizes from the data), write the run's
    config and vocabularies, and train. The one seed is set before the model is initialised.
    `tensorboard`: a claimed folder (`claim_tensorboard`) that also receives log.jsonl's numbers."""

    data_config = dict(data_config)
    if data_config.get("loader", "translation") == "translation":
        data_config.setdefault("seed", train_config.seed)  # the split follows --seed unless fixed
    check_model_config(model_type, model_config)
    check_fits(model_type, {"src_vocab_size": 1, "tgt_vocab_size": 1, **model_config}, train_config)  # no data yet
    check_data_config(data_config)
    rank, _ = distributed_info()
    if run_dir is not None and rank == 0:
        claim_run_dir(run_dir, force=force)
    seed_everything(train_config.seed)
    data = load_data(data_config)
    # Record the resolved file so `evaluate` rebuilds the same test split without --data.
    data_config["path"] = data.settings.get("data_path", data_config.get("path"))
    model_config = {**model_config, "src_vocab_size": len(data.src_vocab), "tgt_vocab_size": len(data.tgt_vocab)}
    check_fits(model_type, model_config, train_config)  # with the data's vocabularies
    seed_everything(train_config.seed)
    model = build_model(model_type, model_config)
    if run_dir is not None and rank == 0:
        # again: loading took a while, and the folder is ours only if still as we found it
        start_in_place(claim_run_dir(run_dir, force=force))
        assert model.config is not None  # build_model always gives the model its config
        write_run_config(
            run_dir,
            model_type,
            model.config.to_dict(),
            train_config.to_dict(),
            data_config,
            data.src_vocab,
            data.tgt_vocab,
        )
    return Trainer(model, data, train_config, run_dir, progress=progress, scalars=_scalars(tensorboard)).fit()


def _scalars(claim: Claim | None) -> TensorBoardScalars | None:
    """The TensorBoard mirror of log.jsonl, on rank 0 only (the rank that writes the run)."""
    return TensorBoardScalars(claim) if claim is not None and distributed_info()[0] == 0 else None


def load_run_data(translator, run_dir: str | os.PathLike, data_path: str | None = None):
    """The `TranslationData` a run was trained on, rebuilt from its config.json (from `data_path` when
    given: the same corpus elsewhere). Raises ValueError when the rebuilt vocabularies are not the run's
    (another corpus, or other settings), since every id would then mean another word."""

    data_cfg = dict(translator.config.get("data", {}))
    if data_path:
        data_cfg["path"] = data_path
    data = load_data(data_cfg)
    if data.src_vocab != translator.src_vocab or data.tgt_vocab != translator.tgt_vocab:
        raise ValueError(
            f"the data rebuilt from {run_dir}/config.json does not give the run's vocabularies; "
            f"pass the corpus the run was trained on with --data"
        )
    return data


def newest_intact_checkpoint(run_dir: Path, say: Say = _stderr) -> Path:
    """The newest checkpoint whose files match its manifest; each damaged one is reported and skipped."""
    ckpts = list_checkpoints(run_dir)
    if not ckpts:
        raise FileNotFoundError(
            f"{run_dir / CHECKPOINTS} holds no checkpoint to resume from; "
            f"the run stopped before its first one — start it again"
        )
    for path in reversed(ckpts):
        why = verify_checkpoint(path)
        if why is None:
            return path
        say(f"attnlab: skipping damaged checkpoint {path}: {why}")
    raise ValueError(
        f"every checkpoint in {run_dir / CHECKPOINTS} is damaged (see above); "
        f"nothing to resume from — start the run again in a new folder"
    )


def _check_vocabularies(run_dir: Path, data) -> None:
    for side, fname in (("src", SRC_VOCAB_FILE), ("tgt", TGT_VOCAB_FILE)):
        if load_vocab(run_dir / fname) != getattr(data, f"{side}_vocab"):
            raise ValueError(
                f"the data rebuilt from {run_dir / CONFIG_FILE} gives a different {side} "
                f"vocabulary than {run_dir / fname}; was the data file changed?"
            )


def resume_run(
    run_dir: str | os.PathLike,
    overrides: Mapping[str, Any] | None = None,
    *,
    progress: bool = True,
    say: Say = _stderr,
    tensorboard: Claim | None = None,
) -> TrainResult | str:
    """Continue a run from its newest intact checkpoint. Returns the TrainResult, or the reason (a
    string) when the run had already finished under its (possibly overridden) limits."""

    run_dir = Path(run_dir)
    cfg = read_run_config(run_dir)
    train_config = TrainConfig.from_dict({**cfg.get("train", {}), **(overrides or {})})
    rank, _ = distributed_info()
    if rank == 0:
        clean_temp_checkpoints(run_dir)
    if not list_checkpoints(run_dir):
        # Killed (or failed) before its first checkpoint: start again in place, as `train` would have.
        if rank == 0:
            say(f"attnlab: {run_dir} has no checkpoint yet; training it from step 0 with its config.json")
        return _restart(run_dir, cfg, train_config, progress, tensorboard)
    last = newest_intact_checkpoint(run_dir, say if rank == 0 else (lambda msg: None))
    data = load_data(cfg["data"])
    _check_vocabularies(run_dir, data)
    model = build_model(cfg["model_type"], cfg["model"])
    load_weights(model, last / WEIGHTS_FILE, what=str(run_dir / CONFIG_FILE))
    trainer = Trainer(model, data, train_config, run_dir, progress=progress)
    trainer.checkpointing.load_state_dict(load_trainer_state(last))
    done = trainer.finished()
    if done is not None:
        return done
    trainer.writer.scalars = _scalars(tensorboard)  # only now: a finished run writes no event file
    if overrides and trainer.is_main:
        write_json(run_dir / CONFIG_FILE, {**cfg, "train": train_config.to_dict()})
    trainer.checkpointing.log({"event": "resume", "step": trainer.state.step, "from": last.name})
    return trainer.fit()


def _restart(
    run_dir: Path, cfg: Mapping[str, Any], train_config: TrainConfig, progress: bool, tensorboard: Claim | None
) -> TrainResult:
    """Train the run at `run_dir` from step 0 as `train_run` started it: the same seeds, data and model."""
    seed_everything(train_config.seed)
    data = load_data(cfg["data"])
    _check_vocabularies(run_dir, data)
    seed_everything(train_config.seed)
    model = build_model(cfg["model_type"], cfg["model"])
    trainer = Trainer(model, data, train_config, run_dir, progress=progress, scalars=_scalars(tensorboard))
    if trainer.is_main and train_config.to_dict() != cfg.get("train"):
        write_json(run_dir / CONFIG_FILE, {**cfg, "train": train_config.to_dict()})
    trainer.checkpointing.log({"event": "restart", "step": 0})
    return trainer.fit()
