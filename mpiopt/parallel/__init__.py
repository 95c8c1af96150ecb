"""Everything that knows MPI (with the communicator handed to training/)."""


def world():
    """MPI_COMM_WORLD, for commands that hand the whole job to the trainer (`mpiopt train`)."""
    from mpi4py import MPI

    from mpiopt.objective.processes import keep_nohup

    keep_nohup()
    return MPI.COMM_WORLD
