"""The buckets of one step's gradient, started in order as backward fills them: the part
that MPI's exchange (allreduce.Exchange) and torch.distributed's (torch_collectives.
TorchExchange) share; each says how a bucket's sum starts and how the step waits.

A bucket starts once its tensors and every bucket before it are ready, so every rank of
the group starts the same collectives in the same order (a collective's rule), as
DistributedDataParallel's buckets do.
"""
from __future__ import annotations


class Buckets:
    """One step's buckets, each started once its tensors and every bucket before it are
    ready; a subclass says how a bucket's sum starts, and how the step waits for them."""

    def __init__(self, layout: list):
        self.layout = layout
        self.owner = {k: i for i, (_, _, tensors) in enumerate(layout) for k in tensors}
        self.missing: list = []
        self.started = 0
        self.requests: list = []

    def begin(self) -> None:
        """A new step: no tensor ready, no bucket started."""
        self.missing = [len(tensors) for _, _, tensors in self.layout]
        self.started = 0
        self.requests = []

    def ready(self, k: int) -> None:
        """Tensor k's gradient is in the buffer: start every bucket now complete in order,
        and let the sums in flight progress."""
        self.missing[self.owner[k]] -= 1
        while self.started < len(self.layout) and not self.missing[self.started]:
            self._start()
        self._progress()

    def start_rest(self) -> None:
        """Start every bucket not started yet (all of them for a one-call gradient)."""
        while self.started < len(self.layout):
            self._start()

    def _start(self) -> None:
        lo, hi, _ = self.layout[self.started]
        self.requests.append(self.sum(lo, hi))
        self.started += 1

    def sum(self, lo: int, hi: int):
        """Start the sum of buffer[lo:hi] over the group, in place; its request."""
        raise NotImplementedError

    def _progress(self) -> None:
        """Let the library progress the sums in flight (where it needs calls for that)."""
