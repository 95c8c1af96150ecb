"""mpiopt.objective.processes: what a rank ends at its exit (programs its trials left running)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

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


class _Quick:
    """The least a Sandbox runs: a trial that returns its x at once."""
    where = "test"
    namespace: dict = {}

    def run_here(self, trial, comm, report=None):
        from mpiopt.trial import Result, TrialStatus

        return Result(trial.trial_id, TrialStatus.COMPLETE, value=trial.params["x"])


def test_a_sandboxed_result_leaves_before_its_worker_looks_for_detached_programs(tmp_path,
                                                                             monkeypatch):
    """The look for programs a trial detached takes CPU at the moment every group's
    trial ends: the worker looks once the result is on its way, and before it takes its
    next trial. Here the look waits until the rank has the result (bounded, so the order
    reversed fails the test instead of hanging it)."""
    from mpiopt.objective import sandbox
    from mpiopt.trial import Trial, TrialStatus

    received, looked = tmp_path / "received", tmp_path / "looked"

    class Look:                       # (in the forked worker)
        def end(self):
            end = time.monotonic() + 10
            while not received.exists() and time.monotonic() < end:
                time.sleep(0.01)
            looked.touch()
            return 0

    monkeypatch.setattr(sandbox, "Detached", Look)
    box = sandbox.Sandbox(_Quick())
    try:
        result = box.run(Trial(7, 0, {"x": 1.5}, seed=0))
        looked_first = looked.exists()
        received.touch()
        again = box.run(Trial(8, 1, {"x": 2.5}, seed=0))
    finally:
        received.touch()
        box.close()
    assert (result.status, result.value, again.value) == (TrialStatus.COMPLETE, 1.5, 2.5)
    assert not looked_first and looked.exists()


def _sleeper(**kwargs):
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], **kwargs)


def test_a_look_ends_what_left_the_group_and_keeps_the_rest():
    from mpiopt.objective.processes import Detached

    look = Detached()
    kept, detached = _sleeper(), _sleeper(start_new_session=True)
    try:
        assert look.end() >= 1        # (and what earlier tests of this process left)
        assert not process_alive(detached.pid) and process_alive(kept.pid)
        look.end()
        assert process_alive(kept.pid)
    finally:
        for proc in (kept, detached):
            proc.kill()
            proc.wait()


def test_a_process_that_leaves_the_group_after_a_look_is_ended_at_the_next(tmp_path):
    """A look reads the entries of the pids handed out since the last one, and of the
    processes below it then: a program started before a look and detached after it is
    one of the latter."""
    from mpiopt.objective.processes import Detached

    go, gone = tmp_path / "go", tmp_path / "gone"
    code = ("import os, pathlib, time\n"
            f"go, gone = pathlib.Path({str(go)!r}), pathlib.Path({str(gone)!r})\n"
            "end = time.monotonic() + 30\n"
            "while not go.exists() and time.monotonic() < end:\n    time.sleep(0.01)\n"
            "os.setsid(); gone.touch(); time.sleep(60)\n")
    look = Detached()
    late = subprocess.Popen([sys.executable, "-c", code])
    try:
        look.end()
        assert process_alive(late.pid)
        go.touch()
        end = time.monotonic() + 30
        while not gone.exists() and time.monotonic() < end:
            time.sleep(0.01)
        assert look.end() >= 1 and not process_alive(late.pid)
    finally:
        late.kill()
        late.wait()
