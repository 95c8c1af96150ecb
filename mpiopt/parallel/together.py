"""The ranks of a group end each trial of a group objective together, or the job ends.

A group objective (a function taking `comm`, a Keras model trained data-parallel) runs
its collectives in lock-step on every rank of the group. When one rank's part fails (a
GPU out of memory on that rank only, a file missing on one node) the others wait in the
next collective, which that rank will never join: left alone, they would wait for ever,
or the failed rank's next trial's collectives would meet the others' old trial's ones and
mix results between trials.

So the objective gets a duplicate of the group's communicator (its collectives never meet
mpiopt's own), and every rank ends its part of a trial with a non-blocking all-reduce of
"did my part fail" on the group's own one, waited for with sleeps (never spinning):

- everyone came back: the trial is the leader's result, FAILED with a failed rank's error
  where any rank's part failed (a result some ranks did not finish is not a result);
- a rank whose own part failed waits at most `MPIOPT_GROUP_WAIT` seconds (default 60) for
  the others. Past it they are taken as stuck in a collective it left: it sends the trial
  to the coordinator as FAILED (it is not run again: it would stop the group again) and
  ends the job (GroupBroken, sent as FATAL) with one line and the resume command. A rank
  stuck in a collective cannot be freed from outside MPI: only MPI_Abort ends it;
- a rank whose part went well waits without a limit of its own: the others are still
  working, bounded by the trial's deadline, the heartbeats and the coordinator's grace.
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
from mpi4py import MPI

from mpiopt.backoff import Backoff
from mpiopt.errors import OTHERS_FAILED
from mpiopt.durations import format_duration
from mpiopt.parallel.protocol import Result, Tag, Trial
from mpiopt.trial import TrialStatus

from mpiopt.knobs import GROUP_WAIT


class GroupBroken(RuntimeError):
    """A rank's part of a trial failed and the group's other ranks did not come back."""


def wait_limit() -> float:
    """MPIOPT_GROUP_WAIT: how long a rank whose part failed waits for the others."""
    return GROUP_WAIT.get()


def _failed(result: Result) -> bool:
    return TrialStatus(result.status) is TrialStatus.FAILED


def finish_together(world, comm, trial: Trial, result: Result) -> Result:
    """Every rank of `comm` calls this after its part of `trial`. Returns the trial's
    result (on the leader: its own, or FAILED with a failed rank's error); raises
    GroupBroken on a rank whose part failed when the others do not come back in time."""
    flag = np.array([1 if _failed(result) else 0], dtype=np.int32)
    anyone = np.zeros(1, dtype=np.int32)
    request = comm.Iallreduce(flag, anyone, op=MPI.MAX)
    stopped = TrialStatus(result.status) in (TrialStatus.FAILED, TrialStatus.INTERRUPTED)
    limit = wait_limit() if stopped else None
    end = None if limit is None else time.monotonic() + limit
    backoff = Backoff(first=1e-5, eager_s=0.05, eager_limit=5e-5)   # the others are due
    while not request.Test():
        if end is not None and time.monotonic() >= end:
            raise GroupBroken(_give_up(world, comm, trial, result, limit))
        backoff.sleep()
    if not anyone[0]:
        return result
    errors = comm.gather(result.error if _failed(result) else None, root=0)
    if comm.Get_rank() != 0:
        return result
    cause = _cause([e for e in errors if e])
    if _failed(result) and cause == result.error:
        return result
    return Result(trial.trial_id, TrialStatus.FAILED, duration=result.duration, error=cause)


def _cause(errors: list[str]) -> str:
    """The error to record: the first that is a rank's own, not one that only says
    another rank failed (the trainer's echo on the ranks that did not fail); each names
    its world rank."""
    own = [e for e in errors if OTHERS_FAILED not in e.partition("\n")[0]]
    return (own or errors)[0]


def _give_up(world, comm, trial: Trial, result: Result, limit: float) -> str:
    """Record the trial FAILED (from this rank: the leader may be the stuck one) and say
    why the job ends."""
    error = (result.error or result.status.value).strip()
    first, _, rest = error.partition("\n")
    ended = "failed" if _failed(result) else "was stopped"
    cause = (f"trial {trial.number} {ended} on this rank ({first}) and the group's other "
             f"{comm.Get_size() - 1} rank(s) did not end their part within "
             f"{format_duration(limit)} (MPIOPT_GROUP_WAIT): they wait in a collective this "
             "rank left, which only the job's end can free"
             + ("; the trial is FAILED and not run again" if _failed(result) else ""))
    if _failed(result):
        note = "the group's other ranks were left waiting in a collective, so the job ended"
        world.send(replace(result, error=f"{first}; {note}" + (f"\n{rest}" if rest else "")),
                   dest=0, tag=Tag.RESULT)
    return cause
