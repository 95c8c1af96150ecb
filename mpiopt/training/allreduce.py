"""Synchronous data parallel training: each step's gradient summed over the group in
buckets, each exchanged as soon as backward has its gradients.

Each global batch (training.batch_size samples) is cut into one contiguous part per rank.
Rank r computes the gradient of (n_r / n) * mean loss over its n_r samples, so the sum over
ranks is exactly the gradient of the mean loss over the whole global batch, also when the
batch does not divide evenly (a rank with no sample contributes zeros). The loss rides in
the last slot of the same buffer, allocated once. Every rank then applies the same update
with the model's own optimizer, so all ranks keep identical weights and r ranks follow
the single-rank trajectory over the same global batches up to float rounding.

The buffer is summed in buckets, as PyTorch's DistributedDataParallel does: the trainable
tensors in reverse order (the order backward finishes them), cut into buckets of
BUCKET_BYTES, the first of FIRST_BUCKET_BYTES so that the first exchange starts early. A
model that hands each tensor's gradient over as backward finishes it (FlatModel.grad_sizes:
torch) starts each bucket's non-blocking Iallreduce from inside backward, so the sums
overlap the rest of the backward pass; a model whose gradient comes in one call (Keras's
compiled step) is one bucket, started after it. Buckets start in their order on every rank
whatever order backward finishes tensors in, so the collectives match. A model under the
first bucket's size (most models a group of CPU ranks trains) is one bucket: one message,
started at the end of backward, the least a step can send.

The wait for the sums sleeps between tests (_algorithm.wait's backoff): MPICH busy-polls
inside a blocking Allreduce, and a rank that finished its part first would take the core
that the rank it waits for needs. Its sleeps stay short (STEP_WAIT_LIMIT_S): what it waits
for is the rest of a peer's step, and the sum completes only once both ranks have tested
after it arrived, so a longer sleep is added to the step of both; a test costs microseconds
of a rank that has nothing else to do. Each hand-over also tests the buckets in flight, since
MPICH progresses a collective only inside MPI calls. The wait has no limit of its own, as
any collective of the group's: a peer that died ends the job (the launcher, or the
heartbeats: parallel/liveness), one stuck ends at the trial's deadline or by the
coordinator's MPI_Abort. A rank whose gradient raised still starts the step's remaining
buckets (zeros), so every rank has started the same collectives and the communicator
stays in step for the group's next trial; it waits for them at most MPIOPT_GROUP_WAIT
seconds (the others may be stuck, and parallel/together then ends the job), then raises.

A torch model's buckets are summed by torch.distributed instead where torch_collectives
says so (NCCL on GPUs: the buffer then is a tensor on the device), from the same hooks.

The next batch is gathered after the wait, not under it: a gather from memory takes
microseconds and the prefetch thread reads files (stream.prefetched).

On one rank the gradient and the update of the same step run fused in one call (no
buffer, no MPI): the same arithmetic.

A model that takes its optimizer steps itself (own_step: a module with its own
training_step) gets each rank's part of the global batch and its share instead; the
Allreduce of its gradients happens inside its optimizers' steps (torch_step).
"""
from __future__ import annotations

import time

import numpy as np

from mpiopt.knobs import GROUP_WAIT
from mpiopt.training._algorithm import Algorithm, Clock, EpochStats, wait
from mpiopt.training.buckets import Buckets
from mpiopt.training.data import batches, shard
from mpiopt.training.stream import prefetched, rows

# torch.nn.parallel.DistributedDataParallel's bucket sizes (bucket_cap_mb, and its first
# bucket's cap): large enough that a message's latency is small beside its transfer
BUCKET_BYTES = 25 * 2**20
FIRST_BUCKET_BYTES = 2**20
# the longest sleep between tests of a step's sums: the peer is due within a fraction of a
# step, and a rank that sleeps past its arrival delays both ranks' next step (MPICH
# progresses the sum only inside a test)
STEP_WAIT_LIMIT_S = 1e-4


class AllreduceSGD(Algorithm):
    def __init__(self, model, comm, training, bucket_bytes: int = BUCKET_BYTES,
                 first_bucket_bytes: int = FIRST_BUCKET_BYTES):
        super().__init__(model, comm, training)
        from mpiopt.training import torch_collectives

        group = torch_collectives.group_for(model, comm) if self.size > 1 else None
        # torch.distributed's sums may start from backward's own thread, MPI's only where
        # its thread level allows (_threads_may_call)
        sizes = model.grad_sizes if group is not None or _threads_may_call() else None
        layout = buckets(sizes, model.n_grad, bucket_bytes, first_bucket_bytes)
        if group is not None:
            self.buffer = torch_collectives.gradient_buffer(model)
            self.exchange = torch_collectives.TorchExchange(group, self.buffer, layout)
        else:
            self.buffer = np.zeros(model.n_grad + 1, dtype=np.float32)
            self.exchange = Exchange(comm, self.buffer, layout)
        # a bucket's sum starts from inside backward only where there are several: one
        # bucket starts after backward either way, its gradient taken in one call
        self.hands_over = len(layout) > 1

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
        clock, loss, pending = Clock(stats), 0.0, False
        steps = list(self._parts(order))
        reader = prefetched(x, y, [part for part, _ in steps], failures=self.read_failures)
        batch = next(reader)
        for i, (part, n) in enumerate(steps):
            self._summed_gradient(batch, len(part) / n, pending)
            clock.compute()
            self.exchange.wait()
            batch = next(reader, None)
            clock.comm()
            loss += self._step_loss(n)
            pending = True
            stats.steps += 1
        if pending:
            self.model.apply(self.buffer)
            clock.compute()
        stats.loss = float(loss) / max(1, len(order))
        return stats

    def _step_loss(self, n: int):
        """The step's summed loss (the buffer's last slot) times n: a float from host
        memory; a tensor left on the GPU (reading it would make the host wait for the
        device every step)."""
        last = self.buffer[-1]
        return float(last) * n if isinstance(self.buffer, np.ndarray) else last * n

    def before_validation(self) -> None:
        """Trainable weights are identical on every rank; batch-norm statistics were
        gathered on each rank's own samples, so they are averaged."""
        if self.size > 1 and self.model.n_weights > self.model.n_grad:
            self.model.set_weights(self.average_state(self.model.get_weights()))

    def _summed_gradient(self, batch, scale: float, pending: bool) -> None:
        """This rank's gradient into the buffer, every bucket's sum started; a rank whose
        gradient raised starts the rest too (zeros) before it raises (see the module)."""
        self.exchange.begin()
        try:
            self._gradient(batch, scale, pending)
        except BaseException:
            self.exchange.abandon(GROUP_WAIT.get())
            raise
        self.exchange.start_rest()

    def _gradient(self, batch, scale: float, pending: bool) -> None:
        """Into the buffer: this rank's scaled gradient, after applying the previous step's
        summed gradient when one is pending (one compiled call for both where the model
        gives its gradient in one call)."""
        xb, yb = batch
        if not rows(xb):
            if pending:
                self.model.apply(self.buffer)
            self.buffer[:] = 0.0
        elif self.hands_over:
            if pending:
                self.model.apply(self.buffer)
            self.model.gradient(xb, yb, scale, self.buffer, ready=self.exchange.ready)
        elif pending:
            self.model.apply_and_gradient(self.buffer, xb, yb, scale, self.buffer)
        else:
            self.model.gradient(xb, yb, scale, self.buffer)

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


def _threads_may_call() -> bool:
    """Whether a hand-over may start a sum from another thread than the main one: torch
    runs a GPU's backward, and so its hooks, on a thread of its own while the main thread
    waits, which MPI allows from MPI_THREAD_SERIALIZED up (mpi4py asks for MULTIPLE).
    Below that the gradient is one bucket, summed from the main thread after backward."""
    from mpi4py import MPI

    return MPI.Query_thread() >= MPI.THREAD_SERIALIZED


def buckets(sizes, n_grad: int, cap: int = BUCKET_BYTES,
            first: int = FIRST_BUCKET_BYTES) -> list:
    """The buckets of a gradient buffer of n_grad floats and the loss: [(lo, hi, tensor
    indices)] in the order they are exchanged. sizes: the trainable tensors' float32
    counts in the buffer's order, or None (one bucket: the gradient comes in one call).
    Tensors are taken from the last one back, a bucket closed once it holds cap bytes
    (the first one: first bytes); the first bucket also holds the loss's slot."""
    if not sizes:
        return [(0, n_grad + 1, ())]
    edges = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    out, tensors, limit = [], [], first
    for k in reversed(range(len(sizes))):
        tensors.append(k)
        if (edges[tensors[0] + 1] - edges[k]) * 4 >= limit or k == 0:
            hi = int(edges[tensors[0] + 1]) + (1 if not out else 0)
            out.append((int(edges[k]), hi, tuple(tensors)))
            tensors, limit = [], cap
    return out


class Exchange(Buckets):
    """The buckets summed by MPI's Iallreduce in host memory."""

    def __init__(self, comm, buffer: np.ndarray, layout: list):
        super().__init__(layout)
        self.comm, self.buffer = comm, buffer

    def wait(self) -> None:
        """Until every bucket's sum is in the buffer, sleeping between tests at most
        STEP_WAIT_LIMIT_S."""
        wait(self.requests, limit=STEP_WAIT_LIMIT_S)

    def abandon(self, limit_s: float) -> None:
        """After this rank's gradient raised: start the rest and wait for the sums at most
        limit_s seconds (the error that follows is the trial's either way)."""
        self.start_rest()
        wait(self.requests, limit=0.05, until=time.monotonic() + limit_s)

    def sum(self, lo: int, hi: int):
        from mpi4py import MPI

        return self.comm.Iallreduce(MPI.IN_PLACE, self.buffer[lo:hi], op=MPI.SUM)

    def _progress(self) -> None:
        from mpi4py import MPI

        if self.requests:
            MPI.Request.Testall(self.requests)


def _zeros_like(batch, n: int):
    """n samples of zeros in an (empty) batch's form: an array, named inputs (a dict),
    labels with their event weights (a pair)."""
    if isinstance(batch, dict):
        return {name: _zeros_like(a, n) for name, a in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_zeros_like(a, n) for a in batch)
    return np.zeros((n, *batch.shape[1:]), batch.dtype)
