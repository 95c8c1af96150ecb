"""Importing a recovery file or a leader's kept-result file into the database: first
thing on resume (mpiopt.run.study_run), and at the end of a run that wrote results ahead
(storage/resilient.py).

The records (mpiopt.kept: their format and kinds) become storage calls through one
table, `APPLY`: a record names what happened, never a storage method, so renaming a
method cannot break a file on a user's disk.
"""
from __future__ import annotations

import os
from pathlib import Path

from mpiopt.errors import StorageError, StorageUnavailable, UnknownStudyError
from mpiopt.storage._base import BaseStorage
from mpiopt.kept import FINISH_FIELDS, group_files, lines, read_line, record

# a record's kind -> the storage call that makes it (the fields as kept.KINDS names them)
APPLY = {
    "finish": lambda st, f: st.finish_trial(**{k: f[k] for k in FINISH_FIELDS if k in f}),
    "intermediate": lambda st, f: st.add_intermediate(f["trial_id"], f["epoch"], f["value"],
                                                      fold=f.get("fold") or 0),
    "interrupt": lambda st, f: st.interrupt_running(f["study_id"], keep=f.get("keep") or ()),
    "study": lambda st, f: None,        # (restore_study made it, where it was missing)
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
        if entry["kind"] == "study" and entry.get("db", key) == key:
            continue          # (the study is there: restore_study made it, or it was kept)
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


def rescued_study(paths, name: str) -> dict | None:
    """The last "study" record for `name` in these recovery files (written when its
    SQLite file was deleted or replaced under the job), or None."""
    found = None
    for path in map(Path, paths):
        for entry in _records(path):
            if entry and entry["kind"] == "study" and entry.get("name") == name:
                found = entry
    return found


def restore_study(storage: BaseStorage, paths, name: str, places=()) -> str | None:
    """Where the database has no study `name` and a recovery file holds it (a "study"
    record), the study is made again from that record, and the file's other records of
    the lost database are rewritten to name the new trial ids and this database, so that
    the import which follows writes them; so are the group leaders' kept files beside it
    and beside the recovery `places` (their ids would name other trials here). A note
    for the study's header, or None."""
    try:
        storage.get_study(name)
        return None
    except UnknownStudyError:
        pass
    for path in map(Path, paths):
        rescued = rescued_study([path], name)
        if rescued is None:
            continue
        dump = _typed(rescued["dump"])
        study_id = storage.load_study_dump(dump, name, dump["study"]["spec_text"])
        number_to_id = {t.number: t.id for t in storage.get_trials(study_id)}
        ids = {row["id"]: number_to_id[row["number"]] for row in dump["trials"]}
        old_key, key, studies = rescued.get("db"), storage.location.key, \
            {dump["study"]["id"]: study_id}
        _renamed(path, old_key, key, ids, studies)
        for place in dict.fromkeys([path, *map(Path, places)]):
            for kept in group_files(place, old_key):
                _renamed(kept, old_key, key, ids, studies)
                if old_key != key:
                    os.replace(kept, kept.with_name(key + kept.name[len(old_key):]))
        return (f"study '{name}' made again from {path} ({len(ids)} trial(s) as the last job "
                "saw them: its database file was deleted or replaced while it ran)")
    return None


def _records(path: Path) -> list:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    try:
        return [read_line(line, f"{path}:{n}") for n, line in enumerate(text.splitlines(), 1)]
    except ValueError as exc:
        raise StorageError(str(exc)) from None


def _renamed(path: Path, old_key, new_key, ids: dict, studies: dict) -> None:
    """The file's records of the lost database (`old_key`) with the new ids and key; the
    study record goes (it was used), other lines stay as they are."""
    out = []
    for line, entry in zip(path.read_text(encoding="utf-8").splitlines(), _records(path)):
        if entry is None or entry.get("db") != old_key:
            out.append(line + "\n")
            continue
        if entry["kind"] == "study":
            continue
        fields = {k: v for k, v in entry.items() if k not in ("kind", "db")}
        if "trial_id" in fields:
            fields["trial_id"] = ids.get(fields["trial_id"], -1)   # (another study's trial)
        if "study_id" in fields:
            fields["study_id"] = studies.get(fields["study_id"], -1)
        if "keep" in fields:
            fields["keep"] = [ids.get(k, -1) for k in fields["keep"] or ()]
        out.append(lines([record(entry["kind"], **fields)], new_key))
    temporary = path.with_name(path.name + ".new")
    temporary.write_text("".join(out), encoding="utf-8")
    os.replace(temporary, path)


def _typed(dump: dict) -> dict:
    """A dump read back from JSON: its times are datetimes again."""
    from datetime import datetime

    from mpiopt.storage._studies import CHILDREN
    from mpiopt.storage._writes import STUDIES, TRIALS
    from mpiopt.storage.models import UTCDateTime

    def typed(table, row):
        return {k: datetime.fromisoformat(v) if isinstance(v, str) and k in table.c
                and isinstance(table.c[k].type, UTCDateTime) else v for k, v in row.items()}

    return {"study": typed(STUDIES, dump["study"]),
            "trials": [typed(TRIALS, r) for r in dump["trials"]],
            "children": {t.name: [typed(t, r) for r in dump["children"].get(t.name, ())]
                         for t in CHILDREN}}
