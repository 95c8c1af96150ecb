"""mpiopt.objective.processes: what a rank ends at its exit (programs its trials left running)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from mpiopt.objective.processes import descendants, end_started_since, process_alive


def test_only_processes_started_after_the_snapshot_are_ended():
    kept = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    before = descendants()
    left = subprocess.Popen(["sh", "-c", "sleep 60 & wait"])    # a child with a child
    try:
        grandchild_seen = False
        for _ in range(100):
            now = descendants()
            grandchild_seen = len(now - before) >= 2
            if grandchild_seen:
                break
            subprocess.run(["sleep", "0.02"])
        assert kept.pid in before and left.pid in now and grandchild_seen
        assert end_started_since(before) >= 2
        assert left.wait(5) == -9 and kept.poll() is None
        assert not {p for p in descendants() - before if process_alive(p)}
    finally:
        kept.kill()
        kept.wait()
        left.kill()
        left.wait()


RACE = """
import multiprocessing, os, signal, sys, time
from mpiopt.objective.processes import ignore, usual_signals_in_forks
if sys.argv[1] == "ignored":
    ignore([signal.SIGTERM])                      # a group rank's stop signals
else:
    def interrupt(signum, frame):                 # rank 0's during its start-up
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, interrupt)
os.register_at_fork(after_in_child=lambda: time.sleep(0.3))   # a slow child's first moments
usual_signals_in_forks()
with multiprocessing.get_context("fork").Pool(2):
    pass                                          # its exit terminates the workers at once
print("ended")
"""


@pytest.mark.parametrize("handler", ["ignored", "interrupt"])
def test_a_pool_terminated_at_once_ends_whatever_handlers_it_forked_from(handler):
    """A trial's Pool made and terminated at once: the SIGTERM reached its workers before
    they had their own handlers, tripped the inherited one and was dropped, and
    terminate() waited for ever (a CI run hung on it). The stop signals stay blocked
    across the fork until the child has Python's usual handlers."""
    proc = subprocess.Popen([sys.executable, "-c", RACE, handler], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)       # (the pool's workers too)
        out, err = proc.communicate()
    assert proc.returncode == 0 and out.strip() == "ended", err
