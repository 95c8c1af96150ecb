"""A study as a Chrome Trace Event file: open it in https://ui.perfetto.dev or chrome://tracing.

The JSON object format: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.
Each job of the study is a process (pid 1, 2, ... job by job, oldest first, named "study
S, job J (host, launcher)"; one pid 1 for trials from before jobs were recorded), so a
study that several jobs ran (`--join`, a resume) shows each job's groups together;
inside a job each group is a thread track ("group G", tid G + 1) holding its
trials as "X" (complete) events, with ts and dur in microseconds since the study's first
moment. Inside a trial, where the trial records them (FrozenTrial.spans: dicts with kind
"fold" | "epoch", fold, epoch, start and end in seconds since the trial's start), fold
and epoch spans nest under it; folds that ran at the same time (one sub-communicator
each) get a track of their own per fold ("group G fold F"), because events on one track
must nest. The coordinator's suggestion time (FrozenTrial.suggest_seconds) is a span on
the "coordinator" track (tid 0) ending when the trial started. Fields a trial does not
have are simply left out, so older databases give a trace of trials per group.

Every track nests: two slices on one track are disjoint or one holds the other (Perfetto
drops or mis-draws the rest). Suggestions overlap where asks run ahead of the trials
they are for, so each takes the first coordinator lane where it nests ("coordinator",
"coordinator 2", ...); a fold's or epoch's span is clipped to its trial's
slice (a trial's slice ends where its group's next trial starts).
"""
from __future__ import annotations

from datetime import timedelta
from typing import Iterable

from mpiopt import jsontext
from mpiopt.errors import first_line
from mpiopt.reporting.timeline import intervals, job_order
from mpiopt.reporting.view import StudyView

PID = 1
FOLD_TID = 1000     # tid of "group G fold F" = FOLD_TID * (G + 1) + F
LANE_TID = 900      # tid of coordinator lane k > 0 = LANE_TID + k (lane 0 is tid 0)


def chrome_trace(view: StudyView) -> dict:
    """The trace as a JSON-ready dict."""
    spans = intervals(view)
    starts = [s for _, s, _ in spans] + [s - _delta(getattr(t, "suggest_seconds", None))
                                         for t, s, _ in spans]
    t0 = min(starts) if starts else view.now
    jobs = sorted({t.job for t, _, _ in spans}, key=job_order) or [None]
    pids = {job: PID + i for i, job in enumerate(jobs)}
    events, tracks = [], {pid: {} for pid in pids.values()}

    def us(when) -> int:
        return round((when - t0).total_seconds() * 1e6)

    suggestions: dict[int, list] = {pid: [] for pid in pids.values()}
    for trial, start, end in spans:
        pid, tid = pids[trial.job], trial.group + 1
        tracks[pid][tid] = f"group {trial.group}"
        events.append(_complete(f"trial {trial.number}", "trial", us(start), us(end) - us(start),
                                tid, _args(trial), pid))
        suggest = getattr(trial, "suggest_seconds", None)
        if suggest:
            suggestions[pid].append(_complete(f"suggest trial {trial.number}", "suggest",
                                              us(start) - round(suggest * 1e6),
                                              round(suggest * 1e6), 0,
                                              {"trial": trial.number}, pid))
        events += _inner_spans(trial, us(start), us(end), tid, tracks[pid], pid)
    for pid, slices in suggestions.items():
        events += _in_lanes(slices, tracks[pid])
    meta = []
    for job, pid in pids.items():
        meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                     "args": {"name": _process_name(view, job)}})
        for tid, name in sorted(tracks[pid].items()):
            meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                         "args": {"name": name}})
            meta.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                         "args": {"sort_index": tid}})
    return {"traceEvents": meta + sorted(events, key=lambda e: (e["pid"], e["tid"], e["ts"],
                                                                -e["dur"])),
            "displayTimeUnit": "ms",
            "otherData": {"study": view.name, "metric": view.metric, "t0": t0.isoformat()}}


def _process_name(view: StudyView, job) -> str:
    from mpiopt.reporting.jobs import job_label

    if job is None:
        return f"study {view.name}"
    record = next((j for j in view.jobs if j.id == job), None)
    return f"study {view.name}, " + (job_label(record) if record else f"job {job}")


def write_chrome_trace(view: StudyView, out) -> None:
    jsontext.dump(chrome_trace(view), out, separators=(",", ":"))
    out.write("\n")


def _in_lanes(slices: list[dict], tracks: dict) -> list[dict]:
    """Each slice on the first coordinator lane where it nests: after the slices there
    that ended, inside the one still open (or alone). By start, longest first."""
    lanes: list[list[int]] = []       # per lane: the ends of its open slices, outermost first
    for event in sorted(slices, key=lambda e: (e["ts"], -e["dur"])):
        end = event["ts"] + event["dur"]
        for k, open_ends in enumerate(lanes):
            while open_ends and open_ends[-1] <= event["ts"]:
                open_ends.pop()
            if not open_ends or end <= open_ends[-1]:
                open_ends.append(end)
                break
        else:
            k = len(lanes)
            lanes.append([end])
        event["tid"] = 0 if k == 0 else LANE_TID + k
        tracks[event["tid"]] = "coordinator" if k == 0 else f"coordinator {k + 1}"
    return slices


def _inner_spans(trial, trial_us: int, end_us: int, tid: int, tracks: dict,
                 pid: int) -> list[dict]:
    spans = [s for s in (getattr(trial, "spans", None) or []) if _valid(s)]
    folds = [s for s in spans if s["kind"] == "fold"]
    concurrent = _overlap(folds)
    out = []
    for s in spans:
        track = tid
        if concurrent:
            track = FOLD_TID * tid + int(s["fold"])
            tracks[track] = f"{tracks[tid]} fold {int(s['fold'])}"
        name = (f"fold {s['fold']}" if s["kind"] == "fold"
                else f"fold {s['fold']} epoch {s.get('epoch')}")
        ts = min(end_us, trial_us + round(s["start"] * 1e6))
        end = min(end_us, trial_us + round(s["end"] * 1e6))
        out.append(_complete(name, s["kind"], ts, end - ts, track,
                             {"trial": trial.number, "fold": s["fold"], "epoch": s.get("epoch")},
                             pid))
    return out


def _complete(name: str, cat: str, ts: int, dur: int, tid: int, args: dict,
              pid: int = PID) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": max(0, dur), "pid": pid,
            "tid": tid, "args": args}


def _args(trial) -> dict:
    args = {"status": trial.status.value, "value": trial.value, "params": dict(trial.params),
            "host": trial.host, "attempt": trial.attempt}
    device = getattr(trial, "device", None)
    if device:
        args["device"] = device
    if trial.error:
        args["error"] = first_line(trial.error)
    return args


def _valid(span) -> bool:
    try:
        return (span["kind"] in ("fold", "epoch") and float(span["end"]) >= float(span["start"])
                and span.get("fold") is not None)
    except (KeyError, TypeError, ValueError):
        return False


def _overlap(folds: Iterable[dict]) -> bool:
    ordered = sorted(folds, key=lambda s: s["start"])
    return any(b["start"] < a["end"] for a, b in zip(ordered, ordered[1:]))


def _delta(seconds) -> timedelta:
    return timedelta(seconds=seconds or 0.0)
