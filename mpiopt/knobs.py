"""Every time limit of a run and every MPIOPT_* environment variable, declared once.

A limit is a constant here, with its unit in its name (`_S`: seconds) and one line of why;
where one limit follows from another, the relation is the code (GRACE_S = WIND_DOWN_S),
not a comment. An environment variable is a `Knob`: its default, its unit, the range it
may take, why it exists; `Knob.get()` is the one parser. A value it cannot take (`abc`,
`0` where 0 is not allowed, `-1`) is refused with one line that names the variable and
its range (KnobError: exit status 2), never taken in silence and never a traceback. A run
checks every knob on every rank in its start-up, before anything is written
(mpiopt.run.startup); any other command checks them before it starts (mpiopt.cli.main).
An empty value is no value: the default (`export MPIOPT_GROUP_WAIT=` clears it).

This module imports nothing of mpiopt's but the errors, so every layer may import it.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from mpiopt.errors import MpioptError

# The longest any knob's seconds may be: a week is longer than any allocation, and a
# larger figure (a typo's 1e300) overflows the waits it is given to (threading's timeouts).
LONGEST_S = 7 * 24 * 3600.0


class KnobError(MpioptError):
    """An MPIOPT_* variable holds a value it may not take."""


@dataclass(frozen=True)
class Knob:
    """One MPIOPT_* variable. `kind` is float, int or str; `low`/`high` bound a number,
    `choices` the words a str may be (empty: any text)."""

    env: str
    default: float | int | str | None
    unit: str
    why: str
    kind: type = float
    low: float | None = None
    high: float | None = None
    choices: tuple = ()

    def get(self, environ=None):
        """The variable's value, or the default where it is unset or empty; KnobError
        where it is neither a number of `kind` nor within low..high."""
        raw = (os.environ if environ is None else environ).get(self.env, "").strip()
        if not raw:
            return self.default
        if self.kind is str:
            if self.choices and raw not in self.choices:
                raise KnobError(self._refusal(raw, "not a known word"))
            return raw
        try:
            value = self.kind(raw)
        except ValueError:
            raise KnobError(self._refusal(raw, "not a number")) from None
        if not math.isfinite(value) or (self.low is not None and value < self.low) or (
                self.high is not None and value > self.high):
            raise KnobError(self._refusal(raw, "out of range"))
        return value

    def given(self, environ=None) -> bool:
        """Whether the variable holds a value (an empty one is none)."""
        return bool((os.environ if environ is None else environ).get(self.env, "").strip())

    def allowed(self) -> str:
        """The range in words, as the refusal and the README say it."""
        if self.choices:
            return f"one of {', '.join(self.choices)}"
        if self.kind is str:
            return self.unit
        if self.kind is int:
            return f"a whole number of {self.unit} from {self.low:d} to {self.high:d}"
        return f"{self.unit} from {self.low:g} to {self.high:g}"

    def _refusal(self, raw: str, what: str) -> str:
        shown = raw if len(raw) <= 40 else raw[:37] + "..."
        default = "" if self.default is None else (
            f" (default {self.default})" if self.kind is str else f" (default {self.default:g})")
        return f"{self.env}={shown!r}: {what}; allowed: {self.allowed()}{default}"


# ---- the end of a run ---------------------------------------------------------------------
# How long the coordinator waits for every rank's BYE once the study ends (coordinator.py):
# an orderly rank answers within a trial's cancel; one that does not is stuck in user code.
WIND_DOWN_S = 10.0
# How long a trial in a single process may go on after a stop signal (parallel/local.py):
# what the coordinator gives its groups.
STOP_WAIT_S = WIND_DOWN_S
# After a single-process trial's limit, how long the watch has to give the trial up before
# faulthandler ends the process instead (parallel/local.py).
TRIAL_BACKSTOP_S = 10.0
# How long a rank's exit waits for threads the objective left running (leftover_threads):
# as long as the coordinator waits for the ranks' goodbyes.
GRACE_S = WIND_DOWN_S
# The least the rest of the exit (atexit functions, MPI_Finalize) may be given: MPICH's
# MPI_Finalize waits for the other ranks', and one of them may be waiting GRACE_S for its
# threads.
EXIT_GRACE_LEAST_S = GRACE_S + 1.0
# After the exit's grace, how long before faulthandler's watchdog ends a process that our
# own watchdog could not (a call that never releases the interpreter's lock).
EXIT_BACKSTOP_S = 5.0
# How long a group rank whose FATAL went out waits for the coordinator's answer, and how
# long a rank of a stuck group stays before it exits (parallel/group.py).
FATAL_WAIT_S = WIND_DOWN_S
STAY_S = 3 * WIND_DOWN_S      # (longer than the coordinator's wind-down and its abort)
# How long the closing line gets before MPI_Abort tears the launcher's output down.
ABORT_PAUSE_S = 1.0
# A rank that lost rank 0 in the start-up: rank 1 says so, the others wait this much
# longer (rank 1 may be gone too), so that one line comes where one rank can say it.
AFTER_RANK1_S = 10.0
# How long past its trial_timeout a trial that did not stop may hold its group: as long
# as the timeout, within these bounds (a Keras trial stops at its next epoch).
STUCK_GRACE_LEAST_S, STUCK_GRACE_MOST_S = 5.0, 60.0

# ---- the variables ------------------------------------------------------------------------
STARTUP_TIMEOUT = Knob(
    "MPIOPT_STARTUP_TIMEOUT", 600.0, "seconds",
    "how long rank 0 waits for every rank to set up its objective (TensorFlow on a busy "
    "shared file system takes minutes; a rank stuck in an import must not hold the "
    "allocation)", low=1.0, high=LONGEST_S)
GROUP_WAIT = Knob(
    "MPIOPT_GROUP_WAIT", 60.0, "seconds",
    "how long a rank whose part of a group trial failed waits for the group's others",
    low=1.0, high=LONGEST_S)
SILENCE_LIMIT = Knob(
    "MPIOPT_SILENCE_LIMIT", 60.0, "seconds",
    "a rank silent this long (no heartbeat) is taken for dead and the job ends",
    low=1.0, high=LONGEST_S)
LEASE_PERIOD = Knob(
    "MPIOPT_LEASE_PERIOD", 30.0, "seconds",
    "time between the lease's heartbeats in the database; a job silent for three is dead",
    low=0.2, high=LONGEST_S)
EXIT_GRACE = Knob(
    "MPIOPT_EXIT_GRACE", 30.0, "seconds",
    "how long a rank's exit (atexit functions, MPI_Finalize) may take before it is left",
    low=EXIT_GRACE_LEAST_S, high=LONGEST_S)
SQLITE_BUSY_MS = Knob(
    "MPIOPT_SQLITE_BUSY_MS", 30_000, "milliseconds",
    "how long one SQLite statement waits for a lock before it is a retried error",
    kind=int, low=1, high=int(LONGEST_S * 1000))
THREADS = Knob(
    "MPIOPT_THREADS", None, "threads",
    "a training rank's intra-op threads (default: the node's cores / its ranks)",
    kind=int, low=1, high=4096)
STORAGE = Knob(
    "MPIOPT_STORAGE", None, "a SQLAlchemy URL",
    "the results database where --storage is not given (a URL with a password need not "
    "sit in a spec file or a shell history)", kind=str)
NATIVE_LOG = Knob(
    "MPIOPT_NATIVE_LOG", None, "a file path",
    "where a rank's native stderr (a framework's start-up lines) goes; the launcher sets it",
    kind=str)
TORCH_COLLECTIVES = Knob(
    "MPIOPT_TORCH_COLLECTIVES", "auto", "a word",
    "what sums a torch model's gradient over its group: auto (torch.distributed with NCCL "
    "where the group's ranks have GPUs, else MPI), mpi, or torch (torch.distributed: gloo "
    "on CPUs)", kind=str, choices=("auto", "mpi", "torch"))

KNOBS = (STARTUP_TIMEOUT, GROUP_WAIT, SILENCE_LIMIT, LEASE_PERIOD, EXIT_GRACE, SQLITE_BUSY_MS,
         THREADS, STORAGE, NATIVE_LOG, TORCH_COLLECTIVES)


def table() -> str:
    """The variables as a Markdown table (for the README): name, default, range, why."""
    rows = ["| variable | default | allowed | what it sets |", "|---|---|---|---|"]
    for k in KNOBS:
        default = "-" if k.default is None else (
            k.default if isinstance(k.default, str) else f"{k.default:g}")
        rows.append(f"| `{k.env}` | {default} | {k.allowed()} | {k.why} |")
    return "\n".join(rows)


def check_all(environ=None) -> None:
    """Raise KnobError for the first variable that holds a value it may not take."""
    for knob in KNOBS:
        knob.get(environ)


# ---- limits that follow from the variables ------------------------------------------------
def startup_limit() -> float:
    """Seconds rank 0 waits for every rank's set-up (MPIOPT_STARTUP_TIMEOUT)."""
    return STARTUP_TIMEOUT.get()


def lease_wait_s(startup: float) -> float:
    """How long rank 0's opening waits for a silent holder of the study's lease: half of
    what the other ranks wait for the start-up's verdict, so the verdict comes in time."""
    return startup / 2


def rank0_silence_s(startup: float, rank: int) -> float:
    """How long a rank waits for rank 0's start-up message before it takes rank 0 for lost:
    rank 0 gives up on a rank after `startup` and its opening is bounded by half of it, so
    twice is late; rank 1 says so first, the others a little later (rank 1 may be gone)."""
    return 2 * startup + (0 if rank == 1 else AFTER_RANK1_S)


def job_end_s(storage_retry: float) -> float:
    """How long a rank whose group was stopped waits for rank 0 to reach the job's end
    before its own exit starts (and with it MPIOPT_EXIT_GRACE's bound, since MPI_Finalize
    waits for rank 0): rank 0's wind-down, then its closing writes (the study's end, which
    may ride out an outage of storage.retry_timeout, and the lease given back, as long
    again), with the least exit grace to spare."""
    return WIND_DOWN_S + 2 * storage_retry + EXIT_GRACE_LEAST_S


def stuck_grace_s(timeout: float | None) -> float:
    """How long past its timeout a trial that did not stop may hold its group before the
    job ends: as long as the timeout, within STUCK_GRACE_LEAST_S .. STUCK_GRACE_MOST_S (a
    plain function in a sandbox is killed at once and never gets here)."""
    if not timeout:
        return STUCK_GRACE_MOST_S
    return min(STUCK_GRACE_MOST_S, max(STUCK_GRACE_LEAST_S, timeout))
