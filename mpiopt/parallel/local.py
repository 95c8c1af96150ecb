"""Single-process mode: the same Scheduler, one group, the objective run in this process.

The first thing a newcomer runs, and the baseline of every scaling figure: no MPI job,
same searchers, same storage, same records.
"""
from __future__ import annotations

import signal
from collections import deque

from mpiopt.parallel.group import result_message
from mpiopt.parallel.protocol import Report
from mpiopt.parallel.scheduler import Dispatch, StopGroup


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def run_local(scheduler, objective, comm) -> bool:
    """Run the study to its end. Returns False when interrupted by SIGINT/SIGTERM."""
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        queue = deque(scheduler.start())
        while queue:
            action = queue.popleft()
            if isinstance(action, StopGroup):
                continue
            assert isinstance(action, Dispatch)
            queue.extend(scheduler.on_result(action.group, _evaluate(scheduler, objective, comm, action)))
        return True
    except KeyboardInterrupt:
        scheduler.interrupt()
        return False
    finally:
        signal.signal(signal.SIGTERM, previous)


def _evaluate(scheduler, objective, comm, action: Dispatch):
    trial = action.trial
    last = {"value": None}

    def report(epoch, value) -> bool:
        last["value"] = float(value)
        answer = scheduler.on_report(action.group, Report(trial.trial_id, int(epoch), float(value)))
        return not (answer and answer[0].decision.prune)

    outcome = objective.evaluate(trial.params, trial.seed, comm, report)
    return result_message(trial, outcome, last["value"])
