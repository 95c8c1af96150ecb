"""Data in memory held once per node by the ranks of one training communicator.

The ranks of a group train together: they load the data at the same moment (the group's
first trial), on the communicator handed to the training. So the ranks of that
communicator on one node can hold one in-memory copy of the features between them: an MPI
shared-memory window (MPI_Win_allocate_shared on the node's part of the communicator),
filled by the node's first rank and read in place by the others. Memory then grows with
the groups on a node, not with its ranks; the MPI library frees the window when the
processes end, however they end.

The ranks of different groups load at different times (each group at its first trial, the
coordinator never), so a window over all of a node's ranks would wait on ranks busy with
other work; each group holds its own copy.

Every collective here is reached by every rank of the node, whatever failed before it:
`agree` is passed with the error of a rank or none, and raises on every rank when any rank
failed, so no rank is left waiting in an allocation for a rank that raised.
"""
from __future__ import annotations

import numpy as np

from mpiopt.errors import DataError


class NodeShare:
    """The ranks of a communicator on this node, and the windows they allocated."""

    def __init__(self, node_comm):
        self.comm = node_comm
        self.windows: list = []      # kept: an array lives as long as its window

    @classmethod
    def of(cls, comm) -> "NodeShare | None":
        """The share of comm's ranks on this node; None when this rank is alone on it
        (collective over comm)."""
        if comm is None or comm.Get_size() == 1:
            return None
        from mpi4py import MPI

        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        if node.Get_size() == 1:
            node.Free()
            return None
        return cls(node)

    @property
    def reader(self) -> bool:
        """Whether this rank fills the node's arrays."""
        return self.comm.Get_rank() == 0

    def agree(self, error: BaseException | None, value=None):
        """The reader's value on every rank of the node, once no rank failed; else raises
        on every rank (this rank's own error, or one that says another rank failed)."""
        failed = self.comm.allreduce(0 if error is None else 1)
        if error is not None:
            raise error
        if failed:
            raise DataError(f"data: another rank on this node failed to read the data "
                            f"({failed} rank{'s' * (failed > 1)}; its error is the trial's)")
        return self.comm.bcast(value, root=0)

    def array(self, shape: tuple, dtype, fill) -> np.ndarray:
        """An array of shape and dtype in node-shared memory, filled by fill(out) on the
        reader; every rank returns once it is filled (or raises when it could not be)."""
        from mpi4py import MPI

        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        win = MPI.Win.Allocate_shared(nbytes if self.reader else 0, dtype.itemsize,
                                      comm=self.comm)
        self.windows.append(win)
        buf, _ = win.Shared_query(0)
        out = np.ndarray(shape, dtype, buffer=buf)
        error = None
        if self.reader:
            try:
                fill(out)
            except Exception as exc:  # raised on every rank by agree
                error = exc
        self.filled()
        self.agree(error)
        return out

    def filled(self) -> None:
        """Wait until the reader has filled the array, sleeping between tests: reading
        gigabytes takes minutes, and a rank blocked in MPICH's barrier would spin on a
        core the reader needs (mpiopt.backoff)."""
        from mpiopt.training._algorithm import wait

        wait(self.comm.Ibarrier(), limit=0.05)
