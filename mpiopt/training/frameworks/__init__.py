"""Keras 3 and PyTorch behind one interface: a built model seen as flat float32 buffers.

`objective.model` names a builder, `build_model(params)`; what it returns decides the
framework: a compiled `keras.Model` is trained through keras_model.KerasModel, a
`torch.nn.Module` through torch_model.TorchModel (or, with a training_step of its own,
torch_step.StepModel). All are a `FlatModel` (_base.py), the only thing the algorithms,
the fold driver and the checkpoints see.

A framework is imported only by the builder that uses it, never to find out what the
builder returned: a torch study imports no TensorFlow on any rank, a Keras study no torch.
That is why the framework's random generators are seeded before a build only when this
process already imported it; a rank's first build that imports the framework itself is
made again, seeded, so every build of the same parameters and seed gives the same model.

Each framework module says: NAME; imported() (is it loaded in this process); owns(built)
(is this its model, without importing anything); prepare(seed) (threads and seeds, before
a build); wrap(built, spec, learning_rate, x, y) -> FlatModel.
"""
from __future__ import annotations

import os
import random
import sys

import numpy as np

from mpiopt.training import threads
from mpiopt.training.frameworks import keras_model, torch_model
from mpiopt.training.frameworks._base import FlatModel
from mpiopt.training.tracking import ReadTracker

FRAMEWORKS = (keras_model, torch_model)

__all__ = ["FRAMEWORKS", "FlatModel", "build_model", "preload", "native_stderr_to_log",
           "suffix_of"]


def build_model(build, params, seed: int, spec, learning_rate: float | None, x, y) -> FlatModel:
    """Call the user's build_model(params) seeded, and wrap what it returns in the
    framework's FlatModel; anything else is a TypeError naming objective.model."""
    native_stderr_to_log()
    ready = [f for f in FRAMEWORKS if f.imported()]
    built = _seeded_build(build, params, seed, ready)
    framework = which(built)
    if framework not in ready:      # its generators were not seeded: build it again, seeded
        built = _seeded_build(build, params, seed, [framework])
    return framework.wrap(built, spec, learning_rate, x, y)


def suffix_of(framework: str) -> str:
    """The kept model file's suffix for a framework's name (a result's "framework")."""
    return {"keras": keras_model.KerasModel.suffix, "torch": torch_model.TorchModel.suffix}[framework]


def _seeded_build(build, params, seed: int, frameworks):
    random.seed(int(seed))
    np.random.seed(int(seed) % 2**32)
    for framework in frameworks:
        framework.prepare(seed)
    return build(params if isinstance(params, ReadTracker) else dict(params))


def which(built):
    """The framework module whose model `built` is."""
    for framework in FRAMEWORKS:
        if framework.owns(built):
            return framework
    raise TypeError(f"objective.model: build_model returned {_kind(built)}; expected a "
                    "compiled keras.Model or a torch.nn.Module")


def _kind(value) -> str:
    if value is None:
        return "None (a missing return?)"
    kind = type(value)
    return f"a {kind.__module__}.{kind.__qualname__}" if kind.__module__ != "builtins" \
        else f"a {kind.__name__}"


def preload(ref: str, base_dir) -> None:
    """Import the user's model module during the rank's set-up (mpiopt.objective).

    A model file that imports its framework at its top would otherwise do so at the first
    trial: the framework's native start-up lines would reach the terminal (the log is not
    yet in place) and its seconds would count in the first trial's duration. Here threads
    are pinned, native stderr goes to the study's log, then the module is imported. Where
    the layout needs a communicator (threads.layout_known) it is left to the first trial,
    as is a module that fails to import (the trial records its error)."""
    if not threads.layout_known():
        return
    threads.pin_threads()
    native_stderr_to_log()
    from mpiopt.refs import load_callable

    try:
        load_callable(ref, base_dir, field="objective.model")
    except (Exception, SystemExit):
        return


_redirected = False


def native_stderr_to_log() -> None:
    """The frameworks' C++ start-up lines (TensorFlow's oneDNN, CPU features, absl, CUDA
    factories: 3-4 per rank, not all stopped by TF_CPP_MIN_LOG_LEVEL; torch's NNPACK or
    CUDA warnings) are written to file descriptor 2. Point that descriptor at the study's
    log ($MPIOPT_NATIVE_LOG, set by the launcher) and keep Python's own sys.stderr on the
    terminal: mpiopt's one-line errors and tracebacks still show; native noise does not.
    A log that cannot be opened leaves stderr as it was."""
    global _redirected
    from mpiopt.knobs import NATIVE_LOG

    path = NATIVE_LOG.get()
    if not path or _redirected:
        return
    try:
        log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        return
    _redirected = True
    sys.stderr.flush()
    terminal = os.dup(2)
    os.dup2(log, 2)
    os.close(log)
    sys.stderr = os.fdopen(terminal, "w", buffering=1, encoding=sys.stderr.encoding or "utf-8",
                           errors="backslashreplace")
