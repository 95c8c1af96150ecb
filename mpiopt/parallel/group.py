"""A group: its leader takes trials from the coordinator, its members train alongside.

The leader forwards each trial to its members point to point (members sleep between
probes, never spin), every rank runs the objective on the group communicator, and the
leader sends the result back. Per-epoch values go to the coordinator as REPORTs; the
coordinator's DECISION says whether to go on.
"""
from __future__ import annotations

from mpiopt.parallel.protocol import Report, Result, Tag, Trial
from mpiopt.parallel.waiting import wait_message


def run_group(world, comm, objective) -> int:
    """Serve trials until STOP. Returns the number of trials this rank took part in."""
    leader = comm.Get_rank() == 0
    served = 0
    while True:
        trial = _next_trial(world, comm, objective) if leader else wait_message(comm, 0, Tag.TRIAL)[0]
        if trial is None:
            return served
        if not leader and not objective.uses_group:
            continue
        reporter = Reporter(world, trial) if leader else None
        outcome = objective.evaluate(trial.params, trial.seed, comm, reporter)
        served += 1
        if leader:
            world.send(result_message(trial, outcome, reporter.last), dest=0, tag=Tag.RESULT)


def _next_trial(world, comm, objective) -> Trial | None:
    msg, status = wait_message(world, source=0)
    trial = msg if status.Get_tag() == Tag.TRIAL else None
    if trial is None or objective.uses_group:
        for member in range(1, comm.Get_size()):
            comm.send(trial, dest=member, tag=Tag.TRIAL)
    return trial


class Reporter:
    """report(epoch, value) -> True to go on, False when the coordinator prunes."""

    def __init__(self, world, trial: Trial):
        self.world, self.trial = world, trial
        self.last: float | None = None

    def __call__(self, epoch: int, value: float) -> bool:
        self.last = float(value)
        self.world.send(Report(self.trial.trial_id, int(epoch), self.last), dest=0, tag=Tag.REPORT)
        decision, _ = wait_message(self.world, source=0, tag=Tag.DECISION)
        return not decision.prune


def result_message(trial: Trial, outcome, last_reported: float | None) -> Result:
    value = outcome.value
    if outcome.status == "PRUNED" and value is None:
        value = last_reported
    return Result(trial_id=trial.trial_id, status=outcome.status, value=value,
                  value_std=outcome.value_std, fold_values=list(outcome.fold_values),
                  metrics=dict(outcome.metrics), duration=outcome.duration, error=outcome.error)
