"""Driving the scheduler in tests: its handlers are generators of instructions
(mpiopt.parallel.scheduler.instructions); a test runs them to their end and reads what
they asked for.

`Records` is the test's reading of the instructions: what the database would hold after
them, and a log of every one in order (a message to a group is logged as ("send",
group)). `Driven` wraps a Scheduler so a test calls its handlers as plain methods and
gets back the messages they gave (overdue and finish: their return value). With a real
storage, `scheduler(storage=st, ...)` carries the instructions out through the
production Executor instead.
"""
from __future__ import annotations

from mpiopt.parallel.scheduler import MESSAGES, Executor, Scheduler, drive
from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.trial import FrozenTrial, TrialStatus

HANDLERS = {"start", "on_result", "on_results", "on_report", "tick", "interrupt", "stop_all",
            "withdraw_ahead", "_take_queued"}
RETURNING = {"overdue", "finish"}          # handlers whose return value the test reads


class Records:
    """The database as the instructions leave it (trials by id), and their log."""

    def __init__(self):
        self.trials: dict[int, dict] = {}
        self.log: list[tuple] = []
        self.status = None
        self.intermediate = []
        self.said: list[str] = []                      # the lines for the user (Say)
        self.failing: dict[type, BaseException] = {}   # instruction kind -> error to raise
        self._table = {
            ins.CreateTrials: self._create, ins.RestartTrial: self._restart,
            ins.WriteResults: self._write, ins.WriteResultsAndCreate: self._write_and_create,
            ins.AddIntermediate: lambda i: self.intermediate.append((i.trial_id, i.fold, i.epoch,
                                                                     i.value)),
            ins.InterruptRunning: self._interrupt,
            ins.SetStudyStatus: lambda i: setattr(self, "status", i.status),
            ins.ReadQueue: self._read_queue, ins.TakeQueued: self._take,
            ins.Say: lambda i: self.said.append(i.line),
        }

    def do(self, instruction):
        if type(instruction) in self.failing:
            raise self.failing[type(instruction)]
        if isinstance(instruction, MESSAGES):
            self.log.append(("send", instruction.group))
            return None
        handler = self._table.get(type(instruction))
        return handler(instruction) if handler else None

    def enqueue(self, params) -> int:
        tid = len(self.trials) + 1
        self.trials[tid] = dict(number=tid - 1, params=params, seed=None, status="PENDING", attempt=0)
        return tid

    def _create(self, i: ins.CreateTrials):
        made = []
        for r in i.requests:
            tid = len(self.trials) + 1
            self.trials[tid] = dict(number=tid - 1, params=r["params"], seed=r["seed"],
                                    status="RUNNING", attempt=0, started=r.get("started", True))
            self.log.append(("create", tid))
            made.append(self._frozen(tid))
        return made

    def _restart(self, i: ins.RestartTrial):
        self.trials[i.trial_id].update(status="RUNNING", attempt=self.trials[i.trial_id]["attempt"] + 1)
        self.log.append(("restart", i.trial_id))
        return self._frozen(i.trial_id)

    def _write(self, i: ins.WriteResults):
        self.log.append(("batch", len(i.outcomes)))
        for tid in i.started:
            self.trials[tid]["started"] = True
            self.log.append(("started", tid))
        for o in i.outcomes:
            o = dict(o)
            tid = o.pop("trial_id")
            self.trials[tid].update(status=TrialStatus(o.pop("status")).value, **o)
            self.log.append(("finish", tid))

    def _write_and_create(self, i: ins.WriteResultsAndCreate):
        self.log.append(("one commit", len(i.outcomes), len(i.requests)))
        self._write(ins.WriteResults(i.outcomes, i.started))
        return self._create(ins.CreateTrials(i.study_id, i.requests))

    def _interrupt(self, i: ins.InterruptRunning):
        for tid, t in self.trials.items():
            if t["status"] == "RUNNING" and tid not in i.keep:
                t["status"] = "INTERRUPTED"

    def _read_queue(self, i: ins.ReadQueue):
        queued = [tid for tid, t in sorted(self.trials.items()) if t["status"] == "PENDING"]
        self.log.append(("read queue", len(queued)))
        return [self._frozen(tid) for tid in queued[:i.limit]]

    def _take(self, i: ins.TakeQueued):
        for r in i.requests:
            self.trials[r["trial_id"]].update(status="RUNNING", seed=r["seed"], group=r["group"],
                                              started=r.get("started", True))
            self.log.append(("take", r["trial_id"]))
        return [FrozenTrial(id=r["trial_id"], study_id=1, status=TrialStatus.RUNNING,
                            number=self.trials[r["trial_id"]]["number"], group=r["group"],
                            params=self.trials[r["trial_id"]]["params"], seed=r["seed"])
                for r in i.requests]

    def _frozen(self, tid):
        t = self.trials[tid]
        return FrozenTrial(id=tid, study_id=1, number=t["number"], status=TrialStatus(t["status"]),
                           params=t["params"], seed=t["seed"], attempt=t["attempt"],
                           intermediate=t.get("intermediate", {}))


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
    """A driven Scheduler over `storage`: Records, or a real storage (then the production
    Executor carries the database's instructions out); `artifacts`: an artifact store's
    Keeper (or a test's stand-in), tended as the run tends it."""
    if artifacts is not None:
        kw.update(refit_wanted=artifacts.refit_wanted(), checkpoints=artifacts.checkpoints)
    sched = Scheduler(**kw)
    executor = Executor(storage, send=lambda action: None, artifacts=artifacts, view=sched)
    if isinstance(storage, Records):
        def do(instruction):
            kept = isinstance(instruction, (ins.TrialsSettled, ins.RefitEnded))
            return executor.do(instruction) if kept else storage.do(instruction)
    else:
        do = executor.do
    if artifacts is not None:
        do(sched.settled_on_resume(kw.get("existing", ())))
    return Driven(sched, do)
