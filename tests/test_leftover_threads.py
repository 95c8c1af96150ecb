"""mpiopt.run.leftover_threads, in a process of its own: its hooks stop that process's
thread pools for good."""
from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import threading, time
from concurrent.futures import ThreadPoolExecutor
from mpiopt.run.leftover_threads import wait_for_threads

idle = ThreadPoolExecutor(2)       # idle workers: told to stop, as at a normal exit
idle.submit(time.sleep, 0.01).result()
threading.Thread(target=time.sleep, args=(0.2,), name="short").start()   # ends in the grace
threading.Thread(target=time.sleep, args=(3,), name="long").start()      # does not
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()    # never counted
print(",".join(t.name for t in wait_for_threads(1.0)))
"""


def test_only_threads_still_running_after_the_grace_are_left():
    # (the child itself then ends the Python way: its "long" thread is joined, 3 s)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "long"


EXIT = """
import atexit, re, sys, time
import mpiopt.run.leftover_threads as lt
lt.EXIT_GRACE_S, lt.BACKSTOP_S = 1.0, 1.0
if sys.argv[1] == "sleeps":
    atexit.register(time.sleep, 600)                     # waits, the interpreter free
elif sys.argv[1] == "holds":
    atexit.register(re.match, r"(a+)+$", "a" * 60 + "b")  # never lets the interpreter go
atexit.register(print, "ran the exit functions before it", flush=True)   # (last in, first out)
lt._exit_without_joining(3)
"""


def _exit_of(kind):
    return subprocess.run([sys.executable, "-c", EXIT, kind], capture_output=True, text=True,
                          timeout=120)


def test_the_exit_keeps_the_status_and_runs_the_exit_functions():
    proc = _exit_of("nothing")
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.strip() == "ran the exit functions before it" and proc.stderr == ""


def test_an_exit_function_that_blocks_is_left_after_the_grace_with_the_status():
    proc = _exit_of("sleeps")
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.strip() == "ran the exit functions before it"
    assert proc.stderr.startswith("mpiopt: rank 0 on ") and "leaving without it" in proc.stderr


def test_an_exit_function_that_holds_the_interpreter_is_ended_by_the_backstop():
    proc = _exit_of("holds")
    assert proc.returncode == 1, proc.stderr               # (faulthandler's exit status)
    assert "Timeout (0:00:02)!" in proc.stderr and "in match" in proc.stderr   # (where)


FINAL = """
import sys, time
import mpiopt.run.leftover_threads as lt
lt.EXIT_GRACE_S, lt.BACKSTOP_S = 1.0, 1.0


class Stuck:
    def __del__(self):       # runs in the interpreter's finalization, where our thread cannot
        time.sleep(600)


holder = Stuck()
lt._watch(0)
sys.exit(0)
"""


def test_python_s_own_exit_is_ended_where_its_finalization_blocks():
    # (where mpi4py's MPI_Finalize runs; a peer that never finalizes would block it):
    # faulthandler's timer ends it here; the alarm is there for a later phase
    proc = subprocess.run([sys.executable, "-c", FINAL], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode in (-14, 1), (proc.returncode, proc.stderr)   # SIGALRM, or faulthandler
