"""Training progress for people: a one-line header of what trains how (`run_header`), then a tqdm bar on a
terminal, one plain line every few seconds otherwise (a log file `make demo > log` gets readable lines, not
thousands of carriage returns). A run with a time budget counts its seconds against the budget, the limit that
ends it: a step total it would never reach says nothing."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

from attnlab.inference.precision import PrecisionChoice
from attnlab.utils.runtime import interactive

PLAIN_EVERY_S = 5.0  # seconds between plain progress lines when stderr is not a terminal


class Progress:
    """`update(step, **postfix)` after each step; `close()` at the end.

    Args:
        total: steps expected (for the bar / 'step N/total').
        initial: steps already done (a resumed run).
        stream: where it writes (default stderr); a TTY gets tqdm, anything else plain lines.
        every_s: seconds between plain lines.
        budget: this invocation's time budget in seconds: progress then counts seconds against it
            ('train: 45/120 s step 286 ...') instead of steps against `total`.
    """

    def __init__(
        self,
        total: int,
        initial: int = 0,
        stream=None,
        every_s: float = PLAIN_EVERY_S,
        clock=time.monotonic,
        budget: float | None = None,
    ):
        self.total, self.stream, self.every_s, self.clock = total, stream or sys.stderr, every_s, clock
        self.budget = budget
        self.bar = None
        self.start = self.last_line = clock()
        self.step = initial
        self.postfix: dict = {}
        if interactive(self.stream):
            self.bar = tqdm(
                total=round(budget) if budget is not None else total,
                initial=0 if budget is not None else min(initial, total),
                desc="train",
                unit="s" if budget is not None else "step",
                dynamic_ncols=True,
                file=self.stream,
            )

    def update(self, step: int, **postfix) -> None:
        self.step, self.postfix = step, postfix
        if self.bar is not None:
            done = min(self._seconds(), self.bar.total) if self.budget is not None else step
            self.bar.update(done - self.bar.n)
            self.bar.set_postfix({"step": step, **postfix} if self.budget is not None else postfix)
        elif self.clock() - self.last_line >= self.every_s:
            self._line()

    def _seconds(self) -> int:
        return int(self.clock() - self.start)

    def _line(self) -> None:
        self.last_line = self.clock()
        fields = " ".join(f"{k} {v}" for k, v in self.postfix.items())
        where = (
            f"{self._seconds()}/{self.budget:.0f} s step {self.step}"
            if self.budget is not None
            else f"step {self.step}/{self.total}"
        )
        print(f"train: {where} {fields}".rstrip(), file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.postfix:
            self._line()  # the last state, so a log always ends with where training stopped


def run_header(
    data: str, preset: str, precision: PrecisionChoice, threads: int | None, budget: float | None, cores: int
) -> str:
    """The line `attnlab train` prints before training: what trains on what, and how.

    Examples:
        >>> run_header("data/en-fr", "laptop", PrecisionChoice("auto", "fp32", "auto: no bf16 -> fp32"), 1, 120.0, 2)
        'train: data data/en-fr, preset laptop, precision fp32 (auto: no bf16 -> fp32), 1 of 2 cores, budget 120 s'
    """
    used = "torch's default threads" if threads is None else f"{threads} of {cores} cores"
    limit = f"budget {budget:g} s" if budget is not None else "no time budget"
    return f"train: data {data}, preset {preset}, precision {precision.picked} ({precision.reason}), {used}, {limit}"


class LossWindow:
    """Token-weighted mean training loss since the last `take()` (the 'train' events of log.jsonl)."""

    def __init__(self):
        self.loss_sum, self.tokens = 0.0, 0
        self.last: float | None = None  # the latest completed window's mean

    def add(self, loss: float, tokens: int) -> None:
        self.loss_sum += loss * tokens
        self.tokens += tokens

    def take(self) -> float | None:
        if self.tokens:
            self.last = self.loss_sum / self.tokens
        self.loss_sum, self.tokens = 0.0, 0
        return self.last
