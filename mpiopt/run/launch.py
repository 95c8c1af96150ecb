"""Run a study on every rank: a checked start, then coordinator or group, then one ending.

Start-up is three steps, so that an error on any rank ends every rank with one line and
status 2 and nothing is written:

1. rank 0 loads the spec and checks the layout and the database URL, and sends every rank
   the resolved spec (or the error);
2. every rank sets itself up (imports the objective) and tells rank 0 READY or its error;
3. rank 0 reports the first error, or opens the database and the study (the first write),
   and sends GO.

Then the job runs, and every ending -- done, a signal, the time limit's hard edge, a
rank's failure, the coordinator's own -- ends every rank in bounded time with one line
that says why and, where the study can go on, the exact resume command. MPI_Abort is
called only when a rank is stuck in user code and did not answer.
"""
from __future__ import annotations

import os
import socket
import sys
import time

from mpiopt.errors import LeaseLost, MpioptError, StorageUnavailable, TopologyError
from mpiopt.study.opening import (NATIVE_LOG_ENV, after_failures, native_log_path, resume_command,
                          shown_url)
from mpiopt.parallel.protocol import Tag
from mpiopt.trial import StudyStatus

EXIT_INTERRUPTED = 130
EXIT_FAILED = 1


def run_study_command(prepare, quiet: bool = False) -> int:
    """prepare() -> (spec, storage_url, resume[, options]), called on rank 0 only;
    options: {"retry_failed": bool, "recovery": [recovery files to import first]}."""
    from mpi4py import MPI

    from mpiopt.objective.processes import descendants, end_started_since, keep_nohup

    keep_nohup()
    world = MPI.COMM_WORLD
    _check_launcher(world.Get_size())
    before = descendants()           # (after MPI's start: its own helpers stay)
    try:
        if world.Get_rank() == 0:
            return _rank0(world, prepare, quiet)
        return _other_rank(world)
    finally:
        end_started_since(before)    # programs trials left running: see mpiopt.objective.processes


# The launchers' own count of the processes they started (Open MPI's mpirun; MPICH's,
# Intel MPI's and other PMI launchers)
LAUNCHER_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def _check_launcher(size: int) -> None:
    """A world of one under a launcher that started several processes: mpi4py is built
    for another MPI than the launcher's (the system's `mpirun` with the PyPI wheel's
    MPICH), and each process would run a study of its own, all but one refused by the
    study's lease with lines that do not say why. One line instead (from the launcher's
    rank 0), exit status 2, nothing written."""
    for name in LAUNCHER_SIZE_VARS:
        value = os.environ.get(name, "")
        if size == 1 and value.isdigit() and int(value) > 1:
            from mpi4py import MPI

            library = " ".join(MPI.Get_library_version().strip().splitlines()[0].split())
            raise TopologyError(
                f"started as one of {value} processes ({name}={value}), but MPI sees only "
                f"this one: mpi4py is built for another MPI than the launcher's (mpi4py's: "
                f"{library}); start the job with the mpiexec of the MPI mpi4py was built "
                f"with (the PyPI wheel's: .venv/bin/mpiexec), or build mpi4py against the "
                f"system's MPI (docs: \"Run on a cluster\")")


# ---- rank 0 -------------------------------------------------------------------------------
def _rank0(world, prepare, quiet: bool) -> int:
    from mpiopt.run import startup_signals

    multi = world.Get_size() > 1
    _stop_as_ctrl_c()
    try:
        startup_signals.release()       # a Ctrl-C held since main: the verdict says it
        spec, url, resume, *options = prepare()
        options = options[0] if options else {}
        _check_start(world.Get_size(), spec, url)
        spec = _with_artifacts(spec, url)
        log = _use_native_log(str(native_log_path(url, spec.study.name)))
        limit = _liveness() if multi else None      # every rank's heartbeats use rank 0's
        if multi:
            _tell_every_rank(world, {"spec": spec.to_dict(), "native_log": log,
                                     "liveness": limit,
                                     "resume": resume_command(spec.study.name, url)})
    except (MpioptError, KeyboardInterrupt) as exc:
        if multi:   # (the other ranks leave signals to rank 0: they wait for its word;
            # one sent the spec already takes this as the verdict on the start-up)
            _tell_every_rank(world, {"error": str(exc) or "interrupted"})
        raise
    try:
        own, opened, flag = _start_up(world, spec, url, resume, multi, options)
    except _VerdictSent:
        raise
    except KeyboardInterrupt:   # Ctrl-C while the others set up: they end on this verdict
        _send_verdict(world, multi, error="interrupted")
        raise
    _send_verdict(world, multi, keep=_where_to_keep(opened))
    return _coordinate(world, spec, url, opened, quiet, own[0], limit, flag)


def _tell_every_rank(world, message: dict) -> None:
    """A start-up message to every other rank, or (a Ctrl-C in the middle) still to every
    one: the signal is acted on once all are sent. Cut in two (or a signal before the
    spec went out, when that part had no handler), the ranks not yet sent to waited for
    it for ever (3 jobs in 340 with Ctrl-C or SIGTERM 1.0-1.8 s into a Bayesian study on 5
    ranks; 0 in 180 after)."""
    from mpiopt.run import startup_signals
    from mpiopt.parallel.waiting import quiet_bcast

    with startup_signals.deferred():
        quiet_bcast(world, message, tag=Tag.SETUP)


def _stop_as_ctrl_c() -> None:
    """Until the coordinator's own stop flag takes over, SIGTERM and SIGUSR1 (`scancel`,
    Slurm's `--signal`) end rank 0's start-up as Ctrl-C does: the other ranks get the
    verdict "interrupted" and the job ends with one line (by default they killed rank 0
    silently, exit status 15)."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, interrupt)


def _start_up(world, spec, url, resume, multi: bool, options: dict):
    """Rank 0's part of the start-up after the spec went out: (rank 0's own set-up, the
    opened study, the installed stop flag). A failure sends the other ranks its verdict
    and raises."""
    from mpiopt.run import startup_signals
    from mpiopt.parallel.waiting import gather_ready

    own = _set_up(world, spec) if not multi else (None, None)
    preloading = _preload(world, spec) if multi else None
    errors, payloads, silent = gather_ready(world, own[1], startup_limit(), say=_progress)
    if preloading:
        preloading.join()
    if silent:
        try:
            _send_verdict(world, multi, error="start-up timed out")
        except _VerdictSent:
            pass                        # (the stuck ranks still need the abort below)
        _say(f"start-up: rank(s) {', '.join(map(str, silent))} did not finish setting up the "
             f"objective within {startup_limit():.0f}s (set MPIOPT_STARTUP_TIMEOUT to wait "
             "longer); nothing was written: ending the job with MPI_Abort")
        _abort(world, 2)
    if errors:
        _send_verdict(world, multi, error=errors[0])
        more = f" (and {len(errors) - 1} more rank(s))" if len(errors) > 1 else ""
        raise MpioptError(f"start-up failed on {errors[0]}{more}")
    isolated = all(p.get("isolated") for p in payloads) if multi else own[0].isolated
    try:
        # the study opened and the stop flag in place as one step: a signal in between
        # ended the job with "interrupted" alone and the study created (or resumed) and
        # RUNNING; now it waits for the flag, and the run ends in order, with its resume line
        with startup_signals.deferred():
            opened = _open(spec, url, resume, isolated, options.get("retry_failed", False),
                           options.get("recovery", ()))
            flag = _stop_flag()
    except MpioptError as exc:
        _send_verdict(world, multi, error=str(exc))
        raise
    return own, opened, flag


class _VerdictSent(KeyboardInterrupt):
    """A Ctrl-C that came while the verdict went out: the other ranks have theirs."""


def _stop_flag():
    """The coordinator's stop flag, installed as soon as the study is open: a signal from
    here on ends the run in order, with the resume line (a Ctrl-C between the opening and
    the coordinator's start said `mpiopt: interrupted` alone and left the study RUNNING).
    In single-process mode run_local takes over from it, starting from what it noted."""
    from mpiopt.parallel.coordinator import StopFlag

    flag = StopFlag()
    flag.install()
    return flag


# What rank 0 imports after the other ranks are set up (the database, the run's loop).
_RUN_MODULES = ("mpiopt.run.study_run", "mpiopt.storage.resilient", "mpiopt.reporting.progress",
                "mpiopt.parallel.coordinator", "mpiopt.parallel.scheduler",
                "mpiopt.parallel.liveness", "mpiopt.search.background")


def _preload(world, spec):
    """A thread importing the searcher's modules (scikit-learn and scikit-optimize take
    seconds) and the run's while rank 0 waits for the other ranks to set up: the first
    trial then waits for the slower of the two, not for both in turn. Where the ranks'
    set-up takes seconds (TensorFlow, a data set), a Bayesian study's first trial came 2 s
    sooner (7.1 against 5.1 s, 3 ranks on 2 cores, one rank's set-up 3 s); with ranks that
    are ready at once there is nothing to overlap. Rank 0 joins it right after that wait,
    before it imports anything else (two threads importing packages that import each
    other can fail), and the join lasts no longer than the imports; a rank 0 stuck there
    is what the other ranks' start-up limit ends."""
    import importlib
    import threading

    from mpiopt.parallel.topology import check_layout
    from mpiopt.search import preload

    s = spec.search
    groups = check_layout(world.Get_size(), spec.resources.group_size).n_groups  # (checked)

    def imports() -> None:
        preload(s.algorithm, spec.space, s.trials, groups, spec.objective.vector)
        for module in _RUN_MODULES:
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


def _use_native_log(path: str | None) -> str | None:
    """Where this rank's native stderr goes once TensorFlow is imported (training.backend)."""
    if path and NATIVE_LOG_ENV not in os.environ:
        os.environ[NATIVE_LOG_ENV] = path
    return os.environ.get(NATIVE_LOG_ENV)


def startup_limit() -> float:
    """Seconds rank 0 waits for every rank to set up its objective (imports, data, model
    module): MPIOPT_STARTUP_TIMEOUT, default 10 minutes (TensorFlow on a busy shared file
    system can take minutes; a rank stuck in an import must not hold the allocation)."""
    import os

    try:
        return max(1.0, float(os.environ.get("MPIOPT_STARTUP_TIMEOUT", "600")))
    except ValueError:
        return 600.0


def _say(line: str) -> None:
    """The one closing line (stderr; where that is closed too, the exit status says it)."""
    try:
        print(f"mpiopt: {line}", file=sys.stderr, flush=True)
    except OSError:
        pass


def _progress(line: str) -> None:
    print(line, flush=True)


def _check_start(world_size: int, spec, url: str) -> None:
    """Everything rank 0 can refuse without writing: layout, database URL and driver."""
    from mpiopt.parallel.topology import check_layout

    check_layout(world_size, spec.resources.group_size)
    try:
        from mpiopt.storage import check_url
    except ImportError:          # older storage layer: opening will say it
        return
    check_url(url)


def _with_artifacts(spec, url: str):
    """A Keras study's artifact store, resolved and checked here so that every rank gets
    the same folder with the spec, and a folder that cannot be written is refused
    before anything is written (mpiopt.artifacts)."""
    if not spec.objective.model:
        return spec
    from mpiopt.artifacts import resolve

    return resolve(spec, url)


def _send_verdict(world, multi: bool, error: str | None = None, keep=None) -> None:
    """Step 3's word to every other rank (with GO, where leaders keep their results:
    `_where_to_keep`). A Ctrl-C while it goes out (not after GO: the stop flag then takes
    it) is a _VerdictSent, so that no second verdict follows."""
    if multi:
        try:
            _tell_every_rank(world, {"error": error} if error else {"go": True, "keep": keep})
        except KeyboardInterrupt:
            raise _VerdictSent from None


def _where_to_keep(opened) -> dict:
    """The recovery file's places and the database's key: where a leader (or this rank,
    alone) keeps the results it finished until the database has them."""
    from mpiopt.storage.resilient import key_of

    return {"places": [str(p) for p in opened.recovery], "db_key": key_of(opened.storage)}


def _open(spec, url, resume, isolated: bool, retry_failed: bool = False, recovery=()):
    """The study opened; a holder of its lease on another host is watched for as long as
    the other ranks wait for the start-up's verdict allows (see study_run.take_lease)."""
    from mpiopt.run.study_run import open_run

    return open_run(spec, url, resume, isolated, retry_failed, recovery,
                    lease_wait=startup_limit() / 2)


# ---- every other rank ---------------------------------------------------------------------
def _other_rank(world) -> int:
    from mpiopt.parallel.waiting import send_ready

    # From the start, not only once serving: a rank that a Ctrl-C ended during the
    # start-up left rank 0 in a collective for ever (measured: 10 min and counting, at
    # 100% CPU); rank 0 hears the signal too and sends its verdict.
    signal_ignore()
    payload = _from_rank0(world, "the spec")
    if "error" in payload:
        return 2
    _use_native_log(payload.get("native_log"))
    try:
        from mpiopt.spec import Spec

        spec = Spec.from_dict(payload["spec"], source="<from rank 0>")
    except BaseException as exc:
        send_ready(world, f"{_where(world)}: {_one_line(exc)}")
        _from_rank0(world, "its verdict")
        return 2
    objective, error = _set_up(world, spec)
    send_ready(world, error, {"isolated": bool(objective and objective.isolated)})
    verdict = _from_rank0(world, "its verdict on the start-up")
    if "error" in verdict:
        return 2
    return _serve(world, spec, objective, payload.get("liveness"), payload.get("resume", ""),
                  verdict.get("keep"))


def _from_rank0(world, what: str):
    """A start-up message from rank 0, before any heartbeat runs: rank 0 itself gives up
    on a rank after startup_limit() and opening the database is bounded, so a rank that
    waits twice that has lost rank 0 (stopped, or gone without the launcher noticing) and
    ends the job; rank 1 says so, the others a little later if rank 1 is gone too."""
    from mpiopt.parallel.waiting import quiet_bcast

    limit = 2 * startup_limit() + (0 if world.Get_rank() == 1 else 10)
    try:
        return quiet_bcast(world, None, tag=Tag.SETUP, limit_s=limit)
    except TimeoutError:
        _say(f"{_where(world)}: rank 0 sent {what} not within {limit:.0f}s of waiting "
             "(twice MPIOPT_STARTUP_TIMEOUT): its process died or is stuck; nothing was "
             "written: ending the job with MPI_Abort")
        _abort(world, 2)


def _set_up(world, spec):
    """(objective, None) or (None, 'rank 3 on n12: what failed'): never raises."""
    from mpiopt.objective.evaluate import Objective

    try:
        return Objective(spec, world.Get_rank(), socket.gethostname()), None
    except BaseException as exc:   # SystemExit at import time too
        return None, f"{_where(world)}: {_one_line(exc)}"


def _serve(world, spec, objective, limit: float | None, resume: str, keep=None) -> int:
    from mpiopt.study.kept import KeptResults
    from mpiopt.parallel.group import run_group
    from mpiopt.parallel.topology import make_topology

    signal_ignore()
    topo, comm = make_topology(world, spec.resources.group_size)
    _leader_hosts(world, topo)
    heartbeat = _heartbeat(world, world.Dup(), limit, leader=comm.Get_rank() == 0,
                           resume=resume)
    try:
        _pin_threads(spec, comm)
        keeper = KeptResults(**keep, rank=world.Get_rank()) if keep and comm.Get_rank() == 0 \
            else None
        status = run_group(world, comm, objective, before_bye=heartbeat.stop if heartbeat else None,
                           keeper=keeper)
    finally:
        if heartbeat:
            heartbeat.stop()
    comm.Free()
    return status


def _heartbeat(world, alive_comm, limit: float | None, leader: bool, resume: str):
    """This rank's beats to rank 0; a leader also ends the job when rank 0 falls silent."""
    if not limit:
        return None
    from mpiopt.parallel.liveness import Heartbeat, period_for

    def coordinator_silent(seconds: float) -> None:
        _say(f"{_where(world)}: the coordinator (rank 0) has been silent for {seconds:.0f}s "
             "(its process died or is stuck, and the launcher did not end the job): ending "
             f"the job with MPI_Abort; resume with: {resume}")
        _abort(world, EXIT_FAILED)

    return Heartbeat(alive_comm, lambda: (0,), period_for(limit), limit=limit,
                     on_silent=coordinator_silent if leader else None).start()


def signal_ignore() -> None:
    """Group ranks leave SIGINT/SIGTERM/SIGUSR1 to the coordinator, which cancels their
    trials and ends the job in order; a rank killed first could take the coordinator down
    with it (Slurm's --signal reaches every task of the step, not only rank 0)."""
    from mpiopt.run import startup_signals
    from mpiopt.objective.processes import STOP_SIGNALS, ignore, note_signals

    ignore(STOP_SIGNALS)                # (not in trials' programs)
    note_signals()                      # (a trial's own handler may act on them: objective)
    startup_signals.forget()            # (one held since main: rank 0 heard it too)


# ---- the coordinator's run and ending -----------------------------------------------------
def _coordinate(world, spec, url, opened, quiet, objective, limit, flag) -> int:
    from mpiopt.parallel.topology import make_topology

    topo, comm = make_topology(world, spec.resources.group_size)
    hosts = _leader_hosts(world, topo)
    watch = None if topo.single_process else _watch(world, world.Dup(), topo, limit)
    try:
        return _coordinate_with(world, spec, url, opened, quiet, objective, topo, comm, hosts,
                                watch, flag)
    finally:
        if watch:
            watch.stop()


def _watch(world, alive_comm, topo, limit: float | None):
    """Rank 0's heartbeats and its view of every rank's (mpiopt.parallel.liveness)."""
    if not limit:
        return None
    from mpiopt.parallel.liveness import Watch

    leaders = [topo.leader(g) for g in range(topo.n_groups)]
    return Watch(alive_comm, leaders, world.Get_size(), limit).start()


def _coordinate_with(world, spec, url, opened, quiet, objective, topo, comm, hosts, watch,
                     flag) -> int:
    from mpiopt.reporting.progress import Progress

    from mpiopt.parallel.coordinator import Coordinator
    from mpiopt.parallel.scheduler import Executor
    from mpiopt.storage.resilient import Resilient

    progress = Progress(spec.search.trials, quiet=quiet)
    ranks = [0] if topo.single_process else [topo.leader(g) for g in range(topo.n_groups)]
    storage = Resilient(opened.storage, spec.storage_retry, opened.recovery, say=_progress,
                        study_id=opened.study_id)
    artifacts = _keeper(spec)
    sched = _scheduler(spec, opened, topo.n_groups, hosts, ranks, artifacts,
                       multi=not topo.single_process)
    executor = Executor(storage, lambda action: None, progress, artifacts, view=sched,
                        holding=storage.holding)
    if artifacts is not None:        # what a job that died mid-way left behind
        executor.do(sched.settled_on_resume(opened.existing))
    # A job that is ending (a signal, a failed rank) does not wait out an outage: what
    # cannot be written goes to the recovery file at once.
    storage.should_stop = lambda: flag.is_set() or sched.stop_reason in ("interrupted", "error")
    _announce(progress, spec, url, topo, opened, sched)
    progress.start()
    if topo.single_process:
        return _run_single(spec, url, opened, sched, executor, progress, comm, objective, flag)
    ending = Coordinator(world, topo, sched, storage, progress, artifacts, flag,
                         on_tick=opened.on_tick, watch=watch).run()
    stuck = "" if ending.orderly else (f" (rank(s) {', '.join(map(str, ending.stuck))} did not "
                                       "stop: ending the job with MPI_Abort)")
    code = _close(spec, url, opened, sched, executor, progress, ending.cause, ending.interrupted,
                  stuck)
    if not ending.orderly:
        _abort(world, code)
    return code


def _abort(world, code: int) -> None:
    """MPI_Abort after the closing line is out: the abort tears the launcher's I/O
    forwarding down at once, so the line gets a moment first (measured lost under MPICH
    on a loaded machine). Never returns."""
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(1.0)
    world.Abort(code)
    raise SystemExit(code)


def _run_single(spec, url, opened, sched, executor, progress, comm, objective, flag) -> int:
    from mpiopt.study.kept import KeptResults
    from mpiopt.parallel.local import run_local

    _pin_threads(spec, comm)
    try:
        def give_up(cause, interrupted):     # (a trial stuck in this process: local._Watch)
            return _close(spec, url, opened, sched, executor, progress, cause, interrupted)

        keeper = KeptResults(**_where_to_keep(opened), rank=0)
        clean = run_local(sched, executor, objective, comm, stopped=flag.is_set,
                          give_up=give_up, told=flag.set, keeper=keeper)
        if getattr(executor.storage, "given_up", None) is None:
            keeper.discard()              # (every result written: see coordinator's STOP)
    except Exception as exc:     # as the coordinator's (an outage past retry_timeout, a
        # study deleted under the job): a closing line with the resume, not "error:", exit 2
        closed = _output_closed(exc)
        cause = str(exc) if isinstance(exc, (StorageUnavailable, LeaseLost)) else (
            closed or f"the study's loop failed ({socket.gethostname()}): {type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
        sched.stop("interrupted" if closed else "error", cause)
        try:         # (also with nothing running: the study's record says INTERRUPTED)
            executor.run(sched.interrupt())
        except Exception:
            pass          # the database is the cause; resume finds the trial RUNNING
        return _close(spec, url, opened, sched, executor, progress, cause, True)
    return _close(spec, url, opened, sched, executor, progress,
                  None if clean else sched.message, not clean)


def _output_closed(exc: BaseException) -> str | None:
    """The cause to print when the progress could not be written: the reader of a pipe
    went away (`mpiopt search spec.yaml | head`: a broken pipe) or the terminal hung up (an
    I/O error). The output goes to /dev/null from here on, so that the closing (the study's
    end recorded, its lease given back) is not cut short by the next line it writes; the
    closing line still goes to stderr where that works. As a stop signal: the consumer is
    gone, so the study stops (`mpiexec` itself dies of the broken pipe, see README)."""
    import errno

    if not (isinstance(exc, OSError) and exc.errno in (errno.EPIPE, errno.EIO)):
        return None                  # (the objective's and the database's are caught before)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return (f"the output was closed ({type(exc).__name__}: {exc.strerror}): the study stopped "
            "as for a stop signal, running trials recorded INTERRUPTED")


def _close(spec, url, opened, sched, executor, progress, cause, interrupted,
           stuck: str = "") -> int:
    """Record the study's end, print the summary and the one closing line; the exit code."""
    try:
        status = StudyStatus.INTERRUPTED if interrupted else executor.run(sched.finish())
    except Exception as exc:
        status, cause = StudyStatus.INTERRUPTED, cause or f"could not record the study's end: {exc}"
    sched.close_searcher()
    try:
        progress.summary(sched, status)
    except OSError as exc:      # (the output closed during the summary: as in _run_single)
        _output_closed(exc)
    taken = opened.taken_away(spec.study.name) if status is not StudyStatus.COMPLETE else None
    lost = opened.lost          # (another job runs the study now: no resume line)
    getattr(executor.storage, "discard_written_ahead", lambda: None)()
    opened.close()
    if status is StudyStatus.COMPLETE or (status is StudyStatus.FAILED and not cause):
        if status is StudyStatus.FAILED and sched.stop_reason == "failures":
            # (the cause is outside the parameters: a broken objective, a data file; the
            # failed trials run again only when asked, so say how)
            _say(f"{sched.message}; "
                 f"{after_failures(spec.study.name, url, spec.search.algorithm)}")
        return 0 if status is StudyStatus.COMPLETE else EXIT_FAILED
    if taken and taken[0] == "deleted":
        _say(f"study '{spec.study.name}' was deleted from {shown_url(url)} while this "
             "job ran it (mpiopt study delete --force): nothing is left to resume")
        return EXIT_FAILED
    if lost:
        _say(lost)
        return EXIT_FAILED
    kept = getattr(executor.storage, "kept_in", lambda: None)()
    unkept = getattr(executor.storage, "unkept_note", lambda: "")()
    resume = resume_command(taken[1] if taken else spec.study.name, url, kept)
    _say(f"{cause or sched.message or 'stopped'}{unkept}; resume with: {resume}{stuck}")
    return EXIT_INTERRUPTED if sched.stop_reason == "interrupted" else EXIT_FAILED


# ---- shared helpers -------------------------------------------------------------------------
def _where(world) -> str:
    return f"rank {world.Get_rank()} on {socket.gethostname()}"


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"sys.exit({exc.code!r}) during start-up"
    text = str(exc).strip().splitlines()
    return text[0] if isinstance(exc, MpioptError) and text else \
        f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _pin_threads(spec, comm) -> None:
    """Thread and GPU pinning must precede the TensorFlow import; only model objectives train."""
    if spec.objective.model:
        from mpiopt.training.threads import pin_threads

        pin_threads(comm)


def _leader_hosts(world, topo) -> list[str]:
    """The host of each group's leader, recorded with its trials (collective, at start-up)."""
    names = world.gather(socket.gethostname(), root=0)
    if topo.single_process:
        return names
    return None if names is None else [names[topo.leader(g)] for g in range(topo.n_groups)]


def _scheduler(spec, opened, n_groups, hosts, ranks, artifacts, multi: bool):
    """The study's scheduler. Under MPI (`multi`), a finished group gets its next trial
    before its result is written and busy groups hold their next trial (send_first,
    ask_ahead), except where trials run in the ranks' own processes (one that kills its
    process ends the job: parallel/coordinator.py); a slow searcher works in the
    background, and then asks nothing ahead (its suggestions would be made with one more
    pending point per group, which costs them quality)."""
    from mpiopt.parallel.scheduler import Scheduler
    from mpiopt.search import make_searcher, make_pruner

    s = spec.search
    searcher = make_searcher(s.algorithm, spec.space, s.options, s.seed, budget=s.trials,
                             parallel=n_groups, vector=spec.objective.vector)
    background = multi and searcher.slow
    if background:                        # no group waits for a model fit (see there)
        from mpiopt.search.background import MIN_FILL_WAIT_S, BackgroundSearcher

        searcher = BackgroundSearcher(    # (with a time limit, a wait's every second counts)
            searcher, max_stock=n_groups, min_fill_wait_s=0.0 if s.time_limit else MIN_FILL_WAIT_S)
    send_first = multi and opened.isolated
    return Scheduler(
        refit_wanted=artifacts is not None and artifacts.refit_wanted(),
        checkpoints=artifacts is not None and artifacts.checkpoints,
        send_first=send_first, ask_ahead=send_first and not background,
        study_id=opened.study_id, searcher=searcher,
        direction=spec.objective.direction, budget=s.trials, n_groups=n_groups, seed=s.seed,
        pruner=make_pruner(spec.training.pruning), target=s.target, time_limit=s.time_limit,
        max_initial_failures=s.max_initial_failures,
        max_failures_in_a_row=s.max_failures_in_a_row, existing=opened.existing,
        hosts=hosts, ranks=ranks, trial_timeout=getattr(s, "trial_timeout", None),
        grace=getattr(s, "grace", 300.0), stuck_grace=stuck_grace(getattr(s, "trial_timeout", None)),
        objective=spec.objective, warm=getattr(opened, "warm", ()))


def _keeper(spec):
    """The coordinator's side of the artifact store: ranks kept models, removes the
    checkpoints of finished trials (None for plain-function studies)."""
    if not spec.artifacts:
        return None
    from mpiopt.artifacts.keeper import Keeper

    return Keeper(spec.artifacts, spec.search.keep_models, spec.objective.direction,
                  say=_progress, checkpoints=spec.training.checkpoint_every > 0,
                  refit=spec.training.refit)


def stuck_grace(timeout: float | None) -> float:
    """How long past its timeout a trial that did not stop may hold its group before the
    job ends: as long as the timeout, within 5 s .. 1 min (a Keras trial stops at its next
    epoch; a plain function in a sandbox is killed at once and never gets here)."""
    return 60.0 if not timeout else min(60.0, max(5.0, timeout))


def _announce(progress, spec, url, topo, opened, sched) -> None:
    layout = ("single process" if topo.single_process
              else f"{topo.n_groups} group{'s' * (topo.n_groups > 1)} x {topo.group_size} "
                   f"rank{'s' * (topo.group_size > 1)} + coordinator")
    shown = shown_url(url)
    progress.say(f"study '{spec.study.name}': {spec.search.algorithm} search, "
                 f"{spec.search.trials} trials, {layout}; storage {shown}")
    choice = sched.searcher.choice
    if choice:
        progress.say(choice)
    finite = sched.untried
    if finite is not None and finite.size < spec.search.trials:
        progress.say(f"the search space has {finite.size} parameter sets, fewer than "
                     f"search.trials ({spec.search.trials}): each runs once, then the study ends")
    if opened.resumed:
        progress.say(f"resuming: {sched.finished} finished trials kept, {len(sched.reruns)} to run again")
    for line in getattr(opened, "notes", ()):
        progress.say(line)
    if spec.objective.model and os.environ.get(NATIVE_LOG_ENV):
        progress.say(f"TensorFlow's start-up messages go to {os.environ[NATIVE_LOG_ENV]}")
