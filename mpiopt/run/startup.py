"""Rank 0's part of the checked start-up (the three steps of mpiopt.run.launch).

1. the MPIOPT_* variables, the spec, the layout and the database URL are checked, and
   every rank gets the resolved spec (or the error);
2. every rank sets itself up and answers READY or its error (mpiopt.run.serving);
3. the first error is reported, or the study is opened (the first write) with the stop
   flag installed in the same breath, and GO goes out.

Every message goes to every rank or to none (a signal is acted on once all are sent), and
a Ctrl-C at any point ends every rank with one verdict: "interrupted".
"""
from __future__ import annotations

import os
import socket
from dataclasses import replace

from mpiopt import knobs
from mpiopt.errors import MpioptError
from mpiopt.parallel.protocol import Tag
from mpiopt.run.context import Request, Started
from mpiopt.run.ending import abort, progress_line, say
from mpiopt.reporting.commands import resume_command
from mpiopt.study.opening import native_log_path


def start_rank0(world, prepare, quiet: bool, launch: str) -> Started:
    """Steps 1-3 on rank 0: the Started run once GO is out; else raises (MpioptError:
    one line, status 2, nothing written; KeyboardInterrupt: "interrupted")."""
    from mpiopt.run import startup_signals
    from mpiopt.run.signals import stop_as_ctrl_c

    multi = world.Get_size() > 1
    stop_as_ctrl_c()
    try:
        startup_signals.release()       # a Ctrl-C held since main: the verdict says it
        knobs.check_all()
        request = Request.of(prepare())
        spec, url = request.spec, request.url
        _check_start(world.Get_size(), spec, url)
        spec = _with_artifacts(spec, url)
        request = replace(request, spec=spec)
        log = use_native_log(str(native_log_path(url, spec.study.name)))
        limit = _liveness() if multi else None      # every rank's heartbeats use rank 0's
        if multi:
            _tell_every_rank(world, {"spec": spec.to_dict(), "native_log": log,
                                     "liveness": limit, "rank0": (socket.gethostname(), os.getpid()),
                                     "resume": resume_command(
                                         spec.study.name, url, launch=launch)})
    except (MpioptError, KeyboardInterrupt) as exc:
        if multi:   # (the other ranks leave signals to rank 0: they wait for its word;
            # one sent the spec already takes this as the verdict on the start-up)
            _tell_every_rank(world, {"error": str(exc) or "interrupted"})
        raise
    try:
        own, opened, flag = _start_up(world, request, multi, launch)
    except _VerdictSent:
        raise
    except KeyboardInterrupt:   # Ctrl-C while the others set up: they end on this verdict
        _send_verdict(world, multi, error="interrupted")
        raise
    _send_verdict(world, multi, keep=where_to_keep(opened))
    return Started(spec, url, opened, flag, quiet, launch=launch, objective=own[0],
                   liveness=limit)


def _tell_every_rank(world, message: dict) -> None:
    """A start-up message to every other rank, or (a Ctrl-C in the middle) still to every
    one: the signal is acted on once all are sent. Cut in two (or a signal before the
    spec went out, when that part had no handler), the ranks not yet sent to waited for
    it for ever."""
    from mpiopt.parallel.waiting import quiet_bcast
    from mpiopt.run import startup_signals

    with startup_signals.deferred():
        quiet_bcast(world, message, tag=Tag.SETUP)


def _start_up(world, request: Request, multi: bool, launch: str):
    """Rank 0's part of the start-up after the spec went out: (rank 0's own set-up, the
    opened study, the installed stop flag). A failure sends the other ranks its verdict
    and raises."""
    from mpiopt.parallel.waiting import gather_ready

    own = set_up(world, request.spec) if not multi else (None, None)
    preloading = _preload(world, request.spec) if multi else None
    errors, payloads, silent = gather_ready(world, own[1], knobs.startup_limit(),
                                            say=progress_line)
    if preloading:
        preloading.join()
    if silent:
        _end_silent_start(world, multi, silent)
    if errors:
        _send_verdict(world, multi, error=errors[0])
        more = f" (and {len(errors) - 1} more rank(s))" if len(errors) > 1 else ""
        raise MpioptError(f"start-up failed on {errors[0]}{more}")
    isolated = all(p.get("isolated") for p in payloads) if multi else own[0].isolated
    return own, *_open_with_flag(world, multi, request, isolated, launch)


def _end_silent_start(world, multi: bool, silent) -> None:
    """Ranks that did not finish setting up in time: the others get the verdict, the
    stuck ones (in an import, a data set) can only be ended by MPI_Abort."""
    try:
        _send_verdict(world, multi, error="start-up timed out")
    except _VerdictSent:
        pass                        # (the stuck ranks still need the abort below)
    say(f"start-up: rank(s) {', '.join(map(str, silent))} did not finish setting up the "
        f"objective within {knobs.startup_limit():.0f}s (set {knobs.STARTUP_TIMEOUT.env} to "
        "wait longer); nothing was written: ending the job with MPI_Abort")
    abort(world, 2)


def _open_with_flag(world, multi: bool, request: Request, isolated: bool, launch: str):
    """(the opened study, the installed stop flag), as one step: a signal in between ended
    the job with "interrupted" alone and the study created (or resumed) and RUNNING; now
    it waits for the flag, and the run ends in order, with its resume line."""
    from mpiopt.run import startup_signals
    from mpiopt.run.signals import installed_stop_flag
    from mpiopt.run.study_run import open_run

    try:
        with startup_signals.deferred():
            # (a holder of the lease on another host is watched for as long as the other
            # ranks' wait for the verdict allows: study_run.take_lease)
            opened = open_run(request.spec, request.url, request.resume, isolated,
                              request.retry_failed, request.recovery,
                              lease_wait=knobs.lease_wait_s(knobs.startup_limit()),
                              shared=request.shared, groups=_groups(world, multi, request.spec),
                              launch=launch)
            return opened, installed_stop_flag()
    except MpioptError as exc:
        _send_verdict(world, multi, error=str(exc))
        raise


def _groups(world, multi: bool, spec) -> int:
    """How many groups this job runs (as `mpiopt status` lists its jobs)."""
    if not multi:
        return 1
    return max(1, (world.Get_size() - 1) // max(1, spec.resources.group_size or 1))


class _VerdictSent(KeyboardInterrupt):
    """A Ctrl-C that came while the verdict went out: the other ranks have theirs."""


def _send_verdict(world, multi: bool, error: str | None = None, keep=None) -> None:
    """Step 3's word to every other rank (with GO, where leaders keep their results:
    `where_to_keep`). A Ctrl-C while it goes out (not after GO: the stop flag then takes
    it) is a _VerdictSent, so that no second verdict follows."""
    if multi:
        try:
            _tell_every_rank(world, {"error": error} if error else {"go": True, "keep": keep})
        except KeyboardInterrupt:
            raise _VerdictSent from None


def where_to_keep(opened) -> dict:
    """The recovery file's places and the database's key: where a leader (or this rank,
    alone) keeps the results it finished until the database has them."""
    return {"places": [str(p) for p in opened.recovery], "db_key": opened.storage.location.key}


# What rank 0 imports after the other ranks are set up (the database, the run's loop).
RUN_MODULES = ("mpiopt.run.study_run", "mpiopt.storage.resilient", "mpiopt.reporting.progress",
               "mpiopt.parallel.coordinator", "mpiopt.parallel.scheduler",
               "mpiopt.parallel.liveness", "mpiopt.search.background")


def _preload(world, spec):
    """A thread importing the searcher's modules (scikit-learn and scikit-optimize take
    seconds), paying its one-time costs (mpiopt.search.preload), and importing the run's
    modules while rank 0 waits for the other ranks to set up: the first
    trial then waits for the slower of the two, not for both in turn (figures:
    benchmarks/startup.py). Rank 0 joins it right after that wait, before it imports
    anything else (two threads importing packages that import each other can fail), and
    the join lasts no longer than the imports; a rank 0 stuck there is what the other
    ranks' start-up limit ends."""
    import importlib
    import threading

    from mpiopt.parallel.topology import check_layout
    from mpiopt.search import preload

    s = spec.search
    groups = check_layout(world.Get_size(), spec.resources.group_size).n_groups  # (checked)

    def imports() -> None:
        preload(s.algorithm, spec.space, s.trials, groups, spec.objective.vector, s.options)
        for module in RUN_MODULES:
            try:
                importlib.import_module(module)
            except Exception:        # (imported again where it is used, and raised there)
                pass

    thread = threading.Thread(target=imports, name="mpiopt-preload", daemon=True)
    thread.start()
    return thread


def _liveness() -> float | None:
    """The silence limit every rank's heartbeat uses, or None where MPI cannot send from
    a second thread (mpiopt.parallel.liveness)."""
    from mpiopt.parallel.liveness import silence_limit, threads_ok

    return silence_limit() if threads_ok() else None


def use_native_log(path: str | None) -> str | None:
    """Where this rank's native stderr goes once a framework is imported (training.frameworks)."""
    if path and not knobs.NATIVE_LOG.get():
        os.environ[knobs.NATIVE_LOG.env] = path
    return knobs.NATIVE_LOG.get()


def _check_start(world_size: int, spec, url: str) -> None:
    """Everything rank 0 can refuse without writing: layout, database URL and driver."""
    from mpiopt.parallel.topology import check_layout
    from mpiopt.storage import check_url

    check_layout(world_size, spec.resources.group_size)
    check_url(url)


def _with_artifacts(spec, url: str):
    """The artifact store of a model study, or of a function that takes `comm` (its
    checkpoints: mpiopt.objective.torch_group), resolved and checked here so that every
    rank gets the same folder with the spec, and a folder that cannot be written is
    refused before anything is written (mpiopt.artifacts). Whether a function takes
    `comm` is read from its file, unrun: rank 0 never imports the objective."""
    from mpiopt.refs import may_take

    obj = spec.objective
    if not (obj.model or (obj.function and may_take(obj.function, "comm", spec.base_dir))):
        return spec
    from mpiopt.artifacts import resolve

    return resolve(spec, url)


def set_up(world, spec):
    """(objective, None) or (None, 'rank 3 on n12: what failed'): never raises. The
    MPIOPT_* variables are this rank's own: checked here too (rank 0 checked its own)."""
    from mpiopt.objective.evaluate import Objective

    try:
        knobs.check_all()
        return Objective(spec, world.Get_rank(), socket.gethostname()), None
    except BaseException as exc:   # SystemExit at import time too
        return None, f"{where(world)}: {one_line(exc)}"


def where(world) -> str:
    return f"rank {world.Get_rank()} on {socket.gethostname()}"


def one_line(exc: BaseException) -> str:
    """An exception in one line: an MpioptError's own first line, else its type too."""
    if isinstance(exc, SystemExit):
        return f"sys.exit({exc.code!r}) during start-up"
    text = str(exc).strip().splitlines()
    return text[0] if isinstance(exc, MpioptError) and text else \
        f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
