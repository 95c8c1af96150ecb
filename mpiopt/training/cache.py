"""data.cache: copy each data file to node-local disk once per node, then read the copy.

Shared file systems (GPFS, Lustre, NFS) serve many small random reads badly; a node-local
disk serves them well and its page cache is shared by the node's ranks. The copy of a file
is named by its path, size and modification time, so a changed file is copied again and
a copy made by an earlier job of the same files is reused.

Several ranks of a node start at once and ask for the same file: the first to create the
lock file (O_CREAT | O_EXCL) copies it to a temporary name and renames it into place (an
atomic rename: a reader sees the whole file or none); the others wait for the copy to
appear. The copier touches its lock while it copies; a lock untouched for STALE_S seconds
belongs to a copier that died, and is taken over, so no rank waits for ever.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import socket
import time
from pathlib import Path

from mpiopt.backoff import Backoff
from mpiopt.errors import DataError

STALE_S = 60.0
PIECE = 1 << 26      # bytes copied between two touches of the lock


def local_copy(path, cache_dir) -> Path:
    """The node-local copy of a file (or of an npy directory's files), made if missing."""
    path = Path(path)
    st = path.stat()
    key = hashlib.sha1(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
    cache = Path(cache_dir).expanduser()
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"data.cache: cannot create {cache} ({e.strerror})") from e
    dest = cache / f"{key[:16]}-{path.name}"
    lock = dest.with_name(dest.name + ".lock")
    backoff = Backoff(0.01, 0.5)
    while not dest.exists():
        if _take(lock):
            try:
                if not dest.exists():
                    _copy(path, dest, lock)
            finally:
                lock.unlink(missing_ok=True)
        elif _stale(lock):
            lock.unlink(missing_ok=True)
        else:
            backoff.sleep()
    return dest


def _take(lock: Path) -> bool:
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(f"{socket.gethostname()} {os.getpid()}\n")
    return True


def _stale(lock: Path) -> bool:
    try:
        return time.time() - lock.stat().st_mtime > STALE_S
    except FileNotFoundError:
        return False


def _copy(src: Path, dest: Path, lock: Path) -> None:
    tmp = dest.with_name(f".{dest.name}.{socket.gethostname()}.{os.getpid()}.tmp")
    try:
        if src.is_dir():
            tmp.mkdir()
            for f in sorted(src.iterdir()):
                if f.is_file():
                    _copy_file(f, tmp / f.name, lock)
        else:
            _copy_file(src, tmp, lock)
        os.replace(tmp, dest)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
        raise DataError(f"data.cache: cannot copy {src} to {dest.parent} ({e.strerror or e})") from e


def _copy_file(src: Path, dest: Path, lock: Path) -> None:
    with open(src, "rb") as fin, open(dest, "wb") as fout:
        while piece := fin.read(PIECE):
            fout.write(piece)
            os.utime(lock)
    shutil.copystat(src, dest)
