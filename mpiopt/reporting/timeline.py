"""When each group worked: trial intervals per group, idle gaps, and the study's efficiency.

A track is one group of one job: a study run by several jobs (`--join`, a job array, a
resume) has a group 0 in each, so tracks are (job, group), shown job by job, each job's
groups together under its label (host, launcher job id). A trial belongs to the job that
ran it last (FrozenTrial.job; a lost job's trial rerun by another is that one's).

efficiency = busy group-seconds / the group-seconds the jobs held, where each job holds
its groups from its first trial's start to its last trial's end (a running trial ends
"now") and a group is busy while any trial of it runs. It is what `mpirun -n N` bought:
1.0 means no group ever waited. Time between jobs (a queue wait, a study stopped before
its resume) is no job's, so it is not idle. Limits: a job's start-up before its first
trial is not counted, nor a group that never got a trial (the database does not know it
existed). Trials of a database from before jobs were recorded (job None) form one job.
"""
from __future__ import annotations

from datetime import timedelta

from mpiopt.reporting.view import Panel, StudyView, utc
from mpiopt.trial import TrialStatus


def intervals(view: StudyView) -> list[tuple]:
    """(trial, start datetime, end datetime) for trials with a group and a start time.

    A trial starts when the coordinator commits it and lasts its measured duration (the
    group's own clock), not until finished_at: a group gets its next trial before its
    result is committed, so finished_at may fall after the group's next start. A running
    trial ends now; one without a duration ends at finished_at."""
    out = []
    for t in view.trials:
        start = utc(t.started_at)
        if start is None or t.group is None:
            continue
        if t.status == TrialStatus.RUNNING:
            end = max(view.now, start)
        elif t.duration is not None:
            end = start + timedelta(seconds=max(0.0, t.duration))
        else:
            end = utc(t.finished_at)
        if end is not None:
            out.append((t, start, max(end, start)))
    return _one_at_a_time(out)


def _one_at_a_time(spans: list[tuple]) -> list[tuple]:
    """A group runs one trial at a time: a trial's end is cut at the next one's start on
    its group. (A trial sent ahead is noted as started when the result before it is
    written, a few milliseconds after it began, so start + duration may overlap.)"""
    by_group: dict[tuple, list[int]] = {}
    for i, (t, start, _) in enumerate(spans):
        by_group.setdefault(track_of(t), []).append(i)
    out = list(spans)
    for indexes in by_group.values():
        indexes.sort(key=lambda i: spans[i][1])
        for a, b in zip(indexes, indexes[1:]):
            t, start, end = out[a]
            out[a] = (t, start, max(start, min(end, spans[b][1])))
    return out


def union_length(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of the (start, end) spans."""
    total, reach = 0.0, None
    for start, end in sorted(spans):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def gaps(spans: list[tuple[float, float]], wall: float) -> list[tuple[float, float]]:
    """The parts of [0, wall] no span covers."""
    out, reach = [], 0.0
    for start, end in sorted(spans):
        if start > reach:
            out.append((reach, start))
        reach = max(reach, end)
    if reach < wall:
        out.append((reach, wall))
    return out


def track_of(trial) -> tuple:
    """(job, group): a job's group runs one trial at a time; another job's group of the
    same number is another track."""
    return (trial.job, trial.group)


def job_order(job) -> tuple:
    """Jobs oldest first (ids grow with time)."""
    return (job is not None, job or 0)      # (job None: trials from before jobs were recorded)


def timeline(view: StudyView) -> Panel:
    """bars: [{job, group, track, number, status, start, end}] in seconds from t0; tracks:
    [{job, group}] job by job (oldest first), groups in order; jobs: [{job, label, first,
    last, start, end}] (first/last: its tracks' indexes; start/end: the time it held its
    groups); idle: [[track, start, end]]; wall; busy (group-seconds); held (group-seconds
    the jobs held); efficiency; t0 (ISO)."""
    title = "Timeline of the groups (idle time shaded)"
    spans = intervals(view)
    if not spans:
        return Panel("timeline", title, "no trial has started on a group yet")
    t0 = min(start for _, start, _ in spans)
    keys = sorted({track_of(t) for t, _, _ in spans}, key=lambda k: (job_order(k[0]), k[1]))
    index = {k: i for i, k in enumerate(keys)}
    bars = [{"job": t.job, "group": t.group, "track": index[track_of(t)], "number": t.number,
             "status": t.status.value, "start": (s - t0).total_seconds(),
             "end": (e - t0).total_seconds()} for t, s, e in spans]
    wall = max(b["end"] for b in bars)
    jobs = _jobs(view, keys, bars)
    extent = {j["job"]: (j["start"], j["end"]) for j in jobs}
    busy = held = 0.0
    idle = []
    for i, (job, _) in enumerate(keys):
        mine = [(b["start"], b["end"]) for b in bars if b["track"] == i]
        a, b = extent[job]
        busy += union_length(mine)
        held += b - a
        idle += [[i, a + x, a + y] for x, y in gaps([(s - a, e - a) for s, e in mine], b - a)]
    efficiency = busy / held if held > 0 else 1.0
    return Panel("timeline", f"{title}: efficiency {efficiency:.1%}", data={
        "bars": bars, "tracks": [{"job": j, "group": g} for j, g in keys], "jobs": jobs,
        "idle": idle, "wall": wall, "busy": busy, "held": held, "efficiency": efficiency,
        "t0": t0.isoformat()})


def _jobs(view: StudyView, keys: list[tuple], bars: list[dict]) -> list[dict]:
    """Each job's label (mpiopt.reporting.jobs.job_label where the view holds its record),
    its tracks and the time it held its groups (its first trial's start to its last
    trial's end)."""
    from mpiopt.reporting.jobs import job_label

    records = {j.id: j for j in view.jobs}
    out = []
    for job in dict.fromkeys(j for j, _ in keys):
        tracks = [i for i, k in enumerate(keys) if k[0] == job]
        mine = [b for b in bars if b["job"] == job]
        label = (job_label(records[job]) if job in records
                 else "earlier jobs" if job is None else f"job {job}")
        out.append({"job": job, "label": label, "first": tracks[0], "last": tracks[-1],
                    "start": min(b["start"] for b in mine), "end": max(b["end"] for b in mine)})
    return out


def job_bands(d: dict) -> list[dict]:
    """The jobs a drawn timeline labels (d: timeline's data): every job, once the database
    records them; none for trials from before it did (their groups read as before)."""
    return d["jobs"] if any(j["job"] is not None for j in d["jobs"]) else []


def held_text(d: dict) -> str:
    """What the efficiency divides, in words (d: timeline's data)."""
    n, jobs = len(d["tracks"]), len(d["jobs"])
    held = (f"{n} groups × {d['wall']:.1f} s" if jobs == 1
            else f"{n} groups of {jobs} jobs, each while its job ran")
    return f"{d['busy']:.1f} busy group-s / {d['held']:.1f} group-s ({held})"
