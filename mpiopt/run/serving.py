"""Every rank but 0: its part of the checked start-up, then serving its group's trials.

From its first line such a rank leaves stop signals to rank 0 (a rank that a Ctrl-C ended
during the start-up left rank 0 in a collective for ever; rank 0 hears the signal too and
sends its verdict). Every wait for rank 0 is bounded: the start-up's messages by twice
rank 0's own limit, the run by the heartbeats (mpiopt.parallel.liveness).
"""
from __future__ import annotations

from mpiopt import knobs
from mpiopt.parallel.protocol import Tag
from mpiopt.run.ending import EXIT_FAILED, abort, say
from mpiopt.run.signals import leave_signals_to_rank0
from mpiopt.run.startup import one_line, set_up, use_native_log, where


def serve_rank(world) -> int:
    """Steps 1-3 of the start-up on a rank other than 0, then its group's trials; the
    rank's exit status (2: the start-up failed, on this rank or another)."""
    from mpiopt.parallel.waiting import send_ready

    leave_signals_to_rank0()
    payload = _from_rank0(world, "the spec")
    if "error" in payload:
        return 2
    use_native_log(payload.get("native_log"))
    try:
        from mpiopt.spec import Spec

        spec = Spec.from_dict(payload["spec"], source="<from rank 0>")
    except BaseException as exc:
        send_ready(world, f"{where(world)}: {one_line(exc)}")
        _from_rank0(world, "its verdict")
        return 2
    objective, error = set_up(world, spec)
    send_ready(world, error, {"isolated": bool(objective and objective.isolated)})
    verdict = _from_rank0(world, "its verdict on the start-up")
    if "error" in verdict:
        return 2
    return _serve(world, spec, objective, payload, verdict)


def _startup_limit() -> float:
    """Rank 0's start-up limit as this rank reads it: a value this rank may not take is
    reported in its set-up (step 2), so here it is the default meanwhile."""
    try:
        return knobs.startup_limit()
    except knobs.KnobError:
        return knobs.STARTUP_TIMEOUT.default


def _from_rank0(world, what: str):
    """A start-up message from rank 0, before any heartbeat runs: rank 0 itself gives up
    on a rank after its start-up limit and opening the database is bounded, so a rank
    that waits twice that has lost rank 0 (stopped, or gone without the launcher
    noticing) and ends the job; rank 1 says so, the others a little later."""
    from mpiopt.parallel.waiting import quiet_bcast

    limit = knobs.rank0_silence_s(_startup_limit(), world.Get_rank())
    try:
        return quiet_bcast(world, None, tag=Tag.SETUP, limit_s=limit)
    except TimeoutError:
        say(f"{where(world)}: rank 0 sent {what} not within {limit:.0f}s of waiting "
            f"(twice {knobs.STARTUP_TIMEOUT.env}): its process died or is stuck; nothing "
            "was written: ending the job with MPI_Abort")
        abort(world, 2)


def _serve(world, spec, objective, payload: dict, verdict: dict) -> int:
    """This rank's group's trials until STOP, with heartbeats where rank 0 sent a silence
    limit (`payload`: step 1's message) and kept results where it said where (`verdict`)."""
    from mpiopt.parallel.group import run_group
    from mpiopt.parallel.topology import make_topology
    from mpiopt.kept import KeptResults
    from mpiopt.parallel.waiting import meet

    leave_signals_to_rank0()
    topo, comm = make_topology(world, spec.resources.group_size)
    leader_hosts(world, topo)
    heartbeat = _heartbeat(world, world.Dup(), payload.get("liveness"),
                           leader=comm.Get_rank() == 0, resume=payload.get("resume", ""),
                           rank0=payload.get("rank0"))
    keep = verdict.get("keep")
    try:
        pin_threads(spec, comm)
        keeper = KeptResults(**keep, rank=world.Get_rank()) if keep and comm.Get_rank() == 0 \
            else None
        status = run_group(world, comm, objective,
                           before_bye=heartbeat.stop if heartbeat else None, keeper=keeper)
    finally:
        if heartbeat:
            heartbeat.stop()
    comm.Free()
    meet(world, knobs.job_end_s(spec.storage_retry))    # (rank 0 closes the study first)
    return status


def _heartbeat(world, alive_comm, limit: float | None, leader: bool, resume: str, rank0=None):
    """This rank's beats to rank 0; a leader also ends the job when rank 0 falls silent.
    `rank0`: its (host, pid), so that a coordinator stopped before its first beat is
    known as stopped (mpiopt.parallel.liveness)."""
    if not limit:
        return None
    from mpiopt.parallel.liveness import Heartbeat, period_for

    def coordinator_silent(seconds: float) -> None:
        say(f"{where(world)}: the coordinator (rank 0) has been silent for {seconds:.0f}s "
            "(its process died or is stuck, and the launcher did not end the job): ending "
            f"the job with MPI_Abort; resume with: {resume}")
        abort(world, EXIT_FAILED)

    return Heartbeat(alive_comm, lambda: (0,), period_for(limit), limit=limit,
                     on_silent=coordinator_silent if leader else None,
                     coordinator=tuple(rank0) if rank0 else None).start()


def pin_threads(spec, comm) -> None:
    """Thread and GPU pinning must precede the TensorFlow import; only model objectives train."""
    if spec.objective.model:
        from mpiopt.training.threads import pin_threads as pin

        pin(comm)


def leader_hosts(world, topo) -> list[str]:
    """The host of each group's leader, recorded with its trials (collective, at start-up:
    every rank calls it)."""
    import socket

    names = world.gather(socket.gethostname(), root=0)
    if topo.single_process:
        return names
    return None if names is None else [names[topo.leader(g)] for g in range(topo.n_groups)]
