"""Whether a study's output reaches a person's terminal, and how wide it is.

Under `mpiexec` rank 0's stdout is a pipe to the launcher even when the launcher writes to
a terminal: `isatty()` alone would never let the status line redraw in the demo. So the
answer follows stdout through the launcher's own processes (MPICH's hydra_pmi_proxy and
mpiexec, Open MPI's prted/orted and mpirun) to the first one whose stdout is not a pipe
from such a launcher: a terminal there is a terminal here (the launcher forwards bytes
as they come, a carriage return included). A pipe into anything else (`| tee log`), a
file or a socket is not a terminal: the output is a log, and it gets plain lines.
"""
from __future__ import annotations

import os

# Processes that only forward a rank's output (their /proc comm, at most 15 characters)
LAUNCHERS = frozenset({"hydra_pmi_proxy", "mpiexec", "mpiexec.hydra", "mpirun", "orterun",
                       "orted", "prted", "prterun", "mpiexec.openmpi", "mpirun.openmpi"})
# How many launcher processes may sit between a rank and the terminal (rank -> proxy ->
# mpiexec is two)
MOST_HOPS = 4


def terminal_path(out) -> str | None:
    """The terminal device `out` ends up on (directly, or through a launcher), or None."""
    try:
        if out.isatty():
            return os.ttyname(out.fileno())
    except (AttributeError, ValueError, OSError):
        return None
    try:
        if out.fileno() != 1:
            return None
    except (AttributeError, ValueError, OSError):
        return None
    return _through_launchers(os.getpid())


def _through_launchers(pid: int) -> str | None:
    """Follow stdout from `pid` up through launcher parents (Linux's /proc; elsewhere None)."""
    for _ in range(MOST_HOPS + 1):
        target = _stdout_of(pid)
        if target is None:
            return None
        if target.startswith(("/dev/pts/", "/dev/tty")):
            return target
        if not target.startswith("pipe:"):
            return None                   # a file, a socket, /dev/null: a log
        pid = _parent(pid)
        if pid is None or _name(pid) not in LAUNCHERS:
            return None                   # a pipe into `tee`, a pager, a test: a log
    return None


def width(path: str | None, default: int = 100) -> int:
    """Columns of the terminal at `path` (a status line wider than that wraps, and a
    wrapped line cannot be redrawn in place)."""
    if path is None:
        return default
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return default
    try:
        return os.get_terminal_size(fd).columns or default
    except OSError:
        return default
    finally:
        os.close(fd)


def _stdout_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return None


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return ""
