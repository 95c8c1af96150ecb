"""Seeing the jobs of a study (`mpiopt search --join`): `mpiopt status` lists every job,
live or dead, and says the study runs while any job lives; the report's timeline, the
static plot and the Chrome trace keep each job's groups together under its label.

Real SQLite files filled through the Storage API (join_study, the fence, end_job,
take_orphans), the real commands in subprocesses; and real jobs, one killed -9.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from datetime import datetime, timedelta, timezone

from conftest import mpiopt
from mpiopt.storage import open_storage
from mpiopt.trial import TrialStatus

SPEC = "study: {name: shared}\nsearch: {algorithm: random, trials: 20}\nobjective: {metric: loss}\n"
SPACE = json.dumps({"x": {"type": "real", "low": 0.0, "high": 1.0}})
HOST = socket.gethostname()


def new_study(url: str) -> int:
    with open_storage(url, create=True) as st:
        return st.create_study("shared", "minimize", "loss", SPEC, "s" * 64, SPACE)


def join(st, sid: int, pid: int = None, **kw):
    return st.join_study(sid, HOST, os.getpid() if pid is None else pid, 30.0, shared=True, **kw)


def make_stale(st, job_id: int) -> None:
    """As if the job's last beat was 5 minutes ago (it was killed without a word)."""
    from mpiopt.storage.models import JobModel

    with st.engine.begin() as conn:
        conn.execute(JobModel.__table__.update().where(JobModel.__table__.c.id == job_id).values(
            beat_at=datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(minutes=5)))


def gone_pid() -> int:
    """The pid of a process of this host that has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=60)
    return proc.pid


def status(url: str) -> tuple[list[str], dict]:
    text = mpiopt("status", "shared", "--storage", url, check=True).stdout
    summary = json.loads(mpiopt("status", "shared", "--storage", url, "--format", "json",
                                check=True).stdout)
    return text.splitlines(), summary


def test_status_lists_every_job_live_ended_and_lost(tmp_path):
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    sid = new_study(url)
    with open_storage(url) as st:
        lost = join(st, sid, groups=2, launcher="slurm 42_0")
        st.fence = (lost.id, lost.token)
        left = st.create_trial(sid, {"x": 0.5}, seed=1, group=1)      # RUNNING when it died
        make_stale(st, lost.id)
        live = join(st, sid, groups=4, launcher="slurm 42_1")      # finds job 1 stale
        st.fence = (live.id, live.token)
        assert [t.id for t in st.take_orphans(sid, False)] in ([], [left.id])
        st.restart_trial(left.id, group=3, host=HOST)                # claimed: job 2 runs it
        ended = join(st, sid, groups=1)
        st.end_job(ended.id, ended.token, "ended")
    lines, summary = status(url)
    text = "\n".join(lines)
    assert f"jobs     3 (1 live, 1 ended, 1 lost)" in lines, text
    line = {int(m.group(1)): m.group(0) for m in re.finditer(r"^job (\d+) .*$", text, re.M)}
    assert f"{HOST} pid {os.getpid()}, slurm 42_0, 2 groups;" in line[lost.id]
    assert line[lost.id].endswith(f": lost, taken over by job {live.id}")
    assert "slurm 42_1, 4 groups, 1 running;" in line[live.id]
    assert line[live.id].endswith(": live (joined)") and "last heartbeat " in line[live.id]
    groups = [x for x in lines if x.startswith("group ")]       # the live job's only
    assert len(groups) == 1 and groups[0].startswith(f"group 3   {HOST}: "), lines
    assert groups[0].endswith(f", running trial {left.number}")
    assert ", 1 group;" in line[ended.id] and re.search(r": ended [\d.]+s ago$", line[ended.id])
    state = next(x for x in lines if x.startswith("state "))
    assert state.startswith(f"state    running (host {HOST}, pid {os.getpid()}")
    jobs = summary["jobs"]
    assert [(j["id"], j["state"]) for j in jobs] == [(lost.id, "lost"), (live.id, "live"),
                                                      (ended.id, "ended")]
    assert jobs[0]["taken_by"] == live.id and jobs[0]["launcher"] == "slurm 42_0"
    assert jobs[1]["running"] == 1 and jobs[1]["groups"] == 4 and jobs[1]["shared"] is True
    assert jobs[2]["ended_at"] is not None and jobs[1]["ended_at"] is None
    assert all(0 <= j["since_start"] < 600 for j in jobs)


def test_a_study_runs_while_any_job_lives_and_stops_only_when_none_does(tmp_path):
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    sid = new_study(url)
    dead = gone_pid()
    with open_storage(url) as st:
        first = join(st, sid, pid=dead)          # its process is gone: lost, seen at once
        second = join(st, sid)
        third = join(st, sid)
        for job in (first, second, third):        # each runs a trial on its group 0
            st.fence = (job.id, job.token)
            st.create_trial(sid, {"x": 0.1 * job.id}, seed=1, group=0, host=HOST)
    lines, summary = status(url)
    groups = [x for x in lines if re.match(r"(job \d+ )?group ", x)]
    assert [x.split(":")[0] for x in groups] == [f"job {second.id} group 0   {HOST}",
                                                 f"job {third.id} group 0   {HOST}"], lines
    state = next(x for x in lines if x.startswith("state "))
    assert state.startswith(f"state    running (2 jobs live, on {HOST};"), state
    assert summary["shown_status"] == "running"
    assert [j["state"] for j in summary["jobs"]] == ["lost", "live", "live"]
    from mpiopt.reporting.dashboard import Studies

    with open_storage(url, read_only=True) as st:            # the dashboard's header
        shown = Studies(st, url).study("shared")
    assert shown["state"].startswith(f"running (2 jobs live, on {HOST};")
    assert [(j["id"], j["state"]) for j in shown["jobs"]] == [
        (first.id, "lost"), (second.id, "live"), (third.id, "live")]
    first_line = next(x for x in lines if x.startswith(f"job {first.id} "))
    assert first_line.endswith(f"lost (its process {dead} is gone; a live job, or the next "
                               "to start, takes its trials over)")
    with open_storage(url) as st:                # the others end without a word as well
        make_stale(st, second.id)
        make_stale(st, third.id)
    lines, summary = status(url)
    assert summary["shown_status"].startswith("stopped (")
    # (the job with the newest beat says why: the first, whose process is gone)
    assert summary["state"].startswith(f"stopped without a word (its process {dead} is gone, "
                                       f"host {HOST})")
    assert "resume with: mpiopt resume shared" in summary["state"]
    assert [j["state"] for j in summary["jobs"]] == ["lost", "lost", "lost"]
    assert lines[0].startswith("study    shared (stopped (")


def test_the_timeline_and_the_trace_keep_each_jobs_groups_together(tmp_path):
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    sid = new_study(url)
    with open_storage(url) as st:
        jobs = [join(st, sid, groups=2, launcher=f"slurm 42_{i}") for i in range(2)]
        for job in jobs:                          # both jobs run a group 0 and a group 1
            st.fence = (job.id, job.token)
            for group in (0, 1):
                t = st.create_trial(sid, {"x": 0.1 * (group + 1)}, seed=group, group=group,
                                    host=HOST)
                st.finish_trial(t.id, TrialStatus.COMPLETE, value=float(group), duration=1.0)
        for job in jobs:
            st.end_job(job.id, job.token)
        trials = st.get_trials(sid)
    assert {t.job for t in trials} == {j.id for j in jobs}
    labels = [f"job {j.id} ({HOST}, slurm 42_{i})" for i, j in enumerate(jobs)]

    page = tmp_path / "r.html"
    mpiopt("report", "shared", "--storage", url, "-o", page, check=True)
    html = page.read_text()
    figures = json.loads(re.search(r"const FIGURES = (\{.*?\});\n", html, re.S).group(1))
    layout = figures["plot-timeline"]["layout"]
    assert [a["text"] for a in layout["annotations"]] == labels
    assert layout["yaxis"]["ticktext"] == ["group 0", "group 1", "group 0", "group 1"]
    tracks = {n: y for trace in figures["plot-timeline"]["data"]
              for n, y in zip(trace["customdata"], trace["y"])}
    by_number = {t.number: (t.job, t.group) for t in trials}
    order = [(jobs[0].id, 0), (jobs[0].id, 1), (jobs[1].id, 0), (jobs[1].id, 1)]
    assert {n: order[y] for n, y in tracks.items()} == by_number
    assert "4 groups of 2 jobs, each while its job ran" in html

    svg = tmp_path / "t.svg"
    mpiopt("plot", "timeline", "shared", "--storage", url, "-o", svg, check=True)
    drawn = svg.read_text()
    assert all(label in drawn for label in labels)        # (the plot's text is text)

    trace_file = tmp_path / "t.json"
    mpiopt("export", "shared", "--format", "chrome-trace", "--storage", url, "-o", trace_file,
           check=True)
    events = json.loads(trace_file.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(names.values()) == [f"study shared, {label}" for label in labels]
    placed = {e["name"]: e["pid"] for e in events if e["ph"] == "X"}
    pid_of = {j.id: pid for pid, name in names.items() for j in jobs if f"job {j.id} " in name}
    assert placed == {f"trial {t.number}": pid_of[t.job] for t in trials}


def test_real_jobs_one_killed_show_up_as_lost_and_taken_over(tmp_path):
    """Two real jobs join one study; one is killed -9 mid-study; the other takes its
    trials over and finishes. `mpiopt status` then names the lost job and who took it."""
    from test_jobs import finish, spec_file, start_job, wait_for_finished

    url = f"sqlite:///{tmp_path / 'real.db'}"
    spec = spec_file(tmp_path, trials=16)
    first = start_job(tmp_path, url, spec, None, sleep=0.5)
    wait_for_finished(url, 2, [first])
    second = start_job(tmp_path, url, spec, None, sleep=0.5)
    wait_for_finished(url, 5, [first, second])
    os.killpg(first.pid, signal.SIGKILL)
    first.communicate()
    [(code, err)] = finish([second])
    assert code == 0, err[-3000:]
    lines, summary = status(url)
    jobs = {j["id"]: j for j in summary["jobs"]}
    assert sorted(j["state"] for j in jobs.values()) == ["ended", "lost"], jobs
    lost = next(j for j in jobs.values() if j["state"] == "lost")
    survivor = next(j for j in jobs.values() if j["state"] == "ended")
    assert lost["taken_by"] == survivor["id"] and lost["pid"] != survivor["pid"]
    assert any(x.startswith(f"job {lost['id']} ") and
               x.endswith(f": lost, taken over by job {survivor['id']}") for x in lines)
    assert summary["status"] == "COMPLETE" and summary["done"] == 16
