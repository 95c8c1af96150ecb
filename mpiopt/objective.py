"""Evaluate one trial's parameters: a plain Python function or nested Keras training.

A plain objective is `f(params)`; it may also accept any of the keyword arguments `comm`
(the group's communicator, for the user's own MPI code), `seed` (the trial's seed) and
`report` (report(epoch, value) -> False asks the objective to stop: pruned). It returns a
float or a dict of metrics from which `objective.metric` picks the figure of merit.

Every failure becomes a FAILED outcome whose error names the rank and host: an exception,
a NaN or infinite value, a return value of the wrong type. Nothing here touches the
database or the coordinator.
"""
from __future__ import annotations

import inspect
import math
import random
import socket
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from mpiopt.trial import TrialStatus

OPTIONAL_ARGS = ("comm", "seed", "report")


class Pruned(Exception):
    """Raised inside an objective (or the trainer) when the pruner says stop."""

    def __init__(self, epoch: int | None = None, value: float | None = None):
        super().__init__(f"pruned at epoch {epoch}")
        self.epoch, self.value = epoch, value


@dataclass
class Outcome:
    status: str
    value: float | None = None
    value_std: float | None = None
    fold_values: list[float] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    duration: float = 0.0


class Objective:
    """Built once per rank from the spec; evaluate() runs one trial on a communicator."""

    def __init__(self, spec):
        self.spec = spec
        self.metric = spec.objective.metric
        self._function: Callable | None = None
        self._accepts: set[str] = set()
        if spec.objective.function:
            from mpiopt.objective_ref import load_callable

            self._function = load_callable(spec.objective.function, spec.base_dir)
            self._accepts = _accepted_args(self._function)

    @property
    def uses_group(self) -> bool:
        """Whether all ranks of a group take part (else only the leader runs it)."""
        return self._function is None or "comm" in self._accepts

    def evaluate(self, params: dict, seed: int, comm, report: Callable | None = None) -> Outcome:
        start = time.perf_counter()
        try:
            outcome = self._run(params, seed, comm, report)
        except Pruned as exc:
            outcome = Outcome(TrialStatus.PRUNED.value, value=exc.value)
        except Exception as exc:  # the study goes on; the error is recorded
            outcome = Outcome(TrialStatus.FAILED.value, error=describe_error(exc))
        outcome.duration = time.perf_counter() - start
        return outcome

    def _run(self, params, seed, comm, report) -> Outcome:
        if self._function is None:
            from mpiopt.training import run_training

            res = run_training(self.spec, dict(params), comm, seed, report=report)
            return Outcome(TrialStatus.COMPLETE.value, value=_finite(res["value"], self.metric),
                           value_std=res.get("value_std"), fold_values=list(res.get("fold_values", [])),
                           metrics=dict(res.get("metrics", {})))
        random.seed(seed)
        np.random.seed(seed % 2**32)
        extra = {"comm": comm, "seed": seed, "report": report}
        kwargs = {k: v for k, v in extra.items() if k in self._accepts}
        return self._interpret(self._function(dict(params), **kwargs))

    def _interpret(self, returned: Any) -> Outcome:
        if isinstance(returned, dict):
            if self.metric not in returned:
                raise ValueError(f"objective returned metrics {sorted(returned)} without "
                                 f"'{self.metric}' (objective.metric)")
            metrics = {k: _number(v, k) for k, v in returned.items()}
            return Outcome(TrialStatus.COMPLETE.value, value=_finite(metrics[self.metric], self.metric),
                           metrics=metrics)
        return Outcome(TrialStatus.COMPLETE.value, value=_finite(_number(returned, self.metric), self.metric))


def _accepted_args(fn: Callable) -> set[str]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return set()
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return set(OPTIONAL_ARGS)
    return {name for name in OPTIONAL_ARGS if name in sig.parameters}


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        if getattr(value, "shape", None) == ():  # 0-d arrays and tensors
            return float(value)
        raise TypeError(f"objective returned {type(value).__name__} for '{name}'; expected a "
                        "number or a dict of numbers")
    return float(value)


def _finite(value: float, name: str) -> float:
    if not math.isfinite(value):
        raise ValueError(f"objective returned a non-finite value for '{name}': {value}")
    return value


def describe_error(exc: BaseException) -> str:
    """One readable error text: the exception, where it happened, then the traceback."""
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    where = f"(world rank {rank} on {socket.gethostname()})"
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
    return f"{type(exc).__name__}: {exc} {where}\n{tb}".rstrip()
