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

The recovery file is JSON lines, one write per line, flushed and fsynced as it is written.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

from mpiopt.errors import StorageError, StorageUnavailable
from mpiopt.study.kept import lines as _lines
from mpiopt.storage._stall import hurry_when

# (interrupt_running too: a job that ends in order during an outage could not mark its
# running trials INTERRUPTED, and the resume counted each a lost attempt, which after
# `max_attempts` such endings FAILED a good parameter set)
JOURNALED = ("finish_trial", "finish_trials", "finish_and_create", "add_intermediate",
             "interrupt_running")
FINISHING = JOURNALED[:3]    # written ahead at their first failed try


class Resilient:
    """A storage whose calls survive outages up to `limit_s` (see the module docstring).

    `say(line)` tells the user once per outage; `should_stop()` (a signal arrived) ends
    the waiting early. Attributes that are not methods pass straight through.
    """

    def __init__(self, storage, limit_s: float, places: list[Path], say=print,
                 should_stop=lambda: False, clock=time.monotonic, sleep=time.sleep,
                 study_id: int | None = None):
        # the recovery file's places, in order: the first one that can be written is used
        # (a spec in a read-only folder, an Apptainer image's, lost the results of an
        # outage: the job ended on "Read-only file system" with its finished trials RUNNING)
        self.places = [Path(p) for p in places]
        self.storage, self.limit_s, self.recovery = storage, float(limit_s), self.places[0]
        self.say, self.should_stop, self.clock, self._sleep = say, should_stop, clock, sleep
        self.study_id = study_id             # (whose trials a file written ahead holds)
        self.db_key = key_of(storage)        # (and in which database: see import_recovery)
        # a call that waits on a server that stopped answering ends sooner once stopping
        hurry_when(getattr(storage, "engine", None), should_stop)
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

    def __getattr__(self, name):
        attr = getattr(self.storage, name)
        if not callable(attr) or name.startswith("_") or name == "close":
            return attr

        def call(*args, **kwargs):
            return self._call(name, attr, args, kwargs)

        call.__name__ = name
        return call

    def _call(self, name, method, args, kwargs):
        if self.given_up is not None:
            if name in JOURNALED:
                return self._journal(name, args, kwargs)
            raise StorageUnavailable(self.given_up)
        start, pause, tries, ahead = self.clock(), 0.5, 0, False
        while True:
            try:
                result = method(*args, **kwargs)
            except StorageUnavailable as exc:
                tries += 1
                if tries == 1:
                    ahead = self._write_ahead(name, args, kwargs)
                waited = self.clock() - start
                if waited >= self.limit_s or self.should_stop():
                    return self._give_up(name, args, kwargs, exc, waited, ahead)
                if tries == 1:
                    self.say(f"database unavailable ({_first_line(exc)}); retrying for up "
                             f"to {_minutes(self.limit_s)} (storage.retry_timeout), results "
                             "wait here meanwhile")
                self._pause(min(pause, max(0.0, self.limit_s - waited)))
                pause = min(pause * 2, 15.0)
                continue
            except StorageError as exc:
                if tries and name.startswith("finish_") and "already" in str(exc):
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
            self._append_entries(_entries("finish_trials", (outcomes,), {}))

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

    def _give_up(self, name, args, kwargs, exc, waited, ahead=False):
        outage = f"the database was unavailable for {waited:.0f}s ({_first_line(exc)})"
        if name in JOURNALED and not ahead:
            self._append_entries(_entries(name, args, kwargs), journaled=True)
        else:
            self._append_entries([])          # (those held unwritten, and finds the place)
        self._unkept = _trials(self._unwritten)
        self.given_up = f"{outage}; {self._kept()}"
        raise StorageUnavailable(self.given_up) from exc

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
        self.kept_results.update(_finished(lines))
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

    def _write_ahead(self, name, args, kwargs) -> bool:
        """The call's results, and those held (`holding`), in the file before the call's
        retries (see the module docstring). Whether the call had results of its own (in
        the file now, or waiting for a place that takes them)."""
        own = _entries(name, args, kwargs) if name in FINISHING else []
        held = [e for outcomes in self._held.values()
                for e in _entries("finish_trials", (outcomes,), {})]
        self._held.clear()                              # (each written ahead once)
        if own or held:           # (where no place takes them they wait in _unwritten, and
            self._append_entries(held + own)           # go with the next write)
        return bool(own)

    def _journal(self, name, args, kwargs) -> None:
        if not self._append_entries(_entries(name, args, kwargs), journaled=True):
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


def import_recovery(storage, path: Path, study_id: int | None = None,
                    foreign: list | None = None) -> int:
    """Write what a recovery file kept into the database (first thing on resume), then
    remove the file. Writes that the database already holds are skipped. Returns how
    many were written.

    With `study_id`, a write for a trial that is not that study's (the file was written
    for another database, or another study's file was named) is not made: the trial ids
    of one database mean other trials in another, and one could have been given another
    study's result. Lines carry their database's key too (a study of the same name in
    another database, run from the same folder, writes to the same file, and its trial
    ids can be this study's as well). Such lines stay in the file (counted in `foreign`)
    for the resume they belong to."""
    path = Path(path)
    if not path.is_file():
        return 0
    written, left, key = 0, [], key_of(storage)
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue          # a line cut short by the crash that ended the job
        if entry.get("db", key) != key or \
                study_id is not None and not _belongs(storage, entry, study_id):
            left.append(line)
            continue
        try:      # (a status comes back as its text, which finish_trial takes as well)
            getattr(storage, entry["op"])(*entry.get("args", []), **entry.get("kwargs", {}))
            written += 1
        except StorageUnavailable:
            raise
        except StorageError:
            pass              # already there (or the trial is gone): nothing to redo
    if left:
        path.write_text("".join(line + "\n" for line in left), encoding="utf-8")
        if foreign is not None:
            foreign.append(len(left))
    else:
        path.unlink()
    return written


def _belongs(storage, entry: dict, study_id: int) -> bool:
    """Whether a recovery line writes to this study (its trial, or the study itself)."""
    args, kwargs = entry.get("args", []), entry.get("kwargs", {})
    if entry.get("op") == "interrupt_running":
        return (args[0] if args else kwargs.get("study_id")) == study_id
    trial_id = args[0] if args else kwargs.get("trial_id")
    try:
        return storage.get_trial_by_id(int(trial_id)).study_id == study_id
    except StorageUnavailable:
        raise
    except (StorageError, TypeError, ValueError):
        return False


def _entries(name, args, kwargs) -> list[dict]:
    if name in ("finish_trials", "finish_and_create"):   # one line per result: on import,
        # one already written must not hide the rest; trials not yet created are not
        # kept (they never left rank 0)
        outcomes = args[0] if args else kwargs["outcomes"]
        return [{"op": "finish_trial", "args": [], "kwargs": dict(o)} for o in outcomes]
    listed = {k: sorted(v) if isinstance(v, (set, frozenset)) else v for k, v in kwargs.items()}
    return [{"op": name, "args": list(args), "kwargs": listed}]


def _trials(entries: list[dict]) -> set:
    """The trials whose finished results the entries hold (not curves or status changes)."""
    found = set()
    for e in entries:
        if e["op"] == "finish_trial":
            args, kwargs = e.get("args", []), e.get("kwargs", {})
            found.add(args[0] if args else kwargs.get("trial_id"))
    return found


def _finished(entries: list[dict]) -> dict:
    """{trial id: status} of the finished results the entries hold."""
    return {e["kwargs"].get("trial_id"): e["kwargs"].get("status") for e in entries
            if e["op"] == "finish_trial" and not e.get("args") and "status" in e["kwargs"]}


def key_of(storage) -> str | None:
    """The database key (storage/_urls.database_key) of a storage; None for a stand-in."""
    from mpiopt.storage._urls import database_key

    url = getattr(storage, "shown_url", None)
    return database_key(url) if isinstance(url, str) else None


def _first_line(exc) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f}m" if seconds >= 60 else f"{seconds:.0f}s"
