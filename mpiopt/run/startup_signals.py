"""Ctrl-C (or SIGTERM, SIGUSR1) that arrives while a rank is still starting is held, not
acted on, until the rank can end in order.

Under mpirun a terminal's Ctrl-C reaches every rank at once. In a job's first second the
ranks are still importing and inside MPI_Init, where every rank waits for all the others:
a rank 0 that ended at once, cleanly (`mpiopt: interrupted`, status 130), would leave the
other ranks in MPI_Init waiting for it, at full CPU, and mpiexec with them, for ever (how
often: benchmarks/results/startup.md); a group rank ended by the signal a little later
would end the job with a killed rank (status 9) instead of the one line.

So `main` holds these signals from its first line: a signal that comes is only noted.
Rank 0 of a run releases them where it can tell every rank (mpiopt.run.launch: the
start-up's messages carry the verdict "interrupted"); the other ranks of a run leave
signals to rank 0 from then on (launch.signal_ignore); any other command releases them
once its arguments are parsed. Released, a noted signal goes to the handler then in place
(a KeyboardInterrupt for Ctrl-C). What is left is the time before `main` runs (the
interpreter's start and mpiopt's import, about 60 ms): a rank killed there is a killed
process, and mpiexec ends the job.

`deferred()` does the same for a stretch of code that must not be cut in two: rank 0's
start-up messages go to every rank or to none (a Ctrl-C between two sends left the ranks
not yet sent to waiting for a message that never came).

A signal ignored by whoever started mpiopt (nohup, a background job) stays ignored, and
system calls that a held signal interrupts are restarted, as with no handler.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

from mpiopt.objective.processes import STOP_SIGNALS as HELD


class _Hold:
    """The handlers a hold replaced, and the signals it noted meanwhile."""

    def __init__(self):
        self.before: dict[int, object] = {}
        self.noted: list[int] = []

    def start(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return                       # (signals are the main thread's only)
        for sig in HELD:
            if signal.getsignal(sig) == signal.SIG_IGN:
                continue
            self.before.setdefault(sig, signal.getsignal(sig))
            signal.signal(sig, self.note)
            signal.siginterrupt(sig, False)

    def note(self, signum, frame) -> None:
        self.noted.append(signum)

    def restore(self) -> None:
        for sig, handler in self.before.items():
            if signal.getsignal(sig) == self.note:   # (one who took over is left alone)
                signal.signal(sig, handler)
        self.before.clear()

    def release(self) -> None:
        """Restore, then hand each signal noted to the handler now in place, once."""
        self.restore()
        noted, self.noted = list(dict.fromkeys(self.noted)), []
        for sig in noted:
            signal.raise_signal(sig)


_main = _Hold()


def hold() -> None:
    """From `main`'s first line: note these signals instead of acting on them (in the
    main thread; elsewhere, as when `main` is called from a thread, nothing is held)."""
    _main.start()


def release() -> None:
    """The handlers from before `hold`; a signal noted meanwhile goes to them now (a
    KeyboardInterrupt for Ctrl-C)."""
    _main.release()


def restore() -> None:
    """The handlers from before `hold`, and nothing noted is acted on."""
    _main.restore()
    _main.noted.clear()


def forget() -> None:
    """This process installs its own handlers now (a group rank's): nothing to restore,
    and what was noted is not acted on."""
    _main.before.clear()
    _main.noted.clear()


_deferring: list[_Hold] = []


def noted() -> bool:
    """Whether a stop signal is being held (by `hold` or a `deferred` block): a wait
    inside one ends early with KeyboardInterrupt, which the block's end turns into the
    signal's own handling (mpiopt.run.study_run.take_lease's wait for a silent job)."""
    return bool(_main.noted) or any(h.noted for h in _deferring)


@contextmanager
def deferred():
    """Signals in this block reach the handlers in place at its end, not in the middle."""
    hold = _Hold()
    hold.start()
    _deferring.append(hold)
    try:
        yield
    finally:
        _deferring.remove(hold)
        hold.release()
