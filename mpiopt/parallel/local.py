"""Single-process mode: the same Scheduler, one group, the objective run in this process.

The first thing a newcomer runs, and the baseline of every scaling figure: no MPI job,
same searchers, same storage, same records. Ctrl-C, SIGTERM and SIGUSR1 end the running trial (a
sandboxed one at once; a Keras one at its next epoch) and the study is INTERRUPTED. A
trial in this process that does not stop (at its timeout, the hard time limit, or a signal)
is given up by a watch thread, as the coordinator gives up a stuck group (see _Watch).
"""
from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
from collections import deque
from contextlib import nullcontext

from mpiopt.errors import StopRequested, TrialCancelled
from mpiopt.parallel.protocol import Report
from mpiopt.parallel.scheduler import Dispatch
from mpiopt.parallel.scheduler import events as ev
from mpiopt.objective.processes import (STOP_SIGNALS, forget_signals, note_signals, stop_signal_seen,
                              usual_signals_in_forks)


class _Stop:
    """The signal handler: it only sets a flag, which the sandbox's wait, the per-epoch
    report and the loop look at. An exception raised at an arbitrary point (inside a
    database write, a pool's lock) could leave a lock held and the interrupt's own writes
    waiting on it for ever, as a clean-clone run showed. Only while user code runs in this
    process (objective.isolate: false) is KeyboardInterrupt raised, since nothing else
    could stop a trial that never returns."""

    def __init__(self, told=lambda signum: None):
        self.set = False
        self.user_code = False
        self.first: tuple[int, float] | None = None   # (signal, when) of the first signal
        self.told = told

    def __call__(self, signum, frame):
        self.set = True
        self.first = self.first or (signum, time.monotonic())
        self.told(signum)       # (the launcher's flag: a database wait looks at it)
        if self.user_code:
            raise StopRequested


# How often the watch looks for a trial stuck past its timeout's grace or the hard edge
WATCH_S = 0.5
# How long a trial in this process may go on after a stop signal (one that catches every
# exception, or sits in a long C call), as the coordinator's WIND_DOWN_S for its groups
from mpiopt.knobs import STOP_WAIT_S
# After a trial's limit, how long the watch has to give the trial up before faulthandler
# ends the process instead (_Watch.backstop_s)
from mpiopt.knobs import TRIAL_BACKSTOP_S as BACKSTOP_S


class _Watch:
    """The coordinator's watch over a stuck trial, for one process (mpiopt.parallel.
    coordinator ends such a job with MPI_Abort). A trial in this process that ignores its
    timeout's SIGALRM, or sits in a long C call, keeps the loop in user code: without this
    it ran on past `trial_timeout` and its grace (and past `time_limit` + grace) and was
    recorded COMPLETE; one that swallows a stop signal's exception ran until it returned.
    Past them (or STOP_WAIT_S after the signal), this thread records the trial (FAILED, or
    INTERRUPTED at the hard edge and after a signal), calls `give_up(cause, interrupted)`
    (the closing lines; the exit status) and ends the process: the main thread cannot be
    taken back from user code.

    The scheduler is not thread-safe: the main thread holds `lock` except while user code
    runs, and takes it for each report the trial makes."""

    def __init__(self, scheduler, executor, give_up, stop: _Stop):
        self.scheduler, self.executor = scheduler, executor
        self.give_up, self.signals = give_up, stop
        self.lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mpiopt-watch", daemon=True)

    def _deaf_to_the_stop(self) -> str | None:
        """Why the job ends, where the trial went on STOP_WAIT_S after a stop signal."""
        first = self.signals.first
        if first is None or time.monotonic() - first[1] < STOP_WAIT_S:
            return None
        return (f"interrupted by {signal.Signals(first[0]).name}: the running trial did not "
                f"stop within {STOP_WAIT_S:.0f}s, so the job ended; it is recorded "
                "INTERRUPTED and runs again on resume")

    def backstop_s(self) -> float | None:
        """Seconds from now after which faulthandler's own thread, which needs no
        interpreter lock, ends the process (printing every thread's stack) where this
        watch could not run: user code holding Python's lock in a C call never lets it.
        None where the trial has no limit."""
        now, s = self.scheduler.clock(), self.scheduler
        limits = [s.hard_deadline - now] if s.hard_deadline is not None else []
        if s.trial_timeout is not None:
            limits.append(s.trial_timeout + s.stuck_grace)
        return max(0.0, min(limits)) + BACKSTOP_S if limits else None

    def start(self) -> None:
        self.lock.acquire()
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self.lock.locked():        # (not where a signal came between the trial's end and
            self.lock.release()       # the main thread's taking the lock back)

    def _loop(self) -> None:
        while not self._done.wait(WATCH_S):
            with self.lock:
                if self._done.is_set():
                    return
                self.executor.run(ev.Overdue())     # (it records a trial past its timeout)
                late = self.scheduler.must_end
                interrupted = self.scheduler.stop_reason == "interrupted"
                if late is None:
                    late, interrupted = self._deaf_to_the_stop(), True
                if late is None:
                    continue
                faulthandler.cancel_dump_traceback_later()   # (this thread runs: no backstop)
                try:
                    if interrupted:
                        self.executor.run(ev.Interrupt())
                    code = self.give_up(late, interrupted)
                except BaseException as exc:    # the database: the resume settles the rest
                    print(f"mpiopt: {late}; (recording the end failed: {exc})", file=sys.stderr)
                    code = 1
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)


def run_local(scheduler, executor, objective, comm, stopped=lambda: False, give_up=None,
              told=lambda signum: None, keeper=None) -> bool:
    """Run the study to its end, the scheduler's instructions carried out by `executor`
    (parallel/scheduler/executor.py; its messages for the group come back to this loop).
    Returns False when interrupted (signal, hard time limit;
    `stopped()`: whether a signal came since the study was opened, before this took over;
    `told(signum)`: called for each stop signal, as the launcher's flag would have been:
    a retried database write ends its wait on it).
    `give_up(cause, interrupted) -> exit status`: the closing of a job whose trial is stuck
    in this process past its limits (see _Watch); without it, no watch.
    `keeper` (mpiopt.kept.KeptResults): each result kept on file until written
    (a kill -9 during the write lost it), the file gone at an end with all written."""
    # SIGINT too: a process started with SIGINT ignored (a background job, a parent that
    # ignores it) gets no KeyboardInterrupt from Python, and Ctrl-C or killpg would not stop
    # it; unblocked too: a blocked mask is inherited across fork and exec, and a pending
    # signal that is never delivered would leave the study running
    stop = _Stop(told)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    stop.set = stop.set or stopped()   # (asked once this handler is in place: none is lost)
    note_signals()       # (a trial that puts its own SIGINT handler back: objective.py)
    usual_signals_in_forks()     # (not the flag in a trial's Pool workers)
    watch = _Watch(scheduler, executor, give_up, stop) \
        if give_up is not None and not objective.isolated else None
    queue = deque()                    # the Dispatches the scheduler gave (one group)
    executor.send = lambda action: queue.append(action) if isinstance(action, Dispatch) else None
    try:
        if watch is not None:
            watch.start()
        if not stop.set:
            executor.run(ev.Start())
        while (queue or _wait_for_other_jobs(scheduler, executor, stop)) and not stop.set:
            if not queue:
                continue
            action = queue.popleft()
            result = _evaluate(scheduler, executor, objective, comm, action, stop, watch)
            if keeper is not None:
                keeper.keep(result)
            executor.run(ev.Results(((action.group, result),)))
            if result.status.value == "INTERRUPTED":
                raise KeyboardInterrupt
            executor.run(ev.Overdue())
            if scheduler.must_end is not None:
                raise KeyboardInterrupt
        if stop.set:
            raise KeyboardInterrupt
        return True
    except KeyboardInterrupt:
        if stop.first is not None:    # (the same closing line as under mpiexec)
            executor.run(ev.Stop("interrupted", f"interrupted by {signal.Signals(stop.first[0]).name}"
                                 ": running trials are recorded INTERRUPTED and run again on resume"))
        executor.run(ev.Interrupt())
        return False
    finally:
        if watch is not None:
            watch.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        forget_signals()
        objective.close()


def _wait_for_other_jobs(scheduler, executor, stop: _Stop) -> bool:
    """With no trial to run, a job of a shared study waits while other jobs' trials run
    (mpiopt.parallel.scheduler.shared), a poll at a time; False once it may end. The
    wait ends with a stop signal, or once those trials end or their job is taken over."""
    if not scheduler.waits_for_other_jobs:
        return False
    time.sleep(scheduler.poll_s)
    if not stop.set:
        executor.run(ev.Tick())
    return True


def _evaluate(scheduler, executor, objective, comm, action: Dispatch, stop: _Stop, watch=None):
    trial = action.trial

    def past_hard_edge() -> bool:
        edge = scheduler.hard_deadline
        return stop.set or (edge is not None and scheduler.clock() >= edge)

    def report(epoch, value, fold=0):
        if past_hard_edge():
            return TrialCancelled("cancelled: the study is stopping")
        with watch.lock if watch is not None else nullcontext():
            answers = executor.collect(ev.Reported(action.group, Report(
                trial.trial_id, int(epoch), float(value), int(fold))))
        return not (answers and answers[0].decision.prune)

    backstop = watch.backstop_s() if watch is not None else None
    if backstop is not None:
        faulthandler.dump_traceback_later(backstop, exit=True)
    if watch is not None:
        watch.lock.release()          # (the watch may look at the scheduler meanwhile)
    try:                              # (a signal's StopRequested comes inside the try only)
        stop.user_code = objective.function_here
        if stop.set and stop.user_code:
            raise StopRequested
        result = objective.evaluate(trial, comm, report, should_cancel=past_hard_edge)
    finally:
        stop.user_code = False
        if watch is not None:
            watch.lock.acquire()      # (blocks for ever where the watch is ending the job)
        if backstop is not None:
            faulthandler.cancel_dump_traceback_later()
    heard = None if stop.set else stop_signal_seen()
    if heard is not None:             # the objective's own handler took a stop signal and
        stop(heard, None)             # the trial ended all the same: the study stops now
    if result.status.value == "PRUNED" and result.value is None:
        from dataclasses import replace

        last = scheduler.last_report(trial.number)
        if last is not None:
            result = replace(result, value=last)
    return result
