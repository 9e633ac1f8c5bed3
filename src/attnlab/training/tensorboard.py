"""`attnlab train --tensorboard DIR`: the numbers of log.jsonl as TensorBoard scalars, written as training goes.

log.jsonl stays the run's record; DIR holds the same numbers for TensorBoard (`tensorboard --logdir DIR`):
`train/loss`, `train/lr`, `train/tokens_per_s` at every `log_every` step and `valid/bleu`, `valid/loss` at
every evaluation, each at its step and wall-clock time. Needs the `tensorboard` package (the
`[tensorboard]` extra); `attnlab train` checks for it before anything is written.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from attnlab.runs.outputs import Claim, claim_output, continue_output, start_in_place

# log.jsonl event -> {its key: the TensorBoard tag}
TAGS: dict[str, dict[str, str]] = {
    "train": {"loss": "train/loss", "lr": "train/lr", "tokens_per_s": "train/tokens_per_s"},
    "eval": {"valid_bleu": "valid/bleu", "valid_loss": "valid/loss"},
}


def claim_tensorboard(folder: str | os.PathLike, *, force: bool = False, resume: bool = False) -> Claim:
    """The folder for the event files, checked before any work: new, or an earlier one with `force`;
    with `resume`, an earlier one is continued (a new event file beside the earlier ones)."""
    if resume:
        return continue_output(folder, "tensorboard", flag="--tensorboard")
    return claim_output(folder, "tensorboard", force=force, flag="--tensorboard")


class TensorBoardScalars:
    """Mirror log.jsonl events into TensorBoard event files in the claimed folder (created and marked here)."""

    def __init__(self, claim: Claim):
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package: an optional extra

        self.folder: Path = start_in_place(claim)
        self.writer = SummaryWriter(log_dir=str(self.folder))

    def log(self, event: dict) -> None:
        """Add the numbers of one log.jsonl event (those in TAGS; missing or non-finite ones are skipped)."""
        for key, tag in TAGS.get(event.get("event", ""), {}).items():
            value = event.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                self.writer.add_scalar(tag, value, global_step=event["step"], walltime=event.get("time"))

    def close(self) -> None:
        self.writer.close()


__all__ = ["TAGS", "claim_tensorboard", "TensorBoardScalars"]
