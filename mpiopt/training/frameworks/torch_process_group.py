"""torch.distributed's process group over an MPI group's communicator, made per trial:
the part that mpiopt.torch_group (a function objective's own loop) and the trainer's
gradient sums on GPUs (training/torch_collectives) share.

The group's first rank opens a TCP store on a free port of its host (each group its own:
two groups running at once never meet) and sends the address over the communicator;
every rank joins with its rank there. The backend is NCCL where the rank has a GPU
(torch_device.rank_device: the one a model mpiopt trains takes), gloo elsewhere. close()
destroys the group and closes the store, however the trial ended; torchrun's variables
(TORCHRUN_VARIABLES) are set while it is open, for code that reads them. A process has
one default group: a second is refused with one line.
"""
from __future__ import annotations

import os
import socket
from datetime import timedelta

from mpiopt.training import threads
from mpiopt.training.frameworks.torch_device import rank_device

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                      "MASTER_PORT")
TIMEOUT_S = 1800.0      # torch's own default for a collective that does not complete


class ProcessGroup:
    """torch.distributed's default process group over a group's communicator (module
    doc): rank, size, local_rank, device, backend; close() destroys it."""

    def __init__(self, comm, timeout: float = TIMEOUT_S):
        import torch.distributed as dist

        if dist.is_initialized():
            raise RuntimeError("torch.distributed has a default process group in this process "
                               "already (an init_process_group without destroy_process_group?); "
                               "mpiopt makes the trial's own: remove the other")
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        hosts = comm.allgather(socket.gethostname())
        mine = [r for r, h in enumerate(hosts) if h == hosts[self.rank]]
        self.local_rank, self.local_size = mine.index(self.rank), len(mine)
        self.device = _device(comm)
        self.backend = "nccl" if self.device.type == "cuda" else "gloo"
        wait = timedelta(seconds=timeout)
        self.address = "127.0.0.1" if len(set(hosts)) == 1 else hosts[0]
        self._store, self.port = _store(comm, self.address, wait)
        local = self.device.index if self.device.type == "cuda" else self.local_rank
        self._env = _set_env({"RANK": self.rank, "WORLD_SIZE": self.size, "LOCAL_RANK": local,
                              "LOCAL_WORLD_SIZE": self.local_size,
                              "MASTER_ADDR": self.address, "MASTER_PORT": self.port})
        try:
            dist.init_process_group(self.backend, store=self._store, rank=self.rank,
                                    world_size=self.size, timeout=wait)
        except BaseException:
            self.close()
            raise
        self.group = dist.group.WORLD

    def close(self) -> None:
        """Destroy the process group and close the store; torchrun's variables as before."""
        import torch.distributed as dist

        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        finally:
            self._store = None
            _set_env(self._env)


def _device(comm):
    """The rank's GPU where it has one (torch_device.rank_device: the one a model mpiopt
    trains takes, by node-local rank), else the CPU; intra-op threads as pinned."""
    import torch

    pinned = threads.pin_threads(comm)
    if pinned["threads"]:
        torch.set_num_threads(pinned["threads"])
    return rank_device(comm)


def _store(comm, address: str, wait: timedelta):
    """(the group's TCP store, its port): the first rank's, on a free port it picks, the
    address sent to the others over comm. A store that cannot be opened fails every rank."""
    from torch.distributed import TCPStore

    store, port = None, None
    if comm.Get_rank() == 0:
        try:
            store = TCPStore(address, 0, comm.Get_size(), True, timeout=wait,
                             wait_for_workers=False)
            port = store.port
        except (RuntimeError, OSError) as exc:
            port = f"torch_group: cannot open a TCP store on {address}: {exc}"
    port = comm.bcast(port, root=0)
    if isinstance(port, str):
        raise RuntimeError(port)
    if store is None:
        store = TCPStore(address, port, comm.Get_size(), False, timeout=wait)
    return store, port


def _set_env(values: dict) -> dict:
    """Set (or, for None, remove) environment variables; returns what they were."""
    before = {k: os.environ.get(k) for k in values}
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = str(value)
    return before
