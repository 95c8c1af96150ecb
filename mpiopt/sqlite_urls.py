"""The file path inside a SQLite URL, as text: the two rewrites a user's URL gets before
anything parses it (`~` expanded, a relative path anchored to the spec's folder).

Plain string work, apart from the storage package on purpose: every rank rebuilds the
spec it is sent, and that must not import SQLAlchemy on ranks that never open the
database (its import is most of a training rank's start-up after numpy's and MPI's).
"""
from __future__ import annotations

from pathlib import Path

SQLITE_PREFIXES = ("sqlite:///", "sqlite+pysqlite:///")


def _split(url: str) -> tuple[str | None, str]:
    prefix = next((p for p in SQLITE_PREFIXES if url.startswith(p)), None)
    return prefix, (url[len(prefix):] if prefix else "")


def expand_home(url: str) -> str:
    """A SQLite URL whose path starts with ~ (sqlite:///~/runs/opt.db) with the home folder
    put in, as a shell would: SQLAlchemy takes the ~ literally, and the study then wanted a
    folder named "~" in the working directory."""
    prefix, path = _split(url)
    if prefix is None or not path.startswith("~"):
        return url
    return prefix + str(Path(path).expanduser())


def anchored(url: str, base_dir: Path) -> str:
    """`url` with ~ expanded and a relative SQLite path made absolute from `base_dir` (a
    spec file's folder: relative paths in a spec count from it). Servers, in-memory
    databases and file: URIs are returned as they are."""
    url = expand_home(url)
    prefix, path = _split(url)
    if prefix is None or not path or path.startswith(("/", ":memory:", "file:")):
        return url
    return prefix + str((base_dir / path).resolve())
