"""What the three training algorithms share: the epoch statistics, the interface, waiting.

An algorithm trains one epoch over an index order (the same on every rank), and before
validation makes every rank of the communicator hold the weights to be validated.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from mpiopt.backoff import Backoff


@dataclass
class EpochStats:
    """Loss and where the time went, for the per-epoch log and the throughput benchmark."""

    loss: float = 0.0
    samples: int = 0
    steps: int = 0
    compute_s: float = 0.0
    comm_s: float = 0.0
    wall_s: float = 0.0


class Algorithm:
    """Base: subclasses implement train_epoch; validation hooks default to no-ops."""

    # whether validation sees other weights than the model's own after an epoch (easgd's
    # center): a checkpoint then keeps those too
    separate_validation = False

    def __init__(self, model, comm, training):
        self.model, self.comm, self.training = model, comm, training
        self.size, self.rank = comm.Get_size(), comm.Get_rank()
        # reads that failed this epoch (stream.prefetched): raised on every rank at its end
        self.read_failures: list = []

    def start(self) -> None:
        """Every rank starts from rank 0's initial weights."""
        self.broadcast_weights()

    def broadcast_weights(self) -> None:
        if self.size == 1:
            return
        weights = self.model.get_weights()
        self.comm.Bcast(weights, root=0)
        if self.rank:
            self.model.set_weights(weights)

    def average_state(self, weights: np.ndarray, contributes: bool = True) -> np.ndarray:
        """Average the non-trainable float state (batch-norm statistics: the tail of the
        weights buffer) over the ranks that contribute; every rank gets the same tail."""
        from mpi4py import MPI

        n = self.model.n_grad
        if self.size == 1 or len(weights) == n:
            return weights
        tail = np.ascontiguousarray(weights[n:]) if contributes else np.zeros(len(weights) - n, np.float32)
        count = self.comm.allreduce(1 if contributes else 0)
        self.comm.Allreduce(MPI.IN_PLACE, tail, op=MPI.SUM)
        weights[n:] = tail / count
        return weights

    def train_epoch(self, x, y, order: np.ndarray) -> EpochStats:
        raise NotImplementedError

    def before_validation(self) -> None:
        """Make every rank hold the weights that validation should see."""

    def after_validation(self) -> None:
        """Undo before_validation where an algorithm keeps per-rank weights."""

    def validated_weights(self) -> np.ndarray:
        """The flat weights the last validation saw (what a kept model holds)."""
        return self.model.get_weights()

    def resume(self, validated: np.ndarray | None) -> None:
        """After a checkpoint's state was restored on every rank (and start() ran)."""


class Clock:
    """Accumulates compute and communication seconds into EpochStats."""

    def __init__(self, stats: EpochStats):
        self.stats, self.t = stats, time.perf_counter()

    def compute(self) -> None:
        now = time.perf_counter()
        self.stats.compute_s += now - self.t
        self.t = now

    def comm(self) -> None:
        now = time.perf_counter()
        self.stats.comm_s += now - self.t
        self.t = now


def wait(requests, first: float = 2e-5, limit: float = 1e-3, until: float | None = None) -> bool:
    """Complete a non-blocking request (or every one of a list), sleeping between tests
    instead of busy-polling: MPICH spins inside blocking calls and would steal the core of
    a computing rank. `until` (a time.monotonic() instant): give up then; whether they
    completed."""
    from mpi4py import MPI

    requests = requests if isinstance(requests, list) else [requests]
    backoff = Backoff(first, limit)
    while requests and not MPI.Request.Testall(requests):
        if until is not None and time.monotonic() > until:
            return False
        backoff.sleep()
    return True
