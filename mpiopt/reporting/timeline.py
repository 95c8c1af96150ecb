"""When each group worked: trial intervals per group, idle gaps, and the study's efficiency.

efficiency = busy group-seconds / (groups x wall), where wall runs from the first trial's
start to the last trial's end (a running trial ends "now") and a group is busy while any
trial of it runs. It is what `mpirun -n N` bought: 1.0 means no group ever waited. Limits:
the time a study was stopped between a job and its resume counts as idle wall time, and
a group that never got a trial is not counted (the database does not know it existed).
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
    by_group: dict[int, list[int]] = {}
    for i, (t, start, _) in enumerate(spans):
        by_group.setdefault(t.group, []).append(i)
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


def timeline(view: StudyView) -> Panel:
    """bars: [{group, number, status, start, end}] in seconds from t0; idle:
    [[group, start, end]]; groups; wall; busy (group-seconds); efficiency; t0 (ISO)."""
    title = "Timeline of the groups (idle time shaded)"
    spans = intervals(view)
    if not spans:
        return Panel("timeline", title, "no trial has started on a group yet")
    t0 = min(start for _, start, _ in spans)
    bars = [{"group": t.group, "number": t.number, "status": t.status.value,
             "start": (s - t0).total_seconds(), "end": (e - t0).total_seconds()}
            for t, s, e in spans]
    wall = max(b["end"] for b in bars)
    groups = sorted({b["group"] for b in bars})
    per_group = {g: [(b["start"], b["end"]) for b in bars if b["group"] == g] for g in groups}
    busy = sum(union_length(s) for s in per_group.values())
    efficiency = busy / (len(groups) * wall) if wall > 0 else 1.0
    idle = [[g, a, b] for g in groups for a, b in gaps(per_group[g], wall)]
    return Panel("timeline", f"{title}: efficiency {efficiency:.1%}", data={
        "bars": bars, "idle": idle, "groups": groups, "wall": wall, "busy": busy,
        "efficiency": efficiency, "t0": t0.isoformat()})
