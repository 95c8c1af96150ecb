"""Read a recorded study from Python.

    >>> import mpiopt
    >>> study = mpiopt.load_study("branin", storage="sqlite:///mpiopt.db")  # doctest: +SKIP
    >>> study.best_trial.params                                              # doctest: +SKIP
    {'x': 3.14, 'y': 2.27}
    >>> study.to_dataframe().sort_values("value").head()                     # doctest: +SKIP

Each property reads the database again, so a Study follows a study that is still running.
"""
from __future__ import annotations

from typing import Any

from mpiopt.report import export_rows
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

    def to_dataframe(self) -> Any:
        """A pandas DataFrame of flat rows (params_*, metrics_*, fold_*) when pandas is
        installed, else the same rows as a list of dicts."""
        columns, rows = export_rows(self.trials)
        try:
            import pandas
        except ImportError:
            return rows
        return pandas.DataFrame(rows, columns=columns)


def load_study(name: str, storage: str) -> Study:
    """Open study `name` in the database at URL `storage` (which must exist)."""
    store = open_storage(storage)
    try:
        return Study(store, store.get_study(name))
    except BaseException:
        store.close()
        raise
