"""Checkpoint averaging at the end of a run (`TrainConfig.average_last = K`): the run's final weights, the ones
`load_translator`, `translate` and `evaluate` read, become the element-wise mean of the final weights and the
newest K-1 intact checkpoints before them, as `attnlab average --last K` does by hand (fairseq's
average_checkpoints.py, OpenNMT's average_models.py). The final checkpoint keeps the un-averaged weights and the
optimizer, so `--resume` continues the trajectory, not the average.

    plan = plan_average(run_dir, step, k)      # before the final checkpoint is saved (and older ones pruned)
    ...save the final checkpoint...
    install_average(run_dir, model, plan)      # model.safetensors and `model` now hold the average
    plan.event                                 # the 'average' event of log.jsonl: the steps, and any shortfall

A run killed between its final checkpoint and the average's 'average' event is finished by `--resume`
(`finish_average`): the final weights are put back from the final checkpoint (the weights as trained), then
averaged as the run would have.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from torch import Tensor, nn

from attnlab.runs.checkpoints import average_checkpoints, list_checkpoints, save_tensors, verify_checkpoint
from attnlab.runs.layout import LOG_FILE, WEIGHTS_FILE
from attnlab.runs.weights import load_weights, weights_metadata


@dataclass
class AveragePlan:
    """What the end of a run averages: the tensors (None: nothing to average with) and the event saying so."""

    tensors: dict[str, Tensor] | None
    event: dict = field(default_factory=dict)

    @property
    def averaged(self) -> bool:
        return self.tensors is not None


def _step(ckpt: Path) -> int:
    return int(ckpt.name[5:])  # step_NNNNNNN


def earlier_checkpoints(run_dir: Path, step: int, count: int) -> tuple[list[Path], list[str]]:
    """The newest `count` intact checkpoints of `run_dir` before `step` (oldest first), and why each damaged
    one among the newest was passed over."""
    chosen: list[Path] = []
    damaged: list[str] = []
    for ckpt in reversed([p for p in list_checkpoints(run_dir) if _step(p) < step]):
        if len(chosen) == count:
            break
        why = verify_checkpoint(ckpt)
        if why is None:
            chosen.append(ckpt)
        else:
            damaged.append(f"{ckpt.name}: {why}")
    return chosen[::-1], damaged


def plan_average(run_dir: Path | None, step: int, k: int) -> AveragePlan:
    """The mean of `run_dir`'s final weights (its model.safetensors, already written for `step`) and its newest
    k-1 intact checkpoints before `step`, read now, before saving the final checkpoint prunes any of them.

    Fewer checkpoints than asked: the ones there are, and the event's `note` says so. Nothing to average with,
    or a checkpoint that cannot be read: the final weights stay as trained, and the note says why. A finished
    run never fails here."""
    event: dict = {"event": "average", "step": step, "asked": k, "steps": [step]}
    if run_dir is None:
        return AveragePlan(None, {**event, "note": "no run folder, so no checkpoints: the final weights as trained"})
    earlier, damaged = earlier_checkpoints(run_dir, step, k - 1)
    notes = [f"skipped damaged {d}" for d in damaged]
    if len(earlier) < k - 1:
        notes.append(
            f"averaged {len(earlier) + 1} of the {k} asked for: the run kept {len(earlier)} intact checkpoint(s) "
            f"before step {step} (checkpoint more often with `--checkpoint-every STEPS`, or average none with "
            "`--average-last 0`)"
        )
    tensors = None
    if earlier:
        try:
            tensors = average_checkpoints([*earlier, run_dir / WEIGHTS_FILE])
        except (ValueError, OSError) as exc:  # never fail a finished run over its average
            notes.append(f"not averaged, the final weights as trained: {exc}")
        else:
            event["steps"] = [_step(p) for p in earlier] + [step]
    return AveragePlan(tensors, {**event, **({"note": "; ".join(notes)} if notes else {})})


def install_average(run_dir: Path, model: nn.Module, plan: AveragePlan) -> None:
    """Write the plan's average as `run_dir`'s final weights (the same format as `save_weights`), then load
    it into `model`, so what the run evaluates last is what a user loads."""
    if plan.tensors is None:
        return
    path = run_dir / WEIGHTS_FILE
    save_tensors(plan.tensors, path, metadata=weights_metadata(model))
    load_weights(model, path, what="the averaged weights")


def averaged_at(run_dir: Path, step: int) -> bool:
    """Whether `run_dir`'s log.jsonl records the 'average' event of its end at `step`."""
    try:
        lines = (run_dir / LOG_FILE).read_text(encoding="utf-8").splitlines()
    except OSError:
        return False
    for line in reversed(lines):
        try:
            event = json.loads(line)  # one short line attnlab wrote (append_jsonl): no depth to bound
        except ValueError:
            continue  # a line cut by a kill
        if isinstance(event, dict) and event.get("event") == "average" and event.get("step") == step:
            return True
    return False


def finish_average(run_dir: Path, model: nn.Module, final: Path, k: int) -> dict | None:
    """Finish a run whose final averaging was interrupted (killed after its final checkpoint `final`, before
    the 'average' event): the final weights from `final` (as trained), then `plan_average` and
    `install_average` as `save_final` does. Returns the 'average' event to log, or None when there is
    nothing to finish (averaging off, or done)."""
    step = _step(final)
    if k < 2 or averaged_at(run_dir, step):
        return None
    root = run_dir / WEIGHTS_FILE
    tmp = root.with_name(root.name + ".resume.tmp")
    shutil.copyfile(final / WEIGHTS_FILE, tmp)
    tmp.replace(root)  # atomic: the root holds the weights as trained again, never half of them
    plan = plan_average(run_dir, step, k)
    install_average(run_dir, model, plan)
    return plan.event
