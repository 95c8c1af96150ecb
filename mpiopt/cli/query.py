"""Query commands: studies, trials, best, show, export, status.

Each is a few lines over Storage and mpiopt.reporting.tables. They never create a database: a
missing file is an error naming it (open_storage without create).
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

from mpiopt import jsontext
from mpiopt.cli.common import (add_format_option, add_storage_option, print_rows, print_text,
                               storage_url)
from mpiopt.errors import MpioptError
from mpiopt.trial import TrialStatus

STUDY_COLUMNS = ("name", "state", "direction", "metric", "trials", "complete", "running",
                 "failed", "pruned", "best", "created")


def register(subparsers) -> None:
    p = _command(subparsers, "studies", cmd_studies, "list the studies in the database")
    p = _command(subparsers, "trials", cmd_trials, "list a study's trials", study=True)
    p.add_argument("--status", nargs="+", action="extend", type=str.upper, metavar="S",
                   choices=[s.value for s in TrialStatus], help="only these statuses")
    p.add_argument("--sort", choices=("number", "value"), default="number",
                   help="by trial number, or by value best first (the study's direction)")
    p.add_argument("--limit", type=_positive, metavar="N", help="at most N trials")
    p = _command(subparsers, "best", cmd_best, "the best complete trials", study=True)
    p.add_argument("--top", type=_positive, default=None, metavar="K",
                   help="how many (default 1; with several objectives the whole Pareto front)")
    p = _command(subparsers, "show", cmd_show, "one trial in full", study=True)
    p.add_argument("number", type=int, help="trial number (from `mpiopt trials`)")
    p = _command(subparsers, "export", cmd_export, "all trials as CSV or JSON, or a Chrome "
                 "trace of the groups' work (open in ui.perfetto.dev)", study=True, fmt=False)
    p.add_argument("--format", choices=("csv", "json", "chrome-trace"), default="csv",
                   help="csv or json: a row per trial; chrome-trace: the groups' work over time")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    _command(subparsers, "status", cmd_status, "progress of a study (also while it runs)",
             study=True)


def _command(subparsers, name, func, help_text, study=False, fmt=True):
    p = subparsers.add_parser(name, help=help_text, description=help_text)
    if study:
        p.add_argument("study", help="study name")
    add_storage_option(p)
    if fmt:
        add_format_option(p)
    p.set_defaults(func=func)
    return p


def _positive(text: str) -> int:
    import argparse

    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


@contextmanager
def _opened(args, study: bool = True):
    """(storage, study record or None), closed afterwards."""
    from mpiopt.storage import open_storage

    storage = open_storage(storage_url(args), read_only=True)
    try:
        yield storage, (storage.get_study(args.study) if study else None)
    finally:
        storage.close()


def cmd_studies(args) -> int:
    from mpiopt.reporting.tables import liveness

    url = storage_url(args)
    with _opened(args, study=False) as (storage, _):
        records = storage.list_studies()
        rows = [{"name": r.name, "status": r.status.value,
                 "state": liveness(r, url)[0], "direction": r.direction,
                 "metric": r.metric, "trials": sum(r.counts.values()),
                 "complete": r.counts[TrialStatus.COMPLETE],
                 "running": r.counts[TrialStatus.RUNNING],
                 "failed": r.counts[TrialStatus.FAILED], "pruned": r.counts[TrialStatus.PRUNED],
                 **_best_of_study(storage, r, args.format == "table"),
                 "created": r.created_at.isoformat(timespec="seconds")} for r in records]
    print_rows(rows, args.format, STUDY_COLUMNS)
    return 0


def _best_of_study(storage, record, human: bool) -> dict:
    """The study's best value; with constraints the best feasible one; with several
    objectives no single value but the front's size ("front": N; the table says so)."""
    front = _front(storage, record)
    if front is None:
        return {"best": record.best_value}
    if not front.multi:
        return {"best": None if front.best is None else front.best.value}
    size = len(front.trials)
    return {"best": f"front of {size}" if human else None, "front": size,
            "hypervolume": front.hypervolume}


def _front(storage, record, trials=None):
    """The best trials (mpiopt.reporting.front) of a study with several objectives or
    constraints, from its COMPLETE trials; None for one objective without constraints
    (the store's order by value says it all)."""
    from mpiopt.reporting.front import Front, stored_objectives

    if stored_objectives(record.spec_text) is None:
        return None
    if trials is None:
        trials = storage.get_trials(record.id, statuses=[TrialStatus.COMPLETE.value])
    return Front.of(record, trials)


def cmd_trials(args) -> int:
    from mpiopt.reporting.tables import table_columns, trial_row

    with _opened(args) as (storage, record):
        trials = storage.get_trials(record.id, statuses=args.status, order_by=args.sort,
                                    limit=args.limit,
                                    descending=args.sort == "value" and record.direction == "maximize")
        front = _front(storage, record)
    human = args.format == "table"
    print_rows([trial_row(t, human, front) for t in trials], args.format,
               table_columns(trials, front))
    return 0


def cmd_best(args) -> int:
    from mpiopt.reporting.tables import table_columns, trial_row

    with _opened(args) as (storage, record):     # one opening, whichever kind of study
        front = _front(storage, record)
        if front is not None:
            return _best_of_vector(args, record, front)
        trials = storage.best_trials(record.id, args.top or 1)
    if not trials and args.format == "table":
        print(f"study '{record.name}' has no complete trial yet")
        return 0
    rows = [{"rank": i + 1, **trial_row(t, args.format == "table")} for i, t in enumerate(trials)]
    print_rows(rows, args.format, ("rank",) + table_columns(trials))
    return 0


def _best_of_vector(args, record, front) -> int:
    """Several objectives: the first --top trials of the Pareto front of the feasible
    complete trials, by the first objective (the title says how many there are); one
    objective with constraints: the best feasible trials."""
    from mpiopt.reporting.tables import front_rows

    rows, columns, title = front_rows(front, args.top or (len(front.trials) if front.multi else 1))
    if not rows and args.format == "table":
        print(f"study '{record.name}' has no feasible complete trial yet")
        return 0
    if args.format == "table" and title:
        print_text(title)
    print_rows(rows, args.format, columns)
    return 0


def cmd_show(args) -> int:
    from mpiopt.reporting.tables import show_lines, trial_dict

    with _opened(args) as (storage, record):
        trial = storage.get_trial(record.id, args.number)
        parent = None if trial.parent is None else storage.get_trial(record.id, trial.parent)
        front = _front(storage, record)
    if args.format == "json":
        print(jsontext.dumps(trial_dict(trial, front), indent=2))
        return 0
    for line in show_lines(trial, record.name, record.metric, record.direction,
                           unicode_ok=_can_encode("▁█"), parent=parent, front=front):
        print(line)
    return 0


def cmd_export(args) -> int:
    from mpiopt.reporting.tables import write_csv, write_json

    with _opened(args) as (storage, record):
        trials = storage.get_trials(record.id)
        jobs = storage.list_jobs(record.id) if args.format == "chrome-trace" else ()
    front = _front(storage, record, [t for t in trials if t.status == TrialStatus.COMPLETE])
    names = front.names if front is not None else ()
    writer = write_csv if args.format == "csv" else write_json
    write = lambda trials, out: writer(trials, out, names, front)    # noqa: E731
    if args.format == "chrome-trace":
        write = _trace_writer(record, jobs)
    if not args.output:
        write(trials, sys.stdout)
        return 0
    try:
        with open(args.output, "w", newline="", encoding="utf-8") as out:
            write(trials, out)
    except OSError as exc:
        raise MpioptError(f"cannot write {args.output}: {exc.strerror}") from exc
    print(f"wrote {len(trials)} trials to {Path(args.output)}", file=sys.stderr)
    return 0


def _trace_writer(record, jobs):
    from mpiopt.reporting.trace import write_chrome_trace
    from mpiopt.reporting.view import StudyView

    return lambda trials, out: write_chrome_trace(StudyView.of(record, trials, jobs=jobs), out)


def cmd_status(args) -> int:
    from mpiopt.reporting.tables import status_lines, status_summary

    with _opened(args) as (storage, record):
        counts = storage.count_trials(record.id)
        best = storage.best_trials(record.id, 1)
        groups = storage.group_activity(record.id)
        front = _front(storage, record)
        jobs = storage.list_jobs(record.id)
    summary = status_summary(record, counts, best[0] if best else None, groups,
                             storage_url(args), front, jobs)
    if args.format == "json":
        print(jsontext.dumps(summary, indent=2))
    else:
        print("\n".join(status_lines(summary)))
    return 0


def _can_encode(text: str) -> bool:
    try:
        text.encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True
