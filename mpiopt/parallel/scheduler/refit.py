"""training.refit: once a search ended well (budget used, target reached, or a finite
space exhausted) and nothing runs, one group trains the best parameters once more on all
the data. Its run has no trial row and tells no searcher."""
from __future__ import annotations


class Refit:
    def __init__(self, wanted: bool):
        # None: not yet; "running"; "done" (also where none is wanted or one is on disk)
        self.state = None if wanted else "done"

    def wanted_now(self, stop_reason: str | None, best) -> bool:
        """Not yet run, and the search ended well (or may yet: no stop) with a best trial;
        the Dispatcher adds that nothing runs and a group is idle (dispatch.py)."""
        return (self.state is None and stop_reason in (None, "target", "exhausted")
                and best is not None)

    def started(self) -> None:
        self.state = "running"

    def finished(self) -> None:
        self.state = "done"
