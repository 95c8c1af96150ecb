"""Run a study on every rank: set-up on rank 0, topology, then coordinator or group.

Rank 0 validates everything (spec, process layout, database, resume rules) before any
trial is written and sends the other ranks either the resolved spec or the error, so a
bad start ends every rank with the same one-line message and exit status 2.
"""
from __future__ import annotations

import sys

from mpiopt.errors import MpioptError
from mpiopt.trial import StudyStatus
from mpiopt.parallel.protocol import Tag

EXIT_INTERRUPTED = 130


def run_study_command(prepare, quiet: bool = False) -> int:
    """prepare() -> (spec, storage_url, resume), called on rank 0 only."""
    from mpi4py import MPI

    from mpiopt.parallel.waiting import quiet_bcast

    world = MPI.COMM_WORLD
    multi = world.Get_size() > 1
    if world.Get_rank() == 0:
        try:
            spec, url, resume = prepare()
            _check_layout(world.Get_size(), spec)
            opened = _open(spec, url, resume)
        except MpioptError as exc:
            if multi:
                quiet_bcast(world, {"error": str(exc)}, tag=Tag.SETUP)
            raise
        if multi:
            quiet_bcast(world, {"spec": spec.to_dict()}, tag=Tag.SETUP)
        return _coordinate(world, spec, url, opened, quiet)
    payload = quiet_bcast(world, None, tag=Tag.SETUP)
    if "error" in payload:
        return 2
    from mpiopt.spec import Spec

    return _serve(world, Spec.from_dict(payload["spec"], source="<from rank 0>"))


def _check_layout(world_size: int, spec) -> None:
    from mpiopt.parallel.topology import check_layout

    check_layout(world_size, spec.resources.group_size)


def _open(spec, url, resume):
    from mpiopt.storage import open_storage
    from mpiopt.study import open_study

    storage = open_storage(url, create=True)
    try:
        return open_study(storage, spec, resume, url)
    except Exception:
        storage.close()
        raise


def _coordinate(world, spec, url, opened, quiet) -> int:
    from mpiopt.parallel.topology import make_topology
    from mpiopt.progress import Progress

    topo, comm = make_topology(world, spec.resources.group_size)
    hosts = _leader_hosts(world, topo)
    progress = Progress(spec.search.trials, quiet=quiet)
    sched = _scheduler(spec, opened, topo.n_groups, progress, hosts)
    _announce(progress, spec, url, topo, opened, sched)
    progress.start()
    if topo.single_process:
        from mpiopt.parallel.local import run_local

        _pin_threads(spec, comm)
        clean = run_local(sched, _objective(spec), comm)
    else:
        from mpiopt.parallel.coordinator import Coordinator, StopFlag

        flag = StopFlag()
        flag.install()
        coordinator = Coordinator(world, topo, sched, flag)
        clean = coordinator.run()
        if clean:
            coordinator.execute(sched.stop_all())
    status = sched.finish() if sched.stop_reason != "interrupted" else StudyStatus.INTERRUPTED
    progress.summary(sched, status)
    opened.storage.close()
    if sched.stop_reason == "interrupted":
        progress.say(f"resume with: mpiopt resume {spec.study.name} --storage {url}")
        if not clean:
            sys.stdout.flush()
            world.Abort(EXIT_INTERRUPTED)  # groups are mid-trial; their work is recorded as INTERRUPTED
        return EXIT_INTERRUPTED
    return 0 if status is StudyStatus.COMPLETE else 1


def _serve(world, spec) -> int:
    from mpiopt.parallel.group import run_group
    from mpiopt.parallel.topology import make_topology

    signal_ignore()
    topo, comm = make_topology(world, spec.resources.group_size)
    _leader_hosts(world, topo)
    _pin_threads(spec, comm)
    run_group(world, comm, _objective(spec))
    comm.Free()
    return 0


def signal_ignore() -> None:
    """Group ranks leave SIGINT/SIGTERM to the coordinator, which records the interruption
    and then ends the job; a rank killed first could take the coordinator down with it."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def _objective(spec):
    from mpiopt.objective import Objective

    return Objective(spec)


def _pin_threads(spec, comm) -> None:
    """Thread and GPU pinning must precede the TensorFlow import; only model objectives train."""
    if spec.objective.model:
        from mpiopt.training.threads import pin_threads

        pin_threads(comm)


def _leader_hosts(world, topo) -> list[str]:
    """The host of each group's leader, recorded with its trials (collective, at start-up)."""
    import socket

    names = world.gather(socket.gethostname(), root=0)
    if topo.single_process:
        return names
    return None if names is None else [names[topo.leader(g)] for g in range(topo.n_groups)]


def _scheduler(spec, opened, n_groups, progress, hosts):
    from mpiopt.parallel.scheduler import Scheduler
    from mpiopt.search import make_pruner, make_searcher

    s = spec.search
    return Scheduler(
        storage=opened.storage, study_id=opened.study_id,
        searcher=make_searcher(s.algorithm, spec.space, s.options, s.seed),
        direction=spec.objective.direction, budget=s.trials, n_groups=n_groups, seed=s.seed,
        pruner=make_pruner(spec.training.pruning), target=s.target, time_limit=s.time_limit,
        max_initial_failures=s.max_initial_failures, existing=opened.existing, progress=progress,
        hosts=hosts)


def _announce(progress, spec, url, topo, opened, sched) -> None:
    layout = ("single process" if topo.single_process
              else f"{topo.n_groups} group{'s' * (topo.n_groups > 1)} x {topo.group_size} "
                   f"rank{'s' * (topo.group_size > 1)} + coordinator")
    progress.say(f"study '{spec.study.name}': {spec.search.algorithm} search, "
                 f"{spec.search.trials} trials, {layout}; storage {url}")
    if opened.resumed:
        progress.say(f"resuming: {sched.finished} finished trials kept, {len(sched.reruns)} to run again")
