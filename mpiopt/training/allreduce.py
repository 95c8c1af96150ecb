"""Synchronous data parallel training: one Allreduce of one flat buffer per step.

Each global batch (training.batch_size samples) is cut into one contiguous part per rank.
Rank r computes the gradient of (n_r / n) * mean loss over its n_r samples, so the sum over
ranks is exactly the gradient of the mean loss over the whole global batch, also when the
batch does not divide evenly (a rank with no sample contributes zeros). The loss rides in
the last slot of the same buffer, so a step is one Allreduce, in place, into a buffer
allocated once. Every rank then applies the same update with the model's own optimizer,
so all ranks keep identical weights and r ranks follow the single-rank trajectory over the
same global batches up to float rounding.

The update of step i and the gradient of step i+1 run as one compiled call, so a step
costs one framework dispatch plus the Allreduce. On one rank the gradient and the update
of the same step run fused in one call (no buffer, no MPI): the same arithmetic.

The next batch is gathered after the Allreduce, not under a non-blocking one in flight:
MPICH progresses a collective only inside MPI calls, and a gather from memory takes
microseconds, so overlapping them gains nothing
(benchmarks/results/training_throughput.md).

A model that takes its optimizer steps itself (own_step: a module with its own
training_step) gets each rank's part of the global batch and its share instead; the
Allreduce of its gradients happens inside its optimizers' steps (torch_step).
"""
from __future__ import annotations

import numpy as np

from mpiopt.training._algorithm import Algorithm, Clock, EpochStats
from mpiopt.training.data import batches, shard
from mpiopt.training.stream import prefetched, rows


class AllreduceSGD(Algorithm):
    def __init__(self, model, comm, training):
        super().__init__(model, comm, training)
        self.buffer = np.zeros(model.n_grad + 1, dtype=np.float32)

    def _parts(self, order):
        """(x-index of this rank's part, its share of the global batch) for each step."""
        for b in batches(len(order), self.training.batch_size):
            idx = order[b]
            yield idx[shard(len(idx), self.size, self.rank)], len(idx)

    def train_epoch(self, x, y, order) -> EpochStats:
        stats = EpochStats(samples=len(order))
        if self.size == 1:
            return self._single(x, y, order, stats)
        if self.model.own_step:
            return self._own_steps(x, y, order, stats)
        from mpi4py import MPI

        clock, loss, pending = Clock(stats), 0.0, False
        steps = list(self._parts(order))
        reader = prefetched(x, y, [part for part, _ in steps], failures=self.read_failures)
        batch = next(reader)
        for i, (part, n) in enumerate(steps):
            self._gradient(batch, len(part) / n, pending)
            clock.compute()
            self.comm.Allreduce(MPI.IN_PLACE, self.buffer, op=MPI.SUM)
            batch = next(reader, None)
            clock.comm()
            loss += float(self.buffer[-1]) * n
            pending = True
            stats.steps += 1
        if pending:
            self.model.apply(self.buffer)
            clock.compute()
        stats.loss = loss / max(1, len(order))
        return stats

    def before_validation(self) -> None:
        """Trainable weights are identical on every rank; batch-norm statistics were
        gathered on each rank's own samples, so they are averaged."""
        if self.size > 1 and self.model.n_weights > self.model.n_grad:
            self.model.set_weights(self.average_state(self.model.get_weights()))

    def _gradient(self, batch, scale: float, pending: bool) -> None:
        """Into the buffer: this rank's scaled gradient, after applying the previous step's
        summed gradient when one is pending (one compiled call for both)."""
        xb, yb = batch
        if rows(xb) and pending:
            self.model.apply_and_gradient(self.buffer, xb, yb, scale, self.buffer)
        elif rows(xb):
            self.model.gradient(xb, yb, scale, self.buffer)
        else:
            if pending:
                self.model.apply(self.buffer)
            self.buffer[:] = 0.0

    def _single(self, x, y, order, stats) -> EpochStats:
        clock, losses = Clock(stats), []
        parts = [order[b] for b in batches(len(order), self.training.batch_size)]
        for xb, yb in prefetched(x, y, parts):
            losses.append((self.model.train_step(xb, yb), rows(xb)))
            stats.steps += 1
        stats.loss = sum(float(l) * n for l, n in losses) / max(1, len(order))
        clock.compute()
        return stats

    def _own_steps(self, x, y, order, stats) -> EpochStats:
        """Each step the model's own on this rank's part of the global batch. A rank with
        no sample of a short batch takes the step on the batch's first sample at weight
        0, and a rank whose read failed on zeros at weight 0 (the failure is raised at the
        epoch's end), so every rank takes the same optimizer steps: their Allreduces meet.
        The loss is summed over the ranks once, at the epoch's end."""
        from mpi4py import MPI

        clock, total = Clock(stats), np.zeros(1)
        steps = [self._own_part(order[b]) for b in batches(len(order), self.training.batch_size)]
        reader = prefetched(x, y, [part for part, _, _ in steps], failures=self.read_failures)
        for (xb, yb), (_, scale, n) in zip(reader, steps):
            if not rows(xb):
                xb, yb, scale = _zeros_like(xb, 1), _zeros_like(yb, 1), 0.0
            total[0] += self.model.group_step(xb, yb, scale, self.comm) * scale * n
            stats.steps += 1
        clock.compute()
        self.comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
        clock.comm()
        stats.loss = float(total[0]) / max(1, len(order))
        return stats

    def _own_part(self, idx) -> tuple:
        """(this rank's indices, its share, the global batch's size) for a model's own step."""
        part = idx[shard(len(idx), self.size, self.rank)]
        return (part, len(part) / len(idx), len(idx)) if len(part) else (idx[:1], 0.0, len(idx))


def _zeros_like(batch, n: int):
    """n samples of zeros in an (empty) batch's form: an array, named inputs (a dict),
    labels with their event weights (a pair)."""
    if isinstance(batch, dict):
        return {name: _zeros_like(a, n) for name, a in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_zeros_like(a, n) for a in batch)
    return np.zeros((n, *batch.shape[1:]), batch.dtype)
