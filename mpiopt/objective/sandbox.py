"""Run a plain function objective in a worker process, so user code cannot end the job.

Under MPI a rank that dies takes the whole job with it (mpiexec kills every other rank at
once), so a trial that calls os._exit, segfaults or meets the OOM killer would leave no
record and poison every resume. Here the rank forks one worker that runs trials one after
another (module state stays warm between trials, as in-process); the rank waits on a pipe,
never spinning, and so stays free to notice:

- the worker's death: the trial is FAILED with its exit status or signal, and a fresh
  worker serves the next trial;
- the trial's deadline (search.trial_timeout): the worker is killed, the trial FAILED;
- a cancel from the coordinator (the job is ending): the worker is killed, the trial
  INTERRUPTED, so it runs again on resume.

The worker is forked (the objective is already imported, nothing is pickled) and never
calls MPI (an objective that tries gets an error at once: mpiopt.objective.world_guard): it
exits with os._exit and dies with its parent (PR_SET_PDEATHSIG).

Processes a trial starts die with its worker. A subprocess.Popen the objective does not
wait for, or a simulation still running when its trial's deadline kills the worker, would
otherwise live on holding the job's output pipes, and mpiexec waits for those after the
last rank has exited: a study that finished in seconds would keep the job for as long as
a killed trial's `subprocess.run(["sleep", "100"])` sleeps. So the worker leads a
process group of its own, which the rank kills whole where it kills the worker, and a
keeper process in that group kills the group when the worker dies for any reason (its
trial's os._exit, the end of the study, the rank's own death). A process that starts a
session of its own (setsid, start_new_session) leaves the group: the worker is a child
subreaper, so such a program stays below it even when its parent exits, and the worker
ends it as the trial ends (the job's launcher waited for it for as long as it ran): once
the result is on its way to the rank and before the worker takes its next trial, so the
group's next trial does not wait for the look (mpiopt.objective.processes.Detached).
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import time

from mpiopt.errors import TrialStopped
from mpiopt.durations import format_duration
from mpiopt.trial import Result, Trial
from mpiopt.objective.world_guard import guard_worker
from mpiopt.objective.processes import (STOP_SIGNALS, Detached, follow_orphans,
                                       forget_signals, ignore, own_fork)
from mpiopt.trial import TrialStatus

POLL_S = 0.05        # how often a waiting rank looks at the coordinator's cancel
KILL_WAIT_S = 5.0    # how long a killed worker may take to be reaped


class Sandbox:
    """One worker process per rank; run() is a trial, start to end."""

    def __init__(self, objective):
        self.objective = objective
        self._ctx = multiprocessing.get_context("fork")
        self._proc = None
        self._conn = None

    def run(self, trial: Trial, report=None, should_cancel=None) -> Result:
        self._ensure_worker()
        start = time.perf_counter()
        deadline = None if not trial.timeout else time.monotonic() + trial.timeout
        self._conn.send(("run", trial, report is not None))
        while True:
            wait = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic()))
            try:
                ready = self._conn.poll(wait)
            except KeyboardInterrupt:
                self._kill()
                raise
            if ready:
                msg = self._receive()
                if msg is None:
                    return _elapsed(self._death(trial), start)
                kind, payload = msg
                if kind == "done":
                    return payload
                self._conn.send(_answer_for_worker(report(*payload)))   # a report
                continue
            if deadline is not None and time.monotonic() >= deadline:
                self._kill()
                return _elapsed(_failed(trial, f"timed out after {format_duration(trial.timeout)} "
                                                     f"({self.objective.where})"), start)
            if should_cancel is not None and should_cancel():
                self._kill()
                return _elapsed(Result(trial.trial_id, TrialStatus.INTERRUPTED,
                                       error="cancelled: the job is ending"), start)

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(("exit", None, None))
                self._proc.join(KILL_WAIT_S)
            except (OSError, EOFError):
                pass
        self._kill()

    # ---- internals ----------------------------------------------------------------
    def _ensure_worker(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            return
        parent, child = self._ctx.Pipe(duplex=True)
        self._proc = self._ctx.Process(target=_serve, args=(self.objective, child), daemon=True,
                                       name="mpiopt-trial")
        follow_orphans()   # what the worker leaves when killed stays below the rank, which
                           # ends it as it exits (mpiopt.objective.processes)
        with own_fork():                 # (it ignores the stop signals from its first line)
            self._proc.start()
        child.close()
        self._conn = parent
        try:
            os.setpgid(self._proc.pid, self._proc.pid)   # (the worker does too: no race)
        except OSError:
            pass

    def _receive(self):
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            return None

    def _death(self, trial: Trial) -> Result:
        self._proc.join(KILL_WAIT_S)
        code = self._proc.exitcode
        self._forget()
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            hint = " (out of memory?)" if -code == signal.SIGKILL else ""
            how = f"killed by {name}{hint}"
        else:
            how = f"exit status {code}"
        return _failed(trial, f"objective killed its process: {how} ({self.objective.where})")

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.exitcode is None:   # not reaped: its pid and group are still ours
                _kill_group(self._proc.pid)
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(KILL_WAIT_S)
        self._forget()

    def _forget(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._proc, self._conn = None, None


def _kill_group(pid: int) -> None:
    """SIGKILL the worker's process group (the worker and whatever its trials started),
    only where the worker leads one: never the rank's own group."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _answer_for_worker(answer):
    """A report's answer crosses the pipe as True/False or ("stop", class name, reason)."""
    if isinstance(answer, TrialStopped):
        return ("stop", type(answer).__name__, answer.reason)
    return bool(answer)


def _elapsed(result: Result, start: float) -> Result:
    from dataclasses import replace

    return replace(result, duration=time.perf_counter() - start)


# ---- the worker process -----------------------------------------------------------------
def _serve(objective, conn) -> None:
    """The worker's loop: run trials until told to exit or the parent is gone."""
    _die_with_parent()
    # Daemonic to the rank (multiprocessing ends it if the rank exits without close()),
    # but not to itself: multiprocessing refuses a daemonic process children, and an
    # objective's multiprocessing.Pool or ProcessPoolExecutor failed every trial with
    # "daemonic processes are not allowed to have children"
    multiprocessing.current_process().daemon = False
    # the rank decides; it kills us when it must (the trial's programs keep the defaults)
    ignore(STOP_SIGNALS)
    forget_signals()                       # (the rank's record of signals is the rank's)
    _lead_a_group_with_a_keeper()
    follow_orphans()                       # a detached program stays below us (Detached)
    detached = Detached()
    guard_worker(objective.namespace)      # MPI here would run on the rank's copied state
    try:
        while True:
            try:
                kind, trial, wants_report = conn.recv()
            except (EOFError, OSError):
                break
            if kind != "run":
                break
            report = _remote_report(conn) if wants_report else None
            trial = _without_timeout(trial)      # the parent keeps the deadline
            conn.send(("done", objective.run_here(trial, None, report)))
            detached.end()
    finally:
        os._exit(0)


def _remote_report(conn):
    from mpiopt import errors

    def report(epoch, value):
        conn.send(("report", (epoch, value)))
        answer = conn.recv()
        if isinstance(answer, tuple):
            _, name, reason = answer
            return getattr(errors, name)(reason)
        return answer

    return report


def _without_timeout(trial: Trial) -> Trial:
    from dataclasses import replace

    return replace(trial, timeout=None)


def _lead_a_group_with_a_keeper() -> None:
    """Make this worker a process group's leader and fork the group's keeper: a process
    that does nothing until the worker dies (its PR_SET_PDEATHSIG), then SIGKILLs the
    whole group, itself included, so nothing a trial started outlives the worker. The
    keeper holds no file of the worker's (not the job's output, not the rank's pipe), so
    even a keeper that failed to act would not keep the job or the rank waiting."""
    try:
        os.setpgid(0, 0)
    except OSError:
        return
    if os.getpgrp() != os.getpid() or not _LIBC_PRCTL:
        return                                   # never kill a group we do not lead
    worker = os.getpid()
    try:
        with own_fork():
            pid = os.fork()
    except OSError:
        return
    if pid:
        return
    try:                                         # the keeper
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, _max_fd())
        # blocked, the signal waits for sigtimedwait (no race with a check of the parent);
        # the timeout re-checks the parent should the signal never come
        signal.pthread_sigmask(signal.SIG_BLOCK, [_KEEPER_SIGNAL])
        _LIBC_PRCTL(1, _KEEPER_SIGNAL)           # PR_SET_PDEATHSIG: sent when the worker dies
        while os.getppid() == worker:
            signal.sigtimedwait([_KEEPER_SIGNAL], _KEEPER_CHECK_S)
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(0)


def _max_fd() -> int:
    try:
        return max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1
    except (OSError, ValueError):
        return 1024


def _libc_prctl():
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_LIBC_PRCTL = _libc_prctl()
# The keeper's signal that its worker died: one that nothing else sends (a job's SIGTERM,
# which the worker ignores, must not make the keeper kill a trial the rank will cancel).
_KEEPER_SIGNAL = signal.SIGRTMIN + 7
_KEEPER_CHECK_S = 1.0     # the keeper looks at its parent at least this often


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the rank that forked it dies (no orphans)."""
    if _LIBC_PRCTL is not None:
        _LIBC_PRCTL(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    if os.getppid() == 1:
        os._exit(0)


def _failed(trial: Trial, error: str) -> Result:
    return Result(trial.trial_id, TrialStatus.FAILED, error=error)
