"""Training progress for people: a tqdm bar on a terminal, one plain line every few seconds otherwise
(a log file `make demo > log` gets readable lines, not thousands of carriage returns)."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

from attnlab.utils.runtime import interactive

PLAIN_EVERY_S = 5.0  # seconds between plain progress lines when stderr is not a terminal


class Progress:
    """`update(step, **postfix)` after each step; `close()` at the end.

    Args:
        total: steps expected (for the bar / 'step N/total').
        initial: steps already done (a resumed run).
        stream: where it writes (default stderr); a TTY gets tqdm, anything else plain lines.
        every_s: seconds between plain lines.
    """

    def __init__(self, total: int, initial: int = 0, stream=None, every_s: float = PLAIN_EVERY_S, clock=time.monotonic):
        self.total, self.stream, self.every_s, self.clock = total, stream or sys.stderr, every_s, clock
        self.bar = None
        self.last_line = clock()
        self.step = initial
        self.postfix: dict = {}
        if interactive(self.stream):
            self.bar = tqdm(
                total=total,
                initial=min(initial, total),
                desc="train",
                unit="step",
                dynamic_ncols=True,
                file=self.stream,
            )

    def update(self, step: int, **postfix) -> None:
        self.step, self.postfix = step, postfix
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            self.bar.set_postfix(**postfix)
        elif self.clock() - self.last_line >= self.every_s:
            self._line()

    def _line(self) -> None:
        self.last_line = self.clock()
        fields = " ".join(f"{k} {v}" for k, v in self.postfix.items())
        print(f"train: step {self.step}/{self.total} {fields}".rstrip(), file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.postfix:
            self._line()  # the last state, so a log always ends with where training stopped


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
