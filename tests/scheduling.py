"""Driving the scheduler in tests: its handlers are generators of instructions
(mpiopt.parallel.scheduler.instructions); a test runs them to their end and reads what
they asked for.

`Records` is the database the instructions leave: a real in-memory storage (sqlite://,
the same SQL code and conformance suite as a study's file: storage/_engine.py) holding
study 1, written through the production Executor, and a log of every instruction in
order (a message to a group is logged as ("send", group)). `Driven` wraps a Scheduler so
a test calls its handlers as plain methods and gets back the messages they gave (overdue
and finish: their return value). With another storage, `scheduler(storage=st, ...)`
carries the instructions out through the Executor alone.
"""
from __future__ import annotations

from conftest import MEMORY_URL
from mpiopt.parallel.scheduler import MESSAGES, Executor, Scheduler, drive
from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.storage import open_storage
from mpiopt.trial import TrialStatus

HANDLERS = {"start", "on_result", "on_results", "on_report", "tick", "interrupt", "stop_all",
            "withdraw_ahead", "_take_queued"}
RETURNING = {"overdue", "finish"}          # handlers whose return value the test reads
SPEC = "study: {name: s}\nsearch: {algorithm: random, trials: 10}\n"


class Records:
    """Study 1 in an in-memory storage, as the instructions leave it, and their log.

    `trials` reads the study's trials back (by id: a dict of their fields, status as its
    name, `started` whether the trial's start is recorded); `intermediate` every stored
    per-epoch value as (trial id, fold, epoch, value); `status` the study's; `said` the
    lines for the user (Say); `failing` maps an instruction kind to the error its
    execution raises instead (an outage)."""

    def __init__(self):
        self.storage = open_storage(MEMORY_URL, create=True)
        self.study_id = self.storage.create_study("s", "minimize", "value", SPEC, "0" * 64, "{}")
        self.log: list[tuple] = []
        self.said: list[str] = []
        self.failing: dict[type, BaseException] = {}
        self.executor = Executor(self.storage, send=lambda instruction: None)
        self._after = {
            ins.CreateTrials: self._created, ins.RestartTrial: self._restarted,
            ins.WriteResults: self._written, ins.WriteResultsAndCreate: self._written_and_created,
            ins.ReadQueue: lambda i, got: self.log.append(("read queue", len(got))),
            ins.TakeQueued: lambda i, got: self.log.extend(
                ("take", t.id) for t in got if t is not None),
        }

    def do(self, instruction, executor: Executor | None = None):
        """Carry `instruction` out through `executor` (the test's, else a bare one) on the
        in-memory storage, and log it."""
        if type(instruction) in self.failing:
            raise self.failing[type(instruction)]
        if isinstance(instruction, MESSAGES):
            self.log.append(("send", instruction.group))
            return None
        if isinstance(instruction, ins.Say):
            self.said.append(instruction.line)
            return None
        got = (executor or self.executor).do(instruction)
        logged = self._after.get(type(instruction))
        if logged is not None:
            logged(instruction, got)
        return got

    @property
    def trials(self) -> dict[int, dict]:
        return {t.id: dict(number=t.number, params=t.params, seed=t.seed,
                           status=t.status.value, attempt=t.attempt, group=t.group,
                           error=t.error, started=t.started_at is not None,
                           intermediate=dict(t.intermediate))
                for t in self.storage.get_trials(self.study_id)}

    @property
    def intermediate(self) -> list[tuple]:
        return [(t.id, step.fold, step.epoch, value)
                for t in self.storage.get_trials(self.study_id)
                for step, value in t.intermediate.items()]

    @property
    def status(self):
        return self.storage.get_study("s").status

    def enqueue(self, params) -> int:
        return self.storage.enqueue_trials(self.study_id, [params])[0].id

    def put(self, params, status: TrialStatus, seed=None, value=None, error=None,
            intermediate=None) -> int:
        """A trial as an earlier job left it (numbered next), written through the storage:
        PENDING queued; RUNNING as a resume finds it (INTERRUPTED, its per-epoch values
        kept); a final status finished."""
        status = TrialStatus(status)
        if status is TrialStatus.PENDING:
            return self.enqueue(params)
        trial = self.storage.create_trial(self.study_id, params, seed=seed, group=0)
        for (fold, epoch), v in (intermediate or {}).items():
            self.storage.add_intermediate(trial.id, epoch, v, fold=fold)
        if status is TrialStatus.RUNNING:
            self.storage.interrupt_running(self.study_id, keep=set(
                t.id for t in self.storage.get_trials(self.study_id, [TrialStatus.RUNNING])
                if t.id != trial.id))
        else:
            self.storage.finish_trial(trial.id, status, value=value, error=error)
        return trial.id

    def _created(self, i, made):
        self.log.extend(("create", t.id) for t in made if t is not None)

    def _restarted(self, i, trial):
        self.log.append(("restart", i.trial_id))

    def _written(self, i, written):
        self.log.append(("batch", len(i.outcomes)))
        self.log.extend(("started", tid) for tid in i.started)
        self.log.extend(("finish", o["trial_id"]) for o in i.outcomes)

    def _written_and_created(self, i, made):
        self.log.append(("one commit", len(i.outcomes), len(i.requests)))
        self._written(i, None)
        self._created(i, made or [])


class Driven:
    """A Scheduler whose handlers run to their end when called (see the module docstring)."""

    def __init__(self, sched: Scheduler, do):
        object.__setattr__(self, "sched", sched)
        object.__setattr__(self, "do", do)

    def __getattr__(self, name):
        attr = getattr(self.sched, name)
        if name in HANDLERS:
            return lambda *args, **kw: self.run(attr(*args, **kw))[0]
        if name in RETURNING:
            return lambda *args, **kw: self.run(attr(*args, **kw))[1]
        return attr

    def __setattr__(self, name, value):
        setattr(self.sched, name, value)

    def run(self, steps):
        """(the messages the handler gave, its return value)"""
        sent = []

        def do(instruction):
            if isinstance(instruction, MESSAGES):
                sent.append(instruction)
            return self.do(instruction)

        value = drive(steps, do)
        return sent, value


def scheduler(storage, artifacts=None, **kw) -> Driven:
    """A driven Scheduler over `storage`: Records, or another storage (then the production
    Executor alone carries the database's instructions out); `artifacts`: an artifact
    store's Keeper (or a test's stand-in), tended as the run tends it."""
    if artifacts is not None:
        kw.update(refit_wanted=artifacts.refit_wanted(), checkpoints=artifacts.checkpoints)
    sched = Scheduler(**kw)
    if isinstance(storage, Records):
        executor = Executor(storage.storage, send=lambda action: None, artifacts=artifacts,
                            view=sched)
        do = lambda instruction: storage.do(instruction, executor)  # noqa: E731
    else:
        do = Executor(storage, send=lambda action: None, artifacts=artifacts, view=sched).do
    if artifacts is not None:
        do(sched.settled_on_resume(kw.get("existing", ())))
    return Driven(sched, do)
