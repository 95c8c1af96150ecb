"""Inside a trial, MPI.COMM_WORLD is a guard that fails at once and says what to use.

COMM_WORLD holds the coordinator and every group, and none of them joins a trial's
collectives. Unguarded, a function calling `MPI.COMM_WORLD.Barrier()` (under
`mpiexec -n 3`):

- taking `comm` (it runs in its rank), it waits in the barrier for ever: the ranks'
  heartbeats go on, so nothing looks wrong, and the job prints nothing until `timeout`
  kills it;
- without `comm`, it runs in a worker process forked from its rank, which must never use
  MPI: there the barrier runs on the rank's copied MPI state, the rank stops hearing its
  coordinator, and the job ends after 60 s blaming a silent coordinator, its trials left
  RUNNING to hang the same way on every resume.

So while a trial runs, `MPI.COMM_WORLD` (and, where the objective's module holds it in a
global, that name too) is a GuardedComm: asking it for its rank or size answers as
before, anything else raises MPIInTrialError, and the trial is FAILED with a line that
says to take the `comm` argument. In the forked worker every communicator the objective's
module holds, and COMM_SELF, are guarded too, for good (the worker serves only trials).
A communicator kept elsewhere (another module, an object) is not found: a function
taking `comm` that waits on such one ends at `search.trial_timeout`.

mpiopt's own code never looks MPI.COMM_WORLD up during a trial (launch.py keeps the world
it started with), so swapping the module's attribute touches user code only.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager

# What a guard still answers: local queries that send nothing (a rank's number for a log
# line or a seed works as before).
LOCAL = frozenset({"Get_rank", "Get_size", "rank", "size", "Get_name", "name"})

IN_RANK = ("it holds the coordinator and every other group, which never join this trial's "
           "collectives, so a call on it would wait for ever; use the objective's `comm` "
           "argument (this trial's group of ranks) instead")
IN_WORKER = ("a function without a `comm` argument runs in a worker process forked from its "
             "rank, where MPI cannot be used; take a `comm` argument to run the trial in the "
             "rank itself, and use that communicator")


class MPIInTrialError(RuntimeError):
    """An objective used a communicator it must not use inside a trial."""


class GuardedComm:
    """Stands for a communicator while a trial runs; see the module docstring."""

    def __init__(self, real, name: str, why: str):
        self._real, self._name, self._why = real, name, why

    def __getattr__(self, attr):
        if attr in LOCAL:
            return getattr(self._real, attr)
        raise MPIInTrialError(f"{self._name}.{attr} called inside a trial: {self._why}")

    def __repr__(self) -> str:
        return f"<{self._name}, guarded inside a trial>"


def _mpi():
    """mpi4py's MPI module if something imported it (never imported here: a study that
    does not use MPI, -n 1 without mpiexec, stays without it)."""
    return sys.modules.get("mpi4py.MPI")


@contextmanager
def world_guarded(namespace: dict | None = None):
    """While the block runs (a trial in its rank): MPI.COMM_WORLD, and each global of the
    objective's module that is COMM_WORLD, are guards; restored after."""
    MPI = _mpi()
    if MPI is None or isinstance(MPI.COMM_WORLD, GuardedComm):
        yield
        return
    real = MPI.COMM_WORLD
    guard = GuardedComm(real, "MPI.COMM_WORLD", IN_RANK)
    names = [k for k, v in (namespace or {}).items() if v is real]
    MPI.COMM_WORLD = guard
    for name in names:
        namespace[name] = guard
    try:
        yield
    finally:
        MPI.COMM_WORLD = real
        for name in names:
            if namespace.get(name) is guard:
                namespace[name] = real


def guard_worker(namespace: dict | None = None) -> None:
    """In a sandbox's forked worker, for good: COMM_WORLD, COMM_SELF and every communicator
    among the objective module's globals become guards that say why MPI cannot be used."""
    MPI = _mpi()
    if MPI is None:
        return
    for name in ("COMM_WORLD", "COMM_SELF"):
        setattr(MPI, name, GuardedComm(getattr(MPI, name), f"MPI.{name}", IN_WORKER))
    for key, value in list((namespace or {}).items()):
        if isinstance(value, MPI.Comm):
            namespace[key] = GuardedComm(value, key, IN_WORKER)
