"""What `mpiopt status` tells a person after a job ended (issue 62), from real jobs under
`mpiexec -n 3`: the resume line is the one the job's own closing line printed, launcher
and rank count included (a line without them, copied on a cluster, trains on the login
node), and after a `kill -9` the study's stop is no older than its last update and no
trial of the dead job is said to be running."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time

from conftest import BIN, mpiopt, resume_with, study_state, subprocess_env
from mpiopt.trial import TrialStatus

OBJECTIVE = '''
import time


def f(params):
    time.sleep(1.0)
    return params["x"] ** 2
'''
SPEC = """study: {name: told}
objective: {function: %s:f}
search_space:
  x: {type: real, low: -1.0, high: 1.0}
search: {algorithm: random, trials: 60, seed: 4}
"""
WAIT_S = 120      # a bound on each wait, never a timing assertion


def _job(tmp_path) -> tuple[subprocess.Popen, str]:
    (tmp_path / "slow.py").write_text(OBJECTIVE)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC % (tmp_path / "slow.py"))
    url = f"sqlite:///{tmp_path / 'told.db'}"
    job = subprocess.Popen([str(BIN / "mpiexec"), "-n", "3", str(BIN / "mpiopt"), "search",
                            str(spec), "--storage", url], cwd=tmp_path, env=subprocess_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    return job, url


def _wait_complete(job, url: str, n: int) -> None:
    """Until `n` trials are COMPLETE (bounded: the test fails, never hangs)."""
    end = time.monotonic() + WAIT_S
    while time.monotonic() < end:
        assert job.poll() is None, job.communicate()
        try:
            _, trials = study_state(url, "told")
            if sum(t.status is TrialStatus.COMPLETE for t in trials) >= n:
                return
        except Exception:           # (the database is being created)
            pass
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} trials completed within {WAIT_S}s")


def _resume_in(text: str) -> str:
    found = re.findall(r"resume with: (.+?)(?:\n|$)", text)
    assert found, text
    return found[-1]


def test_status_gives_the_resume_line_of_the_jobs_own_closing_line(tmp_path):
    job, url = _job(tmp_path)
    try:
        _wait_complete(job, url, 2)
        os.killpg(job.pid, signal.SIGINT)                  # as a terminal's Ctrl-C does
        out, err = job.communicate(timeout=WAIT_S)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
    closing = _resume_in(out + err)
    assert closing.startswith(resume_with(3)), closing
    status = mpiopt("status", "told", "--storage", url, check=True).stdout
    assert _resume_in(status) == closing, status


def test_status_after_kill_9_tells_one_stop_and_runs_nothing_of_the_dead_job(tmp_path):
    job, url = _job(tmp_path)
    try:
        _wait_complete(job, url, 8)           # trials finished well after the job's start
    finally:
        os.killpg(job.pid, signal.SIGKILL)    # every process of the job, as a lost node
        job.communicate(timeout=WAIT_S)
    text = mpiopt("status", "told", "--storage", url, check=True).stdout
    stopped = re.search(r"\(stopped \((\S+) ago", text)
    update = re.search(r"last update (\S+) ago", text)
    assert stopped and update, text
    assert _seconds(stopped.group(1)) <= _seconds(update.group(1)), text
    trials = next(line for line in text.splitlines() if line.startswith("trials"))
    _, stored = study_state(url, "told")
    left = sum(t.status is TrialStatus.RUNNING for t in stored)
    assert left >= 1 and ", 0 running" in trials, text
    assert f"{left} left RUNNING by a job that died" in trials, text
    jobs = [line for line in text.splitlines() if line.startswith("job ")]
    assert jobs and all(" running" not in line.split(";")[0] for line in jobs), text
    assert not re.search(r"group \d+ .*, running trial", text), text
    assert _resume_in(text).startswith(resume_with(3)), text
    shown = mpiopt("status", "told", "--storage", url, "--format", "json", check=True).stdout
    assert '"running": 0' in shown and f'"stranded": {left}' in shown


def _seconds(text: str) -> float:
    """'1m5s' -> 65; '12s' -> 12; '0.5s' -> 0.5."""
    total = 0.0
    for number, unit in re.findall(r"([\d.]+)([hms]+)", text):
        total += float(number) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[unit]
    return total
