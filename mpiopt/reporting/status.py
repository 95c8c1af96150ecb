"""`mpiopt status` and a study's state: its numbers read from the database alone, whether
its job lives, what "best" is (mpiopt.reporting.front), and how to go on after a job ended.

No database code here: it takes the StudyRecord, the counts and the group activity the
storage gives, so the CLI and tests share one path.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from mpiopt.durations import format_duration as _seconds
from mpiopt.reporting.jobs import dead_here, job_lines, job_row, live_jobs
from mpiopt.reporting.view import utc
from mpiopt.search import traits
from mpiopt.trial import FrozenTrial, TrialStatus


def budget_of(spec_text: str) -> int | None:
    """search.trials from the stored spec; None when it has none."""
    from mpiopt.spec import stored

    trials = stored(spec_text).get("search", "trials")
    return trials if isinstance(trials, int) else None


def space_sets_of(spec_text: str) -> int | None:
    """How many parameter sets the stored study's space has (mpiopt.search.untried); None
    for an infinite space or a spec that cannot be read."""
    from mpiopt.search.untried import space_size
    from mpiopt.spec import stored

    spec = stored(spec_text).spec
    return None if spec is None else space_size(spec.space)


def _how_to_go_on(record, url: str | None, jobs=()) -> str:
    """What the closing line of an ended job said to do next, for `mpiopt status`."""
    from mpiopt.reporting.commands import after_failures

    if url is None or record.status.value not in ("INTERRUPTED", "FAILED"):
        return ""
    if record.status.value == "INTERRUPTED":
        return f"; resume with: {_resume_command(record, url, jobs)}"
    from mpiopt.spec import stored

    algorithm = stored(record.spec_text).get("search", "algorithm")
    try:
        rounds = traits(algorithm).rounds
    except Exception:               # (a stored spec of another version: no advice)
        return ""
    what = "rounds" if rounds else "trials"
    return (f" (its {what} failed before any succeeded); "
            f"{after_failures(record.name, url, algorithm, launch=_launch(jobs))}")


def liveness(record, url: str | None, now: datetime | None = None,
             jobs=None, last_event: datetime | None = None) -> tuple[str, str]:
    """(short, long) state of a study: its status, except that a RUNNING study is either
    run by live jobs or "stopped without a word" (its last job died); the long one says
    how to go on (`url`: the database's, for the commands it gives).

    A job beats its lease every period (MPIOPT_LEASE_PERIOD); one silent for three
    periods has died. On the job's own host a dead process is seen at once (its pid is
    gone), so the study reads stopped without waiting out the three periods. `jobs`
    (storage.list_jobs): a study is running while any of its jobs lives, and stopped
    only when none does; without them the record's lease (the job with the newest
    beat) decides.

    A stopped study stopped at its last sign of life: its last heartbeat, or a later
    event the database recorded (`last_event`: a trial started or finished; the
    study's own update), so "stopped (18s ago)" never sits above "last update 18s ago"
    as an older moment."""
    now = now or datetime.now(timezone.utc)
    if record.status.value != "RUNNING":
        text = record.status.value.lower()
        return text, text + _how_to_go_on(record, url, jobs)
    lease = getattr(record, "lease", None)
    if jobs:
        live = live_jobs(jobs, now)
        if len(live) > 1:
            return "running", _several_running(live, now)
        lease = live[0] if live else max(jobs, key=lambda j: utc(j.beat_at))
    if lease is not None and not lease.is_stale(now) and not dead_here(lease):
        text = (f"running (host {lease.host}, pid {lease.pid}, last heartbeat "
                f"{_seconds(lease.age_s(now))} ago; it beats every {_seconds(lease.period_s)}, "
                f"and {_seconds(3 * lease.period_s)} without one means the job died)")
        return "running", text
    seen = [utc(record.updated_at)] + [m for m in (last_event,) if m is not None]
    if lease is not None:
        seen.append(utc(lease.beat_at))
    ago = _seconds((now - max(seen)).total_seconds())
    if lease is None or not lease.host:        # (no lease names a host: none is made up)
        return (f"stopped ({ago} ago)", f"stopped without a word (last update {ago} ago); "
                f"resume with: {_resume_command(record, url, jobs)}")
    why = (f"its process {lease.pid} is gone" if dead_here(lease)
           else f"last heartbeat {_seconds(lease.age_s(now))} ago")
    return (f"stopped ({ago} ago, {lease.host})",
            f"stopped without a word ({why}, host {lease.host}); resume with: "
            f"{_resume_command(record, url, jobs)}")


def _several_running(live, now: datetime) -> str:
    """The long state of a study that several live jobs run."""
    hosts = ", ".join(dict.fromkeys(j.host for j in live))
    newest = min(j.age_s(now) for j in live)
    period = max(j.period_s for j in live)
    return (f"running ({len(live)} jobs live, on {hosts}; newest heartbeat "
            f"{_seconds(newest)} ago; each beats every {_seconds(period)}, and "
            f"{_seconds(3 * period)} without one means that job died and the others take "
            "its trials over)")


def _resume_command(record, url: str | None, jobs=()) -> str:
    """The resume line the last job's closing line printed (mpiopt.reporting.commands):
    its launcher and process count (a line without them, copied on a cluster's login
    node, trains there in one process), --join where it was one of several jobs, and the
    recovery file the last job left (an outage's results wait there; `mpiopt resume` run
    from another folder would not find it)."""
    from pathlib import Path

    from mpiopt.reporting.commands import resume_command

    if not url:
        return "mpiopt resume NAME"
    kept = next((p for p in getattr(record, "recovery", ()) or () if Path(p).is_file()), None)
    last = _last_job(jobs)
    return resume_command(record.name, url, kept, launch=_launch(jobs),
                          shared=bool(last and last.shared))


def _last_job(jobs):
    """The job that started last (storage.list_jobs), or None."""
    return max(jobs, key=lambda j: j.id) if jobs else None


def _launch(jobs) -> str:
    """What went before `mpiopt resume` in the last job's own lines ("mpiexec -n 9 "),
    "" where it ran alone or did not record it (a job of an older mpiopt)."""
    last = _last_job(jobs)
    return (last.launch or "") if last is not None else ""


def status_summary(record, counts: dict, best: FrozenTrial | None, groups=(),
                   url: str | None = None, front=None, jobs=()) -> dict[str, Any]:
    """The numbers `mpiopt status` shows, read from the database alone. front (a
    mpiopt.reporting.front.Front, for a study with several objectives or constraints)
    says what "best" is: the best feasible trial, or (several objectives) no single
    best but the Pareto front, under "front". jobs (storage.list_jobs, oldest first):
    every job that ran the study, live or dead, under "jobs" (mpiopt.reporting.jobs)."""
    done = sum(n for s, n in counts.items() if TrialStatus(s).counts())
    now = datetime.now(timezone.utc)
    # the last recorded event: a trial started or finished, or the study's own record changed
    last_event = max([utc(record.updated_at)] + [g["last_at"] for g in groups])
    short, state = liveness(record, url, now, jobs, last_event)
    running, ahead, stranded = _running(counts, groups, jobs, now, short == "running")
    if front is not None:
        best = front.best
    summary = {
        "study": record.name, "status": record.status.value, "shown_status": short,
        "state": state, "direction": record.direction,
        "metric": record.metric, "budget": budget_of(record.spec_text), "done": done,
        "space_sets": space_sets_of(record.spec_text),
        "complete": counts[TrialStatus.COMPLETE],
        "running": running, "sent_ahead": ahead, "stranded": stranded,
        "failed": counts[TrialStatus.FAILED], "pruned": counts[TrialStatus.PRUNED],
        "interrupted": counts[TrialStatus.INTERRUPTED],
        "queued": counts[TrialStatus.PENDING],    # mpiopt enqueue, --retry-failed
        "best": None if best is None else {"number": best.number, "value": best.value,
                                           "params": dict(best.params)},
        "created_at": _iso(record.created_at), "updated_at": _iso(last_event),
        "elapsed": (now - record.created_at).total_seconds(),
        "since_update": (now - last_event).total_seconds(),
        "groups": [{**g, "since": (now - g["last_at"]).total_seconds(),
                    "last_at": _iso(g["last_at"]), "live": _live_group(g, jobs, now, short)}
                   for g in _groups_now(groups, jobs, now)],
        "jobs": [job_row(j, now) for j in jobs],
    }
    if front is not None and front.constrained:
        summary["constraints"] = [c.text() for c in front.constraints]
    if front is not None and front.multi:
        summary["objectives"] = dict(zip(front.names, front.directions))
        summary["front"] = {"size": len(front.trials), "hypervolume": front.hypervolume,
                            "trials": [{"number": t.number,
                                        "values": dict(zip(front.names, front.values(t))),
                                        "params": dict(t.params)} for t in front.trials]}
    return summary


def _running(counts, groups, jobs, now: datetime, alive: bool) -> tuple[int, int, int]:
    """(running, sent ahead, stranded): the RUNNING trials of live jobs, started or
    waiting for their group, and those a job that died left RUNNING (nothing runs them:
    a live job of the study takes them over, else the next resume runs them again).
    Without job records (an older database), `alive` (the study's state) decides."""
    total = counts[TrialStatus.RUNNING]
    if jobs:
        live = {j.id for j in live_jobs(jobs, now)}
        held = sum(j.running for j in jobs if j.id in live)
        ahead = sum(g.get("ahead", 0) for g in groups if g.get("job") in live)
    else:
        held = total if alive else 0
        ahead = sum(g.get("ahead", 0) for g in groups) if alive else 0
    return held - ahead, ahead, total - held


def _live_group(group: dict, jobs, now: datetime, short: str) -> bool:
    """Whether the group's job still runs (its "running trial" is running now)."""
    if not jobs:
        return short == "running"
    return group.get("job") in {j.id for j in live_jobs(jobs, now)}


def _groups_now(groups, jobs, now: datetime) -> list[dict]:
    """The groups of the live jobs (every job had its own group 0); with none live, those
    of the job that reported last: what was happening when the study stopped. A dead
    job's groups are summed up by its line in the jobs (mpiopt.reporting.jobs)."""
    known = {j.id for j in jobs}
    if not known or not groups:
        return list(groups)
    live = {j.id for j in live_jobs(jobs, now)}
    if not live:
        live = {max(groups, key=lambda g: g["last_at"]).get("job")}
    return [g for g in groups if g.get("job") in live or g.get("job") not in known]


FRONT_LINES = 5     # trials of the front `mpiopt status` lists (all of them: mpiopt best)


def _best_lines(summary: dict[str, Any]) -> list[str]:
    front = summary.get("front")
    if front is None:
        best = summary["best"]
        what = "best     " if not summary.get("constraints") else "best     (feasible) "
        return [what + ("-" if best is None else
                        f"{best['value']:.6g} (trial {best['number']}) "
                        + " ".join(f"{k}={_num(v)}" for k, v in best["params"].items()))]
    lines = [f"front    {front['size']} trials on the Pareto front, hypervolume "
             f"{front['hypervolume']:.6g} (no single best: {len(summary['objectives'])} objectives)"]
    for t in front["trials"][:FRONT_LINES]:
        lines.append(f"         trial {t['number']}: "
                     + ", ".join(f"{k} {_num(v)}" for k, v in t["values"].items()) + "; "
                     + " ".join(f"{k}={_num(v)}" for k, v in t["params"].items()))
    if front["size"] > FRONT_LINES:
        lines.append(f"         ... {front['size'] - FRONT_LINES} more: mpiopt best {summary['study']}")
    return lines


def status_lines(summary: dict[str, Any]) -> list[str]:
    """`mpiopt status` for people. The first line shows the study's state as the state
    line does (a RUNNING study whose jobs died reads stopped in both), which comes after
    the jobs and before the live groups, so that a stopped study ends on how to go on."""
    budget = summary["budget"] if summary["budget"] is not None else "?"
    objectives = summary.get("objectives") or {summary["metric"]: summary["direction"]}
    said = ", ".join(f"{k}, {v}" for k, v in objectives.items())
    constraints = summary.get("constraints")
    several = len({g.get("job") for g in summary["groups"]}) > 1
    return [f"study    {summary['study']} ({summary.get('shown_status', summary['status'])}, "
            f"{said}" + (f"; {', '.join(constraints)}" if constraints else "") + ")",
            f"trials   {summary['done']}/{budget} done, {summary['running']} running"
            + (f" (+{summary['sent_ahead']} sent ahead)" if summary.get("sent_ahead") else "")
            + (f", {summary['stranded']} left RUNNING by a job that died (they run again)"
               if summary.get("stranded") else "")
            + ", "
            f"{summary['failed']} failed, {summary['pruned']} pruned, "
            f"{summary['interrupted']} interrupted"
            + (f", {summary['queued']} queued" if summary.get("queued") else "")
            + _sets_note(summary),
            *_best_lines(summary),
            f"started  {summary['created_at']} ({_seconds(summary['elapsed'])} ago), "
            f"last update {_seconds(summary['since_update'])} ago",
            *job_lines(summary.get("jobs") or []),
            f"state    {summary['state']}"] + [
            f"{_group_name(g, several)} {g['host'] or '?'}: last reported {_seconds(g['since'])} ago"
            + (f", {'running' if g.get('live', True) else 'was running'} trial {g['running']}"
               if g["running"] is not None else "")
            + (f", {g['ahead']} sent ahead" if g.get("ahead") else "")
            for g in summary["groups"]]


def _group_name(g: dict, several: bool) -> str:
    """"group 2  ", or "job 3 group 2" where groups of several jobs are listed."""
    name = f"group {g['group']:<3}"
    return f"job {g.get('job')} {name}" if several else name


def _sets_note(summary: dict[str, Any]) -> str:
    """A finite space smaller than the budget ends the study first (README "Finite spaces")."""
    sets, budget = summary.get("space_sets"), summary["budget"]
    if sets is None or budget is None or sets >= budget:
        return ""
    return f"; the space has {sets} parameter sets, each run once"


def _num(v) -> str:
    if v is None:
        return "-"
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()
