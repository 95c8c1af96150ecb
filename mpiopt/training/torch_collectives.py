"""Where a torch model's gradient buckets are summed over its group: torch.distributed on
GPUs, MPI on CPUs (MPIOPT_TORCH_COLLECTIVES).

On GPUs the buffer stays in the device's memory and each bucket is summed by NCCL, started
from the same backward hooks as MPI's (allreduce.py): MPI would take every step's
gradient to the host and back (no CUDA-aware MPI is assumed, torch_device), and NCCL is
what DistributedDataParallel sums with. On CPUs MPI stays: between nodes it runs over
the cluster's fabric where gloo takes TCP sockets, and on one node gloo's own threads
cost as much CPU per sample or more (benchmarks/results/torch_training.md). `torch` forces torch.distributed
(gloo on CPUs: how this path is tested without a GPU), `mpi` forces MPI. The ranks of a
group agree on one path (an allgather of each rank's wish), so a group whose ranks differ
(a rank without a GPU) sums through MPI rather than hang.

The process group is made per trial from the group's communicator as mpiopt.torch_group
makes a function objective's (a TCP store of the group's first rank, on a port of its
own: groups running at once never meet), the first time a fold of the trial needs it, and
destroyed at the trial's end (close(), from run_training), however it ends.

No wait is unbounded: the group's timeout is MPIOPT_GROUP_WAIT, so a sum whose peer is
gone or stuck raises after it (gloo's wait, NCCL's watchdog), where MPI's wait relies on
the launcher and the heartbeats (parallel/liveness) to end the job. A rank whose gradient
raised starts the rest of the step's buckets and waits for them at most as long, as with
MPI; its error is the trial's, and the next trial makes a new process group.

torch is imported only where a torch model is trained.
"""
from __future__ import annotations

import time

from mpiopt.backoff import Backoff
from mpiopt.knobs import GROUP_WAIT, TORCH_COLLECTIVES
from mpiopt.training.buckets import Buckets

_open: tuple | None = None      # (the communicator, its ProcessGroup) of the running trial


def group_for(model, comm):
    """The torch.distributed group to sum the model's buckets over comm (a ProcessGroup), or
    None for MPI. Called on every rank of comm (the choice is collective)."""
    if getattr(model, "framework", None) != "torch" or getattr(model, "own_step", False):
        return None
    choice = TORCH_COLLECTIVES.get()
    wish = choice == "torch" or (choice == "auto" and model.device.type == "cuda")
    if not all(comm.allgather(wish)):
        return None
    return _group(comm)


def _group(comm):
    """The trial's process group over comm: the open one, else a new one (a group over
    another communicator is closed first: a process has one default group)."""
    global _open
    if _open is not None and _open[0] is comm:
        return _open[1]
    close()
    from mpiopt.training.frameworks.torch_process_group import ProcessGroup

    _open = (comm, ProcessGroup(comm, timeout=GROUP_WAIT.get()))
    return _open[1]


def close() -> None:
    """Destroy the trial's process group, if one is open (the end of every trial)."""
    global _open
    if _open is not None:
        group, _open = _open[1], None
        group.close()


def gradient_buffer(model):
    """The step's flat gradient and loss, on the model's device (a tensor; a CUDA
    out-of-memory is the trial's one line)."""
    return model.zeros(model.n_grad + 1)


class TorchExchange(Buckets):
    """The buckets summed by torch.distributed's all_reduce, on the buffer's device."""

    def __init__(self, group, buffer, layout: list):
        super().__init__(layout)
        self.group, self.buffer = group, buffer

    def sum(self, lo: int, hi: int):
        import torch.distributed as dist

        return dist.all_reduce(self.buffer[lo:hi], group=self.group.group, async_op=True)

    def wait(self) -> None:
        """Until every bucket's sum is in the buffer: NCCL's wait orders the device's
        stream after the sums (the host goes on); gloo's sleeps on a condition, raising
        after the group's timeout."""
        for work in self.requests:
            work.wait()

    def abandon(self, limit_s: float) -> None:
        """After this rank's gradient raised: start the rest and wait for the sums at most
        limit_s seconds, sleeping between tests (the error that follows is the trial's)."""
        self.start_rest()
        until, backoff = time.monotonic() + limit_s, Backoff(2e-5, 0.05)
        while not all(w.is_completed() for w in self.requests) and time.monotonic() < until:
            backoff.sleep()
