"""Ctrl-C (or SIGTERM, SIGUSR1) that arrives while a rank is still starting is held, not
acted on, until the rank can end in order.

Under mpirun a terminal's Ctrl-C reaches every rank at once. In a job's first second the
ranks are still importing and inside MPI_Init, where every rank waits for all the others:
rank 0 used to end at once, cleanly (`mpiopt: interrupted`, status 130), while the other
ranks sat in MPI_Init waiting for it, at full CPU, and mpiexec with them, for ever
(measured: Ctrl-C 0.2-0.3 s into `mpiexec -n 3 mpiopt search`, 5 jobs of 10 hung). A group
rank ended by the signal a little later ended the job with a killed rank (status 9)
instead of the one line.

So `main` holds these signals from its first line: a signal that comes is only noted.
Rank 0 of a run releases them where it can tell every rank (mpiopt.parallel.launch: the
start-up's first message carries the verdict "interrupted"); the other ranks of a run
leave signals to rank 0 from then on (launch.signal_ignore); any other command releases
them once its arguments are parsed. Released, a noted signal is a KeyboardInterrupt.
What is left is the time before `main` runs (the interpreter's start and mpiopt's import,
about 60 ms): a rank killed there is a killed process, and mpiexec ends the job.

System calls that a held signal interrupts are restarted, as with no handler.
"""
from __future__ import annotations

import signal
import threading

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)

_noted: list[int] = []
_before: dict[int, object] = {}


def hold() -> None:
    """Note these signals instead of acting on them (in the main thread; elsewhere, as
    when `main` is called from a thread, nothing is held)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in HELD:
        if signal.getsignal(sig) == signal.SIG_IGN:
            continue            # ignored by whoever started us (nohup, `cmd &`): it stays so
        _before.setdefault(sig, signal.getsignal(sig))
        signal.signal(sig, _note)
        signal.siginterrupt(sig, False)


def _note(signum, frame) -> None:
    _noted.append(signum)


def release() -> None:
    """The handlers from before `hold`; a signal noted meanwhile is raised now as
    KeyboardInterrupt (SIGTERM too: a held start-up ends as Ctrl-C ends it)."""
    restore()
    if _noted:
        _noted.clear()
        raise KeyboardInterrupt


def restore() -> None:
    """The handlers from before `hold`, and nothing noted is acted on."""
    for sig, handler in _before.items():
        if signal.getsignal(sig) is _note:     # (someone who took over is left alone)
            signal.signal(sig, handler)
    _before.clear()


def forget() -> None:
    """This process installs its own handlers now (a group rank's): nothing to restore,
    and what was noted is not acted on."""
    _before.clear()
    _noted.clear()
