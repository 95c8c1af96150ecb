"""What rank 0 holds for one run of a study: its storage, its lease, its unfinished trials.

Opening a run is the job's first write. On resume it settles the trials that were still
RUNNING when the last job ended without a word (kill -9, a node lost, a process killed by
its own trial):

- a sandboxed objective (mpiopt.sandbox) cannot take its rank down, so such a trial only
  lost its job: it is INTERRUPTED and runs again;
- an objective that runs in the rank's own process (Keras models, functions taking
  `comm`, `objective.isolate: false`) may have killed the job itself. Each such ending
  counts as a lost attempt of the trial (with the rank and host it ran on); after
  `search.max_attempts` the trial is FAILED ("killed its process 2 times (last: rank 3,
  host n12)") and the study goes on without it, so one bad parameter set cannot poison
  every resume. A job killed from outside while the trial ran counts too: raise
  max_attempts where jobs are often killed mid-trial.
"""
from __future__ import annotations

import os
import socket
import time

from mpiopt.trial import TrialStatus

LEASE_PERIOD_S = 30.0


class StudyRun:
    def __init__(self, storage, opened, notes, lease_token=None):
        self.storage, self.study_id = storage, opened.study_id
        self.existing, self.resumed = opened.existing, opened.resumed
        self.notes = notes
        self.lease_token = lease_token
        self._next_beat = time.monotonic() + LEASE_PERIOD_S

    def on_tick(self) -> None:
        """Called by the coordinator while it waits: renew the lease once a period."""
        if self.lease_token is None or time.monotonic() < self._next_beat:
            return
        self._next_beat = time.monotonic() + LEASE_PERIOD_S
        self.storage.heartbeat(self.study_id, self.lease_token)

    def close(self) -> None:
        try:
            if self.lease_token is not None:
                self.storage.release_lease(self.study_id, self.lease_token)
        except Exception:
            pass          # a lease left behind goes stale by itself
        finally:
            self.storage.close()


def open_run(spec, url: str, resume: bool, isolated: bool) -> StudyRun:
    from mpiopt.storage import open_storage
    from mpiopt.study import open_study

    storage = open_storage(url, create=True)
    try:
        opened = open_study(storage, spec, resume, url)
        token = getattr(opened, "lease_token", None)
        if token is None and hasattr(storage, "acquire_lease"):
            token = storage.acquire_lease(opened.study_id, socket.gethostname(), os.getpid(),
                                          period_s=LEASE_PERIOD_S)
        notes = []
        if opened.resumed:
            notes = settle_unfinished(storage, opened.study_id, isolated,
                                      getattr(spec.search, "max_attempts", 2))
            opened.existing = storage.get_trials(opened.study_id)
        return StudyRun(storage, opened, notes, token)
    except BaseException:
        storage.close()
        raise


def settle_unfinished(storage, study_id: int, isolated: bool, max_attempts: int) -> list[str]:
    """Mark trials left RUNNING by a job that died; FAIL those that killed it too often.
    Returns lines for the study's header."""
    if isolated or not hasattr(storage, "note_lost_attempts"):
        n = storage.interrupt_running(study_id)
        return [f"{n} trial(s) were running when the last job ended; they run again"] if n else []
    notes = []
    for t in storage.note_lost_attempts(study_id):
        if t.lost_attempts >= max_attempts:
            where = f"rank {t.rank if t.rank is not None else '?'}, host {t.host or '?'}"
            error = f"killed its process {t.lost_attempts} times (last: {where})"
            storage.finish_trial(t.id, TrialStatus.FAILED, error=error)
            notes.append(f"trial {t.number} FAILED: {error} (search.max_attempts = {max_attempts})")
        else:
            notes.append(f"trial {t.number} was running when the last job ended (attempt "
                         f"{t.lost_attempts} of {max_attempts}); it runs again")
    return notes
