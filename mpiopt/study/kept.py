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

from mpiopt.study.names import file_stem

RECOVERY_SUFFIX = ".mpiopt-recovery.jsonl"
KEEP_LAST = 4
REWRITE_EVERY = 16


def recovery_file(folder: Path, study: str) -> Path:
    return Path(folder) / f"{file_stem(study)}{RECOVERY_SUFFIX}"


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


def lines(entries: list[dict], db_key: str | None = None) -> str:
    """Recovery lines: one JSON object per write, tagged with the database key."""
    tagged = ({**e, "db": db_key} if db_key else e for e in entries)
    return "".join(json.dumps(e, default=_json_default) + "\n" for e in tagged)


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
        line = lines([{"op": "finish_trial", "args": [], "kwargs": result.record()}], self.db_key)
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
