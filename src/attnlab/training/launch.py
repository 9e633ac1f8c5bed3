"""Whole training runs of any task (translators, the Vision Transformer): start one in a new folder
(`train_run`) or continue one (`resume_run`).

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

from attnlab.data import load_data
from attnlab.models import build_model
from attnlab.runs.checkpoints import clean_temp_checkpoints, list_checkpoints, load_trainer_state, verify_checkpoint
from attnlab.runs.config import read_run_config
from attnlab.runs.layout import CHECKPOINTS, CONFIG_FILE, WEIGHTS_FILE
from attnlab.runs.outputs import Claim, claim_output, start_in_place
from attnlab.runs.weights import load_weights
from attnlab.training.averaging import finish_average
from attnlab.training.config import TrainConfig
from attnlab.training.sizes import check_fits
from attnlab.training.state import TrainResult
from attnlab.training.tasks import task_for
from attnlab.training.tensorboard import TensorBoardScalars, claim_tensorboard
from attnlab.training.trainer import Trainer
from attnlab.utils.extras import require
from attnlab.utils.files import write_json
from attnlab.utils.runtime import distributed_info, seed_everything

Say = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def claim_run_dir(run_dir: str | os.PathLike, *, force: bool = False) -> Claim:
    """The folder a new run may be written to (see `attnlab.runs.outputs`): new, or an earlier run with
    `force`. Raises ValueError otherwise, saying what is there and what to do."""
    return claim_output(run_dir, "run", force=force, hint=f"; continue it with --resume {run_dir}")


def claim_tensorboard_dir(
    tensorboard: str | os.PathLike | None, run_dir: str | os.PathLike | None, *, force: bool, resume: bool = False
):
    """The TensorBoard folder of a run, checked before any work: the extra is installed, the folder is not
    the run folder and may be written (`claim_tensorboard`). None when no folder is asked for."""
    if tensorboard is None:
        return None
    require("tensorboard", "attnlab train --tensorboard")
    if run_dir is not None and Path(tensorboard).resolve() == Path(run_dir).resolve():
        raise ValueError(f"--tensorboard {tensorboard} is the run folder; give it a folder of its own (e.g. DIR/tb)")
    return claim_tensorboard(tensorboard, force=force, resume=resume)


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
    """Check everything, load the data, build the model (sizes from the data: vocabularies, classes),
    write the run's config (and vocabularies), and train, all through the task of `model_type`
    (`attnlab.training.tasks`). The one seed is set before the model is initialised.
    `tensorboard`: a claimed folder (`claim_tensorboard`) that also receives log.jsonl's numbers."""

    task = task_for(model_type)
    data_config = task.check(model_type, model_config, data_config, train_config.seed)
    check_fits(model_type, {"src_vocab_size": 1, "tgt_vocab_size": 1, **model_config}, train_config)  # no data yet
    rank, _ = distributed_info()
    if run_dir is not None and rank == 0:
        claim_run_dir(run_dir, force=force)
    seed_everything(train_config.seed)
    data = task.load(data_config)
    data_config = task.recorded(data_config, data)
    model_config = task.sized(model_config, data)
    check_fits(model_type, model_config, train_config)  # with the data's vocabularies
    seed_everything(train_config.seed)
    model = build_model(model_type, model_config)
    if run_dir is not None and rank == 0:
        # again: loading took a while, and the folder is ours only if still as we found it
        start_in_place(claim_run_dir(run_dir, force=force))
        assert model.config is not None  # build_model always gives the model its config
        task.write_run(run_dir, model_type, model.config.to_dict(), train_config.to_dict(), data_config, data)
    trainer = Trainer(model, data, train_config, run_dir, progress=progress, scalars=_scalars(tensorboard), task=task)
    return trainer.fit()


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
    task = task_for(cfg["model_type"])
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
    data = task.load(cfg["data"])
    task.check_rebuilt(run_dir, cfg, data)
    model = build_model(cfg["model_type"], cfg["model"])
    load_weights(model, last / WEIGHTS_FILE, what=str(run_dir / CONFIG_FILE))
    trainer = Trainer(model, data, train_config, run_dir, progress=progress, task=task)
    trainer.checkpointing.load_state_dict(load_trainer_state(last))
    done = trainer.finished()
    if done is not None:
        event = finish_average(run_dir, model, last, train_config.average_last) if trainer.is_main else None
        if event is not None:  # killed between the final checkpoint and its average: finished now
            trainer.checkpointing.log(event)
            return f"{done}; its final averaging had been interrupted and is now done (steps {event['steps']})"
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
    task = task_for(cfg["model_type"])
    seed_everything(train_config.seed)
    data = task.load(cfg["data"])
    task.check_rebuilt(run_dir, cfg, data)
    seed_everything(train_config.seed)
    model = build_model(cfg["model_type"], cfg["model"])
    trainer = Trainer(model, data, train_config, run_dir, progress=progress, scalars=_scalars(tensorboard), task=task)
    if trainer.is_main and train_config.to_dict() != cfg.get("train"):
        write_json(run_dir / CONFIG_FILE, {**cfg, "train": train_config.to_dict()})
    trainer.checkpointing.log({"event": "restart", "step": 0})
    return trainer.fit()
