"""What rank 0 holds for one run, frozen once it is known, passed whole to every step.

`Request` is what the command asks for (its prepare()); `Started` is what the checked
start-up hands on (mpiopt.run.startup): the spec every rank set up with, the opened
study, the stop flag already in place. `RunContext` adds what the coordination set up
(mpiopt.run.coordinating): the layout, the scheduler and its executor, the storage, the
progress. The ending (mpiopt.run.ending) reads the one it is given; nothing in them
changes after it is made, so a step cannot see a half-built run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mpiopt.run.signals import StopFlag


@dataclass(frozen=True)
class Request:
    """What the command asks for (its prepare(), on rank 0): the spec, the storage URL,
    `resume` (False, True or "auto": mpiopt.study.opening.open_study), whether FAILED
    trials run again, recovery files to import first, whether other jobs may run the study
    at once (`--join`)."""

    spec: Any
    url: str
    resume: Any = False
    retry_failed: bool = False
    recovery: tuple = ()
    shared: bool = False

    @classmethod
    def of(cls, prepared) -> "Request":
        """From prepare()'s (spec, url, resume[, options]); options: {"retry_failed":
        bool, "recovery": [files], "shared": bool}."""
        spec, url, resume, *options = prepared
        options = options[0] if options else {}
        return cls(spec, url, resume, bool(options.get("retry_failed", False)),
                   tuple(options.get("recovery", ())), bool(options.get("shared", False)))


@dataclass(frozen=True)
class Started:
    """Rank 0 after a start-up that every rank passed: GO has gone out.

    `objective`: rank 0's own (single-process mode only); `liveness`: the silence limit
    every rank's heartbeats use, or None (single process, or MPI without threads);
    `launch`: what goes before `mpiopt resume` in a printed line (`mpiexec -n 9 `)."""

    spec: Any
    url: str
    opened: Any                 # mpiopt.run.study_run.StudyRun
    flag: StopFlag
    quiet: bool
    launch: str = ""
    objective: Any = None
    liveness: float | None = None


@dataclass(frozen=True)
class RunContext:
    """One run on rank 0, from its first trial to its closing line."""

    world: Any                  # COMM_WORLD
    started: Started
    topo: Any                   # mpiopt.parallel.topology.Topology
    comm: Any                   # rank 0's group communicator (its own, single process)
    hosts: Any                  # the host of each group's leader
    progress: Any               # mpiopt.reporting.progress.Progress
    sched: Any                  # mpiopt.parallel.scheduler.Scheduler
    executor: Any               # mpiopt.parallel.scheduler.Executor: carries out its instructions
    storage: Any                # the run's storage (mpiopt.storage.resilient.Resilient)
    artifacts: Any = None       # the artifact store's keeper, or None
    watch: Any = None           # mpiopt.parallel.liveness.Watch, or None

    @property
    def spec(self):
        return self.started.spec

    @property
    def url(self) -> str:
        return self.started.url

    @property
    def opened(self):
        return self.started.opened

    @property
    def flag(self) -> StopFlag:
        return self.started.flag
