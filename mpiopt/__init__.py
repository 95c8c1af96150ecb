"""mpiopt: distributed hyperparameter optimization for neural networks under MPI.

Importing mpiopt imports neither mpi4py nor TensorFlow: the query commands and the
coordinator never pay for them.
"""
from mpiopt.trial import FrozenTrial, StudyStatus, TrialStatus

__version__ = "0.1.0"


def load_study(name: str, storage: str | None = None):
    """Open a recorded study for reading: trials, best trials and values, a DataFrame.
    `storage` defaults to $MPIOPT_STORAGE, else sqlite:///mpiopt.db."""
    from mpiopt.study.api import load_study as _load

    return _load(name, storage=storage)


__all__ = ["FrozenTrial", "StudyStatus", "TrialStatus", "load_study", "__version__"]
