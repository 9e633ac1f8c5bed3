"""Why a training run stops: one policy owns every reason and the ranks' agreement on it.

    policy = StopPolicy(cfg, device, world_size)
    with policy.catching_signals():
        while ...:
            ...one step...
            if not math.isfinite(loss): policy.diverged(); break
            if policy.after_step(step, epoch): break           # every rank gets the same answer
    policy.reason  ->  'max_steps' | 'epochs' | 'time_budget' | 'early_stopping' | 'signal' | 'non_finite_loss'

Reasons that are facts about the run (its step and epoch limits, early stopping) survive a resume;
reasons that belong to one invocation (its time budget, a Ctrl-C, a divergence) do not: `--resume`
asks `finished(step, epoch)`, which only looks at the former.

The same clock tells the budgeted schedules how much of the run is spent (`progress`), so a linear or
cosine learning rate reaches zero exactly when the time budget ends the run.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time

import torch

# Ordered by precedence: when ranks disagree (rank 0's clock or evaluation, a signal that reached one
# rank), the all-reduced MAX wins, so a divergence or a signal anywhere stops everyone.
REASONS = (None, "time_budget", "max_steps", "epochs", "early_stopping", "signal", "non_finite_loss")
# Reasons that end a run for good (a resumed run with unchanged limits has nothing to do).
_STICKY = ("early_stopping",)


class StopPolicy:
    """Decides, after each step and each epoch, whether training is over, and why.

    Args:
        cfg: the TrainConfig (max_steps, epochs, time_budget, patience are read at every check, so a
            resumed run's overridden limits apply).
        device, world_size: where the agreement tensor lives and how many ranks must agree.
    """

    def __init__(self, cfg, device: torch.device | str = "cpu", world_size: int = 1, clock=time.monotonic):
        self.cfg = cfg
        self.device = torch.device(device)
        self.world_size = world_size
        self.clock = clock
        self.start = clock()
        self.reason: str | None = None
        self.signum: int | None = None  # the signal that asked us to stop, if any
        self.best_bleu: float | None = None  # best validation BLEU so far (patience)
        self.evals_since_best = 0

    def restart(self) -> None:
        """This invocation's clock starts now (the time budget counts from here)."""
        self.start = self.clock()

    def progress(self, step: int) -> float:
        """The fraction of the run spent after `step` updates, in [0, 1]: step / max_steps, or this
        invocation's elapsed seconds / time_budget, the larger when both are set (the limit that ends the
        run first governs). The time budget counts per invocation, so a resumed run's fraction starts
        again at (its step / max_steps, or) 0. Every rank gets the same value (the MAX over ranks), so
        every rank sets the same learning rate. 0 when neither limit is set."""
        p = step / self.cfg.max_steps if self.cfg.max_steps is not None else 0.0
        if self.cfg.time_budget is not None:
            spent = (self.clock() - self.start) / self.cfg.time_budget
            if self.world_size > 1:  # clocks differ between ranks: agree on the furthest
                t = torch.tensor([spent], dtype=torch.float64, device=self.device)
                torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
                spent = float(t.item())
            p = max(p, spent)
        return min(max(p, 0.0), 1.0)

    # -- state that a checkpoint carries ----------------------------------------------------------
    def state_dict(self) -> dict:
        return {"best_bleu": self.best_bleu, "evals_since_best": self.evals_since_best, "stop_reason": self.reason}

    def load_state_dict(self, state: dict) -> None:
        self.best_bleu = state["best_bleu"]
        self.evals_since_best = state["evals_since_best"]
        # Only a reason that ends the run for good carries over into a new invocation.
        self.reason = state["stop_reason"] if state["stop_reason"] in _STICKY else None

    # -- the checks -------------------------------------------------------------------------------
    def finished(self, step: int, epoch: int) -> str | None:
        """Is the run over under the current limits, before any step of this invocation?"""
        if self.reason in _STICKY:
            return self.reason
        return self._limits(step, epoch)

    def record_eval(self, bleu: float) -> bool:
        """Track patience on validation BLEU (rank 0 evaluates); True when `bleu` is a new best."""
        improved = self.best_bleu is None or bleu > self.best_bleu
        if improved:
            self.best_bleu, self.evals_since_best = bleu, 0
        else:
            self.evals_since_best += 1
        return improved

    def diverged(self) -> str:
        """The loss went non-finite (it is all-reduced first, so every rank calls this together)."""
        self.reason = "non_finite_loss"
        return self.reason

    def after_step(self, step: int, epoch: int) -> str | None:
        """Checked after every optimizer update (and its evaluation); the same answer on every rank."""
        local = None
        if self.signum is not None:
            local = "signal"
        elif self.cfg.patience is not None and self.evals_since_best >= self.cfg.patience:
            local = "early_stopping"
        elif self.cfg.max_steps is not None and step >= self.cfg.max_steps:
            local = "max_steps"
        elif self.cfg.time_budget is not None and self.clock() - self.start >= self.cfg.time_budget:
            local = "time_budget"
        return self._agree(local)

    def after_epoch(self, step: int, epoch: int) -> str | None:
        """Checked when an epoch ends (`epoch` = epochs completed)."""
        return self._agree(self._limits(step, epoch) or ("signal" if self.signum is not None else None))

    def _limits(self, step: int, epoch: int) -> str | None:
        if self.cfg.max_steps is not None and step >= self.cfg.max_steps:
            return "max_steps"
        if epoch >= self.cfg.epochs:
            return "epochs"
        return None

    def _agree(self, local: str | None) -> str | None:
        """One reason for every rank: a rank that stopped alone would hang the others' all-reduce."""
        code = REASONS.index(local)
        if self.world_size > 1:
            t = torch.tensor([code], device=self.device)
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
            code = int(t.item())
        if REASONS[code] is not None:
            self.reason = REASONS[code]
        return REASONS[code]

    # -- signals ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def catching_signals(self, signals=(signal.SIGINT, signal.SIGTERM)):
        """Within the block, SIGINT/SIGTERM ask the loop to stop after the current step (so the run
        can checkpoint); a second one interrupts at once. Outside the main thread: a no-op."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.getsignal(s) for s in signals}

        def handler(signum, frame):
            if self.signum is not None:  # asked twice: stop now, whatever is lost
                signal.signal(signum, previous[signum] if callable(previous[signum]) else signal.SIG_DFL)
                raise KeyboardInterrupt
            self.signum = signum

        for s in signals:
            signal.signal(s, handler)
        try:
            yield self
        finally:
            for s, h in previous.items():
                signal.signal(s, h)

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number (130, 143)."""
        return 128 + self.signum if self.signum is not None else 0
