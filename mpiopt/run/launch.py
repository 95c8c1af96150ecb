"""Run a study on every rank: a checked start, then coordinator or group, then one ending.

Start-up is three steps, so that an error on any rank ends every rank with one line and
status 2 and nothing is written:

1. rank 0 checks the MPIOPT_* variables, loads the spec and checks the layout and the
   database URL, and sends every rank the resolved spec (or the error);
2. every rank sets itself up (checks its own MPIOPT_* variables, imports the objective)
   and tells rank 0 READY or its error;
3. rank 0 reports the first error, or opens the database and the study (the first write),
   and sends GO.

Then the job runs, and every ending -- done, a signal, the time limit's hard edge, a
rank's failure, the coordinator's own -- ends every rank in bounded time with one line
that says why and, where the study can go on, the exact resume command. MPI_Abort is
called only when a rank is stuck in user code and did not answer.

Where each part lives: rank 0's start-up in mpiopt.run.startup, its run in
mpiopt.run.coordinating, the ending in mpiopt.run.ending, the other ranks in
mpiopt.run.serving; the signals in mpiopt.run.startup_signals (held while a rank starts)
and mpiopt.run.signals (the stop flag after); every time limit in mpiopt.knobs.
"""
from __future__ import annotations

from mpiopt.run.coordinating import coordinate
from mpiopt.run.launcher import check_launcher, launch_prefix
from mpiopt.run.serving import serve_rank
from mpiopt.run.startup import RUN_MODULES as _RUN_MODULES  # noqa: F401 (tests check it)
from mpiopt.run.startup import start_rank0


def run_study_command(prepare, quiet: bool = False) -> int:
    """prepare() -> (spec, storage_url, resume[, options]), called on rank 0 only;
    options: {"retry_failed": bool, "recovery": [recovery files to import first]}.
    This rank's exit status."""
    from mpi4py import MPI

    from mpiopt.objective.processes import descendants, end_started_since, keep_nohup

    keep_nohup()
    world = MPI.COMM_WORLD
    check_launcher(world.Get_size())
    before = descendants()           # (after MPI's start: its own helpers stay)
    try:
        if world.Get_rank() == 0:
            started = start_rank0(world, prepare, quiet, launch_prefix(world.Get_size()))
            return coordinate(world, started)
        return serve_rank(world)
    finally:
        end_started_since(before)    # programs trials left running: see mpiopt.objective.processes
