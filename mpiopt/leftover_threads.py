"""The process ends even where an objective left a thread running.

Python's exit joins every non-daemon thread before anything else, without a limit. A
trial in a rank's own process (`isolate: false`, a function taking `comm`, a Keras model)
that starts one and leaves it running (a logger's writer, a prefetching loader, a busy
ThreadPoolExecutor) kept its rank alive after the study had ended, and with it mpiexec:
a COMPLETE study whose job never ended (a thread sleeping an hour: the job was still
there 100 s after the study's last line). Here the process waits for such threads at most
GRACE_S (a logger's last flush), then says so in one line and ends the way Python would
have, minus that join: atexit functions, MPI_Finalize (mpi4py's exit hook comes after
the join, so it would be skipped), flushed output, os._exit with the same status.

Only the `mpiopt` program does this (`run`, its console entry): tests call `main()` in
their own process, which must not end.
"""
from __future__ import annotations

import os
import socket
import sys
import threading
import time
import traceback
from collections import Counter

GRACE_S = 10.0   # as long as the coordinator waits for the ranks' goodbyes


def run() -> None:
    """The `mpiopt` program: main(), then an exit that no thread can hold up."""
    from mpiopt.cli.main import main

    try:
        code = main()
    except SystemExit as exc:          # (argparse's usage errors, --help, --version)
        code = exc.code
    except BaseException:              # (a bug of mpiopt's: its traceback, then the same
        traceback.print_exc()          # bounded exit, not Python's unbounded join)
        code = 1
    left = wait_for_threads(GRACE_S)
    if left:
        _say(left)
        _exit_without_joining(code if isinstance(code, int) else 1)
    raise SystemExit(code)


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
    from mpiopt.cli.main import _world_rank

    counts = Counter(t.name for t in left)
    names = ", ".join(name + (f" x{n}" if n > 1 else "") for name, n in counts.most_common(3))
    names += ", ..." if len(counts) > 3 else ""
    print(f"mpiopt: rank {_world_rank()} on {socket.gethostname()}: {len(left)} thread(s) "
          f"the objective started ({names}) still running {GRACE_S:g}s after the end; "
          "not waiting for them (make them daemon threads, or join them in the objective)",
          file=sys.stderr, flush=True)


def _exit_without_joining(code: int) -> None:
    import atexit

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
            os._exit(code)
