"""Evaluate one trial's parameters: a plain Python function or nested Keras training.

A plain objective is `f(params)`; it may also accept any of the keyword arguments `comm`
(the group's communicator, for the user's own MPI code), `seed` (the trial's seed) and
`report` (report(epoch, value) -> False asks the objective to stop: pruned). It returns a
float or a dict of metrics from which `objective.metric` picks the figure of merit.

User code is untrusted. Every failure becomes a FAILED result whose error names the rank
and host: an exception (SystemExit too), a NaN or infinite value, a return value of the
wrong type, a run past `search.trial_timeout`. A plain function that does not take `comm`
runs in a worker process of its own (mpiopt.objective.sandbox, `objective.isolate`), so that even
os._exit, a segfault or the OOM killer end only the trial, not the job. Nothing here
touches the database or the coordinator.
"""
from __future__ import annotations

import decimal
import inspect
import math
import numbers
import operator
import os
import random
import re
import signal
import socket
import sys
import time
import traceback
from contextlib import contextmanager
from dataclasses import replace as _replace
from typing import Any, Callable

import numpy as np

from mpiopt.objective.current import Running, running
from mpiopt.objective.device import describe_device
from mpiopt.durations import format_duration
from mpiopt.errors import ArtifactStoreError, Pruned, StopRequested, TrialStopped, TrialTimeout
from mpiopt.objective.world_guard import world_guarded
from mpiopt.storable import epoch_problem, metric_name_problem
from mpiopt.trial import Result, Trial
from mpiopt.objective.processes import own_stop_handlers, stop_signal_seen
from mpiopt.objective.settings import kept, ours
from mpiopt.trial import TrialStatus

OPTIONAL_ARGS = ("comm", "seed", "report")

__all__ = ["Objective", "Pruned", "describe_error", "format_duration"]


class Objective:
    """Built once per rank from the spec; evaluate() runs one trial on a communicator."""

    def __init__(self, spec, rank: int = 0, host: str | None = None):
        self.spec = spec
        self.metric = spec.objective.metric
        self.where = f"world rank {rank} on {host or socket.gethostname()}"
        self._function: Callable | None = None
        self._accepts: set[str] = set()
        self._sandbox = None
        # metrics mpiopt reads: they must be numbers; other entries of a returned dict
        # that are not (a path, a list) are left out of the record, with one note
        self._read = {self.metric, *(m for m, _ in spec.objective.metrics),
                      *(c.metric for c in spec.objective.constraints)}
        self._told_skipped = False
        if spec.objective.function:
            from mpiopt.refs import load_callable

            self._function = load_callable(spec.objective.function, spec.base_dir)
            self._accepts = _accepted_args(self._function)
        elif spec.objective.model:        # (its import is the set-up's, not the first trial's)
            from mpiopt.training.frameworks import preload

            preload(spec.objective.model, spec.base_dir)

    @property
    def namespace(self) -> dict | None:
        """The globals of a plain function's module (where a `comm = MPI.COMM_WORLD` the
        module keeps is guarded during a trial: mpiopt.objective.world_guard)."""
        return getattr(self._function, "__globals__", None)

    @property
    def uses_group(self) -> bool:
        """Whether all ranks of a group take part (else only the leader runs it)."""
        return self._function is None or "comm" in self._accepts

    @property
    def reports_in_group(self) -> bool:
        """A function taking `comm` and `report`: every rank of its group hears the
        leader's answer to each report (parallel/group.py), so a prune, a deadline or a
        cancel stops every rank at the same step."""
        return self._function is not None and {"comm", "report"} <= self._accepts

    @property
    def function_here(self) -> bool:
        """A plain function run in this process (objective.isolate: false)."""
        return self._function is not None and not self.isolated

    @property
    def isolated(self) -> bool:
        """A plain function without `comm` runs in a worker process (objective.isolate)."""
        return (self._function is not None and "comm" not in self._accepts
                and bool(getattr(self.spec.objective, "isolate", True)))

    def evaluate(self, trial: Trial, comm, report: Callable | None = None,
                 should_cancel: Callable[[], bool] | None = None) -> Result:
        """Run one trial; never raises for anything the user's code does."""
        if self.isolated:
            if self._sandbox is None:
                from mpiopt.objective.sandbox import Sandbox

                self._sandbox = Sandbox(self)
            result = self._sandbox.run(trial, report, should_cancel)
        else:
            result = self.run_here(trial, comm, report)
        return _replace(result, device=describe_device())

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None

    def run_here(self, trial: Trial, comm, report: Callable | None = None) -> Result:
        """Run the trial in this process; a plain function's deadline is a SIGALRM. The
        process-wide settings it changes are put back as it ends, and its reports run
        with mpiopt's (mpiopt.objective.settings)."""
        start, pid = time.perf_counter(), os.getpid()
        stop_signal_seen()        # (what came before this trial is not its concern)
        try:
            with kept() as noted, own_stop_handlers(), \
                    _alarm(trial.timeout if self._function is not None else None), \
                    world_guarded(self.namespace):
                result = _storable(self._run(trial, comm,
                                             ours(noted, report) if report else None))
        except TrialStopped as exc:
            result = stopped_result(trial, exc, self.where)
        except ArtifactStoreError as exc:   # not the trial's fault: it runs again on resume,
            result = Result(trial.trial_id, TrialStatus.INTERRUPTED,   # and the study stops
                            error=f"{exc} ({self.where})", halt=True)
        except SystemExit as exc:
            _end_a_forked_copy(pid, exc.code)
            result = _failed_or_stopped(
                trial, f"objective called sys.exit({exc.code!r}) ({self.where})")
        except StopRequested:     # a signal in single-process mode: the study stops
            _end_a_forked_copy(pid, 1)
            raise
        except BaseException as exc:  # the study goes on; the error is recorded
            # (KeyboardInterrupt, GeneratorExit, asyncio's CancelledError too: let through,
            # one ended a group rank, the job ending 60 s later on missed heartbeats, or a
            # sandbox worker, "killed its process: exit status 0")
            _end_a_forked_copy(pid, 1)
            result = _failed_or_stopped(trial, describe_error(exc, self.where))
        _end_a_forked_copy(pid, 0)
        return _with_duration(result, time.perf_counter() - start)

    def _run(self, trial: Trial, comm, report) -> Result:
        if self._function is None and trial.refit:
            return self._refit(trial, comm, report)
        if self._function is None:
            from mpiopt.training import run_training

            from mpiopt.artifacts import trial_artifacts

            from mpiopt.training.segment import segment_of

            res = run_training(self.spec, dict(trial.params), comm, trial.seed, report=report,
                               artifacts=trial_artifacts(self.spec, trial.number),
                               segment=segment_of(self.spec, trial))
            return Result(trial.trial_id, TrialStatus.COMPLETE, value=_finite(res["value"], self.metric),
                          value_std=res.get("value_std"), fold_values=list(res.get("fold_values", [])),
                          metrics=dict(res.get("metrics", {})), spans=list(res.get("spans", [])),
                          unread=list(res.get("unread", [])))
        random.seed(trial.seed)
        np.random.seed(trial.seed % 2**32)
        extra = {"comm": comm, "seed": trial.seed, "report": _plain_report(report)}
        kwargs = {k: v for k, v in extra.items() if k in self._accepts}
        with running(self._current(trial, report)) as now:
            result = self._interpret(trial, self._function(dict(trial.params), **kwargs))
        return _replace(result, spans=list(now.spans)) if now.spans else result

    def _current(self, trial: Trial, report) -> Running:
        """What the helpers a function calls see of its trial (mpiopt.objective.current):
        its checkpoint folder where the study keeps an artifact store (a function taking
        `comm`: mpiopt.run.startup) and training.checkpoint_every is not 0."""
        from mpiopt.artifacts import checkpoint_dir

        root, every = getattr(self.spec, "artifacts", None), self.spec.training.checkpoint_every
        folder = checkpoint_dir(root, trial.number) if root and every else None
        return Running(trial.number, trial.seed, folder, every, report)

    def _refit(self, trial: Trial, comm, report) -> Result:
        """training.refit: the model is the point (kept by the trainer); the value is the
        metric on the training data, for the record only. Its per-epoch reports only ask
        whether the job is ending (the coordinator records nothing of them)."""
        from mpiopt.artifacts import refit_artifacts
        from mpiopt.training.trainer import run_refit

        res = run_refit(self.spec, dict(trial.params), comm, trial.seed, report=report,
                        artifacts=refit_artifacts(self.spec))
        return Result(trial.trial_id, TrialStatus.COMPLETE, value=res["value"],
                      metrics=dict(res.get("metrics", {})))

    def _interpret(self, trial: Trial, returned: Any) -> Result:
        if isinstance(returned, dict):
            if self.metric not in returned:
                raise ValueError(f"objective returned metrics {sorted(returned)} without "
                                 f"'{self.metric}' (objective.metric)")
            metrics, skipped = {}, []
            for key, value in returned.items():
                if key in self._read or _is_number(value):
                    metrics[key] = _number(value, key)
                else:
                    skipped.append(key)
            if skipped and not self._told_skipped:
                self._told_skipped = True
                print(f"mpiopt: note: the objective returned {', '.join(map(repr, skipped))}, "
                      f"which are not numbers; they are not stored (metrics are numbers; the "
                      f"trial's value is) ({self.where}; said once)", file=sys.stderr, flush=True)
            return Result(trial.trial_id, TrialStatus.COMPLETE,
                          value=_finite(metrics[self.metric], self.metric), metrics=metrics)
        return Result(trial.trial_id, TrialStatus.COMPLETE,
                      value=_finite(_number(returned, self.metric), self.metric))


def _storable(result: Result) -> Result:
    """The result, or a ValueError raised here, in the trial's process, where a metric's
    name is one the database cannot keep (mpiopt.storable): its trial fails with it,
    rather than the coordinator's write of it, which ended the job."""
    for name in result.metrics:
        problem = metric_name_problem(name)
        if problem:
            raise ValueError(f"objective returned a metric named {_short(name)}, which "
                             f"{problem} (a stored metric's name)")
    return result


def _plain_report(report: Callable | None) -> Callable | None:
    """What a plain function sees: report(epoch, value) -> bool; a cancel or a deadline
    raises (a BaseException, so the function's own `except Exception` lets it through)."""
    if report is None:
        return None

    def plain(epoch, value) -> bool:
        answer = report(*report_args(epoch, value))
        if isinstance(answer, TrialStopped):
            raise answer
        return bool(answer)

    return plain


def _end_a_forked_copy(pid: int, code) -> None:
    """A process the objective forked (os.fork) whose code returned or raised instead of
    ending with os._exit came back here, a copy of the trial's worker or rank: it ends
    now, with the status its code gave (sys.exit's, 0 for a return, 1 for an error).
    Going on, it sent the trial's result in its parent's place (every trial of a study
    FAILED with the child's `sys.exit(0)`), or, in the rank's process, sent it over MPI
    and the job ended on a silent coordinator after 60 s."""
    if os.getpid() == pid:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


def report_args(epoch, value) -> tuple[int, float]:
    """report()'s arguments as the coordinator records them, or a TypeError / ValueError
    raised in the objective's own code, where its trial fails with it: a value the
    coordinator could not record (an epoch that is no integer, or past the database's
    INTEGER column; a value past a float's range) ended its rank or the coordinator, and
    with it the job, on every resume again (mpiopt.storable)."""
    try:
        step = operator.index(epoch)
    except TypeError:
        raise TypeError(f"report(epoch, value): epoch must be an integer, got "
                        f"{type(epoch).__name__} {_short(epoch)}") from None
    problem = epoch_problem(step)
    if problem:
        raise ValueError(f"report(epoch, value): epoch {problem}")
    try:
        if isinstance(value, (str, bytes)):
            raise TypeError
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"report(epoch, value): value must be a number, got "
                        f"{type(value).__name__} {_short(value)}") from None
    except OverflowError:
        raise ValueError(f"report(epoch, value): value {_short(value)} is beyond a float's "
                         "range (the database keeps 64-bit floats)") from None
    return step, number


def _short(x) -> str:
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def stopped_result(trial: Trial, exc: TrialStopped, where: str) -> Result:
    status = TrialStatus(exc.status)
    error = None if status is TrialStatus.PRUNED else f"{exc.reason} ({where})"
    return Result(trial.trial_id, status, value=exc.value if status is TrialStatus.PRUNED else None,
                  error=error, spans=list(getattr(exc, "spans", None) or []))


def _failed_or_stopped(trial: Trial, error: str) -> Result:
    """FAILED with `error`; but INTERRUPTED (run again on resume) where a stop signal
    reached this rank while the trial ran: the objective's own handler turned it into the
    error (Python's default SIGINT handler put back by a library, `sys.exit` on SIGTERM),
    and a Ctrl-C must not cost the study its running trials."""
    sig = stop_signal_seen()
    if sig is None:
        return failed_result(trial, error)
    name = signal.Signals(sig).name
    return Result(trial.trial_id, TrialStatus.INTERRUPTED,
                  error=f"stopped by {name}, which the objective handled itself: "
                        f"{error.splitlines()[0]}")


def failed_result(trial: Trial, error: str) -> Result:
    return Result(trial.trial_id, TrialStatus.FAILED, error=error)


def _with_duration(result: Result, seconds: float) -> Result:
    return _replace(result, duration=seconds)


@contextmanager
def _alarm(seconds: float | None):
    """Raise TrialTimeout in the main thread after `seconds` (a SIGALRM; sleeps and Python
    loops are interrupted, a long C call ends first). No-op without a timeout."""
    if not seconds or seconds <= 0:
        yield
        return

    def _fire(signum, frame):
        raise TrialTimeout(f"timed out after {format_duration(seconds)}")

    previous = signal.signal(signal.SIGALRM, _fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _accepted_args(fn: Callable) -> set[str]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return set()
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return set(OPTIONAL_ARGS)
    return {name for name in OPTIONAL_ARGS if name in sig.parameters}


def _is_number(value: Any) -> bool:
    try:
        _number(value, "")
        return True
    except OverflowError:     # a number, too large for a float: reading it fails the trial
        return True
    except (TypeError, ValueError):
        return False


def _number(value: Any, name: str) -> float:
    try:
        if isinstance(value, bool) or not isinstance(value, (numbers.Real, decimal.Decimal,
                                                              np.integer, np.floating)):
            if getattr(value, "shape", None) == ():  # 0-d arrays and tensors
                return float(value)
            raise TypeError(f"objective returned {type(value).__name__} for {name!r}; "
                            "expected a number or a dict of numbers")
        return float(value)
    except OverflowError:
        raise OverflowError(f"objective returned {_short(value)} for {name!r}, beyond a "
                            "float's range (the database keeps 64-bit floats)") from None


def _finite(value: float, name: str) -> float:
    if not math.isfinite(value):
        raise ValueError(f"objective returned a non-finite value for '{name}': {value}")
    return value


def describe_error(exc: BaseException, where: str) -> str:
    """One readable error text: the exception, where it happened, then the traceback.

    The first line is the deepest message worth reading (Keras wraps errors raised in a
    traced function as "ValueError: in user code:"; the real one is further down)."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
    first = _first_line(exc)
    if not first:                        # (a bare `raise KeyboardInterrupt`)
        first = type(exc).__name__
    elif not _NAMED.match(first):        # the wrapped error's line names its own type
        first = f"{type(exc).__name__}: {first}"
    return f"{first} ({where})\n{tb}".rstrip()


_NAMED = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt): ")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_KERAS_CALL = "Exception encountered when calling"


_TF_GRAPH_ERROR = "Graph execution error"


def _text(exc: BaseException) -> str:
    """str(exc), which is user code too: an exception whose __str__ raised failed the
    trial's own error handling (the rank ended, or the sandbox said "killed its process")."""
    try:
        return str(exc)
    except Exception as inner:
        return f"<str() of the exception failed: {type(inner).__name__}>"


def _first_line(exc: BaseException) -> str:
    """TensorFlow's "Graph execution error:" puts the real error after the stack of where
    the failing op was defined (measured: a model with 3 outputs for 10 classes was recorded
    as "InvalidArgumentError: Graph execution error:", the line that says "Received a label
    value of 9 which is outside the valid range of [0, 3)" 40 lines down); its "in user
    code:" puts the real error last but one block down, and
    Keras's "Exception encountered when calling X.call()." puts the message on the next
    line and the call's arguments after it (measured: a layer's MemoryError was recorded
    as "StagingError: • training=True")."""
    lines = [ln.strip() for ln in _ANSI.sub("", _text(exc)).strip().splitlines() if ln.strip()]
    if len(lines) > 1 and lines[0].rstrip(":") == "in user code":
        named = [i for i, ln in enumerate(lines) if _NAMED.match(ln)]
        if not named:
            return lines[-1]
        lines = lines[named[-1]:]
    if len(lines) > 1 and lines[0].rstrip(":").endswith(_TF_GRAPH_ERROR):
        files = [i for i, ln in enumerate(lines) if ln.startswith("File ")]
        after = [ln for ln in lines[files[-1] + 1 if files else 1:] if not ln.startswith("[[")]
        if after:
            return after[0]
    if len(lines) > 1 and _KERAS_CALL in lines[0]:
        kind = lines[0].split(":", 1)[0] if _NAMED.match(lines[0]) else ""
        return f"{kind}: {lines[1]}" if kind else lines[1]
    return lines[0] if lines else ""
