"""Importing a recovery file or a leader's kept-result file into the database: first
thing on resume (mpiopt.run.study_run), and at the end of a run that wrote results ahead
(storage/resilient.py).

The records (mpiopt.study.kept: their format and kinds) become storage calls through one
table, `APPLY`: a record names what happened, never a storage method, so renaming a
method cannot break a file on a user's disk.
"""
from __future__ import annotations

from pathlib import Path

from mpiopt.errors import StorageError, StorageUnavailable
from mpiopt.storage._base import BaseStorage
from mpiopt.study.kept import FINISH_FIELDS, read_line

# a record's kind -> the storage call that makes it (the fields as kept.KINDS names them)
APPLY = {
    "finish": lambda st, f: st.finish_trial(**{k: f[k] for k in FINISH_FIELDS if k in f}),
    "intermediate": lambda st, f: st.add_intermediate(f["trial_id"], f["epoch"], f["value"]),
    "interrupt": lambda st, f: st.interrupt_running(f["study_id"], keep=f.get("keep") or ()),
}


def import_recovery(storage: BaseStorage, path: Path, study_id: int | None = None,
                    foreign: list | None = None) -> int:
    """Write what a recovery file kept into the database, then remove the file. Writes
    that the database already holds are skipped. Returns how many were written.

    With `study_id`, a write for a trial that is not that study's (the file was written
    for another database, or another study's file was named) is not made: the trial ids
    of one database mean other trials in another, and one could have been given another
    study's result. Lines carry their database's key too (a study of the same name in
    another database, run from the same folder, writes to the same file, and its trial
    ids can be this study's as well). Such lines stay in the file (counted in `foreign`)
    for the resume they belong to.

    A line this mpiopt cannot read (a newer format) is a StorageError naming the file and
    line, before anything is written: it is never dropped."""
    path = Path(path)
    if not path.is_file():
        return 0
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            entries.append((line, read_line(line, f"{path}:{number}")))
        except ValueError as exc:
            raise StorageError(str(exc)) from None
    written, left, key = 0, [], storage.location.key
    for line, entry in entries:
        if entry is None:
            continue          # a line cut short by the crash that ended the job
        if entry.get("db", key) != key or \
                study_id is not None and not _belongs(storage, entry, study_id):
            left.append(line)
            continue
        try:
            APPLY[entry["kind"]](storage, entry)
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


def _belongs(storage: BaseStorage, entry: dict, study_id: int) -> bool:
    """Whether a record writes to this study (its trial, or the study itself)."""
    if entry["kind"] == "interrupt":
        return entry.get("study_id") == study_id
    try:
        return storage.get_trial_by_id(int(entry.get("trial_id"))).study_id == study_id
    except StorageUnavailable:
        raise
    except (StorageError, TypeError, ValueError):
        return False
