"""training.refit: once a search ended well (budget used, target reached, or a finite
space exhausted) and nothing runs, one group trains the best parameters once more on all
the data. Its run has no trial row and tells no searcher."""
from __future__ import annotations


class Refit:
    def __init__(self, wanted: bool):
        # None: not yet; "running"; "done" (also where none is wanted or one is on disk)
        self.state = None if wanted else "done"

    def due(self, sched) -> bool:
        """After a search that ended well, with nothing left running and a group idle."""
        return (self.state is None and sched.stop_reason in (None, "target", "exhausted")
                and sched.best is not None and bool(sched.idle) and not sched.running
                and not sched.finishing and not sched._can_dispatch())

    def started(self) -> None:
        self.state = "running"

    def finished(self) -> None:
        self.state = "done"
