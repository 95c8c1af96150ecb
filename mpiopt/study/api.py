"""Read a recorded study from Python, in Optuna's names where the concept is the same.

    >>> import mpiopt
    >>> study = mpiopt.load_study(study_name="branin", storage="sqlite:///mpiopt.db")  # doctest: +SKIP
    >>> study.best_trial.params                                              # doctest: +SKIP
    {'x': 3.14, 'y': 2.27}
    >>> study.trials_dataframe().sort_values("value").head()                 # doctest: +SKIP
    >>> study.best_params, study.best_value                                  # doctest: +SKIP
    >>> [t.state for t in study.trials]                                      # doctest: +SKIP

Each property reads the database again, so a Study follows a study that is still running.

"Best" is mpiopt.reporting.front's, as in every other view: with one objective the best
COMPLETE trial (the best feasible one under constraints); with several objectives there
is no single best trial (best_trial raises, as Optuna's does) and `best_trials` is the
Pareto front. The trials are TrialView values: Optuna's names (state, values,
intermediate_values, datetime_start, datetime_complete, duration as a timedelta,
user_attrs) over mpiopt's record, whose own fields (status, metrics, fold_values,
value_std, group, host, ...) read through unchanged. docs/optuna-migration.md lists
what maps to what.
"""
from __future__ import annotations

import warnings
from datetime import timedelta
from typing import Any

from mpiopt.errors import MpioptError
from mpiopt.reporting.tables import export_rows
from mpiopt.storage import Storage, StudyRecord, open_storage
from mpiopt.reporting.view import utc
from mpiopt.trial import FrozenTrial, StudyDirection, TrialState, TrialStatus


class MultiObjectiveError(MpioptError, RuntimeError):
    """A single best trial was asked of a study with several objectives (Optuna raises
    RuntimeError there too)."""


class TrialView:
    """One trial as the API shows it: Optuna's names first, mpiopt's record behind them
    (any other attribute is the FrozenTrial's: status, metrics, fold_values, group, ...)."""

    __slots__ = ("_trial", "_names", "_params")

    def __init__(self, trial: FrozenTrial, names: tuple[str, ...] = (), params: dict = None):
        """`params`: {name: mpiopt.reporting.view.Param} of the study's space (the
        distributions' source; without it they are inferred from the trial alone)."""
        self._trial, self._names, self._params = trial, names, params or {}

    def __getattr__(self, name: str):
        return getattr(self._trial, name)

    def __eq__(self, other) -> bool:
        return isinstance(other, TrialView) and other._trial == self._trial

    def __hash__(self) -> int:
        return hash((self._trial.study_id, self._trial.number))

    def __repr__(self) -> str:
        return (f"TrialView(number={self.number}, state={self.state.name}, value={self.value}, "
                f"params={self.params})")

    @property
    def frozen(self) -> FrozenTrial:
        """mpiopt's own record of the trial."""
        return self._trial

    @property
    def state(self) -> TrialState:
        return TrialState.of(self._trial.status)

    @property
    def values(self) -> list[float] | None:
        """Every objective's value in the spec's order (Optuna's `values`); None until
        the trial completes. One objective: [value]."""
        if self._trial.value is None:
            return None
        if len(self._names) < 2:
            return [self._trial.value]
        metrics = {**self._trial.metrics, self._names[0]: self._trial.value}
        return [metrics.get(n) for n in self._names]

    @property
    def intermediate_values(self) -> dict:
        """Per-epoch values: {epoch: value} as report(epoch, value) gave them, Optuna's
        {step: value}; a trial of several folds has {(fold, epoch): value}, each fold's
        epochs counting from 1 (one number per report would mean different points in
        different trials)."""
        values = self._trial.intermediate
        if all(s.fold == 0 for s in values):
            return {s.epoch: v for s, v in values.items()}
        return {(s.fold, s.epoch): v for s, v in values.items()}

    @property
    def last_step(self) -> int | None:
        """The last step the trial reported (Optuna's last_step), None before its first
        report: an epoch, or (fold, epoch) for a study of several folds, as the keys of
        intermediate_values."""
        return max(self.intermediate_values, default=None)

    @property
    def distributions(self) -> dict:
        """{name: Optuna distribution} of the trial's parameters, from the study's stored
        space: FloatDistribution / IntDistribution (log=True for a log-uniform prior),
        CategoricalDistribution. A conditional parameter the trial did not use is absent,
        as in its params. Optuna's own classes (optuna.distributions), so code that reads
        them keeps working."""
        from mpiopt.reporting.view import params_of

        known = self._params or {p.name: p for p in params_of(None, [self._trial])}
        return {name: _distribution(known[name], value)
                for name, value in self._trial.params.items()}

    @property
    def datetime_start(self):
        """When it started (timezone-aware, UTC)."""
        return utc(self._trial.started_at)

    @property
    def datetime_complete(self):
        """When it finished (None while it runs), as Optuna names it for every end."""
        return utc(self._trial.finished_at)

    @property
    def duration(self) -> timedelta | None:
        """How long it ran, as a timedelta (its measured time; duration_s in seconds)."""
        seconds = self._trial.duration
        return None if seconds is None else timedelta(seconds=seconds)

    @property
    def duration_s(self) -> float | None:
        return self._trial.duration

    @property
    def user_attrs(self) -> dict[str, Any]:
        """The metrics the objective recorded beside its value (what an Optuna objective
        keeps with trial.set_user_attr)."""
        return dict(self._trial.metrics)

    @property
    def system_attrs(self) -> dict[str, Any]:
        return {"seed": self._trial.seed, "attempt": self._trial.attempt,
                "group": self._trial.group, "host": self._trial.host}


def _status_of(state) -> str:
    """A stored status from mpiopt's TrialState or TrialStatus, Optuna's own TrialState
    (by its name: an Optuna user's `optuna.trial.TrialState.COMPLETE`), or a word."""
    if isinstance(state, (TrialState, TrialStatus)):
        return state.value
    if getattr(state, "name", None) in TrialState.__members__:
        return TrialState[state.name].value
    return TrialStatus(state).value


def _distribution(param, value):
    """The Optuna distribution of one parameter (its bounds from the space, else the
    value itself: a parameter the stored space does not name)."""
    from optuna import distributions as d

    if param.categorical:
        return d.CategoricalDistribution(list(param.choices))
    low = value if param.low is None else param.low
    high = value if param.high is None else param.high
    if param.kind == "integer":
        return d.IntDistribution(int(low), int(high), log=param.log)
    return d.FloatDistribution(float(low), float(high), log=param.log)


class BestTrials(list):
    """The Pareto front (Optuna's `best_trials`). Called as best_trials(k), it gives the
    k best trials as mpiopt's first releases did (a method then); top_trials(k) is that
    name now."""

    def __init__(self, front, top):
        super().__init__(front)
        self._top = top

    def __call__(self, k: int = 1) -> list[TrialView]:
        warnings.warn("study.best_trials(k) is study.top_trials(k) now; study.best_trials "
                      "(no call) is the Pareto front, as in Optuna", DeprecationWarning,
                      stacklevel=2)
        return self._top(k)


class Study:
    """A read-only view of one study; close() (or `with`) releases the database."""

    def __init__(self, storage: Storage, record: StudyRecord):
        self._storage, self._record = storage, record

    def __enter__(self) -> "Study":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._storage.close()

    def __repr__(self) -> str:
        return f"Study(study_name={self.study_name!r}, directions={self.directions!r})"

    @property
    def study_name(self) -> str:
        return self._record.name

    @property
    def name(self) -> str:
        return self._record.name

    @property
    def direction(self) -> StudyDirection:
        """The (first) objective's direction."""
        return StudyDirection(self._record.direction)

    @property
    def directions(self) -> list[StudyDirection]:
        """Every objective's direction, in the spec's order."""
        return [StudyDirection(d) for d in self._objective().directions]

    @property
    def metric_names(self) -> list[str]:
        """Every objective's name (Optuna's set_metric_names; here from the spec)."""
        return list(self._objective().names)

    @property
    def metric(self) -> str:
        return self._record.metric

    @property
    def user_attrs(self) -> dict[str, Any]:
        """Optuna's study attributes: mpiopt keeps none beside the spec (study.record)."""
        return {}

    @property
    def record(self) -> StudyRecord:
        """The stored study row, read again (status and spec may change while it runs)."""
        return self._storage.get_study(self.name)

    @property
    def trials(self) -> list[TrialView]:
        return self._view(self._storage.get_trials(self._record.id))

    def get_trials(self, deepcopy: bool = True, states=None, *, statuses=None) -> list[TrialView]:
        """Trials in the given states (Optuna's TrialState or mpiopt's TrialStatus);
        `deepcopy` is accepted for Optuna's signature (records never change anyway). A
        list as the first argument is the statuses, as mpiopt's first releases took it."""
        if isinstance(deepcopy, (list, tuple, set)):
            statuses, deepcopy = deepcopy, True
        wanted = [_status_of(s) for s in (states or statuses or ())] or None
        return self._view(self._storage.get_trials(self._record.id, statuses=wanted))

    @property
    def best_trial(self) -> TrialView:
        """The best COMPLETE trial (feasible, under constraints); an error with several
        objectives (see best_trials) or while there is none."""
        front = self._front()
        if front.multi:
            raise MultiObjectiveError(
                f"study '{self.name}' has {len(front.names)} objectives "
                f"({', '.join(front.names)}): no single best trial; study.best_trials is "
                "its Pareto front")
        if front.best is None:
            raise MpioptError(f"study '{self.name}' has no "
                              + ("feasible " if front.constrained and front.complete else "")
                              + "complete trial yet")
        return self._view([front.best])[0]

    @property
    def best_trials(self) -> BestTrials:
        """The Pareto front of the feasible complete trials (one objective: the best)."""
        front = self._front()
        return BestTrials(self._view(front.trials), self.top_trials)

    def top_trials(self, k: int = 1) -> list[TrialView]:
        """The k best trials: the k best feasible COMPLETE ones (one objective), or the
        first k of the Pareto front by the first objective."""
        from mpiopt.reporting.front import stored_objectives

        if stored_objectives(self._record.spec_text) is None:
            return self._view(self._storage.best_trials(self._record.id, k))
        return self._view(self._front().top(k))

    @property
    def best_params(self) -> dict:
        """The best trial's parameters (see best_trial)."""
        return dict(self.best_trial.params)

    @property
    def best_value(self) -> float:
        """The best trial's value (in the study's direction; see best_trial)."""
        return self.best_trial.value

    def view(self):
        """The study as the report, the dashboard and `mpiopt plot` see it, read now
        (mpiopt.reporting.view.StudyView): what mpiopt.importance and mpiopt.visualization
        measure and draw, so they agree with the page."""
        from mpiopt.reporting.view import StudyView

        record = self.record
        return StudyView.of(record, self._storage.get_trials(record.id),
                            jobs=self._storage.list_jobs(record.id))

    def best_model(self, trial: int | None = None):
        """The kept model of the best trial (or of trial number `trial`); the refit model
        when training.refit made one. A Keras model comes loaded with
        keras.models.load_model; a torch model as its state_dict (torch.load), to load
        into the module the study's build_model makes. An MpioptError names the kept
        trials when that one was not kept."""
        from mpiopt.artifacts.models import model_path

        path, _ = model_path(self.record, self._storage, trial)
        if path.suffix == ".pt":
            import torch

            return torch.load(path)
        import keras

        return keras.models.load_model(path)

    def trials_dataframe(self, attrs: tuple[str, ...] | None = None, multi_index: bool = False):
        """A pandas DataFrame, one row per trial, with the columns `mpiopt export` writes
        (mpiopt.reporting.tables.RECORD_FIELDS): Optuna's first (number, value, or
        values_<name> each with several objectives, datetime_start, datetime_complete,
        duration as a timedelta, params_<name>, user_attrs_<name> for the metrics, state
        in Optuna's words: COMPLETE, PRUNED, FAIL, ...), then mpiopt's own (value_std, a
        float, NaN with fewer than two folds; seed, attempt, group, host, error, device,
        suggest_seconds, feasible under constraints, a pbt round's member, round and
        parent, fold_<i>). `attrs` picks columns as Optuna's does ("params" picks every
        params_ column). Needs pandas (the `report` extra)."""
        pandas = _pandas()
        frame = pandas.DataFrame(self._export_rows(typed=True)[1])
        if attrs is not None:
            keep = [c for c in frame.columns if c in attrs or c.split("_")[0] in attrs
                    or (c.startswith("values_") and "values" in attrs)
                    or (c.startswith("user_attrs_") and "user_attrs" in attrs)]
            frame = frame[keep]
        if multi_index:
            frame.columns = pandas.MultiIndex.from_tuples(
                [tuple(c.split("_", 1)) if c.startswith(("params_", "user_attrs_", "values_"))
                 else (c, "") for c in frame.columns])
        return frame

    def to_dataframe(self) -> Any:
        """The rows `mpiopt export` writes, under the same names as trials_dataframe()
        (duration in seconds, times as datetimes): a pandas DataFrame when pandas is
        installed, else a list of dicts."""
        columns, rows = self._export_rows(typed=False)
        try:
            import pandas
        except ImportError:
            return rows
        return pandas.DataFrame(rows, columns=columns)

    # ------------------------------------------------------------------ helpers
    def _view(self, trials) -> list[TrialView]:
        from mpiopt.reporting.view import params_of

        names = tuple(self._objective().names)
        params = {p.name: p for p in params_of(self._record.space_json, trials)}
        return [TrialView(t, names, params) for t in trials]

    def _objective(self):
        from mpiopt.reporting.front import Front, objective_of

        return Front(objective_of(self._record), ())

    def _front(self):
        from mpiopt.reporting.front import Front

        return Front.of(self._record, self._storage.get_trials(
            self._record.id, statuses=[TrialStatus.COMPLETE.value]))

    def _export_rows(self, typed: bool) -> tuple[list[str], list[dict]]:
        """(columns, rows) as `mpiopt export` has them, every row with every column;
        `typed`: duration a timedelta and value_std a float (NaN for none), as pandas
        and Optuna's DataFrame hold them."""
        import math

        from mpiopt.reporting.front import Front

        trials = self._storage.get_trials(self._record.id)
        front = Front.of(self._record, [t for t in trials if t.status == TrialStatus.COMPLETE])
        columns, rows = export_rows(trials, front.names, front)
        rows = [{c: row.get(c) for c in columns} for row in rows]
        if typed:
            for row in rows:
                seconds, std = row["duration"], row["value_std"]
                row["duration"] = None if seconds is None else timedelta(seconds=seconds)
                row["value_std"] = math.nan if std is None else float(std)
        return columns, rows


def _pandas():
    try:
        import pandas
    except ImportError:
        raise MpioptError("trials_dataframe() needs pandas: pip install 'mpiopt[report]' "
                          "(or pandas)") from None
    return pandas


def load_study(study_name: str | None = None, storage: str | None = None, *,
               name: str | None = None, **optuna_only) -> Study:
    """Open study `study_name` in the database at URL `storage` (which must exist);
    without one, $MPIOPT_STORAGE, else sqlite:///mpiopt.db, as the commands do. Without a
    name, the database's only study (as Optuna does). Optuna's sampler= and pruner= are
    accepted and ignored: a loaded study is read, not searched."""
    from mpiopt.storage import StorageURL

    unknown = set(optuna_only) - {"sampler", "pruner"}
    if unknown:
        raise TypeError(f"load_study() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    store = open_storage(StorageURL.default(storage))
    try:
        return Study(store, store.get_study(study_name or name or _only_study(store)))
    except BaseException:
        store.close()
        raise


def _only_study(store) -> str:
    names = [r.name for r in store.list_studies()]
    if len(names) != 1:
        raise MpioptError(f"load_study() needs study_name=: the database holds "
                          f"{len(names)} studies" + (f" ({', '.join(names)})" if names else ""))
    return names[0]


def get_all_study_names(storage: str) -> list[str]:
    """The names of every study in the database (Optuna's get_all_study_names)."""
    with open_storage(storage, read_only=True) as store:
        return [r.name for r in store.list_studies()]
