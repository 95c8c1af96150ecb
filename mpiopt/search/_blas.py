"""BLAS thread control for the model-based searchers: their fits and predictions run on one
BLAS thread, so that on a node shared with training ranks OpenBLAS's threads do not fight
them for the cores (a kernel fit gets many times slower where they do)."""
from __future__ import annotations

from threadpoolctl import ThreadpoolController

_THREADS = None


def single_thread():
    """One BLAS thread while we fit and predict: on a node shared with training ranks,
    OpenBLAS's threads fight them for the cores and a kernel fit gets many times slower."""
    return controller().limit(limits=1, user_api="blas")


def controller() -> ThreadpoolController:
    """The thread pools' controller, made once. Making it inspects every loaded library
    (tens of milliseconds), so warm_up makes it before any group waits for a fit."""
    global _THREADS
    if _THREADS is None:
        _THREADS = ThreadpoolController()
    return _THREADS
