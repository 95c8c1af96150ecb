"""Read a recorded study from Python.

    >>> import mpiopt
    >>> study = mpiopt.load_study("branin", storage="sqlite:///mpiopt.db")  # doctest: +SKIP
    >>> study.best_trial.params                                              # doctest: +SKIP
    {'x': 3.14, 'y': 2.27}
    >>> study.trials_dataframe().sort_values("value").head()                 # doctest: +SKIP
    >>> study.best_params, study.best_value                                  # doctest: +SKIP

Each property reads the database again, so a Study follows a study that is still running.
"""
from __future__ import annotations

from typing import Any

from mpiopt.errors import MpioptError
from mpiopt.reporting.tables import export_rows
from mpiopt.storage import Storage, StudyRecord, open_storage
from mpiopt.trial import FrozenTrial, TrialStatus


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
        return f"Study(name={self.name!r}, direction={self.direction!r})"

    @property
    def name(self) -> str:
        return self._record.name

    @property
    def direction(self) -> str:
        return self._record.direction

    @property
    def metric(self) -> str:
        return self._record.metric

    @property
    def record(self) -> StudyRecord:
        """The stored study row, read again (status and spec may change while it runs)."""
        return self._storage.get_study(self.name)

    @property
    def trials(self) -> list[FrozenTrial]:
        return self._storage.get_trials(self._record.id)

    def get_trials(self, statuses: list[TrialStatus] | None = None) -> list[FrozenTrial]:
        return self._storage.get_trials(self._record.id, statuses=statuses)

    @property
    def best_trial(self) -> FrozenTrial | None:
        best = self.best_trials(1)
        return best[0] if best else None

    def best_trials(self, k: int = 1) -> list[FrozenTrial]:
        return self._storage.best_trials(self._record.id, k)

    @property
    def best_params(self) -> dict:
        """The best COMPLETE trial's parameters; an MpioptError while there is none."""
        return dict(self._best().params)

    @property
    def best_value(self) -> float:
        """The best COMPLETE trial's value (in the study's direction)."""
        return self._best().value

    def _best(self) -> FrozenTrial:
        best = self.best_trial
        if best is None:
            raise MpioptError(f"study '{self.name}' has no complete trial yet")
        return best

    def best_model(self, trial: int | None = None):
        """The kept model of the best trial (or of trial number `trial`), loaded with
        keras.models.load_model; the refit model when training.refit made one. Needs
        Keras; an MpioptError names the kept trials when that one was not kept."""
        from mpiopt.artifacts.models import model_path

        path, _ = model_path(self.record, self._storage, trial)
        import keras

        return keras.models.load_model(path)

    def trials_dataframe(self):
        """A pandas DataFrame, one row per trial: number, status, value, ..., one column
        per parameter (`params_<name>`), per metric (`metrics_<name>`) and per fold
        (`fold_<i>`); timestamps as pandas datetimes. Needs pandas (the `report` extra)."""
        try:
            import pandas
        except ImportError:
            raise MpioptError("trials_dataframe() needs pandas: pip install 'mpiopt[report]' "
                              "(or pandas)") from None
        columns, rows = export_rows(self.trials)
        frame = pandas.DataFrame(rows, columns=columns)
        for column in ("started_at", "finished_at"):
            if column in frame:
                frame[column] = pandas.to_datetime(frame[column], utc=True)
        return frame

    def to_dataframe(self) -> Any:
        """A pandas DataFrame of flat rows (params_*, metrics_*, fold_*) when pandas is
        installed, else the same rows as a list of dicts."""
        columns, rows = export_rows(self.trials)
        try:
            import pandas
        except ImportError:
            return rows
        return pandas.DataFrame(rows, columns=columns)


def load_study(name: str, storage: str | None = None) -> Study:
    """Open study `name` in the database at URL `storage` (which must exist); without
    one, $MPIOPT_STORAGE, else sqlite:///mpiopt.db, as the commands do."""
    from mpiopt.knobs import STORAGE

    storage = storage or STORAGE.get() or "sqlite:///mpiopt.db"
    store = open_storage(storage)
    try:
        return Study(store, store.get_study(name))
    except BaseException:
        store.close()
        raise
