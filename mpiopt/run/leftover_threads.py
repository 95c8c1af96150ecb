"""The process ends even where an objective left a thread running.

Python's exit joins every non-daemon thread before anything else, without a limit. A
trial in a rank's own process (`isolate: false`, a function taking `comm`, a Keras model)
that starts one and leaves it running (a logger's writer, a prefetching loader, a busy
ThreadPoolExecutor) kept its rank alive after the study had ended, and with it mpiexec:
a COMPLETE study whose job never ended (a thread sleeping an hour: the job was still
there 100 s after the study's last line). Here the process waits for such threads at most
GRACE_S (a logger's last flush), then says so in one line and ends the way Python would
have, minus that join: atexit functions, MPI_Finalize (mpi4py's exit hook comes after
the join, so it would be skipped), flushed output, and the C library's exit with the same
status (see _c_exit).

The rest of the exit is bounded too: an objective's atexit function that blocks (an
experiment tracker's final upload to a server it cannot reach) held the rank, and the
job, the same way after a COMPLETE study (`atexit.register(time.sleep, 3600)` in an
`isolate: false` objective: still running at 40 s). So every exit runs under a watchdog:
if the atexit functions have not returned within EXIT_GRACE_S (MPIOPT_EXIT_GRACE), one
line says so and the process ends with the study's status all the same. A second watchdog in C
(faulthandler's) ends it a little later where the first cannot run (a call that never
releases the interpreter's lock), with a traceback of where, and an alarm (SIGALRM's
default action) later still, in Python's finalization, where neither runs and mpi4py
calls MPI_Finalize (a peer that never finalizes). Where no thread is left,
the exit is otherwise Python's own (measured: a Ctrl-C in the ranks' start-up, 0.2-1.2 s
in, ended 30 of 30 jobs of 3 ranks with status 130 that way, but 27 of 30 through the
atexit-MPI_Finalize-exit() sequence below, the other 3 killed by mpiexec's proxy).

Only the `mpiopt` program does this (mpiopt.cli.main.run, its console entry, calls
`exit_bounded`): tests call `main()` in their own process, which must not end.
"""
from __future__ import annotations

import faulthandler
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections import Counter

from mpiopt.knobs import EXIT_BACKSTOP_S as BACKSTOP_S
from mpiopt.knobs import EXIT_GRACE, GRACE_S, KnobError
from mpiopt.run.launcher import world_rank

EXIT_GRACE_S = EXIT_GRACE.default


def exit_bounded(code) -> None:
    """End the process with SystemExit(code)'s status, by an exit that no thread or exit
    function the objective left can hold up. Never returns."""
    code = _status(code)
    left = wait_for_threads(GRACE_S)
    if left:
        _say(left)
        _exit_without_joining(code)
    _watch(code)
    raise SystemExit(code)   # (Python's own exit: atexit functions, then MPI_Finalize)


def die_of_sigint() -> None:
    """End as Python ends on a Ctrl-C nobody caught: the traceback, then killed by SIGINT.

    A KeyboardInterrupt reaches here from main's first lines, before it holds the stop
    signals (mpiopt.run.startup_signals), while the other ranks may already wait in MPI_Init
    (once main holds them, a Ctrl-C is noted and acted on where the command can end in
    order).
    Ending with status 1 there would hang the job: mpiexec (MPICH's hydra) takes an
    ordinary exit of a rank that never started MPI as that rank's end, not the job's, and
    the others would wait in MPI_Init for it for ever (how often:
    benchmarks/results/startup.md). A rank killed by a signal is what mpiexec
    ends the whole job for, as it does for a Ctrl-C a few milliseconds earlier, in the
    interpreter's start."""
    traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # (a closed or broken pipe: nothing to keep)
            pass
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    os._exit(130)                      # (not reached: the default action ends the process)


def _status(code) -> int:
    """The exit status Python gives SystemExit(code): None 0, an int itself, anything
    else printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr, flush=True)
    return 1


def wait_for_threads(grace_s: float) -> list[threading.Thread]:
    """The non-daemon threads still alive after up to grace_s seconds. Python's own
    pre-join hooks run first (they tell idle ThreadPoolExecutor workers to stop, as at
    a normal exit), so an idle pool is not waited for."""
    hooks = getattr(threading, "_threading_atexits", None)
    if isinstance(hooks, list):
        for hook in list(hooks):
            try:
                hook()
            except Exception:   # (as at a normal exit: one hook's error stops no other)
                pass
        hooks.clear()           # (run once: Python's own exit would call them again)
    deadline = time.monotonic() + grace_s
    for thread in _foreign_threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    return _foreign_threads()


def _foreign_threads() -> list[threading.Thread]:
    main = threading.main_thread()
    return [t for t in threading.enumerate()
            if t is not main and not t.daemon and t.is_alive()]


def _say(left: list[threading.Thread]) -> None:
    counts = Counter(t.name for t in left)
    names = ", ".join(name + (f" x{n}" if n > 1 else "") for name, n in counts.most_common(3))
    names += ", ..." if len(counts) > 3 else ""
    print(f"mpiopt: rank {world_rank()} on {socket.gethostname()}: {len(left)} thread(s) "
          f"the objective started ({names}) still running {GRACE_S:g}s after the end; "
          "not waiting for them (make them daemon threads, or join them in the objective)",
          file=sys.stderr, flush=True)


def _exit_without_joining(code: int) -> None:
    """atexit functions, MPI_Finalize, flushed output, exit(code): within EXIT_GRACE_S, or
    one line and os._exit(code) all the same (see the module docstring)."""
    import atexit

    _watch(code)
    try:
        atexit._run_exitfuncs()
    finally:
        mpi = sys.modules.get("mpi4py.MPI")
        try:
            if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
                mpi.Finalize()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            _c_exit(code)


def _c_exit(code: int) -> None:
    """The C library's exit(code), without Python's finalization (the part that joins
    threads). Not os._exit: that skips the C libraries' exit handlers, MPICH's among them,
    and mpiexec's proxy then took a rank that had called MPI_Finalize for a crash and
    killed the others (BAD TERMINATION, exit status 9, in 4 of 20 jobs of 3 ranks; with
    exit(), 0 of 30)."""
    try:
        import ctypes

        ctypes.CDLL(None).exit(code)
    finally:
        os._exit(code)


def exit_grace_s() -> float:
    """MPIOPT_EXIT_GRACE's seconds, else EXIT_GRACE_S (mpiopt.knobs: never below GRACE_S
    + 1, as a peer's MPI_Finalize may wait that long for a rank that waits GRACE_S for its
    threads). A value it may not take was refused when the command started; at the exit
    it is the default all the same (an exit must not fail)."""
    try:
        return EXIT_GRACE.get() if EXIT_GRACE.given() else EXIT_GRACE_S
    except KnobError:
        return EXIT_GRACE_S


def _watch(code: int) -> None:
    """End the process with `code` if the exit has not, exit_grace_s() from now."""
    where = f"rank {world_rank()} on {socket.gethostname()}"
    grace = exit_grace_s()

    def expire():
        time.sleep(grace)
        try:
            print(f"mpiopt: {where}: the exit (atexit functions the objective registered, "
                  f"MPI_Finalize) still running after {grace:g}s; leaving without "
                  "it", file=sys.stderr, flush=True)
        finally:
            os._exit(code)

    threading.Thread(target=expire, name="mpiopt-exit-watchdog", daemon=True).start()
    try:
        faulthandler.dump_traceback_later(grace + BACKSTOP_S, exit=True)
    except (RuntimeError, ValueError, OSError):   # (no usable stderr: the first one only)
        pass
    # The last resort, for the part of Python's exit where neither of those runs (its
    # finalization, where mpi4py calls MPI_Finalize): the alarm's default action ends the
    # process (killed by SIGALRM), whatever it is doing.
    try:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(int(grace + 2 * BACKSTOP_S))
    except (ValueError, OSError):                 # (not the main thread: the others only)
        pass
