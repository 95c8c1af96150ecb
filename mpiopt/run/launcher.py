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
# A batch system's own launch of several copies of a program: (who, the variables of its
# count, the first one set wins; the variable only its tasks have). srun sets
# SLURM_STEP_NUM_TASKS (and SLURM_NTASKS) in each task of a step; `flux run` sets
# FLUX_JOB_SIZE in each task (flux leaves it out of a batch script's environment); PBS's
# pbsdsh starts one task per slot, PBS_NP of them (PBS_VNODENUM: the task's slot);
# HPE's PALS, PBS's mpiexec there, counts its ranks in PALS_NRANKS.
BATCH_TASKS = (("srun", ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"), "SLURM_PROCID"),
               ("flux run", ("FLUX_JOB_SIZE",), "FLUX_TASK_RANK"),
               ("PBS", ("PBS_NP",), "PBS_VNODENUM"),
               ("PALS", ("PALS_NRANKS",), "PALS_RANKID"))
# What to try where a batch system's launch was not joined
_HINTS = {"srun": ": try srun --mpi=pmi2 or --mpi=pmix"}
# A rank's number, in the same launchers and batch systems
LAUNCHER_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID",
                      "FLUX_TASK_RANK", "PALS_RANKID", "PBS_VNODENUM")
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
    """A world of one where the launcher started several processes: mpi4py is built for
    another MPI than the launcher's (the system's `mpirun` with the PyPI wheel's MPICH),
    or srun, flux or PBS started copies of mpiopt that mpi4py's MPI did not join into one
    job (no PMI it reads), and each process would run a study of its own, all but one
    refused by the study's lease with lines that do not say why. One line instead (from
    the launcher's rank 0), exit status 2 on every process, nothing written."""
    started = launcher_count()
    if size != 1 or started is None:
        return
    who, name, value = started
    from mpi4py import MPI

    library = " ".join(MPI.Get_library_version().strip().splitlines()[0].split())
    if who in ("mpiexec", "mpirun"):
        why = "mpi4py is built for another MPI than the launcher's"
    else:
        why = (f"{who} started them, but mpi4py's MPI did not join them into one job (it "
               f"reads none of the process-manager interfaces {who} offers{_HINTS.get(who, '')})")
    raise TopologyError(
        f"started as one of {value} processes ({name}={value}), but MPI sees only this "
        f"one: {why} (mpi4py's: {library}); start the job with the mpiexec of the MPI "
        f"mpi4py was built with (the PyPI wheel's: .venv/bin/mpiexec), or build mpi4py "
        f"against the system's MPI (docs: \"Run on a cluster\")")


def launcher_count(env=None) -> tuple[str, str, int] | None:
    """(who started this process, the variable that says how many it started, that
    count) where the count is more than one, else None: an MPI launcher's own count
    first, then a batch system's, read only in one of its tasks (its task variable set)
    and never in the job's own script, where the same variables give the allocation's
    size, not a count of started processes (mpiopt run there alone is one process)."""
    env = os.environ if env is None else env
    for name in LAUNCHER_SIZE_VARS:
        if _count(env, name) > 1:
            return ("mpirun" if name.startswith("OMPI") else "mpiexec"), name, _count(env, name)
    for who, names, task in BATCH_TASKS:
        if not env.get(task, "").strip().isdigit() or _job_script(who, env):
            continue
        name = next((n for n in names if n in env), None)
        if name is not None and _count(env, name) > 1:
            return who, name, _count(env, name)
    return None


def _count(env, name: str) -> int:
    value = env.get(name, "").strip()
    return int(value) if value.isdigit() else 0


def _job_script(who: str, env) -> bool:
    """Whether this is the batch job's own script (or what it runs without a launcher):
    Slurm's runs with SLURM_PROCID=0 and the allocation's SLURM_NTASKS but, not being a
    step, without srun's SLURM_STEP_ID (and SLURM_STEP_NUM_TASKS); PBS's is the job's
    first task (PBS_TASKNUM=1), with PBS_VNODENUM=0 and the allocation's PBS_NP."""
    if who == "srun":
        return "SLURM_STEP_NUM_TASKS" not in env and env.get("ENVIRONMENT") == "BATCH" \
            and "SLURM_STEP_ID" not in env and "SLURM_STEPID" not in env
    if who == "PBS":
        return env.get("PBS_TASKNUM", "").strip() == "1"
    return False


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
