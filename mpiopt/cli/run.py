"""`mpiopt search SPEC` and `mpiopt resume STUDY`: run a study, under mpirun or alone."""
from __future__ import annotations

from mpiopt.cli.common import add_storage_option, storage_url
from mpiopt.errors import MpioptError, StorageError


def register(sub) -> None:
    p = sub.add_parser("search", help="run a study from a spec (under mpirun: rank 0 coordinates)")
    p.add_argument("spec", help="the study's YAML spec")
    p.add_argument("--resume", action="store_true",
                   help="continue the study of this name (it must exist; finished trials are kept)")
    p.add_argument("--resume-or-start", action="store_true",
                   help="continue the study if it exists, else start it (a batch job that is "
                        "requeued runs the same command every time)")
    p.add_argument("--join", action="store_true",
                   help="run the study together with other jobs (a job array, more "
                        "allocations): start it if it does not exist, else join it; the "
                        "budget and the search are shared through the database")
    p.add_argument("--retry-failed", action="store_true",
                   help="with --resume: FAILED trials become RETRIED (kept, no longer counted) "
                        "and their parameter sets run again first")
    _common(p)
    p.set_defaults(func=cmd_search, starts_a_run=True)

    p = sub.add_parser("resume", help="continue a study with the spec stored in the database")
    p.add_argument("study", help="study name")
    p.add_argument("--retry-failed", action="store_true",
                   help="FAILED trials become RETRIED and their parameter sets run again first")
    p.add_argument("--recovery", action="append", default=[], metavar="FILE",
                   help="a recovery file a database outage left (the job's closing line names "
                        "it): its results are written first")
    p.add_argument("--join", action="store_true",
                   help="run it together with the other jobs that run it now (see search --join)")
    _common(p)
    p.set_defaults(func=cmd_resume, starts_a_run=True)


def _common(p) -> None:
    add_storage_option(p)
    p.add_argument("--group-size", type=int, default=None, help="ranks per group (overrides the spec)")
    p.add_argument("--trials", type=int, default=None, help="trial budget (overrides the spec)")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")


def _overrides(args) -> dict:
    out = {}
    if args.group_size is not None:
        out["resources.group_size"] = args.group_size
    if args.trials is not None:
        out["search.trials"] = args.trials
    return out


def cmd_search(args) -> int:
    def prepare():
        from mpiopt.cli.common import read_spec
        from mpiopt.run.study_run import refuse_retry_of_rounds, refuse_shared

        if args.retry_failed and not (args.resume or args.resume_or_start or args.join):
            raise MpioptError("--retry-failed needs --resume (or --resume-or-start): it "
                              "retries the failed trials of an existing study")
        if args.resume and args.resume_or_start:
            raise MpioptError("give --resume or --resume-or-start, not both")
        spec = read_spec(args.spec, overrides=_overrides(args))
        url = storage_url(args, spec.storage)
        resume = "auto" if args.resume_or_start or (args.join and not args.resume) else args.resume
        refuse_retry_of_rounds(spec, args.retry_failed)
        if args.join:
            refuse_shared(spec, url)
        return spec, url, resume, {"retry_failed": args.retry_failed, "shared": args.join}

    from mpiopt.run.launch import run_study_command

    return run_study_command(prepare, quiet=args.quiet)


def _recovery_files(given: list[str], study: str) -> list[str]:
    """--recovery files, each one that exists and is this study's (its entries name trials
    by their ids alone): refused before anything is written."""
    from pathlib import Path

    from mpiopt.kept import recovery_file

    import re

    expected = recovery_file(Path("."), study).name
    stem, suffix = expected.split(".mpiopt-recovery", 1)
    job_file = re.compile(re.escape(stem) + r"(\.job\d+)?" + re.escape(".mpiopt-recovery" + suffix))
    for name in given:
        if not job_file.fullmatch(Path(name).name):
            raise MpioptError(f"--recovery: {name} is not study '{study}''s recovery file (that "
                              f"is {expected} in the folder the closing line named)")
        if not Path(name).is_file():
            raise MpioptError(f"--recovery: no file {name} (a resume that imported it removed "
                              "it; without it, leave --recovery out)")
    return given


def _rescued_spec(recovery: list[str], name: str) -> dict | None:
    """The spec of a study that a recovery file holds whole (mpiopt.storage.recovery)."""
    from mpiopt.spec import stored
    from mpiopt.storage.recovery import rescued_study

    rescued = rescued_study(recovery, name)
    return stored(rescued["dump"]["study"]["spec_text"]).data if rescued else None


def _named_as_allowed(name: str, url: str) -> None:
    """A study named before names were checked (mpiopt.names) is renamed first."""
    import shlex

    from mpiopt.reporting.commands import shown_url
    from mpiopt.names import name_problem

    problem = name_problem(name)
    if problem:
        storage = shlex.quote(shown_url(url))
        raise MpioptError(f"study {name!r}: a study's name {problem}; rename this one first: "
                          f"mpiopt study rename {shlex.quote(name)} NEW --storage {storage}")


def cmd_resume(args) -> int:
    def prepare():
        from mpiopt.run.study_run import refuse_retry_of_rounds, refuse_shared
        from mpiopt.spec import Spec
        from mpiopt.storage import open_storage
        from mpiopt.study.opening import stored_spec_dict

        url = storage_url(args)
        _named_as_allowed(args.study, url)
        recovery = _recovery_files(args.recovery, args.study)
        try:
            storage = open_storage(url)
            try:
                data = stored_spec_dict(storage, args.study)
            finally:
                storage.close()
        except StorageError:      # (a study a recovery file holds whole: its database
            data = _rescued_spec(recovery, args.study)     # file was deleted or replaced)
            if data is None:
                raise
        for path, value in _overrides(args).items():
            section, key = path.split(".")
            data.setdefault(section, {})[key] = value
        spec = Spec.from_dict(data, source=f"{url}#{args.study}")
        refuse_retry_of_rounds(spec, args.retry_failed)
        if args.join:
            refuse_shared(spec, url)
        return spec, url, True, {"retry_failed": args.retry_failed, "recovery": recovery,
                                 "shared": args.join}

    from mpiopt.run.launch import run_study_command

    return run_study_command(prepare, quiet=args.quiet)
