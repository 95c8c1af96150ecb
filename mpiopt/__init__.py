"""mpiopt: distributed hyperparameter optimization for neural networks under MPI.

Importing mpiopt imports neither mpi4py nor TensorFlow: the query commands and the
coordinator never pay for them. Reading a study from Python uses Optuna's names where
the concept is the same (docs/optuna-migration.md):

    study = mpiopt.load_study(study_name="branin", storage="sqlite:///mpiopt.db")
"""
# Optuna's places: mpiopt.study.StudyDirection, mpiopt.trial.TrialState,
# mpiopt.importance.get_param_importances, mpiopt.visualization.plot_*
from mpiopt import importance, study, trial, visualization
from mpiopt.trial import FrozenTrial, StudyDirection, StudyStatus, TrialState, TrialStatus

__version__ = "0.1.0"


def load_study(study_name: str | None = None, storage: str | None = None, **kwargs):
    """Open a recorded study for reading: trials, best trials and values, a DataFrame.
    `storage` defaults to $MPIOPT_STORAGE, else sqlite:///mpiopt.db; without a name, the
    database's only study. Optuna's keywords (study_name=, storage=, sampler=, pruner=)
    work; so does the name as the first argument."""
    from mpiopt.study.api import load_study as _load

    return _load(study_name, storage=storage, **kwargs)


def get_all_study_names(storage: str) -> list[str]:
    """Every study's name in the database at URL `storage`."""
    from mpiopt.study.api import get_all_study_names as _names

    return _names(storage)


def torch_group(comm, timeout: float = 1800.0):
    """Inside a function objective that takes `comm`: a context manager that opens
    torch.distributed's process group over the trial's group (gloo on CPU, NCCL on GPUs)
    and closes it as the block ends, so DistributedDataParallel code runs unchanged. It
    yields a TorchGroup: rank, size, device, report(epoch, value) (raises Pruned on every
    rank together), save(epoch, **objects) and restore(**objects) -> the epoch of the
    trial's checkpoint in the study's artifact store. See mpiopt.objective.torch_group."""
    from mpiopt.objective.torch_group import torch_group as _group

    return _group(comm, timeout)


__all__ = ["FrozenTrial", "StudyDirection", "StudyStatus", "TrialState", "TrialStatus",
           "get_all_study_names", "importance", "load_study", "study", "torch_group", "trial",
           "visualization", "__version__"]
