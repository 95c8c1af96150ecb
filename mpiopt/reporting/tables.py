"""Turn stored trials into tables, exports and short text pictures (no database code here).

Everything takes FrozenTrial / StudyRecord values, so the CLI, the Python API and tests
share one formatting path.
"""
from __future__ import annotations

import csv
import json
import math
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

import yaml

from mpiopt.durations import format_duration
from mpiopt.errors import cut
from mpiopt.search import traits
from mpiopt.trial import FrozenTrial, TrialStatus

TABLE_COLUMNS = ("number", "status", "value", "value_std", "attempt", "group", "duration", "params")
BASE_COLUMNS = ("number", "status", "value", "value_std", "seed", "attempt", "group", "host",
                "started_at", "finished_at", "duration", "error", "device", "suggest_seconds")
LINEAGE_COLUMNS = ("member", "round", "parent")     # search.algorithm pbt
SPARK = "▁▂▃▄▅▆▇█"
SPARK_ASCII = "_.-~=*#@"


def trial_row(trial: FrozenTrial, human: bool = False) -> dict[str, Any]:
    """One line of `mpiopt trials` / `mpiopt best`; human: the duration as '1m23s'
    (tables), else in seconds (JSON)."""
    row = {"number": trial.number, "status": trial.status.value, "value": trial.value,
           "value_std": trial.value_std, "attempt": trial.attempt, "group": trial.group,
           "duration": format_duration(trial.duration) if human else trial.duration}
    if trial.round is not None:          # a pbt round: its lineage
        row.update(member=trial.member, round=trial.round, parent=trial.parent)
    row["params"] = dict(trial.params)
    return row


def table_columns(trials) -> tuple:
    """TABLE_COLUMNS, with the lineage before params when some trial is a pbt round."""
    if any(t.round is not None for t in trials):
        return TABLE_COLUMNS[:-1] + LINEAGE_COLUMNS + TABLE_COLUMNS[-1:]
    return TABLE_COLUMNS


def trial_dict(trial: FrozenTrial) -> dict[str, Any]:
    """Every field of a trial, JSON-ready (timestamps as ISO 8601, epochs as strings)."""
    out = {c: getattr(trial, c) for c in BASE_COLUMNS}
    out["status"], out["error"] = trial.status.value, cut(trial.error)
    out["started_at"], out["finished_at"] = _iso(trial.started_at), _iso(trial.finished_at)
    out.update(params=dict(trial.params), metrics=dict(trial.metrics),
               fold_values=list(trial.fold_values),
               intermediate={str(k): v for k, v in trial.intermediate.items()},
               spans=list(trial.spans))
    if trial.round is not None:
        out.update(member=trial.member, round=trial.round, parent=trial.parent)
    return out


def front_rows(trials, tracker, top: int) -> tuple[list[dict], list[str], str]:
    """`mpiopt best` of a study with several objectives (its Pareto front, by the first
    objective) or constraints (the best feasible trials, top k): rows, columns, a title."""
    names = [n for n, _ in tracker.objectives]
    if len(names) > 1:
        for t in sorted(trials, key=lambda t: t.number):
            tracker.add(t)
        chosen = [t for t, _ in sorted(tracker.front, key=lambda tv: tv[1])]
        title = (f"Pareto front: {len(chosen)} of {len(trials)} complete trials "
                 f"({', '.join(f'{n} {d}' for n, d in tracker.objectives)}), hypervolume "
                 f"{tracker.hypervolume():.6g}")
    else:
        feasible = [t for t in trials if tracker.outcome(t) is not None and tracker.feasible(t)]
        chosen = sorted(feasible, key=lambda t: tracker.outcome(t))[:top]
        title = ""
    extra = list(dict.fromkeys(names + [c.metric for c in tracker.constraints]))
    rows = [{"number": t.number, **{n: tracker.metrics_of(t).get(n) for n in extra},
             "params": dict(t.params)} for t in chosen]
    return rows, ["number", *extra, "params"], title


def flat_row(trial: FrozenTrial) -> dict[str, Any]:
    """A spreadsheet row: params_*, metrics_* and fold_* become their own columns."""
    row = {c: getattr(trial, c) for c in BASE_COLUMNS}
    row["status"], row["error"] = trial.status.value, cut(trial.error)
    row["started_at"], row["finished_at"] = _iso(trial.started_at), _iso(trial.finished_at)
    if trial.round is not None:          # a pbt round's lineage
        row.update(member=trial.member, round=trial.round, parent=trial.parent)
    row.update({f"params_{k}": v for k, v in trial.params.items()})
    row.update({f"metrics_{k}": v for k, v in trial.metrics.items()})
    row.update({f"fold_{i}": v for i, v in enumerate(trial.fold_values)})
    return row


def export_rows(trials: Iterable[FrozenTrial]) -> tuple[list[str], list[dict[str, Any]]]:
    """Flat rows plus the union of their columns, in first-seen order within each kind
    (params_*, metrics_*, fold_*): a parameter first seen in a later trial (a conditional
    space's) still sits beside the other parameters. An absent one is an empty cell."""
    rows = [flat_row(t) for t in trials]
    columns: dict[str, None] = dict.fromkeys(BASE_COLUMNS)
    for prefix in ("params_", "metrics_", "fold_", ""):
        for row in rows:
            columns.update(dict.fromkeys(k for k in row if k.startswith(prefix)))
    return list(columns), rows


def write_csv(trials: Iterable[FrozenTrial], out) -> None:
    columns, rows = export_rows(trials)
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})


def write_json(trials: Iterable[FrozenTrial], out) -> None:
    json.dump([trial_dict(t) for t in trials], out, indent=2)
    out.write("\n")


def sparkline(values: Sequence[float | None], ascii_only: bool = False) -> str:
    """One character per value, low to high; gaps (None, NaN) are spaces."""
    ramp = SPARK_ASCII if ascii_only else SPARK
    finite = [v for v in values if _finite(v)]
    if not finite:
        return ""
    lo, hi = min(finite), max(finite)
    scale = (len(ramp) - 1) / (hi - lo) if hi > lo else 0.0
    return "".join(ramp[round((v - lo) * scale)] if _finite(v) else " " for v in values)


CURVE_WIDTH = 60     # columns of `mpiopt show`'s sparkline and curve
EPOCH_ROWS = 40      # per-epoch rows `mpiopt show` lists in full; past it, the ends only


def _thinned(values: Sequence, width: int) -> list:
    """At most `width` values, evenly spaced, the first and last kept."""
    if len(values) <= width:
        return list(values)
    return [values[round(i * (len(values) - 1) / (width - 1))] for i in range(width)]


def _epoch_rows(epochs: list[int], values: list) -> list[str]:
    """A row per epoch; a trial that reported every batch (20,000 reports printed 20,000
    rows) lists its first and last EPOCH_ROWS / 2 and says where the rest are."""
    rows = [f"  {e:>4}  {_num(v)}" for e, v in zip(epochs, values)]
    if len(rows) <= EPOCH_ROWS:
        return rows
    half = EPOCH_ROWS // 2
    return (rows[:half] + [f"  ... {len(rows) - 2 * half} more epochs (all of them: mpiopt export)"]
            + rows[-half:])


def ascii_curve(values: Sequence[float | None], height: int = 5, width: int = CURVE_WIDTH) -> list[str]:
    """A small plot of a learning curve: `*` per epoch (evenly thinned to `width` columns),
    the max on top, the min at the bottom."""
    values = _thinned(values, width)
    points = [v if _finite(v) else None for v in values]
    finite = [v for v in points if v is not None]
    if len(finite) < 2:
        return []
    lo, hi = min(finite), max(finite)
    rows = [[" "] * len(points) for _ in range(height)]
    for x, v in enumerate(points):
        if v is not None:
            level = 0 if hi == lo else round((v - lo) / (hi - lo) * (height - 1))
            rows[height - 1 - level][x] = "*"
    labels = [f"{hi:.4g}"] + [""] * (height - 2) + [f"{lo:.4g}"]
    pad = max(len(label) for label in labels)
    return [f"{label.rjust(pad)} |{''.join(row)}".rstrip() for label, row in zip(labels, rows)]


def show_lines(trial: FrozenTrial, study_name: str, metric: str, direction: str,
               unicode_ok: bool = True, parent: FrozenTrial | None = None) -> list[str]:
    """Everything about one trial, for `mpiopt show` (parent: a pbt round's parent trial)."""
    spread = f" ± {trial.value_std:.6g}" if trial.value_std is not None else ""
    value = "-" if trial.value is None else f"{trial.value:.6g}"
    lines = [f"trial {trial.number} of study '{study_name}': {trial.status.value}",
             f"  {metric} ({direction}): {value}{spread}",
             f"  attempt {trial.attempt}, group {_dash(trial.group)}, host {_dash(trial.host)}, "
             f"seed {_dash(trial.seed)}" + (f", device {trial.device}" if trial.device else ""),
             f"  started {_dash(_iso(trial.started_at))}, finished {_dash(_iso(trial.finished_at))}, "
             f"duration {_seconds(trial.duration)}"]
    if trial.round is not None:
        lines.append("  " + lineage_line(trial, parent))
    lines += _section("params", trial.params)
    lines += _section("folds", dict(enumerate(trial.fold_values)))
    lines += _section("metrics", trial.metrics)
    if trial.intermediate:
        epochs = sorted(trial.intermediate)
        values = [trial.intermediate[e] for e in epochs]
        lines += [f"per-epoch values ({len(epochs)} epochs, {epochs[0]}..{epochs[-1]}): "
                  f"{sparkline(_thinned(values, CURVE_WIDTH), ascii_only=not unicode_ok)}"]
        lines += ["  " + line for line in ascii_curve(values)]
        lines += _epoch_rows(epochs, values)
    if trial.error:
        lines += ["error:"] + ["  " + line for line in cut(trial.error).rstrip().splitlines()]
    return lines


def lineage_line(trial: FrozenTrial, parent: FrozenTrial | None = None) -> str:
    """A pbt round's lineage in words: which member and round, and where it started."""
    head = f"pbt: member {trial.member}, round {trial.round}"
    if trial.parent is None:
        return f"{head}, started afresh"
    if parent is None:
        return f"{head}, from trial {trial.parent}'s checkpoint"
    if parent.member == trial.member:
        return f"{head}, continued its own trial {parent.number} (round {parent.round})"
    value = "-" if parent.value is None else f"{parent.value:.6g}"
    return (f"{head}, exploited member {parent.member}'s trial {parent.number} "
            f"(value {value}) and explored its parameters")


def budget_of(spec_text: str) -> int | None:
    """search.trials from the stored spec (YAML); None when it cannot be read."""
    try:
        trials = (yaml.safe_load(spec_text) or {}).get("search", {}).get("trials")
    except (yaml.YAMLError, AttributeError):
        return None
    return trials if isinstance(trials, int) else None


def space_sets_of(spec_text: str) -> int | None:
    """How many parameter sets the stored study's space has (mpiopt.search.untried); None
    for an infinite space or a spec that cannot be read."""
    from mpiopt.search.untried import space_size
    from mpiopt.spec import Spec

    try:
        return space_size(Spec.from_text(spec_text, check_files=False).space)
    except Exception:        # (a stored spec of another version: the count is only a note)
        return None


def _how_to_go_on(record, url: str | None) -> str:
    """What the closing line of an ended job said to do next, for `mpiopt status`."""
    from mpiopt.study.opening import after_failures, resume_command

    if url is None or record.status.value not in ("INTERRUPTED", "FAILED"):
        return ""
    if record.status.value == "INTERRUPTED":
        return f"; resume with: {_resume_command(record, url)}"
    try:
        algorithm = yaml.safe_load(record.spec_text or "")["search"]["algorithm"]
        rounds = traits(algorithm).rounds
    except Exception:               # (a stored spec of another version: no advice)
        return ""
    what = "rounds" if rounds else "trials"
    return (f" (its {what} failed before any succeeded); "
            f"{after_failures(record.name, url, algorithm)}")


def liveness(record, url: str | None, now: datetime | None = None) -> tuple[str, str]:
    """(short, long) state of a study: its status, except that a RUNNING study is either
    held by a live job (fresh lease) or "stopped without a word" (its job died); the long
    one says how to go on (`url`: the database's, for the commands it gives)."""
    now = now or datetime.now(timezone.utc)
    if record.status.value != "RUNNING":
        text = record.status.value.lower()
        return text, text + _how_to_go_on(record, url)
    lease = getattr(record, "lease", None)
    if lease is not None and not lease.is_stale(now):
        text = (f"running (host {lease.host}, pid {lease.pid}, last heartbeat "
                f"{_seconds(lease.age_s(now))} ago)")
        return "running", text
    last = lease.beat_at if lease is not None else record.updated_at
    ago = _seconds((now - last).total_seconds())
    if lease is not None and lease.host:
        return (f"stopped ({ago} ago, {lease.host})",
                f"stopped without a word (last heartbeat {ago} ago, host {lease.host}); "
                f"resume with: {_resume_command(record, url)}")
    return (f"stopped ({ago} ago)", f"stopped without a word (last update {ago} ago); "
            f"resume with: {_resume_command(record, url)}")


def _resume_command(record, url: str | None) -> str:
    """The resume line, naming the recovery file the last job left (an outage's results
    wait there; `mpiopt resume` run from another folder would not find it)."""
    from pathlib import Path

    from mpiopt.study.opening import resume_command

    if not url:
        return "mpiopt resume NAME"
    kept = next((p for p in getattr(record, "recovery", ()) or () if Path(p).is_file()), None)
    return resume_command(record.name, url, kept)


def status_summary(record, counts: dict, best: FrozenTrial | None, groups=(),
                   url: str | None = None) -> dict[str, Any]:
    """The numbers `mpiopt status` shows, read from the database alone."""
    done = sum(n for s, n in counts.items() if TrialStatus(s).counts())
    now = datetime.now(timezone.utc)
    # the last recorded event: a trial started or finished, or the study's own record changed
    last_event = max([record.updated_at] + [g["last_at"] for g in groups])
    ahead = sum(g.get("ahead", 0) for g in groups)   # RUNNING rows not started yet
    return {
        "study": record.name, "status": record.status.value,
        "state": liveness(record, url, now)[1], "direction": record.direction,
        "metric": record.metric, "budget": budget_of(record.spec_text), "done": done,
        "space_sets": space_sets_of(record.spec_text),
        "complete": counts[TrialStatus.COMPLETE],
        "running": counts[TrialStatus.RUNNING] - ahead, "sent_ahead": ahead,
        "failed": counts[TrialStatus.FAILED], "pruned": counts[TrialStatus.PRUNED],
        "interrupted": counts[TrialStatus.INTERRUPTED],
        "queued": counts[TrialStatus.PENDING],    # mpiopt enqueue, --retry-failed
        "best": None if best is None else {"number": best.number, "value": best.value,
                                           "params": dict(best.params)},
        "created_at": _iso(record.created_at), "updated_at": _iso(last_event),
        "elapsed": (now - record.created_at).total_seconds(),
        "since_update": (now - last_event).total_seconds(),
        "groups": [{**g, "since": (now - g["last_at"]).total_seconds(),
                    "last_at": _iso(g["last_at"])} for g in groups],
    }


def status_lines(summary: dict[str, Any]) -> list[str]:
    budget = summary["budget"] if summary["budget"] is not None else "?"
    best = summary["best"]
    best_text = "-" if best is None else (
        f"{best['value']:.6g} (trial {best['number']}) "
        + " ".join(f"{k}={_num(v)}" for k, v in best["params"].items()))
    return [f"study    {summary['study']} ({summary['status']}, {summary['metric']}, "
            f"{summary['direction']})",
            f"trials   {summary['done']}/{budget} done, {summary['running']} running"
            + (f" (+{summary['sent_ahead']} sent ahead)" if summary.get("sent_ahead") else "")
            + ", "
            f"{summary['failed']} failed, {summary['pruned']} pruned, "
            f"{summary['interrupted']} interrupted"
            + (f", {summary['queued']} queued" if summary.get("queued") else "")
            + _sets_note(summary),
            f"best     {best_text}",
            f"started  {summary['created_at']} ({_seconds(summary['elapsed'])} ago), "
            f"last update {_seconds(summary['since_update'])} ago",
            f"state    {summary['state']}"] + [
            f"group {g['group']:<3} {g['host'] or '?'}: last reported {_seconds(g['since'])} ago"
            + (f", running trial {g['running']}" if g["running"] is not None else "")
            + (f", {g['ahead']} sent ahead" if g.get("ahead") else "")
            for g in summary["groups"]]


def _sets_note(summary: dict[str, Any]) -> str:
    """A finite space smaller than the budget ends the study first (README "Finite spaces")."""
    sets, budget = summary.get("space_sets"), summary["budget"]
    if sets is None or budget is None or sets >= budget:
        return ""
    return f"; the space has {sets} parameter sets, each run once"


def _section(title: str, items: dict) -> list[str]:
    if not items:
        return []
    pad = max(len(str(k)) for k in items)
    return [f"{title}:"] + [f"  {str(k).ljust(pad)}  {_num(v)}" for k, v in items.items()]


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _num(v) -> str:
    if v is None:
        return "-"
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _dash(v) -> str:
    return "-" if v is None else str(v)


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


_seconds = format_duration
