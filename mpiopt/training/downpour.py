"""Downpour SGD (MPI_Learn's master/worker scheme): asynchronous updates on a master.

Rank 0 is the master: it holds the weights and the model's compiled optimizer and does no
gradient work. Ranks 1..r-1 are workers; each takes its share of every epoch's samples in
local batches of batch_size / workers, sums the gradients of sync_every batches computed at
its current (possibly stale) weights, sends the mean to the master in one flat buffer, and
gets the master's fresh weights back. The master applies each gradient as it arrives, with
one compiled call over the flat buffer (split into per-variable views inside the graph, no
per-tensor NumPy optimizer), so an update costs what the framework's own step costs.

Waiting never spins: the master and the workers test their requests with a short backoff
sleep, so on a crowded node the master's idle time goes to the workers' cores.

Validation is a collective phase at the end of each epoch, after every worker has finished
its share: the master's weights are broadcast and all ranks, master included, validate a
shard each. No worker is waiting for the master while it validates.

On one rank there are no workers: the algorithm is plain single-rank training (allreduce).
"""
from __future__ import annotations

import numpy as np

from mpiopt.backoff import Backoff
from mpiopt.training._algorithm import Algorithm, Clock, EpochStats, wait
from mpiopt.training.data import batches, shard
from mpiopt.training.stream import prefetched, rows

TAG_GRAD, TAG_DONE, TAG_WEIGHTS = 11, 12, 13


class Downpour(Algorithm):
    def __init__(self, model, comm, training):
        super().__init__(model, comm, training)
        self.workers = self.size - 1
        self.grad = np.zeros(model.n_grad + 1, dtype=np.float32)
        self.weights = np.zeros(model.n_weights, dtype=np.float32)

    def train_epoch(self, x, y, order) -> EpochStats:
        stats = EpochStats(samples=len(order))
        clock = Clock(stats)
        if self.rank == 0:
            loss = self._serve(stats, clock)
        else:
            loss = self._work(x, y, order, stats, clock)
        stats.loss = self.comm.bcast(loss, root=0)
        return stats

    def before_validation(self) -> None:
        """Everybody takes the master's weights, with the batch-norm statistics (which only
        the workers' forward passes update) averaged over the workers."""
        mine = self.model.get_weights()
        master = mine.copy()
        self.comm.Bcast(master, root=0)
        master[self.model.n_grad:] = mine[self.model.n_grad:]
        self.model.set_weights(self.average_state(master, contributes=self.rank > 0))

    # ------------------------------------------------------------------ master
    def _serve(self, stats, clock) -> float:
        """Apply gradients as they come until every worker reports the end of its epoch."""
        from mpi4py import MPI

        buffers = [np.zeros_like(self.grad) for _ in range(self.workers)]
        requests = [self.comm.Irecv(buffers[w], source=w + 1, tag=MPI.ANY_TAG) for w in range(self.workers)]
        done, losses = 0, []
        while done < self.workers:
            index, status = _wait_any(requests)
            clock.comm()
            if status.Get_tag() == TAG_DONE:
                done += 1
                requests[index] = MPI.REQUEST_NULL
                continue
            grad = buffers[index]
            losses.append(float(grad[-1]))
            self.model.apply_and_get_weights(grad, self.weights)
            stats.steps += 1
            clock.compute()
            self.comm.Send(self.weights, dest=index + 1, tag=TAG_WEIGHTS)
            requests[index] = self.comm.Irecv(buffers[index], source=index + 1, tag=MPI.ANY_TAG)
            clock.comm()
        return float(np.mean(losses)) if losses else float("nan")

    # ------------------------------------------------------------------ worker
    def _work(self, x, y, order, stats, clock) -> None:
        mine = order[shard(len(order), self.workers, self.rank - 1)]
        local_batch = max(1, self.training.batch_size // self.workers)
        every = max(1, self.training.sync_every)
        total, count, fresh = np.zeros_like(self.grad), 0, False
        parts = [mine[b] for b in batches(len(mine), local_batch)]
        for xb, yb in prefetched(x, y, parts, failures=self.read_failures):
            if not rows(xb):        # a failed read: the epoch ends with a DONE, as usual
                continue
            if fresh:  # continue from the master's weights, set in the same compiled call
                self.model.set_weights_and_gradient(self.weights, xb, yb, 1.0, self.grad)
            else:
                self.model.gradient(xb, yb, 1.0, self.grad)
            fresh = False
            total += self.grad
            count += 1
            stats.steps += 1
            clock.compute()
            if count == every:
                self._push(total / count, clock)
                total[:], count, fresh = 0.0, 0, True
        if count:
            self._push(total / count, clock)
        self.comm.Send(np.zeros(1, np.float32), dest=0, tag=TAG_DONE)
        clock.comm()

    def _push(self, grad, clock) -> None:
        """Send a gradient and receive the master's weights (set with the next gradient;
        at the end of the epoch everybody gets the master's weights anyway)."""
        receive = self.comm.Irecv(self.weights, source=0, tag=TAG_WEIGHTS)
        self.comm.Send(np.ascontiguousarray(grad, dtype=np.float32), dest=0, tag=TAG_GRAD)
        wait(receive)
        clock.comm()


def _wait_any(requests):
    """(index, status) of the first completed receive, sleeping between tests."""
    from mpi4py import MPI

    backoff = Backoff(2e-5, 1e-3)
    while True:
        status = MPI.Status()
        index, flag = MPI.Request.Testany(requests, status)
        if flag and index != MPI.UNDEFINED:
            return index, status
        backoff.sleep()
