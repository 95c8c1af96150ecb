"""The storage contract: what the rest of mpiopt may ask of a results database, and what
every implementation promises.

`Storage` (SQLAlchemy, for SQLite and PostgreSQL, storage/_rdb.py) implements it, and so
does `Resilient` (storage/resilient.py), the coordinator's wrapper that rides out an
outage. A new engine subclasses BaseStorage and passes tests/test_storage.py, the
conformance suite that runs every implementation through the same cases.
"""
from __future__ import annotations

import abc
from typing import Iterable, Sequence

from mpiopt.storage._urls import StorageURL
from mpiopt.trial import FrozenTrial, StudyStatus, TrialStatus


class BaseStorage(abc.ABC):
    """Studies and trials, kept where every process of a study (and later ones) finds them.

    **Writers.** Only the coordinator (world rank 0) of the job that holds a study's lease
    writes its trials; a person's commands (delete, rename, enqueue, retry) write whole
    studies that no job runs. Any number of processes read at any time, also while a
    study runs (`mpiopt trials`). Writes are the methods under "writes" below; the rest
    only read.

    **Transactions.** Each call is one transaction: it is written whole or not at all
    (a batch such as finish_trials too). A call that raised wrote nothing, except where
    StorageUnavailable hid a commit that did happen (see below).

    **Threads.** An instance may be used from several threads at once (the coordinator's
    heartbeat runs beside its loop); each call is its own transaction there too.

    **Records never change.** A FrozenTrial or StudyRecord returned is a snapshot: later
    writes return new records and never alter one already handed out.

    **Errors.** Only mpiopt's own errors leave a call: StorageError (one line naming the
    database; the data or the database is not as asked: an unknown id, a finished trial
    finished again, a database that is not mpiopt's) and its kinds: LeaseLost (another
    job took the study over: write nothing more), DatabaseGone (the SQLite file was
    deleted or replaced under the job: write nothing more, no retry brings it back),
    UnknownStudyError, DuplicateStudyError, and StorageUnavailable, a transient failure
    (connection lost, server restarting, SQLite locked, disk full) that the caller may
    retry.

    **Retries.** Every write may be retried after StorageUnavailable; what a retried
    write that had committed (the answer, not the commit, was lost) does:
    - finish_trial(s), finish_and_create: the trial is finished already, so the retry is
      a StorageError saying "already"; the caller takes that as written. (Of
      finish_and_create the trials it created are then unknown: they stay RUNNING without
      a start, and the next resume sets them INTERRUPTED without a lost attempt.)
    - add_intermediate, set_study_*, interrupt_running, heartbeat, release_lease,
      note_lost_attempts: the same write again, same end state.
    - create_trial(s), enqueue_trials, retry_failed, take_pending, restart_trial: not
      safe blindly (a second set of trials, or an attempt counted twice); the caller
      gives up (the coordinator ends the job: a resume repairs it).
    - create_study: DuplicateStudyError names the study the first try made.

    **Trial numbers** are dense per study: 0, 1, 2, ... in order of creation, with no gap,
    also with several writers at once. Trial ids are the database's own (unique across
    its studies, meaningless in another database: see StorageURL.key).
    """

    #: create_trial(s) and restart_trial take the leader's world rank (`rank`)
    records_rank = True

    def __init__(self, url: "str | StorageURL"):
        self.location = StorageURL.parse(url)
        self.url = self.location.text
        self.shown_url = self.location.shown      # what every message names: no password

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; the instance is not used afterwards."""

    def stop_waiting_when(self, should_stop) -> None:
        """A call blocked on a database that stopped answering ends sooner once
        `should_stop()` is true (a signal arrived); nothing to do where calls cannot
        block for long."""

    # ---- studies (writes: create_study, set_study_*, update_study_spec) ---------------
    @abc.abstractmethod
    def create_study(self, name: str, direction: str, metric: str, spec_text: str,
                     fingerprint: str, space_json, enqueued: Sequence[dict] = ()) -> int:
        """A new study and its queued parameter sets; returns its id."""

    @abc.abstractmethod
    def get_study(self, name: str):
        """The StudyRecord of `name`; UnknownStudyError lists the known ones."""

    @abc.abstractmethod
    def list_studies(self) -> list:
        """Every study's record with its trial counts and best value."""

    @abc.abstractmethod
    def study_name(self, study_id: int) -> str | None:
        """The study's name now; None once it was deleted."""

    @abc.abstractmethod
    def set_study_status(self, study_id: int, status: StudyStatus) -> None: ...

    @abc.abstractmethod
    def update_study_spec(self, study_id: int, spec_text: str) -> None: ...

    @abc.abstractmethod
    def set_study_artifacts(self, study_id: int, folder: str) -> None: ...

    @abc.abstractmethod
    def set_study_recovery(self, study_id: int, places: Sequence[str]) -> None: ...

    # ---- a person's commands on whole studies (writes, except dump_study) ----------
    @abc.abstractmethod
    def delete_study(self, study_id: int) -> int:
        """The study and its trials; returns how many trials went."""

    @abc.abstractmethod
    def rename_study(self, study_id: int, new_name: str, spec_text: str) -> None: ...

    @abc.abstractmethod
    def dump_study(self, study_id: int) -> dict: ...

    @abc.abstractmethod
    def load_study_dump(self, dump: dict, name: str, spec_text: str) -> int: ...

    # ---- the queue of parameter sets run before the searcher's own (PENDING) -------
    @abc.abstractmethod
    def enqueue_trials(self, study_id: int, params_list: Sequence[dict]) -> list[FrozenTrial]: ...

    @abc.abstractmethod
    def pending_trials(self, study_id: int, limit: int | None = None) -> list[FrozenTrial]: ...

    @abc.abstractmethod
    def take_pending(self, requests: Sequence[dict]) -> list[FrozenTrial]: ...

    @abc.abstractmethod
    def retry_failed(self, study_id: int) -> list[int]: ...

    # ---- one coordinator per study (writes) -------------------------------------------
    @abc.abstractmethod
    def acquire_lease(self, study_id: int, host: str, pid: int, period_s: float,
                      takeover: bool = False) -> str: ...

    @abc.abstractmethod
    def heartbeat(self, study_id: int, token: str) -> None: ...

    @abc.abstractmethod
    def release_lease(self, study_id: int, token: str) -> None: ...

    # ---- trial writes (the coordinator only) ------------------------------------------
    def create_trial(self, study_id: int, params: dict, seed: int | None, group: int | None,
                     host: str | None = None, rank: int | None = None) -> FrozenTrial:
        """A RUNNING trial with the next dense number (create_trials of one)."""
        return self.create_trials(study_id, [dict(params=params, seed=seed, group=group,
                                                  host=host, rank=rank)])[0]

    @abc.abstractmethod
    def create_trials(self, study_id: int, requests: Sequence[dict]) -> list[FrozenTrial]:
        """create_trial's keyword dicts (and `started=False` for a trial sent ahead, not
        yet begun), numbered in order, in one transaction."""

    @abc.abstractmethod
    def restart_trial(self, trial_id: int, group: int | None, host: str | None = None,
                      rank: int | None = None, keep_intermediate: bool = False) -> FrozenTrial: ...

    def finish_trial(self, trial_id: int, status: TrialStatus, value: float | None = None,
                     value_std: float | None = None, fold_values: Sequence = (),
                     metrics: dict | None = None, error: str | None = None,
                     duration: float | None = None, intermediate: dict | None = None,
                     fold_metrics: Sequence[dict] | None = None, device: str | None = None,
                     spans: Sequence[dict] = ()) -> FrozenTrial:
        """Record a trial's outcome (finish_trials of one)."""
        return self.finish_trials([dict(
            trial_id=trial_id, status=status, value=value, value_std=value_std,
            fold_values=fold_values, metrics=metrics, error=error, duration=duration,
            intermediate=intermediate, fold_metrics=fold_metrics, device=device,
            spans=spans)])[0]

    @abc.abstractmethod
    def finish_trials(self, outcomes: Sequence[dict],
                      started: Sequence[int] = ()) -> list[FrozenTrial]:
        """finish_trial's keyword dicts, all or none; `started`: trials sent ahead that
        their groups began meanwhile. A trial finished already is a StorageError."""

    @abc.abstractmethod
    def finish_and_create(self, outcomes: Sequence[dict], study_id: int, requests: Sequence[dict],
                          started: Sequence[int] = ()) -> tuple[list[FrozenTrial], list[FrozenTrial]]:
        """finish_trials and create_trials in one transaction."""

    @abc.abstractmethod
    def add_intermediate(self, trial_id: int, epoch: int, value: float) -> None:
        """A per-epoch value (the same epoch again replaces it)."""

    @abc.abstractmethod
    def interrupt_running(self, study_id: int, keep=()) -> int:
        """RUNNING trials (but those in `keep`) become INTERRUPTED; returns how many."""

    @abc.abstractmethod
    def note_lost_attempts(self, study_id: int) -> list[FrozenTrial]:
        """Resume after a job that died: each RUNNING trial counts a lost attempt."""

    # ---- reads ------------------------------------------------------------------------
    @abc.abstractmethod
    def get_trials(self, study_id: int, statuses: Iterable[TrialStatus] | None = None,
                   order_by: str = "number", limit: int | None = None,
                   descending: bool = False) -> list[FrozenTrial]:
        """order_by "number" or "value" (trials without a value last)."""

    @abc.abstractmethod
    def get_trial(self, study_id: int, number: int) -> FrozenTrial: ...

    @abc.abstractmethod
    def get_trial_by_id(self, trial_id: int) -> FrozenTrial: ...

    @abc.abstractmethod
    def study_direction(self, study_id: int) -> str:
        """"minimize" or "maximize"."""

    def best_trials(self, study_id: int, k: int = 1) -> list[FrozenTrial]:
        """The k best COMPLETE trials in the study's direction (ties: lower number first)."""
        return self.get_trials(study_id, [TrialStatus.COMPLETE], order_by="value", limit=k,
                               descending=self.study_direction(study_id) == "maximize")

    @abc.abstractmethod
    def count_trials(self, study_id: int) -> dict[TrialStatus, int]: ...

    @abc.abstractmethod
    def group_activity(self, study_id: int) -> list[dict]: ...
