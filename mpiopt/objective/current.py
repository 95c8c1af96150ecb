"""The trial this rank is running, for the helpers a function objective calls from inside
it (mpiopt.objective.torch_group): its number, its checkpoint folder in the study's
artifact store, the leader's report, and the spans the helpers add to its record.

Why kept here rather than passed as one more argument: a helper is called from deep in
the user's own code (a training loop that knows only `comm`), as Ray Train's
`ray.train.report` and `get_checkpoint` are; the objective's signature stays what it is.
Outside a trial (the function called by hand) there is none, and the helpers say what
they then do.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


@dataclass
class Running:
    number: int
    seed: int
    checkpoints: Path | None        # the trial's checkpoint folder; None: nothing is kept
    every: int = 1                  # training.checkpoint_every: epochs between checkpoints
    report: Callable | None = None  # the leader's report(epoch, value) -> the coordinator's answer
    started: float = field(default_factory=time.time)
    spans: list = field(default_factory=list)   # added to the trial's record (resume marks)

    def since_start(self) -> float:
        return round(time.time() - self.started, 6)


_running: Running | None = None


@contextmanager
def running(trial: Running):
    """The trial in `trial` is this rank's current one while the block runs."""
    global _running
    before, _running = _running, trial
    try:
        yield trial
    finally:
        _running = before


def current() -> Running | None:
    """The trial this rank runs now, or None outside a trial."""
    return _running
