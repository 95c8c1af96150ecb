"""Driving the scheduler in tests: events in (mpiopt.parallel.scheduler.events), through
the production Executor, which answers its database calls and asks; a test reads the
messages for the groups it gave and what the storage holds.

`Records` is the database the instructions leave: a real in-memory storage (sqlite://,
the same SQL code and conformance suite as a study's file: storage/_engine.py) holding
study 1, written through the production Executor, and a log of every instruction in
order (a message to a group is logged as ("send", group)). `Driven` wraps a Scheduler so
a test names an event as a method (`start()`, `on_result(group, result)`, ...: EVENTS) and
gets back the messages it gave (overdue, finish, prefetch: what the shell reads after).
Every scheduler here checks its invariants after each event (validate_state), and a
failing test prints its last events (the stimulus log). With another storage,
`scheduler(storage=st, ...)` carries the instructions out through the Executor alone.
"""
from __future__ import annotations

from conftest import MEMORY_URL
from mpiopt.parallel.scheduler import MESSAGES, Executor, Scheduler
from mpiopt.parallel.scheduler import events as ev
from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.storage import open_storage
from mpiopt.trial import TrialStatus

EVENTS = {            # a test's name for an event -> the event
    "start": lambda: ev.Start(), "tick": lambda: ev.Tick(), "interrupt": lambda: ev.Interrupt(),
    "stop_all": lambda: ev.StopAll(), "withdraw_ahead": lambda: ev.WithdrawAhead(),
    "on_result": lambda group, result: ev.Results(((group, result),)),
    "on_results": lambda batch: ev.Results(tuple(batch)),
    "on_report": lambda group, report: ev.Reported(group, report),
    "stop": lambda reason, message: ev.Stop(reason, message),
    "lose": lambda groups: ev.Lose(tuple(groups)), "blame": lambda ids: ev.Blame(tuple(ids)),
}
READ_AFTER = {         # events whose outcome the shell reads from the machine after
    "overdue": (ev.Overdue, lambda sched, due: sched.must_end),
    "finish": (ev.Finish, lambda sched, due: sched.final_status),
    "prefetch": (ev.Prefetch, lambda sched, due: due),
}
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
        self.executor = _Logged(self, self.storage, send=lambda instruction: None)
        self._after = {
            ins.CreateTrials: self._created, ins.RestartTrial: self._restarted,
            ins.WriteResults: self._written, ins.WriteResultsAndCreate: self._written_and_created,
            ins.ReadQueue: lambda i, got: self.log.append(("read queue", len(got.trials))),
            ins.TakeQueued: lambda i, got: self.log.extend(
                ("take", t.id) for t in got.records if t is not None),
        }

    def do(self, instruction, executor: Executor | None = None):
        """Carry `instruction` out through `executor` (the test's, else a bare one) on the
        in-memory storage, and log it."""
        if type(instruction) in self.failing:
            raise self.failing[type(instruction)]
        if isinstance(instruction, MESSAGES):
            self.log.append(("send", instruction.group))
            return None if executor is None else Executor.do(executor, instruction)
        if isinstance(instruction, ins.Say):
            self.said.append(instruction.line)
            return None
        got = Executor.do(executor or self.executor, instruction)
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
        self.log.extend(("create", t.id) for t in made.records or () if t is not None)

    def _restarted(self, i, trial):
        self.log.append(("restart", i.trial_id))

    def _written(self, i, written):
        self.log.append(("batch", len(i.outcomes)))
        self.log.extend(("started", tid) for tid in i.started)
        self.log.extend(("finish", o["trial_id"]) for o in i.outcomes)

    def _written_and_created(self, i, made):
        self.log.append(("one commit", len(i.outcomes), len(i.requests)))
        self._written(i, None)
        self._created(i, made)


class _Logged(Executor):
    """The production Executor, each instruction through Records.do (logged, or failing)."""

    def __init__(self, records: Records, *args, **kw):
        super().__init__(*args, **kw)
        self.records = records

    def do(self, instruction):
        return self.records.do(instruction, self)


class Driven:
    """A Scheduler whose events are methods (see the module docstring)."""

    def __init__(self, sched: Scheduler, executor: Executor):
        object.__setattr__(self, "sched", sched)
        object.__setattr__(self, "executor", executor)

    def __getattr__(self, name):
        if name in EVENTS:
            return lambda *args: self.run(EVENTS[name](*args))
        if name in READ_AFTER:
            kind, read = READ_AFTER[name]

            def handled():
                due = self.sched.prefetch_due()
                self.run(kind())
                return read(self.sched, due)
            return handled
        return getattr(self.sched, name)

    def __setattr__(self, name, value):
        setattr(self.sched, name, value)

    def run(self, *events) -> list:
        """The messages for the groups that these events gave."""
        sent: list = []
        self.executor.send = sent.append
        try:
            self.executor.run(*events)
        except BaseException as exc:
            exc.add_note(self.sched.story())
            raise
        return sent

    def close_searcher(self) -> None:
        self.executor.close_searcher()


def scheduler(storage, artifacts=None, **kw) -> Driven:
    """A driven Scheduler over `storage`: Records, or another storage (then the production
    Executor alone carries the database's instructions out); `artifacts`: an artifact
    store's Keeper (or a test's stand-in), tended as the run tends it."""
    if artifacts is not None:
        kw.update(refit_wanted=artifacts.refit_wanted(), checkpoints=artifacts.checkpoints)
    sched = Scheduler(validate=True, **kw)
    common = dict(send=lambda action: None, artifacts=artifacts, machine=sched,
                  searcher=kw["searcher"])
    if isinstance(storage, Records):
        executor = _Logged(storage, storage.storage, **common)
    else:
        executor = Executor(storage, **common)
    if artifacts is not None:
        executor.do(sched.settled_on_resume(kw.get("existing", ())))
    return Driven(sched, executor)
