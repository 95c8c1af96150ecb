"""The jobs of a study as `mpiopt status`, the dashboard and the timeline show them.

A study may be run by many jobs (`mpiopt search --join`, a job array, a chain of
allocations, each resume): every job is a row (storage.list_jobs, a Job record each) with
its host, pid, the batch system's job id, its groups, and its heartbeat. No database
code here: the records come in, rows and lines go out.

How a job stands (`job_state`):

- **live**: it beats its lease (every `period_s`) and its process is not known gone;
- **ended**, **interrupted**, **failed**: it ended and said so (end_job);
- **lost**: it ended without a word. Either a job found it stale and took its running
  trials over (`taken_by`: that job), or nobody has yet: a job still marked live whose
  heartbeat is three periods old, or whose process is gone on this very host, is lost
  already; the next beat of a live job (or the next job to start) takes it over.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from mpiopt.durations import format_duration as _seconds
from mpiopt.reporting.view import utc

SHOWN = 20      # jobs `mpiopt status` lists, the newest (JSON lists them all)


def job_state(job, now: datetime) -> str:
    """"live", or how the job ended ("ended", "interrupted", "failed", "lost")."""
    if job.end is not None:
        return job.end
    if job.is_stale(now) or dead_here(job):
        return "lost"
    return "live"


def _gone(job, now: datetime) -> bool:
    """Lost, but nobody has marked it yet, and seen so because its process is gone here
    (its heartbeat may be fresh)."""
    return job.end is None and not job.is_stale(now) and dead_here(job)


def dead_here(job) -> bool:
    """The job ran on this host and its process is gone (seen at once, no need to wait
    out three periods)."""
    import socket

    from mpiopt.objective.processes import process_alive

    return (job.host == socket.gethostname()[:255] and job.pid > 0
            and not process_alive(job.pid))


def live_jobs(jobs, now: datetime) -> list:
    return [j for j in jobs if job_state(j, now) == "live"]


def job_label(job) -> str:
    """'job 3 (n12, slurm 4242_3)': a job as the timeline and the trace name it."""
    where = ", ".join(x for x in (job.host, job.launcher) if x)
    return f"job {job.id}" + (f" ({where})" if where else "")


def job_row(job, now: datetime) -> dict[str, Any]:
    """A job as JSON (mpiopt status --format json, the dashboard): times ISO, ages in
    seconds."""
    return {"id": job.id, "state": job_state(job, now), "host": job.host, "pid": job.pid,
            "launcher": job.launcher, "groups": job.groups, "shared": job.shared,
            "running": job.running, "started_at": _iso(job.started_at),
            "beat_at": _iso(job.beat_at), "ended_at": _iso(job.ended_at),
            "since_start": _age(job.started_at, now), "since_beat": job.age_s(now),
            "since_end": _age(job.ended_at, now), "period_s": job.period_s,
            "taken_by": job.taken_by, "process_gone": _gone(job, now)}


def job_lines(rows: list[dict]) -> list[str]:
    """`mpiopt status`'s lines for the jobs (rows as job_row made them, oldest first):
    a head counting them by state, then one line per job, the newest SHOWN."""
    if not rows:
        return []
    states: dict[str, int] = {}
    for r in rows:
        states[r["state"]] = states.get(r["state"], 0) + 1
    order = ("live", "ended", "interrupted", "failed", "lost")
    head = ", ".join(f"{states[s]} {s}" for s in sorted(states, key=lambda s: (
        order.index(s) if s in order else len(order), s)))
    lines = [f"jobs     {len(rows)} ({head})"]
    if len(rows) > SHOWN:
        lines.append(f"         ... {len(rows) - SHOWN} older jobs: mpiopt status "
                     "--format json lists them all")
    return lines + [_line(r) for r in rows[-SHOWN:]]


def _line(r: dict) -> str:
    where = f"{r['host'] or '?'} pid {r['pid']}" + (f", {r['launcher']}" if r["launcher"] else "")
    work = []
    if r["groups"] is not None:
        work.append(f"{r['groups']} group{'s' if r['groups'] != 1 else ''}")
    if r["running"]:        # (a job that is gone runs nothing: its trials wait for another)
        work.append(f"{r['running']} running" if r["state"] == "live"
                    else f"{r['running']} left RUNNING")
    return (f"job {r['id']:<4} {where}" + (f", {', '.join(work)}" if work else "")
            + f"; started {_seconds(r['since_start'])} ago, last heartbeat "
            f"{_seconds(r['since_beat'])} ago: " + _how(r))


def _how(r: dict) -> str:
    state = r["state"]
    if state == "live":
        return "live" + (" (joined)" if r["shared"] else "")
    if state == "lost":
        if r["taken_by"] is not None:
            return f"lost, taken over by job {r['taken_by']}"
        if r["ended_at"] is not None:
            return "lost"
        why = (f"its process {r['pid']} is gone" if r.get("process_gone")
               else f"silent for {_seconds(r['since_beat'])}")
        return f"lost ({why}; a live job, or the next to start, takes its trials over)"
    ended = r["since_end"]
    return state + (f" {_seconds(ended)} ago" if ended is not None else "")


def _iso(when: datetime | None) -> str | None:
    return None if when is None else utc(when).isoformat()


def _age(when: datetime | None, now: datetime) -> float | None:
    return None if when is None else (now - utc(when)).total_seconds()
