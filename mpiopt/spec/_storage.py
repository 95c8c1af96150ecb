"""`storage`: the URL, the outage to ride out, the artifact store."""
from __future__ import annotations

from pathlib import Path

from mpiopt.field import Field, Fields
from mpiopt.spec._reader import _Section
from mpiopt.spec._types import STORAGE_RETRY_S
from mpiopt.sqlite_urls import anchored

STORAGE = Fields(
    Field("url", None, "text", "The URL.", shown="as above"),
    Field("retry_timeout", STORAGE_RETRY_S, "duration", "How long a database outage (connection "
          "lost, server restarting, SQLite locked) is ridden out before the job ends; see "
          "\"Database outages\"."),
    Field("artifacts", None, "text", "A Keras study's artifact store (checkpoints, kept models), a "
          "folder every rank can reach; relative to the spec file. Default "
          "`<db stem>-artifacts/<study>/` beside a SQLite file, `./mpiopt-artifacts/<study>/` "
          "for a server. See \"What training keeps\".", shown="beside the database"),
)


def _storage(top: _Section, base_dir: Path) -> tuple[str | None, float, str | None]:
    """`storage: URL` or `storage: {url: URL, retry_timeout: 10m, artifacts: DIR}`. A
    relative SQLite path (and a relative artifacts folder) is relative to the spec file
    (stored absolute), so a resume from any directory finds the same database."""
    value = top.raw("storage", None)
    retry, artifacts = STORAGE_RETRY_S, None
    if isinstance(value, dict):
        sec = top.section("storage", STORAGE.names)
        given = STORAGE.read(sec)
        value, retry, artifacts = given["url"], given["retry_timeout"], given["artifacts"]
        if artifacts is not None:
            artifacts = str((base_dir / Path(artifacts).expanduser()).resolve())
    elif value is not None:
        value = top.text("storage", default=None)
    return (anchored(value, base_dir) if value else None), retry, artifacts


def _storage_dict(spec):
    """A plain URL unless retry_timeout or artifacts differ from their defaults."""
    if spec.storage_retry == STORAGE_RETRY_S and spec.artifacts is None:
        return spec.storage
    out = {"url": spec.storage, "retry_timeout": spec.storage_retry}
    if spec.artifacts is not None:
        out["artifacts"] = spec.artifacts
    return out
