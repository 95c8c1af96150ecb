"""MPI_Learn-style nested training of a Keras or PyTorch model on one communicator.

Public surface: run_training(spec, params, comm, seed, report=None) -> result dict, and
Pruned (mpiopt.errors.Pruned, which mpiopt.objective.evaluate catches). Importing this package imports neither
TensorFlow nor mpi4py; they load when training starts.
"""
from mpiopt.errors import Pruned


def run_training(spec, params, comm, seed, report=None, on_epoch=None, artifacts=None,
                 segment=None):
    """See mpiopt.training.trainer.run_training."""
    from mpiopt.training.trainer import run_training as _run

    return _run(spec, params, comm, seed, report=report, on_epoch=on_epoch, artifacts=artifacts,
                segment=segment)


__all__ = ["Pruned", "run_training"]
