"""Riding out a database outage, and losing no finished result when it lasts too long.

The coordinator's storage is wrapped in `Resilient`: a call that fails with
StorageUnavailable (connection lost, server restarting, SQLite locked) is retried with a
growing pause for up to `storage.retry_timeout` (default 10 minutes). Groups keep
training meanwhile; their results wait in the coordinator. Past the limit the wrapper
gives up: the call raises, the job ends with one line, and from then on every result
write (finish_trial, add_intermediate) goes to the recovery file instead of the database.
A write that fails for good is in the recovery file too, so a finished result is never
lost, however long the outage. The next resume imports the file first (`import_recovery`).

A result being retried waits in rank 0's memory, so a job killed during the outage (kill
-9, a node lost, the walltime's SIGKILL) lost it, and the trial ran again on resume. So a
finishing write is also written ahead to the file at its first failed try: a kill at any
moment leaves it there for the resume, which skips what the database already holds. So
are the results other groups finish while the call waits: the caller takes them in
between tries (`meanwhile`) instead of leaving them unreceived.
A run that ends without giving up imports the file itself and removes it
(`discard_written_ahead`).

The recovery file is JSON lines, one record per line (mpiopt.kept: the format),
flushed and fsynced as it is written; storage/recovery.py imports it.

Every method of the contract is written out here: reads and writes that nothing journals
go through the retry alone (the job's heartbeat and end too: the same end state again;
a capped create as any create: the cap holds for the retry too, so a hidden commit costs
trials left RUNNING for this job, never one past the budget; a claim, restart_trial,
whose first try committed unseen finds the trial RUNNING for this very job and answers
it, where the storage alone says TrialTaken); finish_trial(s), finish_and_create, add_intermediate and
interrupt_running also name the records that stand for them in the file (interrupt_running
too: a job that ends in order during an outage could not mark its running trials
INTERRUPTED, and the resume counted each a lost attempt, which after `max_attempts` such
endings FAILED a good parameter set). The finishing ones are written ahead at their first
failed try.
"""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from mpiopt.errors import DatabaseGone, StorageError, StorageUnavailable, TrialTaken
from mpiopt.storage._base import BaseStorage
from mpiopt.storage.recovery import import_recovery
from mpiopt.kept import lines as _lines, record


class Resilient(BaseStorage):
    """A storage whose calls survive outages up to `limit_s` (see the module docstring).

    `say(line)` tells the user once per outage; `should_stop()` (a signal arrived) ends
    the waiting early. With no outage it keeps the contract as the storage it wraps.
    """

    def __init__(self, storage: BaseStorage, limit_s: float, places: list[Path], say=print,
                 should_stop=lambda: False, clock=time.monotonic, sleep=time.sleep,
                 study_id: int | None = None):
        super().__init__(storage.location)
        # the recovery file's places, in order: the first one that can be written is used
        # (a spec in a read-only folder, an Apptainer image's, lost the results of an
        # outage: the job ended on "Read-only file system" with its finished trials RUNNING)
        self.places = [Path(p) for p in places]
        self.storage, self.limit_s, self.recovery = storage, float(limit_s), self.places[0]
        self.say, self.should_stop, self.clock, self._sleep = say, should_stop, clock, sleep
        self.study_id = study_id             # (whose trials a file written ahead holds)
        self.db_key = storage.location.key   # (and in which database: see import_recovery)
        # a call that waits on a server that stopped answering ends sooner once stopping
        storage.stop_waiting_when(should_stop)
        self.given_up: str | None = None     # why, once an outage outlasted the limit
        self.journaled = 0
        self.written_ahead = 0
        # results no place took (a full disk or quota everywhere): kept in memory and tried
        # again with the next write, and counted in the closing line if never written
        self._unwritten: list[dict] = []
        self._append_error = ""
        self._unkept: set = set()            # trials whose results the closing line counts
        self.unkept_after = 0                # of those, ones that came after the give-up
        self._held: dict[int, list[dict]] = {}   # results not yet written (see `holding`)
        self.kept_results: dict = {}         # {trial id: status} in the recovery file
        # callable -> records of results the caller took in while a call waits out an
        # outage (the coordinator receives what groups finish meanwhile): written ahead
        self.meanwhile = None

    # ---- the contract, method by method ----------------------------------------------
    def close(self) -> None:
        self.storage.close()

    def stop_waiting_when(self, should_stop) -> None:
        self.storage.stop_waiting_when(should_stop)

    def create_study(self, *args, **kwargs) -> int:
        return self._call(lambda: self.storage.create_study(*args, **kwargs))

    def get_study(self, name: str):
        return self._call(lambda: self.storage.get_study(name))

    def list_studies(self) -> list:
        return self._call(self.storage.list_studies)

    def study_name(self, study_id: int) -> str | None:
        return self._call(lambda: self.storage.study_name(study_id))

    def set_study_status(self, study_id, status) -> None:
        return self._call(lambda: self.storage.set_study_status(study_id, status))

    def update_study_spec(self, study_id, spec_text) -> None:
        return self._call(lambda: self.storage.update_study_spec(study_id, spec_text))

    def set_study_artifacts(self, study_id, folder) -> None:
        return self._call(lambda: self.storage.set_study_artifacts(study_id, folder))

    def set_study_recovery(self, study_id, places) -> None:
        return self._call(lambda: self.storage.set_study_recovery(study_id, places))

    def delete_study(self, study_id: int) -> int:
        return self._call(lambda: self.storage.delete_study(study_id))

    def rename_study(self, study_id, new_name, spec_text) -> None:
        return self._call(lambda: self.storage.rename_study(study_id, new_name, spec_text))

    def dump_study(self, study_id: int) -> dict:
        return self._call(lambda: self.storage.dump_study(study_id))

    def load_study_dump(self, dump, name, spec_text) -> int:
        return self._call(lambda: self.storage.load_study_dump(dump, name, spec_text))

    def enqueue_trials(self, study_id, params_list):
        return self._call(lambda: self.storage.enqueue_trials(study_id, params_list))

    def pending_trials(self, study_id, limit=None):
        return self._call(lambda: self.storage.pending_trials(study_id, limit))

    def take_pending(self, requests, limit=None):
        if limit is None:
            return self._call(lambda: self.storage.take_pending(requests))
        return self._call(lambda: self.storage.take_pending(requests, limit))

    def retry_failed(self, study_id):
        return self._call(lambda: self.storage.retry_failed(study_id))

    def join_study(self, *args, **kwargs):
        return self._call(lambda: self.storage.join_study(*args, **kwargs))

    def job_heartbeat(self, job_id, token) -> None:
        return self._call(lambda: self.storage.job_heartbeat(job_id, token))

    def end_job(self, job_id, token, end="ended", study_status=None) -> int:
        return self._call(lambda: self.storage.end_job(job_id, token, end, study_status))

    def list_jobs(self, study_id):
        return self._call(lambda: self.storage.list_jobs(study_id))

    def take_orphans(self, study_id, count_lost_attempts):
        return self._call(lambda: self.storage.take_orphans(study_id, count_lost_attempts))

    def changes(self, study_id, since):
        return self._call(lambda: self.storage.changes(study_id, since))

    def create_trials(self, study_id, requests, limit=None, distinct=False):
        if limit is None and not distinct:
            return self._call(lambda: self.storage.create_trials(study_id, requests))
        return self._call(lambda: self.storage.create_trials(study_id, requests, limit,
                                                             distinct))

    def restart_trial(self, trial_id, group, host=None, rank=None, keep_intermediate=False):
        tries = []

        def claim():
            tries.append(1)
            try:
                return self.storage.restart_trial(trial_id, group, host=host, rank=rank,
                                                  keep_intermediate=keep_intermediate)
            except TrialTaken:
                mine = _own_claim(self.storage, trial_id) if len(tries) > 1 else None
                if mine is None:
                    raise
                return mine
        return self._call(claim)

    def finish_trial(self, trial_id, status, **fields):
        """Journaled: after the give-up it returns None (the result is in the file)."""
        kept = [record("finish", trial_id=trial_id, status=status, **fields)]
        return self._call(lambda: self.storage.finish_trial(trial_id, status, **fields),
                          kept, finishing=True)

    def finish_trials(self, outcomes, started=()):
        call = (lambda: self.storage.finish_trials(outcomes, started)) if started else \
            (lambda: self.storage.finish_trials(outcomes))
        return self._call(call, _finished(outcomes), finishing=True)

    def finish_and_create(self, outcomes, study_id, requests, started=(), limit=None,
                          distinct=False):
        extra = {} if limit is None and not distinct else {"limit": limit, "distinct": distinct}
        return self._call(lambda: self.storage.finish_and_create(outcomes, study_id, requests,
                                                                 started, **extra),
                          _finished(outcomes), finishing=True)

    def add_intermediate(self, trial_id, epoch, value, fold=0) -> None:
        kept = [record("intermediate", trial_id=trial_id, epoch=epoch, value=value, fold=fold)]
        return self._call(lambda: self.storage.add_intermediate(trial_id, epoch, value, fold=fold),
                          kept)

    def interrupt_running(self, study_id, keep=()) -> int:
        kept = [record("interrupt", study_id=study_id, keep=sorted(keep))]
        return self._call(lambda: self.storage.interrupt_running(study_id, keep=keep), kept)


    def get_trials(self, study_id, statuses=None, order_by="number", limit=None,
                   descending=False):
        return self._call(lambda: self.storage.get_trials(study_id, statuses, order_by, limit,
                                                          descending))

    def get_trial(self, study_id, number):
        return self._call(lambda: self.storage.get_trial(study_id, number))

    def get_trial_by_id(self, trial_id):
        return self._call(lambda: self.storage.get_trial_by_id(trial_id))

    def study_direction(self, study_id) -> str:
        return self._call(lambda: self.storage.study_direction(study_id))

    def count_trials(self, study_id):
        return self._call(lambda: self.storage.count_trials(study_id))

    def group_activity(self, study_id):
        return self._call(lambda: self.storage.group_activity(study_id))

    # ---- the retry, the file --------------------------------------------------------
    def _call(self, call, kept: list[dict] | None = None, finishing: bool = False):
        """call() retried through an outage (see the module docstring). `kept`: the
        records that stand for a journaled write in the recovery file (None: a call that
        is not journaled); `finishing`: they are finished results, written ahead."""
        if self.given_up is not None:
            if kept is not None:
                return self._journal(kept)
            raise StorageUnavailable(self.given_up)
        start, pause, tries, ahead = self.clock(), 0.5, 0, False
        while True:
            try:
                result = call()
            except StorageUnavailable as exc:
                tries += 1
                if tries == 1:
                    ahead = self._write_ahead(kept if finishing else [])
                waited = self.clock() - start
                if waited >= self.limit_s or self.should_stop():
                    return self._give_up(kept, exc, waited, ahead)
                if tries == 1:
                    self.say(f"database unavailable ({_first_line(exc)}); retrying for up "
                             f"to {_minutes(self.limit_s)} (storage.retry_timeout), results "
                             "wait here meanwhile")
                self._pause(min(pause, max(0.0, self.limit_s - waited)))
                pause = min(pause * 2, 15.0)
                continue
            except DatabaseGone as exc:     # (no retry can bring the file back: kept at once)
                if not tries:
                    ahead = self._write_ahead(kept if finishing else [])
                return self._give_up(kept, exc, self.clock() - start, ahead)
            except StorageError as exc:
                if tries and finishing and "already" in str(exc):
                    return None      # the try that lost its connection did commit (for
                    # finish_and_create the caller then has no trial ids: see the Scheduler)
                raise
            if tries:
                self._unwritten.clear()   # (its own results are written now, and those it
                # held the caller writes next: the database has them, no file needs them)
                self.say(f"database back after {self.clock() - start:.0f}s "
                         f"({tries} failed tr{'y' if tries == 1 else 'ies'})")
            return result

    def _pause(self, seconds: float) -> None:
        """A pause between tries that a stop signal cuts short (up to 15 s: Slurm's
        KillWait is 30 s, and the job must end in order before it)."""
        end = self.clock() + seconds
        while not self.should_stop():
            self._write_meanwhile()
            left = end - self.clock()
            if left <= 0:
                return
            self._sleep(min(left, 0.2))

    def _write_meanwhile(self) -> None:
        """Results finished while this call waits (`meanwhile`), written ahead: a job
        killed during the outage loses none of them."""
        outcomes = self.meanwhile() if self.meanwhile is not None else []
        if outcomes:
            self._append_entries(_finished(outcomes))

    def kept_in(self):
        """The recovery file, where this run wrote results to one; else None."""
        kept = self.given_up is not None and self.written_ahead + self.journaled > 0
        return self.recovery if kept and self.recovery.is_file() else None

    def discard_written_ahead(self) -> None:
        """The end of a run that never gave up: the file written ahead is imported (what
        reached the database is skipped; a held result the run could not write after all,
        ending on an error, is written now) and goes. Left for the resume where that
        fails."""
        if self.given_up is None and self.written_ahead:
            try:
                import_recovery(self.storage, self.recovery, self.study_id)
            except Exception:
                pass
            self.written_ahead = 0

    def _give_up(self, kept, exc, waited, ahead=False):
        outage = f"the database was unavailable for {waited:.0f}s ({_first_line(exc)})"
        if isinstance(exc, DatabaseGone):
            outage = _first_line(exc)
            self._append_entries(self._rescued())
        if kept is not None and not ahead:
            self._append_entries(kept, journaled=True)
        else:
            self._append_entries([])          # (those held unwritten, and finds the place)
        self._unkept = _trials(self._unwritten)
        self.given_up = f"{outage}; {self._kept()}"
        raise StorageUnavailable(self.given_up) from exc

    def _rescued(self) -> list[dict]:
        """The study as this job last saw it, read through its connections to the file
        that is gone (storage/recovery.py's restore_study makes it again from the file):
        its trials' ids are the ones the file's other records name. Nothing where it
        cannot be read."""
        if self.study_id is None:
            return []
        try:
            dump = self.storage.dump_study(self.study_id)
        except Exception:
            return []
        return [record("study", name=dump["study"]["name"], dump=dump)]

    def _kept(self) -> str:
        """What the closing line says of the finished results: where they are kept, and
        how many could not be written anywhere (those trials run again on resume)."""
        in_file = self.written_ahead + self.journaled
        lost = len(self._unkept)
        if not lost:
            if in_file or self._append(""):
                return f"finished results are kept in {self.recovery}"
            return self._nowhere("finished results could not be kept")
        said = self._nowhere(f"{lost} finished result(s) could not be kept") + \
            ": those trials run again on resume"
        return said + (f"; the others are kept in {self.recovery}" if in_file else "")

    def _nowhere(self, what: str) -> str:
        folders = ", ".join(dict.fromkeys(str(p.parent) for p in self.places))
        return f"{what}: none of {folders} could take them" + \
            (f" ({self._append_error})" if self._append_error else "")

    def unkept_note(self) -> str:
        """For the closing line: results that came after the give-up and could not be
        written anywhere either ("" when none)."""
        if not self.unkept_after:
            return ""
        return (f"; {self.unkept_after} more finished result(s) could not be kept "
                f"({self._append_error}): those trials run again on resume")

    def _append_entries(self, entries: list[dict], journaled: bool = False) -> bool:
        """Those left unwritten before, then `entries` (written ahead, or `journaled`
        after the give-up), appended to the recovery file; where no place takes them they
        stay in memory (see `_unwritten`)."""
        lines = self._unwritten + entries
        if lines and not self._append(_lines(lines, self.db_key)):
            if self.given_up is not None:
                new = _trials(entries) - self._unkept
                self._unkept |= new
                self.unkept_after += len(new)
            self._unwritten = lines
            return False
        self.kept_results.update(_statuses(lines))
        if journaled:
            self.journaled += len(entries)
        self.written_ahead += len(lines) - (len(entries) if journaled else 0)
        self._unwritten = []
        return True

    @contextlib.contextmanager
    def holding(self, outcomes: list[dict]):
        """Results the caller holds unwritten while it makes other calls (the scheduler
        sends groups their next trials before it writes the results that freed them):
        written ahead too if one of those calls fails."""
        self._held[id(outcomes)] = outcomes
        try:
            yield
        finally:
            self._held.pop(id(outcomes), None)

    def _write_ahead(self, own: list[dict]) -> bool:
        """The call's results (`own`), and those held (`holding`), in the file before the
        call's retries (see the module docstring). Whether the call had results of its
        own (in the file now, or waiting for a place that takes them)."""
        held = [e for outcomes in self._held.values() for e in _finished(outcomes)]
        self._held.clear()                              # (each written ahead once)
        if own or held:           # (where no place takes them they wait in _unwritten, and
            self._append_entries(held + own)           # go with the next write)
        return bool(own)

    def _journal(self, kept: list[dict]) -> None:
        if not self._append_entries(kept, journaled=True):
            raise StorageUnavailable(self.given_up or f"cannot write {self.recovery}")
        return None

    def _append(self, text: str) -> bool:
        """`text` appended to the recovery file, flushed and fsynced: where it is, else at
        the next place that takes it (a folder that cannot be written, a full disk), which
        it then stays at. False where no place does ("" only finds the place)."""
        for place in dict.fromkeys([self.recovery, *self.places]):
            size = new = None
            try:
                new = not place.exists()
                place.parent.mkdir(parents=True, exist_ok=True)
                with open(place, "a", encoding="utf-8") as fh:
                    size = fh.tell()
                    fh.write(text)
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:
                self._append_error = f"{type(exc).__name__}: {exc.strerror or exc}"
                with contextlib.suppress(OSError):   # (a line cut by a full disk would
                    if size is not None and new:      # spoil the next one written after it)
                        place.unlink()
                    elif size is not None:
                        os.truncate(place, size)
                continue
            self.recovery = place
            return True
        return False


def _own_claim(storage, trial_id: int):
    """The trial, where a retried claim finds it RUNNING for this job (the fence's): the
    try that lost its answer had claimed it. None otherwise."""
    fence = getattr(storage, "fence", None)
    trial = storage.get_trial_by_id(trial_id)
    if fence is not None and trial.job == fence[0] and trial.status.value == "RUNNING":
        return trial
    return None


def _finished(outcomes) -> list[dict]:
    """One record per result: on import, one already written must not hide the rest;
    trials a batch creates are not kept (they never left rank 0)."""
    return [record("finish", **dict(o)) for o in outcomes]


def _statuses(entries: list[dict]) -> dict:
    """{trial id: status} of the finished results the entries hold."""
    return {e["trial_id"]: e.get("status") for e in entries if e["kind"] == "finish"}


def _trials(entries: list[dict]) -> set:
    """The trials whose finished results the entries hold (not curves or status changes)."""
    return {e["trial_id"] for e in entries if e["kind"] == "finish"}


def _first_line(exc) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f}m" if seconds >= 60 else f"{seconds:.0f}s"
