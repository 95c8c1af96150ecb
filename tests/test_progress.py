"""What `mpiopt search` prints while it runs: pace and ETA on each finished trial's line, a
status line of running trials (in place on a terminal, also through mpiexec; bounded plain
lines in a log). Pure parts with a fake clock; the terminal through a real pty and mpiexec."""
from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections import Counter

import pytest
from types import SimpleNamespace

from conftest import BIN, subprocess_env
from mpiopt.reporting.progress import QUIET_MAX_S, QUIET_S, Progress
from mpiopt.trial import FrozenTrial, TrialStatus


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def sched(finished: int, running: int = 1):
    counts = Counter({TrialStatus.COMPLETE: finished})
    return SimpleNamespace(counts=counts, finished=finished, best=None, running=[0] * running,
                           message=None, searcher=None, untried=None, front=None)


def done(number: int, group: int = 0) -> FrozenTrial:
    return FrozenTrial(id=number + 1, study_id=1, number=number, status=TrialStatus.COMPLETE,
                       params={"x": 1.0}, value=float(number), group=group, duration=30.0)


def progress(terminal: bool, budget: int = 10):
    out, clock = io.StringIO(), Clock()
    return (Progress(budget, out=out, terminal=terminal, columns=200, clock=clock, keep_time=False),
            out, clock)


def test_each_line_has_elapsed_time_rate_and_eta():
    p, out, clock = progress(terminal=False)
    clock.now += 60
    p.trial_finished(done(0), sched(1))
    clock.now += 60
    p.trial_finished(done(1), sched(2))
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("elapsed 1m, 1/min, ETA 9m")
    assert lines[1].endswith("elapsed 2m, 1/min, ETA 8m")     # 8 left at 1 a minute
    p.summary(sched(2, running=0), SimpleNamespace(value="COMPLETE"))
    assert "study complete: 2 trials (2 complete) in 2m, 1 trials/min" in out.getvalue()


def test_a_resumed_study_counts_its_rate_from_this_job_only():
    p, out, clock = progress(terminal=False)
    clock.now += 30
    p.trial_finished(done(7), sched(8))          # 7 were kept from an earlier job
    assert out.getvalue().rstrip().endswith("elapsed 30s, 2/min, ETA 1m")


def test_without_the_new_calls_only_the_finished_lines_are_printed():
    p, out, clock = progress(terminal=True)
    for k in range(3):
        clock.now += 100
        p.tick()
        p.trial_finished(done(k), sched(k + 1))
    text = out.getvalue()
    assert "\r" not in text and "running:" not in text and text.count("\n") == 3


def test_a_kfold_trial_is_shown_at_its_fold_and_epoch_and_a_pruned_one_says_why():
    """Issue 62: with `epochs: 6, kfold: 3` a trial at fold 2's fourth epoch reads
    'fold 2 epoch 4' (it once read 'epoch 16'); a PRUNED line is followed by where the
    pruner stopped it and against what."""
    out, clock = io.StringIO(), Clock()
    p = Progress(10, out=out, terminal=False, columns=200, clock=clock, keep_time=False, folds=3)
    p.trial_started(0, 0)
    p.epoch(0, 1, 0.5)
    p.epoch(0, 4, 0.93, fold=2)
    clock.now += QUIET_S
    p.tick()
    assert out.getvalue().splitlines()[-1].endswith("trial 0 (group 0) fold 2 epoch 4 "
                                                    "value=0.93, 15s")
    why = ("pruned at fold 1 epoch 2: its figure so far 0.835 is worse than the median 0.94 "
           "of 4 other trials there")
    pruned = FrozenTrial(id=1, study_id=1, number=0, status=TrialStatus.PRUNED, params={},
                         value=0.835, group=0, duration=3.0, error=why)
    p.trial_finished(pruned, sched(1))
    lines = out.getvalue().splitlines()
    assert "PRUNED" in lines[-2] and lines[-1] == "    " + why
    one = Progress(10, out=io.StringIO(), terminal=False, clock=clock, keep_time=False)
    one.trial_started(0, 0)
    one.epoch(0, 4, 0.5)
    assert "trial 0 (group 0) epoch 4 value=0.5" in one._status(clock.now)


def test_on_a_terminal_the_status_line_is_redrawn_in_place():
    p, out, clock = progress(terminal=True)
    p.trial_started(0, 0)
    p.trial_started(1, 1)
    p.trial_started(2, 0)                        # sent ahead: it waits behind trial 0
    clock.now += 5
    p.epoch(0, 3, 0.25)
    text = out.getvalue()
    assert "\n" not in text                      # nothing scrolls while trials run
    last = text.rsplit("\r", 1)[1]
    assert last == ("5s elapsed, 2 running: trial 1 (group 1) setting up (a group's first "
                    "trial: imports, data, model), 5s; trial 0 (group 0) epoch 3 value=0.25, "
                    "5s\x1b[K")
    clock.now += 2
    p.trial_finished(done(0, group=0), sched(1, running=2))
    p.tick()
    text = out.getvalue()
    finished = text.index("[ 1/10] trial 0")
    assert text[finished - 4:finished] == "\r\x1b[K"      # the status line cleared first
    assert text.rsplit("\r", 1)[1].startswith("7s elapsed, 2 running: trial 1 (group 1) "
                                              "setting up (a group's first trial: imports, "
                                              "data, model), 7s; trial 2 (group 0) starting, 0s")


def test_groups_setting_up_are_named_together():
    """The demo's first half minute: every group imports TensorFlow and reads its data."""
    p, out, clock = progress(terminal=True)
    p.trial_started(0, 0)
    p.trial_started(1, 1)
    clock.now += 27
    p.tick()
    assert out.getvalue().rsplit("\r", 1)[1] == (
        "27s elapsed, 2 running: trial 0 (group 0), trial 1 (group 1) setting up (a group's "
        "first trial: imports, data, model), 27s\x1b[K")


def test_the_status_line_fits_the_terminal():
    out, clock = io.StringIO(), Clock()
    p = Progress(100, out=out, terminal=True, columns=60, clock=clock, keep_time=False)
    for k in range(20):
        p.trial_started(k, k)
    assert all(len(line) <= 60 for line in re.split(r"\r|\x1b\[K", out.getvalue()))


def test_in_a_log_a_long_trial_prints_a_bounded_number_of_plain_lines():
    """An hour of a trial reporting every second, the shell ticking ten times a second:
    a plain line after QUIET_S of silence, then at doubling intervals up to QUIET_MAX_S."""
    p, out, clock = progress(terminal=False)
    p.trial_started(0, 0)
    for second in range(3600):
        for _ in range(10):
            clock.now += 0.1
            p.tick()
        p.epoch(0, second + 1, 1.0 / (second + 1))
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and all(line.startswith("  ... ") for line in lines)
    assert lines[0] == "  ... 15s elapsed, 1 running: trial 0 (group 0) epoch 14 value=0.071429, 15s"
    assert "epoch 3600" not in out.getvalue() and len(lines) <= 3600 / QUIET_MAX_S + 6
    assert 1 < len(lines) and QUIET_S * 2 ** (len(lines) - 1) > 600


def test_a_finished_trial_starts_the_quiet_interval_over():
    p, out, clock = progress(terminal=False)
    p.trial_started(0, 0)
    p.trial_started(1, 1)
    for _ in range(3):                            # 15 s, then 30 s, then 60 s
        clock.now += 200
        p.tick()
    p.trial_finished(done(0), sched(1))
    clock.now += QUIET_S
    p.tick()
    assert out.getvalue().splitlines()[-1].startswith("  ... ")


def test_quiet_prints_nothing():
    out, clock = io.StringIO(), Clock()
    p = Progress(10, out=out, quiet=True, terminal=True, clock=clock, keep_time=False)
    p.trial_started(0, 0)
    clock.now += 100
    p.epoch(0, 1, 1.0)
    p.tick()
    p.trial_finished(done(0), sched(1))
    assert out.getvalue() == ""


def test_on_a_terminal_the_clocks_move_while_no_one_calls():
    """Single-process mode sits in the trial (TensorFlow's import) and cannot tick."""
    out = io.StringIO()
    p = Progress(10, out=out, terminal=True, columns=200)
    p.trial_started(0, 0)
    end = time.monotonic() + 60
    while "1s elapsed" not in out.getvalue() and time.monotonic() < end:
        time.sleep(0.1)
    p.summary(sched(0, running=0), SimpleNamespace(value="COMPLETE"))
    assert "1s elapsed, 1 running: trial 0 (group 0) setting up" in out.getvalue()
    assert not p._ticker.is_alive()


TERMINAL_CHECK = ("import sys; from mpiopt.reporting.terminal import terminal_path; "
                  "print(terminal_path(sys.stdout))")


def test_a_terminal_is_seen_through_mpiexec_and_a_pipe_is_not():
    """The demo runs under mpiexec: rank 0's stdout is a pipe to the launcher, which
    writes to the person's terminal; `| cat` or a file is a log."""
    cmd = [str(BIN / "mpiexec"), "-n", "1", sys.executable, "-c", TERMINAL_CHECK]
    main, child = pty.openpty()
    try:
        proc = subprocess.Popen(cmd, stdout=child, stderr=subprocess.PIPE, env=subprocess_env())
        os.close(child)
        said = b""
        while proc.poll() is None or select.select([main], [], [], 0)[0]:
            if select.select([main], [], [], 1)[0]:
                try:
                    said += os.read(main, 1024)
                except OSError:
                    break
        proc.wait(timeout=60)
    finally:
        os.close(main)
    assert said.decode().strip().startswith("/dev/pts/"), said
    piped = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), timeout=60)
    assert piped.stdout.strip() == "None"


EPOCHS = '''
import time


def epochs(params, report):
    for epoch in range(1, 5):
        time.sleep(0.3)
        report(epoch, params["x"] / epoch)
    return params["x"]
'''


def _on_a_terminal(cmd, cwd) -> str:
    """What `cmd` writes to a pseudo-terminal (bounded: the job's own limits end it)."""
    main, child = pty.openpty()
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=child, stderr=child, env=subprocess_env())
        os.close(child)
        said = b""
        while True:
            if select.select([main], [], [], 1)[0]:
                try:
                    chunk = os.read(main, 4096)
                except OSError:          # (Linux: the other side closed)
                    break
                if not chunk:
                    break
                said += chunk
            elif proc.poll() is not None:
                break
        assert proc.wait(timeout=120) == 0, said.decode(errors="replace")
    finally:
        os.close(main)
    return said.decode(errors="replace")


@pytest.mark.parametrize("np", [None, 3])
def test_a_search_on_a_terminal_shows_running_trials_epochs(tmp_path, np):
    """The shells' calls reach Progress: single-process mode and under mpiexec."""
    (tmp_path / "epochs.py").write_text(EPOCHS)
    (tmp_path / "spec.yaml").write_text(
        "study: {name: e}\n"
        f"objective: {{function: {tmp_path / 'epochs.py'}:epochs, metric: v, direction: minimize}}\n"
        "search_space: {x: {type: real, low: 1.0, high: 2.0}}\n"
        "search: {algorithm: random, trials: 3, seed: 1}\n")
    cmd = [str(BIN / "mpiopt"), "search", "spec.yaml", "--storage", "sqlite:///e.db"]
    if np:
        cmd = [str(BIN / "mpiexec"), "-n", str(np), *cmd]
    said = _on_a_terminal(cmd, tmp_path)
    drawn = [part for part in said.split("\r") if " running: trial " in part]
    assert any("setting up" in part for part in drawn), said
    assert any(re.search(r"trial \d \(group \d\) epoch [1-4] value=", part) for part in drawn), said
    assert re.search(r"\[3/3\] trial \d .* elapsed \d+s, [\d.]+/min\r?\n", said), said
    assert "study complete: 3 trials (3 complete)" in said
