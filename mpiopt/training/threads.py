"""Pin threads and GPUs per rank, before TensorFlow is imported.

TensorFlow sizes its thread pools from the whole machine when it is first imported. With
several ranks on one node that oversubscribes the cores (each rank starts a pool as wide
as the node) and every rank slows down. So each rank sets, before the import:

- intra-op threads = usable cores on the node // ranks on the node (at least 1), inter-op
  threads = 1 (a data-parallel rank runs one step at a time);
- CUDA_VISIBLE_DEVICES = one GPU, round-robin by node-local rank.

Ranks per node come from the launcher when it says (MPICH/hydra MPI_LOCALNRANKS, Open MPI
OMPI_COMM_WORLD_LOCAL_SIZE, Slurm SLURM_NTASKS_PER_NODE), which counts every rank of the
job on the node, idle coordinator included. Otherwise the communicator handed in is split
by node (Split_type(COMM_TYPE_SHARED)); that is collective over that communicator only, so
a group can pin itself without the coordinator taking part. MPIOPT_THREADS overrides.
"""
from __future__ import annotations

import glob
import os

from mpiopt.knobs import THREADS

_LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")
_LOCAL_RANK_VARS = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")

_pinned: dict | None = None


def defaults() -> None:
    """Quiet, Keras-3-on-TensorFlow defaults that users can still override."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _env_int(names) -> int | None:
    for name in names:
        value = os.environ.get(name, "")
        if value.split("(")[0].isdigit():  # Slurm writes e.g. "2(x3)"
            return int(value.split("(")[0])
    return None


def layout_known() -> bool:
    """Whether node_layout() needs no communicator: the launcher says the layout, or there
    is no launcher (one process)."""
    launched = any(os.environ.get(v) for v in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"))
    return not launched or (_env_int(_LOCAL_SIZE_VARS) is not None
                            and _env_int(_LOCAL_RANK_VARS) is not None)


def node_layout(comm=None) -> tuple[int, int]:
    """(node-local rank, ranks on this node)."""
    size, rank = _env_int(_LOCAL_SIZE_VARS), _env_int(_LOCAL_RANK_VARS)
    if size and rank is not None:
        return rank, size
    if comm is None:
        return 0, 1
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return local.Get_rank(), local.Get_size()
    finally:
        local.Free()


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _gpus() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    return sorted(p[len("/dev/nvidia"):] for p in glob.glob("/dev/nvidia[0-9]*"))


def pin_threads(comm=None) -> dict:
    """Set thread counts and the GPU of this rank; a no-op after the first call.

    Returns what was decided: {"threads", "local_rank", "local_size", "gpu"}."""
    global _pinned
    if _pinned is not None:
        return _pinned
    defaults()
    local_rank, local_size = node_layout(comm)
    threads = THREADS.get() or max(1, usable_cores() // max(1, local_size))
    for var in ("TF_NUM_INTRAOP_THREADS", "OMP_NUM_THREADS"):
        os.environ[var] = str(threads)
    os.environ["TF_NUM_INTEROP_THREADS"] = "1"
    gpus = _gpus()
    gpu = gpus[local_rank % len(gpus)] if gpus else None
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    _pinned = {"threads": threads, "local_rank": local_rank, "local_size": local_size, "gpu": gpu}
    return _pinned


def pinned_threads() -> int | None:
    """The intra-op thread count chosen by pin_threads, or None when it never ran."""
    return None if _pinned is None else _pinned["threads"]
