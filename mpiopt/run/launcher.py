"""What the launcher (mpiexec, mpirun, srun) tells a process about the job, without MPI.

A rank's number comes from the launcher's environment, so that a usage error is printed
by rank 0 alone before MPI is started; the launcher's own count of the processes it
started tells a world of one that is not what the user asked for; and the launcher's
name as the user ran it makes the printed resume line start the same layout again.
"""
from __future__ import annotations

import os
from pathlib import Path

from mpiopt.errors import TopologyError

# The launchers' own count of the processes they started (Open MPI's mpirun; MPICH's,
# Intel MPI's and other PMI launchers)
LAUNCHER_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
# A rank's number, in the same launchers and Slurm
LAUNCHER_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
# Programs that start MPI jobs, by the name they are run as
LAUNCHERS = frozenset({"mpiexec", "mpirun", "mpiexec.hydra", "mpiexec.mpich", "mpirun.mpich",
                       "mpiexec.openmpi", "mpirun.openmpi", "orterun", "prterun", "srun"})
# The one named in a resume line where the launcher cannot be seen (another host)
USUAL_LAUNCHER = "mpiexec"


def world_rank() -> int:
    """This process's MPI rank from the launcher's environment (0 without a launcher)."""
    for name in LAUNCHER_RANK_VARS:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def check_launcher(size: int) -> None:
    """A world of one under a launcher that started several processes: mpi4py is built
    for another MPI than the launcher's (the system's `mpirun` with the PyPI wheel's
    MPICH), and each process would run a study of its own, all but one refused by the
    study's lease with lines that do not say why. One line instead (from the launcher's
    rank 0), exit status 2, nothing written."""
    for name in LAUNCHER_SIZE_VARS:
        value = os.environ.get(name, "")
        if size == 1 and value.isdigit() and int(value) > 1:
            from mpi4py import MPI

            library = " ".join(MPI.Get_library_version().strip().splitlines()[0].split())
            raise TopologyError(
                f"started as one of {value} processes ({name}={value}), but MPI sees only "
                f"this one: mpi4py is built for another MPI than the launcher's (mpi4py's: "
                f"{library}); start the job with the mpiexec of the MPI mpi4py was built "
                f"with (the PyPI wheel's: .venv/bin/mpiexec), or build mpi4py against the "
                f"system's MPI (docs: \"Run on a cluster\")")


def launch_prefix(size: int) -> str:
    """What goes before `mpiopt resume ...` so that a copied resume line starts the same
    number of processes: `mpiexec -n 9 ` (the launcher as the user ran it where it runs
    on this host), nothing for a world of one."""
    if size <= 1:
        return ""
    return f"{launcher_name()} -n {size} "


def launcher_name(start: int | None = None, proc: Path = Path("/proc")) -> str:
    """argv[0] of the launcher among this process's ancestors (MPICH: mpiexec, then
    hydra_pmi_proxy, then the rank), `srun` where Slurm's step daemon started it, else
    USUAL_LAUNCHER (the launcher runs on another host, or there is no /proc)."""
    pid = os.getppid() if start is None else start
    for _ in range(8):                         # (a launcher is a few generations up)
        if pid <= 1:
            break
        try:
            argv0 = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")[0].decode()
            stat = (proc / str(pid) / "stat").read_text()
        except (OSError, UnicodeDecodeError):
            break                              # (gone, or not Linux's /proc)
        name = os.path.basename(argv0)
        if name in LAUNCHERS and " " not in argv0:
            return argv0
        if name == "slurmstepd" or stat.partition("(")[2].startswith("slurmstepd)"):
            return "srun"
        try:
            pid = int(stat.rpartition(")")[2].split()[1])     # (the parent's pid)
        except (IndexError, ValueError):
            break
    return USUAL_LAUNCHER
