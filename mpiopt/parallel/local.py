"""Single-process mode: the same Scheduler, one group, the objective run in this process.

The first thing a newcomer runs, and the baseline of every scaling figure: no MPI job,
same searchers, same storage, same records. Ctrl-C, SIGTERM and SIGUSR1 end the running trial (a
sandboxed one at once; a Keras one at its next epoch) and the study is INTERRUPTED.
"""
from __future__ import annotations

import signal
from collections import deque

from mpiopt.errors import StopRequested, TrialCancelled
from mpiopt.parallel.protocol import Report
from mpiopt.parallel.scheduler import Dispatch, StopGroup
from mpiopt.processes import STOP_SIGNALS, forget_signals, note_signals, usual_signals_in_forks


class _Stop:
    """The signal handler: it only sets a flag, which the sandbox's wait, the per-epoch
    report and the loop look at. An exception raised at an arbitrary point (inside a
    database write, a pool's lock) could leave a lock held and the interrupt's own writes
    waiting on it for ever, as a clean-clone run showed. Only while user code runs in this
    process (objective.isolate: false) is KeyboardInterrupt raised, since nothing else
    could stop a trial that never returns."""

    def __init__(self):
        self.set = False
        self.user_code = False

    def __call__(self, signum, frame):
        self.set = True
        if self.user_code:
            raise StopRequested


def run_local(scheduler, objective, comm, stopped=lambda: False) -> bool:
    """Run the study to its end. Returns False when interrupted (signal, hard time limit;
    `stopped()`: whether a signal came since the study was opened, before this took over)."""
    # SIGINT too: a process started with SIGINT ignored (a background job, a parent that
    # ignores it) gets no KeyboardInterrupt from Python, and Ctrl-C or killpg would not stop
    # it; unblocked too: a blocked mask is inherited across fork and exec, and a pending
    # signal that is never delivered would leave the study running
    stop = _Stop()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    stop.set = stop.set or stopped()   # (asked once this handler is in place: none is lost)
    note_signals()       # (a trial that puts its own SIGINT handler back: objective.py)
    usual_signals_in_forks()     # (not the flag in a trial's Pool workers)
    try:
        queue = deque() if stop.set else deque(scheduler.start())
        while queue and not stop.set:
            action = queue.popleft()
            if isinstance(action, StopGroup):
                continue
            assert isinstance(action, Dispatch)
            result = _evaluate(scheduler, objective, comm, action, stop)
            queue.extend(scheduler.on_result(action.group, result))
            if result.status.value == "INTERRUPTED" or scheduler.overdue() is not None:
                raise KeyboardInterrupt
        if stop.set:
            raise KeyboardInterrupt
        return True
    except KeyboardInterrupt:
        scheduler.interrupt()
        return False
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        forget_signals()
        objective.close()


def _evaluate(scheduler, objective, comm, action: Dispatch, stop: _Stop):
    trial = action.trial

    def past_hard_edge() -> bool:
        edge = scheduler.hard_deadline
        return stop.set or (edge is not None and scheduler.clock() >= edge)

    def report(epoch, value):
        if past_hard_edge():
            return TrialCancelled("cancelled: the study is stopping")
        answer = scheduler.on_report(action.group, Report(trial.trial_id, int(epoch), float(value)))
        return not (answer and answer[0].decision.prune)

    stop.user_code = objective.function_here
    try:
        if stop.set and stop.user_code:
            raise StopRequested
        result = objective.evaluate(trial, comm, report, should_cancel=past_hard_edge)
    finally:
        stop.user_code = False
    if result.status.value == "PRUNED" and result.value is None:
        from dataclasses import replace

        last = scheduler.history.get(trial.number, {})
        if last:
            result = replace(result, value=scheduler.sign * last[max(last)])
    return result
