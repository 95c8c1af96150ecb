"""Rank 0 after GO: the run set up (layout, storage, scheduler, progress) and run, under
MPI by the coordinator's loop or in this one process by the local loop, then closed.

The scheduler, its executor and the coordinator are used here through a small surface:
Scheduler(...) with the keywords _scheduler passes, settled_on_resume(existing), the
events Stop, Interrupt and Finish (handed over by the executor's run), stop_reason,
message, searcher (.choice), untried, finished, reruns, and what Progress reads;
Executor(storage, send, progress, artifacts, machine=, searcher=, holding=, shared=) with
do(), run(*events) and close_searcher(); Coordinator(world, topo, sched, storage, executor,
stop_flag, on_tick=, watch=).run() -> Ending(cause, interrupted, orderly, stuck); and
run_local(sched, executor, objective, comm, stopped=, give_up=, told=, keeper=) -> clean.
A job that cannot end in order (a rank stuck in user code) is ended with MPI_Abort after
its closing line.
"""
from __future__ import annotations

import socket

from mpiopt.errors import LeaseLost, StorageUnavailable
from mpiopt.knobs import NATIVE_LOG, stuck_grace_s
from mpiopt.run.context import RunContext, Started
from mpiopt.run.ending import abort, close, output_closed, progress_line
from mpiopt.run.serving import leader_hosts, pin_threads
from mpiopt.run.startup import where_to_keep
from mpiopt.reporting.commands import shown_url


def coordinate(world, started: Started) -> int:
    """The run on rank 0, from its layout to its exit status."""
    from mpiopt.parallel.topology import make_topology

    topo, comm = make_topology(world, started.spec.resources.group_size)
    hosts = leader_hosts(world, topo)
    watch = None if topo.single_process else _watch(world, world.Dup(), topo, started.liveness)
    try:
        run = _set_up_run(world, started, topo, comm, hosts, watch)
        freeze_start_up_heap()
        run.progress.start()
        if topo.single_process:
            return _run_single(run)
        return _run_coordinator(run)
    finally:
        thaw_heap()
        if watch:
            watch.stop()


def freeze_start_up_heap() -> None:
    """Leave what the start-up built (the modules of numpy, scipy, scikit-learn,
    SQLAlchemy and ours: hundreds of thousands of objects) out of every later garbage
    collection (gc.freeze): it lives as long as the run. Otherwise the first full
    collection comes at the first results, when the heap has just grown by them, and
    scans it all (about a tenth of a second: benchmarks/results/simulate.md) while every
    group that finished waits for the coordinator and the searcher."""
    import gc

    gc.freeze()


def thaw_heap() -> None:
    """The frozen objects back under collection when the run ends: the process may go on
    (a caller of the CLI's main, a test), and its garbage among them is then collected."""
    import gc

    gc.unfreeze()


def _watch(world, alive_comm, topo, limit: float | None):
    """Rank 0's heartbeats and its view of every rank's (mpiopt.parallel.liveness)."""
    if not limit:
        return None
    from mpiopt.parallel.liveness import Watch

    leaders = [topo.leader(g) for g in range(topo.n_groups)]
    return Watch(alive_comm, leaders, world.Get_size(), limit).start()


def _set_up_run(world, started: Started, topo, comm, hosts, watch) -> RunContext:
    """The run's storage (riding out outages), scheduler and progress, announced."""
    from mpiopt.parallel.scheduler import Executor
    from mpiopt.reporting.progress import Progress
    from mpiopt.storage.resilient import Resilient

    spec, opened, flag = started.spec, started.opened, started.flag
    progress = Progress(spec.search.trials, quiet=started.quiet,
                        folds=trial_folds(spec, topo)[0])
    storage = Resilient(opened.storage, spec.storage_retry, opened.recovery, say=progress_line,
                        study_id=opened.study_id)
    artifacts = _keeper(spec)
    sched = _scheduler(started, topo, hosts, artifacts)
    # One executor for the run (messages to groups: the coordinator's loop sets `send`)
    executor = Executor(storage, lambda action: None, progress, artifacts, machine=sched,
                        searcher=sched.searcher,
                        holding=storage.holding,
                        shared=opened.shared)
    if artifacts is not None:        # what a job that died mid-way left behind
        executor.do(sched.settled_on_resume(opened.existing))
    # A job that is ending (a signal, a failed rank) does not wait out an outage: what
    # cannot be written goes to the recovery file at once.
    storage.should_stop = lambda: flag.is_set() or sched.stop_reason in ("interrupted", "error")
    run = RunContext(world, started, topo, comm, hosts, progress, sched, executor, storage,
                     artifacts, watch)
    _announce(run)
    return run


def _run_coordinator(run: RunContext) -> int:
    """The coordinator's loop over the groups, then the closing; MPI_Abort where a rank
    never said BYE (stuck in user code)."""
    from mpiopt.knobs import WIND_DOWN_S
    from mpiopt.parallel.coordinator import Coordinator
    from mpiopt.parallel.waiting import meet

    ending = Coordinator(run.world, run.topo, run.sched, run.storage, run.executor,
                         run.flag, on_tick=run.opened.on_tick, watch=run.watch).run()
    stuck = "" if ending.orderly else (f" (rank(s) {', '.join(map(str, ending.stuck))} did not "
                                       "stop: ending the job with MPI_Abort)")
    try:
        code = close(run, ending.cause, ending.interrupted, stuck)
    finally:
        if ending.orderly:
            # Every other rank waits here for the closing (knobs.job_end_s), so that no
            # rank's exit, bounded on its own, has waited in MPI_Finalize all that time.
            meet(run.world, WIND_DOWN_S)
    if not ending.orderly:
        abort(run.world, code)
    return code


def _run_single(run: RunContext) -> int:
    """Single-process mode: the local loop runs the trials here, then the closing."""
    from mpiopt.parallel.local import run_local
    from mpiopt.kept import KeptResults

    sched = run.sched
    pin_threads(run.spec, run.comm)
    try:
        def give_up(cause, interrupted):     # (a trial stuck in this process: local._Watch)
            return close(run, cause, interrupted)

        keeper = KeptResults(**where_to_keep(run.opened), rank=0)
        clean = run_local(sched, run.executor, run.started.objective, run.comm,
                          stopped=run.flag.is_set, give_up=give_up, told=run.flag.set,
                          keeper=keeper)
        if run.storage.given_up is None:     # (the run's storage is a Resilient)
            keeper.discard()              # (every result written: see coordinator's STOP)
    except Exception as exc:
        return _close_failed_loop(run, exc)
    return close(run, None if clean else sched.message, not clean)


def _close_failed_loop(run: RunContext, exc: Exception) -> int:
    """As the coordinator's own failure (an outage past retry_timeout, a study deleted
    under the job): a closing line with the resume, not "error:", and the running trials
    recorded INTERRUPTED where the database lets them be."""
    from mpiopt.parallel.scheduler import events

    closed = output_closed(exc)
    cause = str(exc) if isinstance(exc, (StorageUnavailable, LeaseLost)) else (
        closed or f"the study's loop failed ({socket.gethostname()}): {type(exc).__name__}: "
        f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
    try:             # (also with nothing running: the study's record says INTERRUPTED)
        run.executor.run(events.Stop("interrupted" if closed else "error", cause),
                         events.Interrupt())
    except Exception:
        pass          # the database is the cause; resume finds the trial RUNNING
    return close(run, cause, True)


def _scheduler(started: Started, topo, hosts, artifacts):
    """The study's scheduler. Under MPI, a finished group gets its next trial before its
    result is written and busy groups hold their next trial (send_first, ask_ahead),
    except where trials run in the ranks' own processes (one that kills its process ends
    the job: parallel/coordinator.py); a slow searcher works in the background, and then
    asks nothing ahead (its suggestions would be made with one more pending point per
    group, which costs them quality)."""
    from mpiopt.parallel.scheduler import Scheduler
    from mpiopt.parallel.scheduler.shared import Shared
    from mpiopt.search import make_pruner, make_searcher

    spec, opened, n_groups = started.spec, started.opened, topo.n_groups
    multi = not topo.single_process
    ranks = [topo.leader(g) for g in range(n_groups)] if multi else [0]
    s = spec.search
    searcher = make_searcher(s.algorithm, spec.space, s.options, opened.searcher_seed(s.seed),
                             budget=s.trials,
                             parallel=n_groups, vector=spec.objective.vector)
    background = multi and searcher.slow
    if background:                        # no group waits for a model fit (see there)
        from mpiopt.search.background import MIN_FILL_WAIT_S, BackgroundSearcher

        searcher = BackgroundSearcher(    # (with a time limit, a wait's every second counts)
            searcher, max_stock=n_groups,
            min_fill_wait_s=0.0 if s.time_limit else MIN_FILL_WAIT_S)
    send_first = multi and opened.isolated
    folds, side_by_side = trial_folds(spec, topo)
    return Scheduler(
        refit_wanted=artifacts is not None and artifacts.refit_wanted(),
        checkpoints=artifacts is not None and artifacts.checkpoints,
        send_first=send_first, ask_ahead=send_first and not background,
        study_id=opened.study_id, searcher=searcher,
        direction=spec.objective.direction, budget=s.trials, n_groups=n_groups, seed=s.seed,
        pruner=make_pruner(spec.training.pruning, side_by_side, folds),
        folds=folds, target=s.target,
        time_limit=opened.shared_for(s.time_limit),
        shared=Shared(opened.job.id) if opened.shared else None,
        max_initial_failures=s.max_initial_failures,
        max_failures_in_a_row=s.max_failures_in_a_row, existing=opened.existing,
        hosts=hosts, ranks=ranks, trial_timeout=s.trial_timeout, grace=s.grace,
        stuck_grace=stuck_grace_s(s.trial_timeout), objective=spec.objective,
        warm=getattr(opened, "warm", ()))


def trial_folds(spec, topo) -> tuple[int, bool]:
    """A trial's folds, and whether they train side by side on its group (a model
    objective's; a function objective's reports are all fold 0's)."""
    if not spec.objective.model:
        return 1, False
    from mpiopt.training.folds import fold_plan

    plan = fold_plan(spec.training.kfold, 1 if topo.single_process else topo.group_size)
    return plan.k, plan.concurrent


def _keeper(spec):
    """The coordinator's side of the artifact store: ranks kept models, removes the
    checkpoints of finished trials (None for plain-function studies)."""
    if not spec.artifacts:
        return None
    from mpiopt.artifacts.keeper import Keeper

    return Keeper(spec.artifacts, spec.search.keep_models, spec.objective.direction,
                  say=progress_line, checkpoints=spec.training.checkpoint_every > 0,
                  refit=spec.training.refit)


def _data_lines(spec) -> list[str]:
    """The events the study trains on, before and after its selection (files that became
    unreadable since the spec was checked fail the trials, which say so)."""
    from mpiopt.errors import DataError
    from mpiopt.training.data import describe

    if spec.objective.data is None:
        return []
    try:
        return describe(spec.objective.data, spec.base_dir)
    except DataError:
        return []


def _announce(run: RunContext) -> None:
    """The run's first lines: what is searched, on what layout, into which database."""
    spec, topo, sched, progress = run.spec, run.topo, run.sched, run.progress
    layout = ("single process" if topo.single_process
              else f"{topo.n_groups} group{'s' * (topo.n_groups > 1)} x {topo.group_size} "
                   f"rank{'s' * (topo.group_size > 1)} + coordinator")
    progress.say(f"study '{spec.study.name}': {spec.search.algorithm} search, "
                 f"{spec.search.trials} trials, {layout}; storage {shown_url(run.url)}")
    choice = sched.searcher.choice
    if choice:
        progress.say(choice)
    finite = sched.untried
    if finite is not None and finite.size < spec.search.trials:
        progress.say(f"the search space has {finite.size} parameter sets, fewer than "
                     f"search.trials ({spec.search.trials}): each runs once, then the study ends")
    if run.opened.resumed:
        progress.say(f"resuming: {sched.finished} finished trials kept, "
                     f"{len(sched.reruns)} to run again")
    for line in getattr(run.opened, "notes", ()):
        progress.say(line)
    for line in _data_lines(spec):
        progress.say(line)
    if spec.objective.model and NATIVE_LOG.get():
        progress.say(f"the framework's native start-up messages go to {NATIVE_LOG.get()}")
