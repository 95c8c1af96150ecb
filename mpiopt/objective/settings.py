"""Process-wide settings a trial may change, put back as it ends.

A trial that runs in a rank's own process (`objective.isolate: false`, a function taking
`comm`, a Keras model; in a single-process study, the coordinator's process) shares every
process-wide setting with mpiopt's own code, which runs as soon as the trial returns, and
also during it (each `report` records the value and asks the pruner). What the objective
sets for itself must not reach that code:

- NumPy's error state: after `np.seterr(all="raise")` an underflow in the searcher's
  model is an error, and the study's loop ends on it (on every resume again);
- the warning filters: `warnings.simplefilter("error")` does the same with a library's
  warning;
- the working directory: a relative database path or artifact folder points elsewhere;
- the environment variables mpiopt, its libraries and the programs it starts read;
- the global random generators (Python's, NumPy's), seeded for each trial's objective;
- the thread counts of the BLAS and OpenMP pools (through threadpoolctl) and the CPU
  affinity: a trial's `threadpool_limits(1)` or `sched_setaffinity` slows every model
  fit after it;
- sys.stdout and sys.stderr: pointed at a trial's log file, the progress lines go there.

`kept()` notes them before a trial and puts them back after it, however it ends;
`ours(noted, call)` runs mpiopt's code called from inside the trial (its `report`) with
the settings noted before it, and gives the trial its own back afterwards. State inside
modules (a library's caches, a function the objective replaced) is no setting and is not
noted: a searcher that fails on it replaces its suggestion (mpiopt.search._base).
"""
from __future__ import annotations

import os
import random
import sys
import warnings
from contextlib import contextmanager
from typing import Callable

import numpy as np


class Settings:
    """The process's settings as they were at creation; put_back() restores them (as
    often as it is called)."""

    def __init__(self):
        self._restores = [note() for note in _NOTES]

    def put_back(self) -> None:
        for restore in reversed(self._restores):
            restore()


@contextmanager
def kept():
    """Run a trial: the settings noted before it are put back after it (also when it
    raises). Yields them, for `ours`."""
    noted = Settings()
    try:
        yield noted
    finally:
        noted.put_back()


def ours(noted: Settings, call: Callable) -> Callable:
    """`call` run with the settings in `noted`, the caller's own put back after it."""
    def with_noted(*args, **kwargs):
        theirs = Settings()
        noted.put_back()
        try:
            return call(*args, **kwargs)
        finally:
            theirs.put_back()

    return with_noted


def _numpy_errors() -> Callable[[], None]:
    state, handler = np.geterr(), np.geterrcall()

    def restore():
        np.seterr(**state)
        np.seterrcall(handler)

    return restore


def _warning_filters() -> Callable[[], None]:
    filters, show = list(warnings.filters), warnings.showwarning

    def restore():
        if warnings.filters != filters:
            warnings.resetwarnings()      # (it also tells the warning registries)
            warnings.filters.extend(filters)
        warnings.showwarning = show

    return restore


def _directory() -> Callable[[], None]:
    try:
        path = os.getcwd()
    except OSError:                       # (a trial's own folder, removed under it)
        return lambda: None

    def restore():
        try:
            os.chdir(path)
        except OSError:                   # (removed by the trial: nothing to go back to)
            pass

    return restore


def _environment() -> Callable[[], None]:
    env = dict(os.environ)

    def restore():
        now = dict(os.environ)
        if now == env:
            return
        for name in now.keys() - env.keys():
            del os.environ[name]
        for name, value in env.items():
            if now.get(name) != value:
                os.environ[name] = value

    return restore


def _random_generators() -> Callable[[], None]:
    python, legacy = random.getstate(), np.random.get_state()

    def restore():
        random.setstate(python)
        np.random.set_state(legacy)

    return restore


_CONTROLLER = None


def _thread_counts() -> Callable[[], None]:
    global _CONTROLLER
    from threadpoolctl import ThreadpoolController

    if _CONTROLLER is None:              # (finding the pools reads every loaded library)
        _CONTROLLER = ThreadpoolController()
    controller = _CONTROLLER
    pools = controller.info()
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None

    def restore():
        if [p["num_threads"] for p in controller.info()] != [p["num_threads"] for p in pools]:
            controller.limit(limits=pools)
        if affinity is not None and os.sched_getaffinity(0) != affinity:
            try:
                os.sched_setaffinity(0, affinity)
            except OSError:               # (a CPU gone meanwhile)
                pass

    return restore


def _streams() -> Callable[[], None]:
    out, err = sys.stdout, sys.stderr

    def restore():
        sys.stdout, sys.stderr = out, err

    return restore


_NOTES = (_numpy_errors, _warning_filters, _directory, _environment, _random_generators,
          _thread_counts, _streams)
