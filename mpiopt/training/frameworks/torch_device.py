"""The torch device of a rank, and what crosses between it and the host.

One GPU per rank, by node-local rank (mpiopt.training.threads.node_layout: the launcher's
variables, else a split of the communicator by node): pin_threads already narrowed
CUDA_VISIBLE_DEVICES to that GPU when torch had not started CUDA, so a rank sees one
device; where it still sees several (CUDA started first, or a launcher that hides none)
it takes its node-local rank's, round-robin. No GPU (or CUDA_VISIBLE_DEVICES empty): the
CPU. mpiopt's own trainer and `mpiopt.torch_group` both ask here, so a model mpiopt trains
and a loop of the user's own sit on the same GPU of a rank.

MPI buffers live in host memory: where MPI sums a group's gradient, it is copied to the
host and the sum back to the device, so no CUDA-aware MPI is assumed (the launchers of the
clusters we serve rarely have one built); a group of GPU ranks sums it on the device
through NCCL instead (training/torch_collectives). Checkpoints and kept models are written
from CPU tensors, so a file made on a GPU loads on a machine without one.

A CUDA out-of-memory in a step is that trial's error (FAILED, the study goes on): its
message in one line, and the failed step's cached blocks given back to the driver before
it is raised, so the next trial on that GPU starts with its memory free.
"""
from __future__ import annotations

import functools

from mpiopt.training import threads


def rank_device(comm=None):
    """This rank's torch.device: its node-local rank's GPU where it has any, else the CPU."""
    import torch

    if not torch.cuda.is_available():
        return torch.device("cpu")
    count = torch.cuda.device_count()
    index = 0 if count == 1 else threads.pin_threads(comm)["local_rank"] % count
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def out_of_memory_fails_the_trial(step):
    """A method of a model with a `device` whose CUDA out-of-memory becomes one line (a
    RuntimeError the trial records) after the device's cached memory is freed. The line
    is raised outside the except block, so the failed step's frames, and the tensors they
    hold, are gone before the cache is emptied."""
    @functools.wraps(step)
    def guarded(self, *args, **kwargs):
        try:
            return step(self, *args, **kwargs)
        except RuntimeError as exc:
            if not _out_of_memory(exc):
                raise
            what = str(exc).strip().splitlines()[0] if str(exc).strip() else "out of memory"
        _free_cache()
        raise RuntimeError(f"{self.device}: {what} (a smaller training.batch_size or "
                           "model fits)")
    return guarded


def _out_of_memory(exc: BaseException) -> bool:
    import torch

    kind = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", ())
    return isinstance(exc, kind) or "CUDA out of memory" in str(exc)


def _free_cache() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
