"""Turn stored trials into tables, exports and short text pictures (no database code here).

Everything takes FrozenTrial / StudyRecord values, so the CLI, the Python API and tests
share one formatting path.
"""
from __future__ import annotations

import csv
import math
from datetime import datetime
from typing import Any, Iterable, Sequence

from mpiopt import jsontext
from mpiopt.durations import format_duration
from mpiopt.errors import cut
from mpiopt.trial import FrozenTrial, TrialStatus, by_fold, resume_note

TABLE_COLUMNS = ("number", "status", "value", "value_std", "attempt", "group", "duration", "params")
BASE_COLUMNS = ("number", "status", "value", "value_std", "seed", "attempt", "group", "host",
                "started_at", "finished_at", "duration", "error", "device", "suggest_seconds")
LINEAGE_COLUMNS = ("member", "round", "parent")     # search.algorithm pbt
SPARK = "▁▂▃▄▅▆▇█"
SPARK_ASCII = "_.-~=*#@"


def spread(trial: FrozenTrial) -> float | None:
    """The value's standard deviation over folds; None (shown "-") with fewer than two
    folds: the spread of one value is unknown, not 0."""
    return trial.value_std if len(trial.fold_values) > 1 else None


def trial_row(trial: FrozenTrial, human: bool = False, front=None) -> dict[str, Any]:
    """One line of `mpiopt trials` / `mpiopt best`; human: the duration as '1m23s' and
    the error's first line (tables), else in seconds and the whole error (JSON). front
    (mpiopt.reporting.front.Front): a constrained study's trials say whether they are
    feasible."""
    row = {"number": trial.number, "status": trial.status.value, "value": trial.value,
           "value_std": spread(trial)}
    feasible = _feasible(front, trial)
    if feasible is not None or (front is not None and front.constrained):
        row["feasible"] = feasible
    row.update(attempt=trial.attempt, group=trial.group,
               duration=format_duration(trial.duration) if human else trial.duration)
    if trial.round is not None:          # a pbt round: its lineage
        row.update(member=trial.member, round=trial.round, parent=trial.parent)
    row["metrics"] = dict(trial.metrics)
    if trial.error:
        row["error"] = _first_line(trial.error) if human else cut(trial.error)
    row["params"] = dict(trial.params)
    return row


def table_columns(trials, front=None) -> tuple:
    """TABLE_COLUMNS, with `feasible` in a constrained study, the lineage when some
    trial is a pbt round, `metrics` when some trial has one and `error` when some trial
    failed (the error's first line: `trials --status FAILED` says why)."""
    columns = list(TABLE_COLUMNS[:-1])
    if front is not None and front.constrained:
        columns.insert(columns.index("value_std") + 1, "feasible")
    if any(t.round is not None for t in trials):
        columns += LINEAGE_COLUMNS
    if any(t.metrics for t in trials):
        columns.append("metrics")
    columns.append("params")
    if any(t.error for t in trials):
        columns.append("error")
    return tuple(columns)


def _feasible(front, trial) -> str | None:
    from mpiopt.reporting.front import feasibility_word

    return feasibility_word(front, trial)


def _first_line(text: str) -> str:
    """mpiopt's error texts start with the message and where (objective.describe_error);
    a bare traceback's own heading is skipped."""
    lines = [line.strip() for line in text.strip().splitlines()
             if line.strip() and not line.startswith("Traceback (most recent call last)")]
    return lines[0][:120] if lines else ""


def trial_dict(trial: FrozenTrial, front=None) -> dict[str, Any]:
    """Every field of a trial, JSON-ready (timestamps as ISO 8601; the per-epoch values
    as {fold: {epoch: value}}, their keys strings); `feasible` in a constrained study."""
    out = {c: getattr(trial, c) for c in BASE_COLUMNS}
    out["status"], out["error"] = trial.status.value, cut(trial.error)
    out["value_std"] = spread(trial)
    feasible = _feasible(front, trial)
    if front is not None and front.constrained:
        out["feasible"] = feasible
    out["started_at"], out["finished_at"] = _iso(trial.started_at), _iso(trial.finished_at)
    out.update(params=dict(trial.params), metrics=dict(trial.metrics),
               fold_values=list(trial.fold_values),
               intermediate={str(f): {str(e): v for e, v in epochs.items()}
                             for f, epochs in by_fold(trial.intermediate).items()},
               spans=list(trial.spans))
    if trial.round is not None:
        out.update(member=trial.member, round=trial.round, parent=trial.parent)
    return out


def front_rows(front, top: int) -> tuple[list[dict], list[str], str]:
    """`mpiopt best` of a study with several objectives (the first `top` trials of its
    Pareto front, by the first objective) or constraints (the best feasible trials, top
    k): rows, columns, a title saying how many there are in all."""
    chosen = front.top(top)
    title = ""
    if front.multi:
        shown = (f"; the first {len(chosen)} by {front.names[0]} (--top)"
                 if len(chosen) < len(front.trials) else "")
        title = front.title() + shown
    extra = list(dict.fromkeys(front.names + [c.metric for c in front.constraints]))
    rows = [{"rank": i + 1, "number": t.number,
             **{n: front.metrics_of(t).get(n) for n in extra}, "params": dict(t.params)}
            for i, t in enumerate(chosen)]
    return rows, ["rank", "number", *extra, "params"], title


# A trial's fields as `mpiopt export` (CSV, JSON) and the Python API's trials_dataframe()
# name them, in their order: Optuna's names where Optuna has the field (its FrozenTrial,
# its trials_dataframe: state, datetime_start, user_attrs for what the objective returned
# beside its value), mpiopt's own after them. A flat table (CSV, DataFrame) spreads the
# dicts into columns (params_<name>, user_attrs_<name>, values_<objective>) and the fold
# values into fold_<i>; the per-epoch values and spans are in the JSON alone.
RECORD_FIELDS = ("number", "value", "values", "datetime_start", "datetime_complete",
                 "duration", "params", "user_attrs", "state", "value_std", "seed", "attempt",
                 "group", "host", "error", "device", "suggest_seconds", "feasible", "member",
                 "round", "parent", "fold_values", "intermediate_values", "spans")
SPREAD = {"values": "values_", "params": "params_", "user_attrs": "user_attrs_",
          "fold_values": "fold_"}


def trial_record(trial: FrozenTrial, names: Sequence[str] = (), front=None) -> dict[str, Any]:
    """One trial, its fields named as RECORD_FIELDS says. `names`: the objectives (two or
    more: `values` {objective: value} replaces `value`); `front`: a constrained study's
    trials say whether they are `feasible`. `state` is Optuna's word (FAIL for mpiopt's
    FAILED, WAITING for PENDING); `duration` is in seconds; the times are UTC datetimes
    (the writers give ISO 8601)."""
    from mpiopt.reporting.view import utc
    from mpiopt.trial import TrialState

    rec: dict[str, Any] = {"number": trial.number}
    if len(names) > 1:
        metrics = {**trial.metrics, names[0]: trial.value}
        rec["values"] = None if trial.value is None else {n: metrics.get(n) for n in names}
    else:
        rec["value"] = trial.value
    rec.update(datetime_start=utc(trial.started_at), datetime_complete=utc(trial.finished_at),
               duration=trial.duration, params=dict(trial.params),
               user_attrs=dict(trial.metrics), state=TrialState.of(trial.status).name,
               value_std=spread(trial), seed=trial.seed, attempt=trial.attempt,
               group=trial.group, host=trial.host, error=cut(trial.error),
               device=trial.device, suggest_seconds=trial.suggest_seconds)
    if front is not None and front.constrained:
        rec["feasible"] = _feasible(front, trial)
    if trial.round is not None:          # a pbt round's lineage
        rec.update(member=trial.member, round=trial.round, parent=trial.parent)
    rec.update(fold_values=list(trial.fold_values),
               intermediate_values={str(k): v for k, v in trial.intermediate.items()},
               spans=list(trial.spans))
    return rec


def flat_record(rec: dict[str, Any]) -> dict[str, Any]:
    """A trial_record as one row of a table: dicts and fold values spread into columns
    (SPREAD), the per-epoch values and spans left to the JSON."""
    row: dict[str, Any] = {}
    for key, value in rec.items():
        if key in SPREAD:
            items = enumerate(value) if key == "fold_values" else (value or {}).items()
            row.update({f"{SPREAD[key]}{k}": v for k, v in items})
        elif key not in ("intermediate_values", "spans"):
            row[key] = value
    return row


def export_rows(trials: Iterable[FrozenTrial], names: Sequence[str] = (),
                front=None) -> tuple[list[str], list[dict[str, Any]]]:
    """Flat rows (flat_record) plus the union of their columns in RECORD_FIELDS' order,
    first-seen within each spread field: a parameter first seen in a later trial (a
    conditional space's) still sits beside the other parameters. An absent one is an
    empty cell."""
    rows = [flat_record(trial_record(t, names, front)) for t in trials]
    rank = {field: i for i, field in enumerate(RECORD_FIELDS)}

    def field_of(column: str) -> str:
        for field, prefix in SPREAD.items():
            if column.startswith(prefix) and column not in rank:
                return field
        return column

    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    columns = sorted(seen, key=lambda c: rank.get(field_of(c), len(rank)))   # (stable)
    return columns, rows


def write_csv(trials: Iterable[FrozenTrial], out, names: Sequence[str] = (), front=None) -> None:
    columns, rows = export_rows(trials, names, front)
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _text(v) for k, v in row.items()})


def write_json(trials: Iterable[FrozenTrial], out, names: Sequence[str] = (), front=None) -> None:
    jsontext.dump([{k: _text(v) if isinstance(v, datetime) else v
                    for k, v in trial_record(t, names, front).items()} for t in trials],
                  out, indent=2)
    out.write("\n")


def _text(value) -> Any:
    """A cell of a written table: a time as ISO 8601, nothing as an empty cell."""
    if value is None:
        return ""
    return value.isoformat() if isinstance(value, datetime) else value


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


def _epoch_rows(epochs: list, values: list) -> list[str]:
    """A row per epoch (with several folds, per fold and epoch); a trial that reported
    every batch (20,000 reports printed 20,000 rows) lists its first and last
    EPOCH_ROWS / 2 and says where the rest are."""
    folds = len({s.fold for s in epochs}) > 1
    head = ["  fold  epoch  value"] if folds else []
    rows = [f"  {s.fold:>4}  {s.epoch:>5}  {_num(v)}" if folds else f"  {s.epoch:>4}  {_num(v)}"
            for s, v in zip(epochs, values)]
    if len(rows) <= EPOCH_ROWS:
        return head + rows
    half = EPOCH_ROWS // 2
    return (head + rows[:half]
            + [f"  ... {len(rows) - 2 * half} more epochs (all of them: mpiopt export)"]
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
               unicode_ok: bool = True, parent: FrozenTrial | None = None,
               front=None) -> list[str]:
    """Everything about one trial, for `mpiopt show` (parent: a pbt round's parent trial;
    front: the study's mpiopt.reporting.front.Front, for feasibility and the front)."""
    std = spread(trial)
    value = "-" if trial.value is None else f"{trial.value:.6g}"
    lines = [f"trial {trial.number} of study '{study_name}': {trial.status.value}",
             f"  {metric} ({direction}): {value}" + (f" ± {std:.6g}" if std is not None else ""),
             *_front_lines(trial, front),
             f"  attempt {trial.attempt}, group {_dash(trial.group)}, host {_dash(trial.host)}, "
             f"seed {_dash(trial.seed)}" + (f", device {trial.device}" if trial.device else ""),
             f"  started {_dash(_iso(trial.started_at))}, finished {_dash(_iso(trial.finished_at))}, "
             f"duration {_seconds(trial.duration)}"]
    if trial.round is not None:
        lines.append("  " + lineage_line(trial, parent))
    resumed = resume_note(trial.spans)
    if resumed:
        lines.append(f"  {resumed}")
    lines += _section("params", trial.params)
    lines += _section("folds", dict(enumerate(trial.fold_values)))
    lines += _section("metrics", trial.metrics)
    lines += _curve_lines(trial.intermediate, unicode_ok)
    if trial.error:      # a pruned trial's: where the pruner stopped it, and against what
        head = "pruned:" if trial.status is TrialStatus.PRUNED else "error:"
        lines += [head] + ["  " + line for line in cut(trial.error).rstrip().splitlines()]
    return lines


def _curve_lines(intermediate: dict, unicode_ok: bool) -> list[str]:
    """The per-epoch values: a sparkline and a small plot (one sparkline per fold with
    several folds: each fold's first epoch is a new model, never a fall of the last
    fold's curve), then the values."""
    if not intermediate:
        return []
    steps = sorted(intermediate)
    values = [intermediate[s] for s in steps]
    folds = by_fold(intermediate)
    if len(folds) == 1:
        epochs = [s.epoch for s in steps]
        return ([f"per-epoch values ({len(epochs)} epochs, {epochs[0]}..{epochs[-1]}): "
                 f"{sparkline(_thinned(values, CURVE_WIDTH), ascii_only=not unicode_ok)}"]
                + ["  " + line for line in ascii_curve(values)] + _epoch_rows(steps, values))
    lines = [f"per-epoch values ({len(folds)} folds, {len(steps)} epochs in all; each fold's "
             "epochs count from 1):"]
    for fold, curve in folds.items():
        epochs = sorted(curve)
        lines.append(f"  fold {fold} (epochs {epochs[0]}..{epochs[-1]}): "
                     f"{sparkline(_thinned([curve[e] for e in epochs], CURVE_WIDTH), not unicode_ok)}")
    return lines + _epoch_rows(steps, values)


def _front_lines(trial: FrozenTrial, front) -> list[str]:
    """A constrained study: whether the trial meets the constraints (and which it
    breaks); several objectives: its value in each and whether it is on the front."""
    if front is None or trial.status != TrialStatus.COMPLETE:
        return []
    lines = []
    if front.multi:
        values = ", ".join(f"{n} {_num(v)}" for n, v in zip(front.names, front.values(trial)))
        where = "on the Pareto front" if front.on_front(trial) else "not on the Pareto front"
        lines.append(f"  objectives: {values} ({where} of {len(front.trials)} trials)")
    if front.constrained:
        broken = front.broken(trial)
        lines.append(f"  INFEASIBLE: breaks {', '.join(broken)} (never best)" if broken
                     else f"  feasible: meets {front.constraint_text()}")
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


# `mpiopt status` and the studies' states live in mpiopt.reporting.status; their names
# stay importable from here, where they were first
from mpiopt.reporting.status import (budget_of, liveness, space_sets_of,  # noqa: E402,F401
                                     status_lines, status_summary)
