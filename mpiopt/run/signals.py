"""The run's stop signals once the start-up's hold is over (mpiopt.run.startup_signals
holds them before): rank 0's stop flag, and the group ranks that leave signals to it.

SIGINT, SIGTERM and SIGUSR1 all stop a run in order: the coordinator cancels the running
trials, records them INTERRUPTED and prints the resume line. SIGUSR1 is the batch
system's "walltime is near" (Slurm `--signal=USR1@300`, examples/slurm/), whose default
action would kill the process.
"""
from __future__ import annotations

import signal
import threading

from mpiopt.objective.processes import STOP_SIGNALS


class StopFlag:
    """Set by SIGINT/SIGTERM/SIGUSR1; the coordinator's loop looks at it between messages
    (it calls only is_set() and reads signum), and a database wait looks at it too."""

    def __init__(self):
        self.event = threading.Event()
        self.signum: int | None = None

    def install(self) -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)   # (a blocked mask is inherited)
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._handler)

    def _handler(self, signum, frame) -> None:
        self.set(signum)

    def set(self, signum: int) -> None:
        """As if `signum` had come (single-process mode's own handler passes it on)."""
        self.signum = self.signum or signum
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()


def installed_stop_flag() -> StopFlag:
    """The coordinator's stop flag, installed as soon as the study is open: a signal from
    here on ends the run in order, with the resume line (a Ctrl-C between the opening and
    the coordinator's start said `mpiopt: interrupted` alone and left the study RUNNING).
    In single-process mode run_local takes over from it, starting from what it noted."""
    flag = StopFlag()
    flag.install()
    return flag


def stop_as_ctrl_c() -> None:
    """Until the stop flag takes over, SIGTERM and SIGUSR1 (`scancel`, Slurm's `--signal`)
    end rank 0's start-up as Ctrl-C does: the other ranks get the verdict "interrupted"
    and the job ends with one line (by default they killed rank 0 silently, status 15)."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, interrupt)


def leave_signals_to_rank0() -> None:
    """Group ranks leave SIGINT/SIGTERM/SIGUSR1 to the coordinator, which cancels their
    trials and ends the job in order; a rank killed first could take the coordinator down
    with it (Slurm's --signal reaches every task of the step, not only rank 0)."""
    from mpiopt.objective.processes import ignore, note_signals
    from mpiopt.run import startup_signals

    ignore(STOP_SIGNALS)                # (not in trials' programs)
    note_signals()                      # (a trial's own handler may act on them: objective)
    startup_signals.forget()            # (one held since main: rank 0 heard it too)
