"""A study as the plots see it: its trials, its parameters' axes, hover text and times.

Built from a StudyRecord and FrozenTrial values (no database code here). A parameter's
axis comes from the search space stored with the study (mpiopt.space: real/integer with
a uniform or log-uniform prior, categorical with its choices), so a log-uniform learning
rate gets a log axis. A study whose stored space cannot be read (an old or hand-made
database) gets axes inferred from the values: strings and booleans are categorical,
numbers linear.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Sequence

from mpiopt.trial import FrozenTrial, TrialStatus


@dataclass(frozen=True)
class Panel:
    """One plot's content: `data` to draw (keys documented by its builder in figures.py),
    or a `note` saying why there is nothing to draw."""

    kind: str
    title: str
    note: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    caption: str | None = None     # said under a drawn plot (what it leaves out, and why)


@dataclass(frozen=True)
class Param:
    """One parameter's axis. `encode` maps a value to the number the plots and the
    importance model use: the choice's index for a categorical, log10 for a log prior."""

    name: str
    kind: str                      # "real" | "integer" | "categorical"
    log: bool = False
    choices: tuple = ()
    low: float | None = None       # bounds in value units (None: from the trials)
    high: float | None = None

    @property
    def categorical(self) -> bool:
        return self.kind == "categorical"

    def encode(self, value: Any) -> float | None:
        if self.categorical:
            for i, choice in enumerate(self.choices):
                if type(choice) is type(value) and choice == value:
                    return float(i)
            return None
        if not finite(value) or (self.log and value <= 0):
            return None
        return math.log10(value) if self.log else float(value)

    def decode(self, x: float) -> Any:
        """The inverse of encode, for grid points (a choice, or a number on the value scale)."""
        if self.categorical:
            return self.choices[min(len(self.choices) - 1, max(0, int(round(x))))]
        return 10.0 ** x if self.log else x

    def encoded_range(self, values: Sequence[float]) -> tuple[float, float]:
        """[low, high] in encoded units: the space's bounds, else the trials' spread."""
        if self.categorical:
            return 0.0, float(len(self.choices) - 1)
        if self.low is not None and self.high is not None:
            return self.encode(self.low), self.encode(self.high)
        known = [v for v in values if v is not None]
        return (min(known), max(known)) if known else (0.0, 1.0)

    def label(self, value: Any) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class StudyView:
    """Everything a plot needs to know about a study, read once."""

    name: str
    direction: str
    metric: str
    trials: tuple[FrozenTrial, ...]
    params: tuple[Param, ...]
    now: datetime                  # when the report was made: running trials end here
    spec_text: str = ""            # the stored spec: objectives, constraints
    jobs: tuple = ()               # the jobs that ran it (storage.list_jobs), oldest first
    cache: dict = field(default_factory=dict, compare=False, repr=False)   # shared fits

    @classmethod
    def of(cls, record, trials: Sequence[FrozenTrial], now: datetime | None = None,
           jobs: Sequence = ()) -> "StudyView":
        trials = tuple(sorted(trials, key=lambda t: t.number))
        return cls(record.name, record.direction, record.metric, trials,
                   params_of(getattr(record, "space_json", None), trials),
                   now or datetime.now(timezone.utc), getattr(record, "spec_text", None) or "",
                   tuple(jobs))

    @property
    def maximize(self) -> bool:
        return self.direction == "maximize"

    @property
    def front(self):
        """The study's best trials (mpiopt.reporting.front), computed once per view."""
        if "front" not in self.cache:
            from mpiopt.reporting.front import Front, objective_of

            self.cache["front"] = Front(objective_of(self), self.trials)
        return self.cache["front"]

    @property
    def multi(self) -> bool:
        """Several objectives: the best trials are a Pareto front."""
        return self.front.multi

    def complete(self) -> list[FrozenTrial]:
        """COMPLETE trials with a finite value: the ones a model of the objective may use."""
        return [t for t in self.trials if t.status == TrialStatus.COMPLETE and finite(t.value)]

    def count(self, status: TrialStatus) -> int:
        return sum(t.status == status for t in self.trials)


def params_of(space_json: str | None, trials: Sequence[FrozenTrial]) -> tuple[Param, ...]:
    """Parameters in the space's order, then any the trials hold that the space lacks."""
    params = {p.name: p for p in _from_space(space_json)}
    for trial in trials:
        for name in trial.params:
            if name not in params:
                params[name] = _inferred(name, [t.params.get(name) for t in trials
                                                if name in t.params])
    return tuple(params.values())


def _from_space(space_json: str | None) -> list[Param]:
    try:
        description = json.loads(space_json or "{}")
    except (TypeError, ValueError):
        return []
    out = []
    for name, entry in (description.items() if isinstance(description, dict) else ()):
        if not isinstance(entry, dict):
            continue
        if entry.get("type") == "categorical" and isinstance(entry.get("choices"), list):
            out.append(Param(name, "categorical", choices=tuple(entry["choices"])))
        elif entry.get("type") in ("real", "integer") and finite(entry.get("low")) \
                and finite(entry.get("high")):
            log = entry.get("prior") == "log-uniform" and entry["low"] > 0
            out.append(Param(name, entry["type"], log, low=entry["low"], high=entry["high"]))
    return out


def _inferred(name: str, values: list) -> Param:
    if all(finite(v) for v in values):
        kind = "integer" if all(isinstance(v, int) for v in values) else "real"
        return Param(name, kind)
    choices: list = []
    for v in values:
        if not any(type(c) is type(v) and c == v for c in choices):
            choices.append(v)
    return Param(name, "categorical", choices=tuple(choices))


STATUS_COLORS = {"COMPLETE": "#1f77b4", "PRUNED": "#ff7f0e", "FAILED": "#d62728",
                 "RUNNING": "#2ca02c", "INTERRUPTED": "#9467bd", "PENDING": "#7f7f7f"}


def hover(trial: FrozenTrial, metric: str = "value") -> str:
    """A trial in a few lines (plotly hover text; <br> separates lines)."""
    value = "-" if trial.value is None else f"{trial.value:.6g}"
    lines = [f"trial {trial.number} · {trial.status.value} · {metric} {value}"]
    where = f"group {trial.group}" if trial.group is not None else ""
    if trial.job is not None:
        where += f" of job {trial.job}"
    if trial.host:
        where += f" on {trial.host}"
    if where:
        lines.append(where.strip())
    device = getattr(trial, "device", None)
    if device:
        lines.append(f"device: {device}")
    if trial.duration is not None:
        lines.append(f"duration {trial.duration:.3g} s")
    lines += [f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}"
              for k, v in trial.params.items()]
    return "<br>".join(lines)


def trial_hovers(view: StudyView) -> dict[int, str]:
    """{number: hover text} of every trial, as each figure shows it: the trial (hover),
    then the other objectives' values and the constraints it breaks. The report, the
    dashboard and the Python figures (mpiopt.visualization) share this one table. Each
    line is HTML-escaped (plotly reads a subset of HTML in hover text: a name holding
    markup is shown as text), the lines joined by <br>."""
    import html

    return {t.number: "<br>".join(html.escape(line) for line in
                                  (hover(t, view.metric) + _more_objectives(view, t)).split("<br>"))
            for t in view.trials}


def _more_objectives(view: StudyView, trial) -> str:
    """The other objectives' values and the feasibility, for a trial's hover text."""
    front = view.front
    metrics = front.metrics_of(trial)
    parts = [f"{n} {_num(metrics.get(n))}" for n in front.names[1:] if n in metrics]
    if front.feasible(trial) is False:
        parts.append("breaks " + ", ".join(front.broken(trial)))
    return "<br>" + " · ".join(parts) if parts else ""


def _num(v) -> str:
    return "-" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)


def utc(when: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; mpiopt writes UTC."""
    if when is None or when.tzinfo is not None:
        return when
    return when.replace(tzinfo=timezone.utc)


def finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


