"""`mpiopt study delete|rename|copy` and `mpiopt enqueue`: thin over mpiopt.study.manage.

These write to the database, so unlike the query commands they open it for writing (an
older schema is upgraded, as a study's start does); none of them creates a database
except `study copy --to`, whose target may be new.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager

from mpiopt.cli.common import add_storage_option, storage_url
from mpiopt.errors import MpioptError


def register(subparsers) -> None:
    study = subparsers.add_parser("study", help="manage studies: delete, rename, copy",
                                  description="Delete, rename or copy a study.")
    sub = study.add_subparsers(dest="study_command", metavar="ACTION", required=True)
    p = sub.add_parser("delete", help="delete a study and all its trials")
    p.add_argument("study", help="study name")
    p.add_argument("--yes", action="store_true", help="do not ask (needed without a terminal)")
    _write_options(p, force=True)
    p.set_defaults(func=cmd_delete)
    p = sub.add_parser("rename", help="give a study a new name")
    p.add_argument("old", help="the study's name")
    p.add_argument("new", help="its new name")
    _write_options(p, force=True)
    p.set_defaults(func=cmd_rename)
    p = sub.add_parser("copy", help="copy a study, with every trial, into another database")
    p.add_argument("study", help="study name")
    p.add_argument("--to", required=True, metavar="URL", help="the target database's URL")
    p.add_argument("--as", dest="as_name", metavar="NAME", help="name of the copy (default: the same)")
    add_storage_option(p)
    p.set_defaults(func=cmd_copy)

    p = subparsers.add_parser(
        "enqueue", help="queue a parameter set to run before the searcher's own suggestions",
        description="Queue a parameter set for a study; a running job takes it at its next "
                    "dispatch, else the next resume runs it first.")
    p.add_argument("study", help="study name")
    p.add_argument("--set", dest="settings", action="append", metavar="NAME=VALUE", default=[],
                   required=True, help="one parameter (every parameter of the space is needed; in a conditional space every active one)")
    add_storage_option(p)
    p.set_defaults(func=cmd_enqueue)


def _write_options(p, force: bool) -> None:
    add_storage_option(p)
    if force:
        p.add_argument("--force", action="store_true",
                       help="even while a job runs the study (its lease is fresh)")


@contextmanager
def _opened(url: str, create: bool = False, read_only: bool = False):
    from mpiopt.storage import open_storage

    storage = open_storage(url, create=create, read_only=read_only)
    try:
        yield storage
    finally:
        storage.close()


def cmd_delete(args) -> int:
    from mpiopt.study import manage

    url = storage_url(args)
    with _opened(url) as storage:
        record = storage.get_study(args.study)
        manage.refuse_running(record, args.force, "delete")
        if not args.yes:
            _confirm(f"delete study '{record.name}' and all its trials from "
                     f"{storage.shown_url}? [y/N] ")
        n = manage.delete_study(storage, args.study, force=args.force)
    print(f"deleted study '{args.study}' ({n} trials)")
    return 0


def cmd_rename(args) -> int:
    from mpiopt.study import manage

    with _opened(storage_url(args)) as storage:
        manage.rename_study(storage, args.old, args.new, force=args.force)
    print(f"renamed study '{args.old}' to '{args.new}'")
    return 0


def cmd_copy(args) -> int:
    from mpiopt.study import manage
    from mpiopt.storage import StorageURL

    to = StorageURL.parse(args.to)
    to.check()
    with _opened(storage_url(args), read_only=True) as source:
        source.get_study(args.study)            # an unknown name: before the target is made
        with _opened(to.text, create=True) as target:
            n = manage.copy_study(source, target, args.study, args.as_name)
    print(f"copied study '{args.study}' ({n} trials) to {to.shown}"
          + (f" as '{args.as_name}'" if args.as_name and args.as_name != args.study else ""))
    return 0


def cmd_enqueue(args) -> int:
    from mpiopt.study import manage
    from mpiopt.spec import parse_overrides

    given = parse_overrides(args.settings)
    with _opened(storage_url(args)) as storage:
        trial = manage.enqueue(storage, args.study, given)
        live = manage.running_lease(storage.get_study(args.study)) is not None
    when = ("the running job takes it at its next dispatch" if live else
            "no job runs the study now: it runs first when the study is resumed (it counts "
            "toward the budget: add --trials N if the budget is used up)")
    print(f"queued as trial {trial.number} of '{args.study}' (PENDING): {when}")
    return 0


def _confirm(question: str) -> None:
    if not sys.stdin.isatty():
        raise MpioptError("refusing to delete without --yes (no terminal to ask on)")
    answer = input(question)
    if answer.strip().lower() not in ("y", "yes"):
        raise MpioptError("not deleted")
