"""Finished results kept in files until the database surely has them: the recovery file's
names and lines, and the file each group leader keeps its own results in.

A result lives only in memory from the moment its trial returns until the coordinator's
commit of it ends: in the leader while it sends, in MPI's queue until rank 0 receives it,
in rank 0 while it writes. A job killed in that window (kill -9 of any rank, the
walltime's SIGKILL, the out-of-memory killer, a trial in the ranks' own process that
kills it: the launcher then kills every rank) lost that finished result, and its trial
ran again on resume (README, "Results on their way to the database", has the figures;
tests/test_chaos.py the deterministic case). So each leader
appends the result's record to a file of its own before it sends it (`KeptResults`), and
the resume imports those files with the recovery file (study_run), skipping what the
database already holds. The file is written, not synced: it outlives the process, not
the machine (a node lost loses its trials anyway).

The records: both files are JSON lines, one record per line, in one versioned format
(FORMAT_VERSION; `record`, `lines`, `read_line`): {"v": 1, "kind": KIND, "db": KEY,
...fields}, KIND one of KINDS, each the one storage call it stands for
(storage/recovery.py's table), never a storage method's name, so that renaming a method
leaves the files on users' disks readable:

    finish        a trial's outcome: finish_trial's fields (trial_id, status, value, ...)
    intermediate  a fold's value after an epoch: trial_id, epoch, value, fold (0 where a
                  record has none) (add_intermediate)
    interrupt     a job's running trials INTERRUPTED: study_id, keep (interrupt_running)
    study         the whole study as the job last saw it: name, dump (dump_study), written
                  when its SQLite file was deleted or replaced under the job; a resume
                  makes the study again from it (load_study_dump), and the file's other
                  records name its trial ids

"db" is the database's key (StorageURL.key): trial ids mean other trials in another
database. Lines of the unversioned format before it ({"op": METHOD, "args": [...],
"kwargs": {...}, "db": KEY}, METHOD one of finish_trial, add_intermediate,
interrupt_running) are read as the same records (tests/data/records-v0). A line of a
newer version or an unknown kind stops the import, naming the file and line, before
anything is written: it is never dropped, nor misread.

The files are in a folder beside the recovery file, STUDY.mpiopt-kept/KEY.rankN.jsonl.
A leader's file holds its last KEEP_LAST records (rewritten every REWRITE_EVERY, so it
stays small): a leader gets a trial only after rank 0 took in its result before last
(the one sent ahead aside), so an older result was committed, or is in rank 0's own
recovery file. At an orderly end whose results all reached the database (STOP says
so) the leader removes its file.

No SQL here: the group ranks import this, and never the database's modules.
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
from collections import deque
from pathlib import Path

from mpiopt import jsontext
from mpiopt.names import file_stem
from mpiopt.trial import by_fold

RECOVERY_SUFFIX = ".mpiopt-recovery.jsonl"
KEEP_LAST = 4
REWRITE_EVERY = 16


def recovery_file(folder: Path, study: str, job: int | None = None) -> Path:
    """STUDY.mpiopt-recovery.jsonl; a job of a shared study (`--join`) has its own,
    STUDY.jobN.mpiopt-recovery.jsonl, so that jobs in one folder never write, import or
    remove each other's (nor their leaders' files beside it: kept_folder)."""
    return Path(folder) / f"{file_stem(study)}{'' if job is None else f'.job{job}'}{RECOVERY_SUFFIX}"


def jobs_recovery_files(place: Path) -> list[Path]:
    """Beside the recovery file `place`: the places of the shared study's jobs, where a
    recovery file or a kept folder of theirs is (a start imports from each)."""
    place = Path(place)
    stem = glob.escape(str(place.with_name(place.name[:-len(RECOVERY_SUFFIX)])))
    found = glob.glob(f"{stem}.job*{RECOVERY_SUFFIX}") + glob.glob(f"{stem}.job*.mpiopt-kept")
    return sorted({Path(p[:-len(".mpiopt-kept")] + RECOVERY_SUFFIX)
                   if p.endswith(".mpiopt-kept") else Path(p) for p in found})


def kept_folder(place: Path) -> Path:
    """The folder of the leaders' files beside the recovery file `place`: STUDY.mpiopt-kept
    (one file per leader, hundreds on a large job, kept out of the spec's folder)."""
    place = Path(place)
    return place.with_name(place.name[:-len(RECOVERY_SUFFIX)] + ".mpiopt-kept")


def group_file(place: Path, db_key: str, rank: int) -> Path:
    """Rank `rank`'s kept results beside the recovery file `place` (the database key in
    the name: a study of the same name in another database, run from the same folder,
    has files of its own)."""
    return kept_folder(place) / f"{db_key}.rank{rank}.jsonl"


def group_files(place: Path, db_key: str) -> list[Path]:
    """The leaders' files beside the recovery file `place`, for that database."""
    folder = glob.escape(str(kept_folder(place)))
    return sorted(Path(p) for p in glob.glob(os.path.join(folder, f"{db_key}.rank*.jsonl")))


def remove_if_empty(folder: Path) -> None:
    """The kept folder once its last file went (another leader's may still be there)."""
    with contextlib.suppress(OSError):
        folder.rmdir()


FORMAT_VERSION = 1
FINISH_FIELDS = ("trial_id", "status", "value", "value_std", "fold_values", "metrics", "error",
                 "duration", "intermediate", "fold_metrics", "device", "spans")
KINDS = {"finish": FINISH_FIELDS, "intermediate": ("trial_id", "epoch", "value", "fold"),
         "interrupt": ("study_id", "keep"), "study": ("name", "dump")}
# the unversioned format's storage methods, with their positional parameters then
_V0_OPS = {"finish_trial": ("finish", FINISH_FIELDS),
           "add_intermediate": ("intermediate", KINDS["intermediate"]),
           "interrupt_running": ("interrupt", KINDS["interrupt"])}
_RESERVED = ("v", "kind", "db")


def record(kind: str, **fields) -> dict:
    """A record of `kind` (one of KINDS) with its fields; a field the kind does not have
    is a bug, caught here rather than in a file on a user's disk."""
    unknown = set(fields) - set(KINDS[kind])
    if unknown:
        raise ValueError(f"a {kind!r} record has no field(s) {sorted(unknown)}")
    return {"kind": kind, **fields}


def lines(records: list[dict], db_key: str | None = None) -> str:
    """The records as lines of the file: versioned, tagged with the database key."""
    out = []
    for r in records:
        head = {"v": FORMAT_VERSION, "kind": r["kind"], **({"db": db_key} if db_key else {})}
        fields = {k: by_fold(v) if k == "intermediate" else v for k, v in r.items() if k != "kind"}
        out.append(jsontext.exact({**head, **fields}, default=_json_default) + "\n")
    return "".join(out)


def read_line(text: str, where: str = "") -> dict | None:
    """The record on one line: {"kind", "db" (when tagged), fields...}; None for a line
    that is empty or cut short (the crash that ended the job). A line of a newer format
    or of a kind this mpiopt does not know is a ValueError naming `where`: it must not be
    dropped, nor read wrongly."""
    if not text.strip():
        return None
    try:
        entry = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(entry, dict):
        return None
    if "op" in entry and "v" not in entry:
        return _from_v0(entry, where)
    version, kind = entry.get("v"), entry.get("kind")
    if not isinstance(version, int) or version > FORMAT_VERSION or kind not in KINDS:
        raise ValueError(f"{where}: a record of format version {version!r}, kind {kind!r}, "
                         f"which this mpiopt (format {FORMAT_VERSION}: "
                         f"{', '.join(KINDS)}) cannot read: use the mpiopt that wrote it")
    fields = {k: v for k, v in entry.items() if k in KINDS[kind]}
    return {"kind": kind, **({"db": entry["db"]} if "db" in entry else {}), **fields}


def _from_v0(entry: dict, where: str) -> dict:
    """An unversioned line: the storage method's name and its arguments."""
    if entry["op"] not in _V0_OPS:
        raise ValueError(f"{where}: a record of an unknown write {entry['op']!r}")
    kind, params = _V0_OPS[entry["op"]]
    fields = dict(zip(params, entry.get("args") or []))
    fields.update((k, v) for k, v in (entry.get("kwargs") or {}).items() if k in params)
    return {"kind": kind, **({"db": entry["db"]} if "db" in entry else {}), **fields}


def _json_default(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "value"):
        return value.value
    return str(value)


class KeptResults:
    """A leader's (or a single-process run's) finished results, kept before they leave.
    Never raises: a folder that takes no file costs the protection, not the trial."""

    def __init__(self, places, db_key: str | None, rank: int):
        self.db_key = db_key
        self.paths = list(dict.fromkeys(group_file(Path(p), db_key or "nodb", rank)
                                        for p in places))
        self.used: set[Path] = set()
        self.recent: deque[str] = deque(maxlen=KEEP_LAST)
        self.count = 0

    def keep(self, result) -> None:
        """`result` (parallel.protocol.Result) on file, where it is a finished trial's."""
        if result.trial_id < 0 or result.status.value not in ("COMPLETE", "FAILED", "PRUNED"):
            return              # (a refit has no row; a cancelled trial runs again anyway)
        line = lines([record("finish", **result.record())], self.db_key)
        self.recent.append(line)
        self.count += 1
        if self.count % REWRITE_EVERY == 0 and self._rewrite():
            return
        self._write(line, "a")

    def discard(self) -> None:
        """Every result reached the database: the files go."""
        for path in self.used:
            with contextlib.suppress(OSError):
                path.unlink()
            remove_if_empty(path.parent)
        self.used.clear()

    def _rewrite(self) -> bool:
        """The file cut to the last KEEP_LAST records, replaced in one step (a kill
        meanwhile leaves the old one whole)."""
        text = "".join(self.recent)
        for path in self.paths:
            temporary = path.with_name(path.name + ".new")
            if self._write(text, "w", temporary, remember=False):
                try:
                    os.replace(temporary, path)
                except OSError:
                    with contextlib.suppress(OSError):
                        temporary.unlink()
                    continue
                for older in self.used - {path}:   # (where an earlier place took some)
                    with contextlib.suppress(OSError):
                        older.unlink()
                self.used = {path}
                return True
        return False

    def _write(self, text: str, mode: str, path: Path | None = None, remember=True) -> bool:
        for place in [path] if path else self.paths:
            size = None
            try:
                place.parent.mkdir(parents=True, exist_ok=True)
                with open(place, mode, encoding="utf-8") as fh:
                    size = fh.tell()
                    fh.write(text)
            except OSError:
                with contextlib.suppress(OSError):   # (a line cut by a full disk would
                    if size is not None:              # spoil the next one appended)
                        os.truncate(place, size)
                continue
            if remember:
                self.used.add(place)
            return True
        return False
