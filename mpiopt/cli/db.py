"""`mpiopt db upgrade` and `mpiopt db current`: the results schema, by hand.

Opening a database already upgrades it; these commands exist for operators who want to
migrate (or check) before a study starts, e.g. a shared PostgreSQL database.
"""
from __future__ import annotations

from mpiopt.cli.common import add_storage_option, storage_url


def register(subparsers) -> None:
    db = subparsers.add_parser("db", help="results-database schema: upgrade, current",
                               description="Manage the results database schema.")
    sub = db.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    p = sub.add_parser("upgrade", help="migrate the schema to the newest revision")
    add_storage_option(p)
    p.set_defaults(func=cmd_upgrade)
    p = sub.add_parser("current", help="print the schema revision of the database")
    add_storage_option(p)
    p.set_defaults(func=cmd_current)


def cmd_upgrade(args) -> int:
    url = storage_url(args)
    with _engine(url) as engine:
        from mpiopt.storage import migrate

        before = migrate.current_revision(engine)
        migrate.upgrade(engine)
        after = migrate.current_revision(engine)
    print(f"{url}: {before or 'empty'} -> {after}" if before != after
          else f"{url}: already at {after} (head)")
    return 0


def cmd_current(args) -> int:
    url = storage_url(args)
    with _engine(url) as engine:
        from mpiopt.storage import migrate

        current, head = migrate.current_revision(engine), migrate.head_revision()
        if current is not None and current not in migrate.known_revisions():
            from mpiopt.errors import StorageError

            raise StorageError(migrate.newer_message(engine.url.render_as_string(), current, head))
    if current == head:
        print(f"{current} (head)")
    else:
        print(f"{current or 'none'} (head is {head}: run `mpiopt db upgrade`)")
    return 0


class _engine:
    """An engine on an existing database (never creates a SQLite file), disposed after."""

    def __init__(self, url: str):
        from mpiopt.storage._engine import check_exists, make_engine

        check_exists(url, create=False)
        self.engine = make_engine(url)

    def __enter__(self):
        return self.engine

    def __exit__(self, exc_type, exc, tb):
        self.engine.dispose()
        if exc is not None:
            _translate(exc)


def _translate(exc: BaseException) -> None:
    from sqlalchemy.exc import DBAPIError

    from mpiopt.errors import StorageError
    from mpiopt.storage._session import describe

    if isinstance(exc, DBAPIError):
        raise StorageError(describe(exc)) from exc
