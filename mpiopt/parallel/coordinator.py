"""The coordinator's MPI loop around the pure Scheduler (world rank 0).

One dispatch table maps message tags to scheduler events. Between messages the loop asks
ahead (prefetch) and otherwise sleeps with a growing backoff (at most POLL_LIMIT_S), so
it costs a few percent of a core while the groups train; around the time a result that
a group waits on is expected, it polls finely (mpiopt.parallel.forecast).

Every way out goes through wind_down(): busy groups get CANCEL, idle ones STOP, results
that still come in are recorded, reports are answered "cancel", and the loop waits for a
BYE from every rank for at most WIND_DOWN_S (not from a rank gone silent, nor from a group
stuck in a trial past its timeout and grace: they would never answer). What is still
running then is recorded INTERRUPTED; a rank that never said BYE is stuck in user code,
and only then is the job ended with MPI_Abort. So a signal, the time limit's hard edge, a
rank's FATAL and the coordinator's own error all end the whole job in bounded time. A rank
whose heartbeats stop (mpiopt.parallel.liveness: dead, and the launcher did not notice)
ends it too; its group's trial stays RUNNING, so the resume counts a lost attempt.

Where trials run in the ranks' own processes (Keras models, functions taking `comm`,
`objective.isolate: false`), one that kills its process takes the whole job down at once
(the launcher kills every rank, rank 0 too). There the run builds the scheduler without
`send_first` and `ask_ahead` (mpiopt/run/launch.py): a group's next trial leaves only once
its last result is written, else a good trial's result, received but not yet committed
when the next trial killed the job, was lost, and the good trial ran again and was charged
the poison one's lost attempts. It costs such a group one write and a round trip per trial.
"""
from __future__ import annotations

import signal
import socket
import threading
import time
from dataclasses import dataclass

from mpiopt.parallel.protocol import Decision, Tag, Verdict
from mpiopt.parallel.scheduler import Answer, Dispatch, Executor, StopGroup, Withdraw
from mpiopt.parallel.scheduler.instructions import Cancel
from mpiopt.parallel.scheduler import events as ev
from mpiopt.backoff import Backoff
from mpiopt.errors import LeaseLost, StorageUnavailable
from mpiopt.parallel.waiting import probe

from mpiopt.knobs import WIND_DOWN_S
# The loop's longest sleep between probes: a result waits at most this long to be seen.
# Shorter sleeps see results sooner but cost rank 0 CPU while every group trains, which
# tests/test_search_mpi.py holds under 8% of a core (a rank spinning in MPICH uses all of
# one); what each sleep costs: benchmarks/results/scheduling.md.
POLL_LIMIT_S = 5e-3


@dataclass
class Ending:
    """How the loop ended: `cause` is None for a normal end; `orderly` is False when some
    rank never said BYE (the caller then aborts the job)."""

    cause: str | None = None
    interrupted: bool = False
    orderly: bool = True
    stuck: tuple[int, ...] = ()


class Coordinator:
    """The MPI shell around the Scheduler: receives, sends, and carries out its
    instructions through the run's executor (parallel/scheduler/executor.py), with the
    run's storage (the outage wrapper, storage/resilient.py: the coordinator takes in
    results between its tries during an outage, `meanwhile`)."""

    def __init__(self, world, topology, scheduler, storage, executor: Executor,
                 stop_flag=None, on_tick=None, clock=time.monotonic, watch=None):
        self.world, self.topo, self.sched = world, topology, scheduler
        self.storage = storage
        # the run's one executor (it knows whether other jobs run a shared study, whose
        # status is then theirs to record); its messages to groups go out from here
        self.executor = executor
        executor.send = self._message
        self.stop_flag = stop_flag   # is_set(), signum: mpiopt.run.signals.StopFlag
        self.on_tick = on_tick or (lambda: None)
        self.clock = clock
        self.handlers = {Tag.RESULT: self._on_result, Tag.REPORT: self._on_report}
        self.handling: tuple[int, ...] = ()   # the trials whose messages are being handled
        self.unanswered: tuple[int, int] | None = None   # (group, trial id) of a report
        self.byes: set[int] = set()
        self.watch = watch                   # mpiopt.parallel.liveness.Watch, or None
        self.stopped_ranks: set[int] = watch.stopped if watch else set()
        self.lock = watch.lock if watch else threading.Lock()
        self.liveness = watch.liveness if watch else None
        self.dead: set[int] = set()          # silent ranks: nothing more is sent to them
        self.received: list = []   # results taken in while a write waited out an outage
        # whether every result taken in was written (else the leaders keep their files for
        # the resume: mpiopt.kept); False after a failed write or the coordinator's
        # own failure
        self.all_written = True
        storage.meanwhile = self._take_in_results

    def run(self) -> Ending:
        """Run until the study is done or must end; always returns after wind_down."""
        try:
            if not self.stop_flag.is_set():   # (a signal while the study was being opened:
                self.execute(ev.Start())    # no trial is started only to be stopped)
            cause = self._loop()
        except (StorageUnavailable, LeaseLost) as exc:   # an outage past retry_timeout,
            cause = str(exc)                               # another job took the study over
            self.execute(ev.Stop("error", cause))
            self.all_written = False
        except Exception as exc:  # the coordinator's own failure still ends every rank
            self.all_written = False
            cause = (f"coordinator failed on rank 0 ({socket.gethostname()}): "
                     f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
            self.execute(ev.Stop("error", cause))
            self._blame()
        return self.wind_down(cause)

    def _loop(self) -> str | None:
        backoff = Backoff(limit=POLL_LIMIT_S)
        while not self.sched.done:
            if self.stop_flag.is_set():
                name = signal.Signals(self.stop_flag.signum).name if self.stop_flag.signum else "signal"
                self.execute(ev.Stop("interrupted", f"interrupted by {name}: running trials are "
                                                    "recorded INTERRUPTED and run again on resume"))
                return self.sched.message
            if self.received:    # taken in during an outage: written first (those trials
                # ended in time, whatever the timeouts below would say of them now)
                batch = self._take_received()
                self._handle(ev.Results(tuple(batch)), batch)
                continue
            self.execute(ev.Overdue())
            late = self.sched.must_end
            if late is not None:
                return late
            silent = self.liveness.silent() if self.liveness else ()
            if silent:
                return self._lost(silent)
            self.execute(ev.WithdrawAhead())
            status = probe(self.world) or probe(self.world)   # MPICH's first probe often
            # only moves a message along (mpiopt.parallel.waiting.probe): a second one sees
            # it now instead of one sleep later, for little CPU at POLL_LIMIT_S wake-ups
            if status is not None:
                tag, source = Tag(status.Get_tag()), status.Get_source()
                msg = self.world.recv(source=source, tag=tag)
                if tag is Tag.FATAL:
                    self.execute(ev.Stop("error", msg.line()))
                    self._fatal(source, msg)
                    return msg.line()
                if tag is Tag.BYE:
                    self._bye(source)
                    continue
                self.handlers[tag](self.topo.group_of(source), msg)
                backoff.reset()
            elif self.sched.prefetch_due():
                self.execute(ev.Prefetch())
            else:
                self.execute(ev.Tick())
                self.on_tick()
                if self.executor.progress is not None:
                    self.executor.progress.tick()     # the status line of running trials
                backoff.sleep(at_most=self.sched.sleep_s(backoff.delay))
        return None

    def _on_result(self, group, result) -> None:
        """This result and every other one already waiting (or taken in during an
        outage), as one batch (one write for all; at most two results per group can be
        waiting, its trial's and the one sent ahead, so the drain is bounded)."""
        batch = [*self._take_received(), (group, result), *self._waiting_results()]
        self._handle(ev.Results(tuple(batch)), batch)

    def _on_report(self, group, report) -> None:
        self.unanswered = (group, report.trial_id)
        self._handle(ev.Reported(group, report), [(group, report)])
        self.unanswered = None

    def _handle(self, event, batch: list) -> None:
        """Carry out `event`, these (group, message) pairs: while it runs, the pairs'
        trials are those a failure of the coordinator is blamed on (run)."""
        self.handling = tuple(msg.trial_id for _, msg in batch)
        self.execute(event)
        self.handling = ()

    def _waiting_results(self) -> list:
        batch = []
        while (status := probe(self.world, tag=Tag.RESULT)) is not None:
            source = status.Get_source()
            batch.append((self.topo.group_of(source), self.world.recv(source=source, tag=Tag.RESULT)))
        return batch

    def _blame(self) -> None:
        """The coordinator failed on what these trials sent: what it met once it may meet
        on every resume, so each counts a lost attempt (the scheduler's blame). A report
        it took in is answered CANCEL: its leader waits for the answer, and would not
        stop in order (MPI_Abort)."""
        self.execute(ev.Blame(self.handling))
        if self.unanswered is not None:
            group, trial_id = self.unanswered
            self._send(Decision(trial_id, Verdict.CANCEL), self.topo.leader(group), Tag.DECISION)
            self.unanswered = None

    def _take_in_results(self) -> list[dict]:
        """Between the tries of a write during an outage (the storage calls this): results
        that arrived meanwhile are received, kept for the scheduler (it gets them once the
        database answers) and their records returned for the recovery file: left
        unreceived in MPI's queue, they would be lost with a job killed during the outage,
        and those trials would run again on resume."""
        batch = self._waiting_results()
        self.received += batch
        return self.sched.outcomes_due(batch)

    def _take_received(self) -> list:
        batch, self.received = self.received, []
        return batch

    def wind_down(self, cause: str | None) -> Ending:
        """Cancel busy groups, stop idle ones, wait (bounded) for every rank's BYE."""
        for group, result in self._take_received():   # (taken in during an outage)
            self._record_quietly(group, result)
        self.execute(ev.WindDown())
        gone = self.dead | self._given_up_ranks()        # they never answer: not waited for
        everyone = set(range(1, self.world.Get_size())) - gone
        end = self.clock() + WIND_DOWN_S
        backoff = Backoff()
        while self.byes != everyone and self.clock() < end:
            status = probe(self.world)
            if status is None:
                backoff.sleep()
                continue
            tag, source = Tag(status.Get_tag()), status.Get_source()
            msg = self.world.recv(source=source, tag=tag)
            if tag is Tag.BYE:
                self._bye(source)
            elif tag is Tag.REPORT:
                group = self.topo.group_of(source)
                self._send(Decision(msg.trial_id, Verdict.CANCEL), source, Tag.DECISION)
            elif tag is Tag.RESULT:
                self._record_quietly(self.topo.group_of(source), msg)
            elif tag is Tag.FATAL:
                cause = cause or msg.line()
                self._fatal(source, msg)
                gone |= self.dead
                everyone -= gone
            backoff.reset()
        interrupted = self._interrupt_rest()
        if self.watch:
            self.watch.stop()
        stuck = tuple(sorted((everyone - self.byes) | gone))
        return Ending(cause=cause, interrupted=interrupted or self.sched.stop_reason == "interrupted",
                      orderly=not stuck, stuck=stuck)

    def _given_up_ranks(self) -> set[int]:
        """The ranks of groups whose trial did not stop within its timeout and grace: the
        leader sits in user code that ignores the cancel, so waiting WIND_DOWN_S more for
        their BYE only delays the MPI_Abort that ends them."""
        return {r for r in range(1, self.world.Get_size())
                if self.topo.group_of(r) in self.sched.given_up}

    def _record_quietly(self, group, result) -> None:
        """A result that arrives while the job ends is still recorded, if the database lets."""
        try:
            self.execute(ev.Results(((group, result),)))
        except Exception:
            self.all_written = False
        self.execute(ev.StopAll())

    def _interrupt_rest(self) -> bool:
        # (after an outage given up, always: the write that failed may have committed all
        # the same, a trial created RUNNING that this job never heard of; journaled, the
        # interrupt reaches it on resume instead of counting it a lost attempt)
        # (and where trials were blamed: every other one of the job must be INTERRUPTED
        # before the job's end counts what it left RUNNING: mpiopt.run.study_run)
        if not self.sched.busy and \
                self.sched.stop_reason != "interrupted" and self.storage.given_up is None \
                and not self.sched.blamed:
            return False
        try:
            self.execute(ev.Interrupt())
        except Exception:
            pass          # the database is the cause; resume finds these trials RUNNING
        return True

    def _fatal(self, rank: int, msg) -> None:
        """A rank failed: STOP it; where its group is left in a collective, its ranks are
        given up (not sent to, not waited for: the job's MPI_Abort ends them)."""
        if msg.group_stuck:
            group = self.topo.group_of(rank)
            self.dead.update(r for r in range(1, self.world.Get_size())
                             if self.topo.group_of(r) == group)
        self._stop_rank(rank)

    def _stop_rank(self, rank: int) -> None:
        with self.lock:                 # no heartbeat goes to a rank after its STOP
            if rank not in self.stopped_ranks:
                self.stopped_ranks.add(rank)
                # (True: every result reached the database, the leader's kept file can go;
                # after an outage given up some are only in files: mpiopt.kept)
                written = self.all_written and self.storage.given_up is None
                self._send(written, rank, Tag.STOP)

    def _send(self, obj, dest: int, tag: Tag) -> None:
        if dest not in self.dead:       # a dead rank's queue may be full: a send could block
            self.world.send(obj, dest=dest, tag=tag)

    def _bye(self, rank: int) -> None:
        self.byes.add(rank)
        if self.liveness:
            self.liveness.forget(rank)

    def _lost(self, ranks) -> str:
        """Silent ranks: the job ends; their groups' trials stay RUNNING for the resume."""
        self.dead.update(ranks)
        groups = sorted({self.topo.group_of(r) for r in ranks})
        self.execute(ev.Lose(tuple(groups)))
        shown = ", ".join(map(str, ranks))
        cause = (f"rank(s) {shown} (group(s) {', '.join(map(str, groups))}) sent no heartbeat "
                 f"for {self.liveness.limit:.0f}s: the process died or is stuck, and the "
                 "launcher did not end the job")
        self.execute(ev.Stop("error", cause))
        return cause

    def execute(self, event) -> None:
        """Hand the scheduler this event; carry out what it leads to."""
        self.executor.run(event)

    def _message(self, action) -> None:
        """An instruction for a group, sent to its leader."""
        leader = self.topo.leader(action.group)
        if isinstance(action, Dispatch):
            self._send(action.trial, leader, Tag.TRIAL)
        elif isinstance(action, Answer):
            self._send(action.decision, leader, Tag.DECISION)
        elif isinstance(action, StopGroup):
            self._stop_rank(leader)
        elif isinstance(action, Withdraw):
            self._send((action.trial_id,), leader, Tag.CANCEL)
        elif isinstance(action, Cancel):
            self._send(action.trial_ids, leader, Tag.CANCEL)
