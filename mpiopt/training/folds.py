"""Run the K folds of one trial, one after another or side by side, and report each epoch.

The rule for concurrent folds: with kfold = K > 1 and a communicator of r ranks, the folds
run concurrently when r >= K and r % K == 0, each fold on its own sub-communicator of r / K
ranks (ranks [f*r/K, (f+1)*r/K) train fold f); otherwise they run one after another, each on
all r ranks. (So 6 ranks with K = 3 give 3 folds of 2 ranks at once; 4 ranks with K = 3
run the folds in turn on 4 ranks.) Both give the same figure of merit for the same seed up
to float rounding: the folds, their shuffles and the initial weights depend only on the seed.

What is reported after each epoch (for pruning, and as the trial's learning curve): each
fold's figure of merit after each of its epochs, as (fold, epoch, value), epochs counted
from 1 in every fold. So (fold, epoch) means the same point in every trial of the study
(also when training.epochs is searched), and a pruner compares like with like; folds side
by side report each fold in turn after an epoch they all trained.
Only rank 0 of the communicator calls report; its decision is broadcast, and on "prune"
(or a deadline, or a cancel) every rank raises at the same point, so no rank is left
inside a collective. A prune that comes with the trial's last report is no prune: the
trial has trained everything, and its result is a finished one. A pruned trial's value is
its figure of merit over what it trained (each fold's best epoch so far, the mean over
its folds): what a finished trial's value means, over fewer epochs.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mpiopt.training import resume
from mpiopt.trial import Step
from mpiopt.training.chunks import chunks_suffice
from mpiopt.training.kfold import (chunk_holdout_split, chunk_kfold_splits, group_holdout_split,
                                   group_kfold_splits, holdout_split, kfold_splits)
from mpiopt.training.stream import take
from mpiopt.training.weights import Weighted, weighted


@dataclass
class Splits:
    """Index splits of the data: K folds, a holdout, or the data's own validation set."""

    k: int
    pairs: Sequence | None  # (train indices, validation indices) per fold; None: the given val set

    def arrays(self, data, fold: int):
        """(x, y, x_val, y_val) of a fold; y holds the event weights with the labels
        where the data has them (mpiopt.training.weights)."""
        if self.pairs is None:
            return data.x, data.targets, data.x_val, weighted(data.y_val, data.w_val)
        train, val = self.pairs[fold]
        # Views, in memory too: a fold's samples are gathered batch by batch, not copied

        def targets(idx):
            y = take(data.y, idx)
            return y if data.w is None else Weighted(y, take(data.w, idx))

        return take(data.x, train), targets(train), take(data.x, val), targets(val)


def make_splits(data, training, seed: int) -> Splits:
    """kfold K > 1: K folds of the training data (a separate validation set is not used);
    kfold 1: the data's validation set if it has one, else a holdout fraction. With
    data.split_by: file (data.groups) the folds and the holdout are made of whole files;
    with data.chunks (split_by: auto over files read by chunk), of whole chunks while
    they suffice (mpiopt.training.chunks)."""
    if data.groups is not None and not (training.kfold == 1 and data.has_validation):
        if training.kfold > 1:
            return Splits(training.kfold, group_kfold_splits(data.groups, training.kfold, seed))
        return Splits(1, [group_holdout_split(data.groups, training.holdout, seed)])
    if chunks_suffice(data.chunks, training.kfold, training.holdout) and not (
            training.kfold == 1 and data.has_validation):
        if training.kfold > 1:
            return Splits(training.kfold,
                          chunk_kfold_splits(data.y, data.chunks, training.kfold, seed))
        return Splits(1, [chunk_holdout_split(data.y, data.chunks, training.holdout, seed)])
    if training.kfold > 1:
        return Splits(training.kfold, kfold_splits(data.y, training.kfold, seed))
    if data.has_validation:
        return Splits(1, None)
    return Splits(1, [holdout_split(data.y, training.holdout, seed)])


@dataclass
class Plan:
    k: int
    concurrent: bool
    ranks_per_fold: int


def fold_plan(k: int, size: int) -> Plan:
    """The rule in the module docstring."""
    if k > 1 and size >= k and size % k == 0:
        return Plan(k, True, size // k)
    return Plan(k, False, size)


def run_folds(comm, plan: Plan, make_trainer, epochs: int, report, on_epoch,
              note: dict | None = None) -> dict:
    """note: what the kept model's JSON note says of the trial (seed, metric, params)."""
    runner = _concurrent if plan.concurrent else _sequential
    results, intermediate = runner(comm, plan, make_trainer, epochs, report, on_epoch,
                                   note or {})
    return summarize(results, intermediate)


def _sequential(comm, plan, make_trainer, epochs, report, on_epoch, note):
    """A fold resumed from its checkpoint continues after its last epoch; a fold that was
    done is not trained again (its epochs are still in `intermediate`). The checkpoint's
    last epoch is reported again: the job may have died between its checkpoint and its
    report (an epoch reported twice is one row)."""
    from mpiopt.errors import TrialStopped

    results, intermediate = [], {}
    for fold in range(plan.k):
        trainer = make_trainer(comm, fold)
        last = fold == plan.k - 1
        try:
            for e, (value, _) in enumerate(trainer.history, start=1):
                intermediate[Step(fold, e)] = value
            if trainer.history:
                value, metrics = trainer.history[-1]
                _report(comm, report, on_epoch, Step(fold, len(trainer.history)), value, metrics,
                        last and trainer.done)
            while not trainer.done:
                value, metrics = trainer.run_epoch()
                resume.save_if_due(comm, trainer, ran=True)
                step = Step(fold, trainer.epoch)
                intermediate[step] = value
                _report(comm, report, on_epoch, step, value, metrics, last and trainer.done)
        except TrialStopped as exc:      # a pruned trial keeps the spans of what it ran
            exc.spans = [s for r in results for s in r["spans"]] + list(trainer.spans)
            exc.value = _so_far([r["value"] for r in results], [trainer])
            raise
        results.append(trainer.result())
    resume.save_model(comm, trainer, plan.k, note)
    return results, intermediate


def _concurrent(comm, plan, make_trainer, epochs, report, on_epoch, note):
    """Resumed folds may stand at different epochs (a kill between two folds' writes): a
    fold ahead takes its stored value for the epochs it already has. The loop starts at
    the last epoch every fold has, which is reported again (the job may have died
    between its checkpoints and its report; an epoch reported twice is one row). After
    each epoch the folds are reported in turn, each with its own value."""
    from mpiopt.errors import TrialStopped

    fold = comm.Get_rank() // plan.ranks_per_fold
    sub = comm.Split(fold, comm.Get_rank())
    try:
        trainer = make_trainer(sub, fold)
        leader = sub.Get_rank() == 0
        intermediate = {}
        first = max(1, comm.allreduce(len(trainer.history) if leader else epochs, op=_min()))
        for epoch in range(first, epochs + 1):
            ran = False
            if len(trainer.history) >= epoch:
                mine = trainer.history[epoch - 1]
            elif not trainer.done:
                mine, ran = trainer.run_epoch(), True
            else:
                mine = None
            resume.save_if_due(comm, trainer, ran=ran)     # collective: on every rank
            ahead = len(trainer.history) > epoch
            entries = comm.allgather((fold, mine, trainer.best_value, trainer.done and not ahead)
                                     if leader else None)
            entries = [e for e in entries if e is not None]
            ended = all(e[3] for e in entries)
            reported = [e for e in entries if e[1] is not None]
            try:
                for i, (f, (value, metrics), _, _) in enumerate(reported):
                    intermediate[Step(f, epoch)] = value
                    _report(comm, report, on_epoch, Step(f, epoch), value, metrics,
                            ended and i == len(reported) - 1)
            except TrialStopped as exc:  # a pruned trial keeps its spans (this rank's fold's)
                exc.spans = list(trainer.spans)
                exc.value = _so_far([e[2] for e in entries], [])
                raise
            if ended:
                break
        resume.save_model(comm, trainer, plan.k, note)
        results = comm.allgather(trainer.result() if leader else None)
        return [r for r in results if r is not None], intermediate
    finally:
        sub.Free()


def _so_far(finished: list, running: list) -> float | None:
    """A pruned trial's figure of merit, what the searcher is told: the mean of its
    finished folds' values; with none finished, its running folds' best so far. A fold
    still training is a partial measurement of the same setting (after a fold's end, its
    freshly built model's first epoch): mixed into the finished folds' mean it would make
    a trial pruned early in a fold look worse than the same trial pruned at its end."""
    values = [float(v) for v in finished]
    if not values:
        values = [t.best_value for t in running if t.history]
    values = [v for v in values if v is not None and not np.isnan(v)]
    return float(np.mean(values)) if values else None


def _min():
    from mpi4py import MPI

    return MPI.MIN


def _report(comm, report, on_epoch, step: Step, value: float, metrics: dict,
            last: bool = False) -> None:
    """Rank 0 logs and asks report(); everyone learns the answer together, so a prune, a
    deadline or a cancel raises on every rank at the same point (none is left waiting
    inside a collective). report() answers True, False (prune) or a TrialStopped.
    `last`: the trial's last report, after which nothing is left to save by a prune."""
    from mpiopt.errors import Pruned, answer_from_word, answer_word

    answer = True
    if comm.Get_rank() == 0:
        if on_epoch is not None:
            on_epoch(step, value, metrics)
        if report is not None:
            answer = answer_word(report(step.epoch, value, fold=step.fold))
    answer = answer_from_word(comm.bcast(answer, root=0), step.epoch, value)
    if answer is False and not last:
        raise Pruned(step.epoch, value, fold=step.fold)
    if answer is not True and answer is not False:
        raise answer


def summarize(fold_results: list[dict], intermediate: dict) -> dict:
    """The trial's result from its folds' results."""
    values = [r["value"] for r in fold_results]
    keys = set.intersection(*(set(r["metrics"]) for r in fold_results)) if fold_results else set()
    timing = {}
    for r in fold_results:
        for k, v in r["timing"].items():
            timing[k] = timing.get(k, 0) + v
    return {
        "value": float(np.mean(values)),
        "value_std": float(np.std(values)),
        "fold_values": [float(v) for v in values],
        "metrics": {k: float(np.mean([r["metrics"][k] for r in fold_results])) for k in sorted(keys)},
        "epochs": int(max(r["epochs"] for r in fold_results)),
        "intermediate": dict(intermediate),
        "timing": timing,
        "spans": [s for r in fold_results for s in r.get("spans", ())],
    }
