"""The storage contract: what the rest of mpiopt may ask of a results database, and what
every implementation promises.

`Storage` (SQLAlchemy, for SQLite and PostgreSQL, storage/_rdb.py; in memory it is the same
code on SQLite's in-memory database, storage/_engine.py) implements it, and so
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

    **Writers.** Only the coordinators (world rank 0) of the jobs running a study write its
    trials: one job alone, or several that joined it with --join (shared), each through
    its own row in `jobs` (join_study) and with its fence set; a person's commands
    (delete, rename, enqueue, retry) write whole studies that no job runs. Any number of
    processes read at any time, also while a study runs (`mpiopt trials`). Writes are the
    methods under "writes" below; the rest only read.

    **Jobs and the fence.** `fence = (job id, token)` (set by the job after join_study):
    every write transaction first checks that this job is still live with that token,
    else LeaseLost and nothing written (a job that was silent past three periods and was
    marked "lost" by another writes nothing more); trials it creates, takes
    (take_pending) or claims (restart_trial) are its own (FrozenTrial.job), and
    interrupt_running touches only its own. A job is stale after three periods without
    a beat; the next join_study or take_orphans of the study marks it "lost".

    **The budget.** create_trials, finish_and_create and take_pending with `limit` (the
    study's search.trials) count, under the study's lock in the same transaction, the
    trials whose status is neither PENDING nor RETRIED, and create only what is left: N
    jobs asking at once make exactly `limit` trials, numbered densely.

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
    - add_intermediate, set_study_*, interrupt_running, job_heartbeat, end_job: the same
      write again, same end state (end_job's count is read again).
    - take_orphans: the same end state, but a trial that the first try counted a lost
      attempt is INTERRUPTED now and not counted or returned again.
    - create_trial(s), enqueue_trials, retry_failed, take_pending, join_study: not safe
      blindly (a second set of trials, a second job); the caller gives up (the
      coordinator ends the job: a resume or another job repairs it). With `limit`, a
      second try still makes nothing past the budget.
    - restart_trial: the trial is RUNNING for this job already, so the retry is
      TrialTaken; Resilient answers the trial instead (its job is the fence's).
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
    def take_pending(self, requests: Sequence[dict], limit: int | None = None) -> list:
        """Queued trials (dicts of trial_id, seed, group, host, rank, started) become
        RUNNING for this job, each only once whoever asks. Without `limit`: those taken.
        With it (the budget, see above): aligned with `requests`, None where not taken."""

    @abc.abstractmethod
    def retry_failed(self, study_id: int) -> list[int]: ...

    # ---- jobs (writes, but list_jobs) ----------------------------------------------
    @abc.abstractmethod
    def join_study(self, study_id: int, host: str, pid: int, period_s: float, *,
                   shared: bool = False, takeover: bool = False, groups: int | None = None,
                   launcher: str | None = None, launch: str | None = None):
        """A new live job of the study; returns its Job, with the token that its
        job_heartbeat, end_job and fence name. `launch`: what goes before `mpiopt resume`
        to start the job's layout again ("mpiexec -n 9 "), kept for the resume line that
        `mpiopt status` prints once the job is gone. One write transaction, so two jobs joining
        at once see each other. Live jobs silent for three periods are first marked
        end="lost" (taken_by: the new job). Then:
        - exclusive (shared=False): any other live job is a StudyBusyError naming its
          host, pid and last beat (exc.lease: that Job), unless `takeover` (then it is
          marked "lost" too);
        - shared (--join): a live exclusive job is a StudyBusyError; on SQLite a live job
          on another host is a StorageError (SQLite over a network file system corrupts:
          jobs on several hosts need PostgreSQL)."""

    @abc.abstractmethod
    def job_heartbeat(self, job_id: int, token: str) -> None:
        """Renews the job's beat; LeaseLost if it is no longer live or the token differs
        (another job found it stale and took its trials)."""

    @abc.abstractmethod
    def end_job(self, job_id: int, token: str, end: str = "ended",
                study_status: StudyStatus | None = None) -> int:
        """Marks the job ended ("ended", "interrupted", "failed"; "lost" is for others),
        only if it is still live with that token (else nothing changes). Returns how many
        OTHER live jobs of its study are not stale (0: this was the last one); where it is
        0 and the job ended here, `study_status` becomes the study's, in the same
        transaction (jobs that end at once take turns, so the last one writes it)."""

    @abc.abstractmethod
    def list_jobs(self, study_id: int) -> list:
        """Every job of the study, live and ended, oldest first, each with `running`:
        its RUNNING trials now."""

    @abc.abstractmethod
    def take_orphans(self, study_id: int, count_lost_attempts: bool) -> list[FrozenTrial]:
        """One transaction: stale live jobs become "lost" (taken_by: the fence's job, if
        any); every RUNNING trial whose job is not live (ended, lost, or none) becomes
        INTERRUPTED, so that a live job claims it (restart_trial). With
        count_lost_attempts each of those that had started (a start time) counts one
        lost attempt. Returns those that counted one, updated, by number (none without
        count_lost_attempts)."""

    # ---- trial writes (the coordinator only) ------------------------------------------
    def create_trial(self, study_id: int, params: dict, seed: int | None, group: int | None,
                     host: str | None = None, rank: int | None = None) -> FrozenTrial:
        """A RUNNING trial with the next dense number (create_trials of one)."""
        return self.create_trials(study_id, [dict(params=params, seed=seed, group=group,
                                                  host=host, rank=rank)])[0]

    @abc.abstractmethod
    def create_trials(self, study_id: int, requests: Sequence[dict], limit: int | None = None,
                      distinct: bool = False) -> list:
        """create_trial's keyword dicts (and `started=False` for a trial sent ahead, not
        yet begun; "key": a str naming the parameter set), numbered in order, in one
        transaction. With `distinct`, a request whose key a non-RETRIED trial of the study
        or an earlier request of the batch holds is not created; then with `limit` only
        as many as the budget has left (see above). With either, the answer is aligned
        with `requests`: a FrozenTrial, or None where none was created; without, the
        trials made."""

    @abc.abstractmethod
    def restart_trial(self, trial_id: int, group: int | None, host: str | None = None,
                      rank: int | None = None, keep_intermediate: bool = False) -> FrozenTrial:
        """A claim: an INTERRUPTED trial runs again for this job (a new attempt, its old
        results dropped; keep_intermediate keeps its per-epoch values). A trial that is
        not INTERRUPTED (another job claimed it first, or it finished) is TrialTaken."""

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
                          started: Sequence[int] = (), limit: int | None = None,
                          distinct: bool = False) -> tuple[list[FrozenTrial], list]:
        """finish_trials and create_trials (with its limit and distinct: the created half
        aligned where either is given) in one transaction; the results count first."""

    @abc.abstractmethod
    def add_intermediate(self, trial_id: int, epoch: int, value: float, fold: int = 0) -> None:
        """A fold's value after an epoch (the same fold and epoch again replaces it)."""

    @abc.abstractmethod
    def interrupt_running(self, study_id: int, keep=()) -> int:
        """RUNNING trials (but those in `keep`) become INTERRUPTED; returns how many. With
        a fence, only this job's."""

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

    @abc.abstractmethod
    def changes(self, study_id: int, since):
        """What every job reads of its study, in one read transaction (a Changes):
        `finished`, the trials of any job finished (COMPLETE, PRUNED, FAILED) at or after
        `since` (all if None), with params, per-epoch values and job; `running`, every
        RUNNING trial (any job, started or not); `interrupted`, every INTERRUPTED trial
        (waiting to be claimed); `counted`, the trials that count against the budget
        (status neither PENDING nor RETRIED); `at`, the moment the read began (UTC): pass
        it back, less a margin of a few seconds, as the next `since` (a result is written
        with its finish time and committed a moment later). Cheap enough to call every
        second (benchmarks/results/storage.md)."""
