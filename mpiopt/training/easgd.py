"""Elastic averaging SGD (Zhang, Choromanska and LeCun 2015), synchronous and masterless.

Every rank is a worker with its own weights x_i and its own copy of the model's compiled
optimizer; it trains on its part of each global batch. Every easgd_period local steps the
ranks exchange, in one Allreduce of one flat buffer, their distance to the center variable
c, which every rank keeps identically:

    d_i = x_i - c
    x_i <- x_i - alpha * d_i                  (the elastic force pulls each worker in)
    c   <- c + alpha * mean_i(d_i)            (and the center towards the workers)

alpha is training.easgd_alpha. The center moves by alpha times the *mean* distance (the
paper's beta = alpha), which stays stable for any alpha in (0, 1] whatever the rank count.
Unlike MPI_Learn's variant there is no master: no rank idles and no rank is a bottleneck.
Validation uses the center; workers keep their own weights across it.
"""
from __future__ import annotations

import numpy as np

from mpiopt.training._algorithm import Algorithm, Clock, EpochStats
from mpiopt.training.data import batches, shard
from mpiopt.training.stream import prefetched, rows


class EASGD(Algorithm):
    separate_validation = True
    def __init__(self, model, comm, training):
        super().__init__(model, comm, training)
        self.alpha = float(training.easgd_alpha)
        self.period = max(1, int(training.easgd_period))
        self.local_steps = 0
        self.center = None
        self.weights = np.zeros(model.n_weights, dtype=np.float32)
        self.distance = np.zeros(model.n_weights, dtype=np.float32)
        self._saved = None

    def start(self) -> None:
        super().start()
        self.center = self.model.get_weights()

    def train_epoch(self, x, y, order) -> EpochStats:
        from mpi4py import MPI

        stats = EpochStats(samples=len(order))
        clock, losses = Clock(stats), []
        parts = [order[b][shard(b.stop - b.start, self.size, self.rank)]
                 for b in batches(len(order), self.training.batch_size)]
        for xb, yb in prefetched(x, y, parts, failures=self.read_failures):
            if rows(xb):
                losses.append((self.model.train_step(xb, yb), rows(xb)))
            self.local_steps += 1
            stats.steps += 1
            clock.compute()
            if self.local_steps % self.period == 0:
                self._exchange(clock)
        local = np.array([sum(float(l) * n for l, n in losses), sum(n for _, n in losses)])
        self.comm.Allreduce(MPI.IN_PLACE, local, op=MPI.SUM)
        stats.loss = local[0] / max(1.0, local[1])
        clock.comm()
        return stats

    def _exchange(self, clock) -> None:
        from mpi4py import MPI

        self.model.get_weights(self.weights)
        np.subtract(self.weights, self.center, out=self.distance)
        self.weights -= self.alpha * self.distance
        self.model.set_weights(self.weights)
        clock.compute()
        self.comm.Allreduce(MPI.IN_PLACE, self.distance, op=MPI.SUM)
        clock.comm()
        self.center += (self.alpha / self.size) * self.distance
        clock.compute()

    def validated_weights(self) -> np.ndarray:
        return self.center.copy()

    def resume(self, validated) -> None:
        """The center comes back from the checkpoint; every worker starts from rank 0's
        own weights (the other workers' own weights are not kept)."""
        if validated is not None:
            self.center = np.array(validated, dtype=np.float32)

    def before_validation(self) -> None:
        self._saved = self.model.get_weights()
        self.model.set_weights(self.center)

    def after_validation(self) -> None:
        self.model.set_weights(self._saved)
        self._saved = None
