"""Train one parameter set on a communicator: folds, epochs, validation, early stopping.

run_training is the entry point used by the group ranks (through mpiopt.objective.evaluate) and by
`mpiopt train`. It knows nothing of the coordinator or the database: it gets a
communicator, the spec, the parameters and a seed, and calls report(epoch, value, fold=f)
on the communicator's rank 0 after each epoch of each fold (mpiopt.training.folds).

The figure of merit of a fold is the best value of objective.metric over its epochs (the
epoch early stopping would keep); the trial's value is the mean over the folds, value_std
their standard deviation, and metrics the fold means of every validation metric (and the
training loss) at each fold's best epoch.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from mpiopt.errors import OTHERS_FAILED
from mpiopt.trial import Direction
from mpiopt.training import resume, threads, torch_collectives
from mpiopt.training.data import epoch_order, load_data, shard
from mpiopt.training.stream import raise_together, take
from mpiopt.training.folds import Splits, fold_plan, make_splits, run_folds
from mpiopt.training.tracking import ReadTracker


def run_refit(spec, params: dict, comm, seed: int, report=None, artifacts=None) -> dict:
    """training.refit: params trained once more on all the data the trials saw (every
    fold, the holdout, the validation set), for training.epochs epochs without early
    stopping; the model of the last epoch is kept. With no data left to validate on, the
    figure it reports is the metric on that same training data (its note says so)."""
    from dataclasses import replace

    training = replace(spec.training, kfold=1, early_stopping=None, pruning=None)
    return run_training(replace(spec, training=training), params, comm, seed, report=report,
                        artifacts=artifacts, all_data=True)


def run_training(spec, params: dict, comm, seed: int, report=None, on_epoch=None,
                 artifacts=None, all_data: bool = False, segment=None) -> dict:
    """Train and evaluate params; the same result dict on every rank of comm.

    Returns {value, value_std, fold_values, metrics, epochs, intermediate, timing,
    framework}, the intermediate values keyed by Step(fold, epoch).
    report(epoch, value, fold=f) -> False prunes: every rank raises training.Pruned together.
    on_epoch(step, value, metrics) is called on rank 0 for logging (mpiopt train).
    artifacts (mpiopt.artifacts.TrialArtifacts): each fold continues from its checkpoint
    and writes one every `every` epochs; the final model is saved where it says.
    A model that fails to build, or data that fail to load, raise on every rank.
    segment (mpiopt.training.segment.Segment): a pbt round, trained from its parent's
    checkpoint up to its last epoch, valued at that epoch."""
    threads.pin_threads(comm)
    t0 = comm.bcast(time.time(), root=0)   # spans are seconds since here, on every rank
    from mpiopt.refs import load_callable
    from mpiopt.training import frameworks, searched

    spec, params, learning_rate = searched.split(spec, params)
    if segment is not None:          # a pbt round trains up to its last epoch
        from dataclasses import replace

        spec = replace(spec, training=replace(spec.training, epochs=segment.end))

    obj = spec.objective
    data = together(comm, lambda: load_data(obj.data, spec.base_dir, comm))
    if all_data:                     # the refit: every sample, validated on itself
        data = data.merged()
        splits = Splits(1, [(np.arange(len(data.x)), np.arange(len(data.x)))])
    else:
        splits = make_splits(data, spec.training, seed if segment is None else segment.split_seed)
    build = together(comm, lambda: load_callable(obj.model, spec.base_dir, field="objective.model"))
    tracked = ReadTracker(params)
    model = together(comm, lambda: frameworks.build_model(
        build, tracked, seed, spec, learning_rate, data.x[:2], data.targets[:2]))

    def make_trainer(fold_comm, fold: int) -> FoldTrainer:
        model.reset()
        ckpt = resume.restore(model, resume.load(fold_comm, artifacts, fold))
        x, y, xv, yv = splits.arrays(data, fold)
        trainer = FoldTrainer(model, fold_comm, spec, (x, y, xv, yv), seed, fold, t0, artifacts,
                              last=segment is not None, window=data.window)
        if ckpt is not None:
            trainer.resume_from(ckpt)
        elif segment is not None and segment.parent_number is not None:
            from mpiopt.training.segment import start_from_parent

            start_from_parent(segment, model, trainer, fold_comm, fold)
        return trainer

    plan = fold_plan(splits.k, comm.Get_size())
    note = {"seed": int(seed), "metric": obj.metric, "direction": obj.direction,
            "params": dict(params)}
    try:
        result = run_folds(comm, plan, make_trainer, spec.training.epochs, report, on_epoch, note)
    finally:
        torch_collectives.close()       # the trial's process group, where its folds made one
    result["unread"] = tracked.unread()
    result["framework"] = model.framework
    if comm.Get_rank() == 0:
        result["metrics"].update(model_metrics(spec, model, data.x))
    return comm.bcast(result, root=0)


LATENCY_RUNS = 5


def model_metrics(spec, model, x) -> dict:
    """Metrics of the model itself, for objectives and constraints beside accuracy:
    n_params (its parameter count) always; latency_ms (one forward pass over a batch of
    training.batch_size samples, the median of 5 after a warm-up, on the group's first
    rank) when objective.metrics or a constraint names it."""
    wanted = {n for n, _ in spec.objective.objectives} | {c.metric for c in spec.objective.constraints}
    out = {"n_params": float(model.n_params())}
    if "latency_ms" in wanted:
        batch = x[: spec.training.batch_size]
        model.predict(batch)
        runs = []
        for _ in range(LATENCY_RUNS):
            start = time.perf_counter()
            model.predict(batch)
            runs.append(time.perf_counter() - start)
        out["latency_ms"] = float(np.median(runs) * 1000)
    return out


def together(comm, fn):
    """Run fn on every rank; if it fails anywhere, fail everywhere (no rank left waiting
    in a collective for a rank that raised)."""
    try:
        value, error = fn(), None
    except Exception as exc:  # re-raised below, on every rank
        value, error = None, exc
    failed = comm.allreduce(0 if error is None else 1)
    if error is not None:
        raise error
    if failed:
        raise RuntimeError(f"{failed} {OTHERS_FAILED}")
    return value


def make_algorithm(model, comm, training):
    """The training algorithm of training.mode; downpour needs a master and a worker, so on
    one rank it is single-rank allreduce training."""
    mode = training.mode
    if mode == "downpour" and comm.Get_size() > 1:
        from mpiopt.training.downpour import Downpour

        return Downpour(model, comm, training)
    if mode == "easgd":
        from mpiopt.training.easgd import EASGD

        return EASGD(model, comm, training)
    if mode not in ("allreduce", "downpour"):
        raise ValueError(f"unknown training.mode {mode!r}")
    from mpiopt.training.allreduce import AllreduceSGD

    return AllreduceSGD(model, comm, training)


def validate(model, comm, x, y, batch_size: int) -> dict:
    """Validation metrics over all of (x, y), each rank evaluating one shard; the metric
    accumulators are summed with one Allreduce, so r ranks take 1/r of the time."""
    from mpi4py import MPI

    part = shard(len(x), comm.Get_size(), comm.Get_rank())
    size = max(256, batch_size)
    failures: list = []
    try:
        if part.stop > part.start:
            state = model.metric_state(take(x, part), take(y, part), size)  # streamed: by batch
        else:
            state = model.zero_metric_state(take(x, slice(0, 1)), take(y, slice(0, 1)), size)
    except Exception as exc:   # a failed read: raised on every rank together, below
        if comm.Get_size() == 1:
            raise
        failures.append(exc)
        state = None
    raise_together(comm, failures)      # every rank raises here, before the Allreduce
    comm.Allreduce(MPI.IN_PLACE, state, op=MPI.SUM)
    return {f"val_{k}": v for k, v in model.metric_results(state).items()}


def epoch_seed(fold_seed: int, epoch: int, rank: int) -> int:
    """A rank's seed for one epoch of a fold: its own stream (dropout masks independent
    across ranks), the same however the fold got to that epoch."""
    return int(np.random.SeedSequence([fold_seed, epoch, rank]).generate_state(1)[0])


@dataclass
class Timing:
    train_s: float = 0.0
    val_s: float = 0.0
    compute_s: float = 0.0
    comm_s: float = 0.0
    samples: int = 0
    steps: int = 0

    def add(self, stats, val_s: float) -> None:
        self.train_s += stats.wall_s
        self.val_s += val_s
        self.compute_s += stats.compute_s
        self.comm_s += stats.comm_s
        self.samples += stats.samples
        self.steps += stats.steps


class FoldTrainer:
    """One fold trained on one communicator, an epoch at a time (the fold driver interleaves
    epochs with reports and, for concurrent folds, with the other folds)."""

    def __init__(self, model, comm, spec, arrays, seed: int, fold: int, t0: float | None = None,
                 artifacts=None, last: bool = False, window: int | None = None):
        self.model, self.comm, self.spec = model, comm, spec
        self.window = window      # samples per shuffle window (Dataset.window), None: exact
        self.x, self.y, self.x_val, self.y_val = arrays
        self.training = spec.training
        self.metric = spec.objective.metric
        self.maximize = Direction.parse(spec.objective.direction) is Direction.MAXIMIZE
        self.seed = (int(seed) * 7919 + fold) % 2**32
        self.epoch, self.best_epoch = 0, 0
        self.best_value, self.best_metrics = math.nan, {}
        self.done = False
        self.last = last      # a pbt round: the figure of merit is the last epoch's, not the best
        self.history: list[tuple[float, dict]] = []   # (value, metrics) per epoch
        self.artifacts = artifacts
        # the best epoch's weights, for the kept model (only the rank that saves it)
        self.keep_best = (bool(artifacts is not None and artifacts.model and not artifacts.final)
                          and comm.Get_rank() == 0)
        self.best_weights = None
        self.timing = Timing()
        self.fold, self.t0 = fold, time.time() if t0 is None else t0
        self.spans = [{"kind": "fold", "fold": fold, "epoch": None,
                       "start": self._since_t0(), "end": self._since_t0()}]
        self.algorithm = make_algorithm(model, comm, self.training)
        self.algorithm.start()

    def run_epoch(self) -> tuple[float, dict]:
        """Train one epoch and validate; returns (figure of merit, metrics)."""
        order = epoch_order(len(self.x), self.seed, self.epoch, self.training.shuffle,
                            self.window, self.training.batch_size)
        began = self._since_t0()
        start = time.perf_counter()
        self.model.begin_epoch(epoch_seed(self.seed, self.epoch, self.comm.Get_rank()))
        stats = self.algorithm.train_epoch(self.x, self.y, order)
        raise_together(self.comm, self.algorithm.read_failures)
        stats.wall_s = time.perf_counter() - start
        self.algorithm.before_validation()
        metrics = validate(self.model, self.comm, self.x_val, self.y_val, self.training.batch_size)
        self.algorithm.after_validation()
        self.timing.add(stats, time.perf_counter() - start - stats.wall_s)
        metrics["loss"] = float(stats.loss)
        value = self._figure(metrics)
        self.model.end_epoch(value)      # an epoch-wise learning-rate schedule steps
        self.epoch += 1
        self._span(began)
        self._track(value, metrics)
        self.history.append((value, metrics))
        if self.keep_best and self.best_epoch == self.epoch:
            self.best_weights = self.algorithm.validated_weights()
        return value, metrics

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_parts(self) -> tuple[dict, list, object, object]:
        """(meta, state, validated weights, best weights) of this fold, on its rank 0."""
        meta = {"fold": self.fold, "epoch": self.epoch, "done": self.done,
                "best_value": self.best_value, "best_epoch": self.best_epoch,
                "best_metrics": self.best_metrics, "history": self.history,
                "timing": self.timing.__dict__,
                "mode": self.training.mode, "ranks": self.comm.Get_size()}
        validated = self.algorithm.validated_weights() if self.algorithm.separate_validation else None
        return meta, self.model.state(), validated, self.best_weights

    def resume_from(self, ckpt: dict) -> None:
        """Continue after the checkpoint's epoch (its state is already in the model)."""
        m = ckpt["meta"]
        self.epoch, self.done = int(m["epoch"]), bool(m["done"])
        self.best_value, self.best_epoch = float(m["best_value"]), int(m["best_epoch"])
        self.best_metrics = dict(m["best_metrics"])
        self.history = [(float(v), dict(mt)) for v, mt in m["history"]]
        self.timing = Timing(**m["timing"])
        now = self._since_t0()     # the earlier attempt's spans had another start: a mark
        self.spans.append({"kind": "resume", "fold": self.fold, "epoch": self.epoch,
                           "start": now, "end": now})
        if self.keep_best:
            self.best_weights = ckpt.get("best")
        self.algorithm.resume(ckpt.get("validated"))

    def inherit(self, ckpt: dict) -> None:
        """A pbt round: continue the parent's learning curve after its last epoch (its
        state is already in the model); this round's timing and spans are its own."""
        m = ckpt["meta"]
        self.epoch, self.done = int(m["epoch"]), False
        self.history = [(float(v), dict(mt)) for v, mt in m["history"]]
        if self.history:
            self.best_value, self.best_metrics = self.history[-1]
            self.best_epoch = self.epoch
        self.done = self.epoch >= self.training.epochs
        self.algorithm.resume(ckpt.get("validated"))

    def _since_t0(self) -> float:
        return round(time.time() - self.t0, 6)

    def _span(self, began: float) -> None:
        """This epoch's span, and the fold's end moved to now (for the report's trace). Its
        start is read from the same clock as the fold's (a start worked out from
        perf_counter's duration, another clock, can fall before the fold's own start)."""
        end = self._since_t0()
        self.spans.append({"kind": "epoch", "fold": self.fold, "epoch": self.epoch,
                           "start": began, "end": end})
        self.spans[0]["end"] = end

    def _figure(self, metrics: dict) -> float:
        if self.metric not in metrics:
            names = ", ".join(sorted(k for k in metrics if k.startswith("val_")))
            raise ValueError(f"objective.metric '{self.metric}' is not a validation metric of "
                             f"this model (it reports: {names})")
        return float(metrics[self.metric])

    def _track(self, value: float, metrics: dict) -> None:
        """Best epoch so far, early stopping, and a stop on a non-finite value."""
        if not math.isfinite(value):
            self.best_value, self.best_metrics, self.done = value, metrics, True
            return
        stopping = self.training.early_stopping
        delta = stopping.min_delta if stopping else 0.0
        if self.last or math.isnan(self.best_value) or self._better(value, self.best_value, delta):
            self.best_value, self.best_metrics, self.best_epoch = value, metrics, self.epoch
        if self.epoch >= self.training.epochs:
            self.done = True
        elif stopping and self.epoch - self.best_epoch >= stopping.patience:
            self.done = True

    def _better(self, value: float, best: float, delta: float) -> bool:
        return value > best + delta if self.maximize else value < best - delta

    def result(self) -> dict:
        return {"value": self.best_value, "metrics": self.best_metrics, "epochs": self.epoch,
                "timing": self.timing.__dict__.copy(), "spans": list(self.spans)}
