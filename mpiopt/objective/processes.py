"""Programs a rank's trials started and left running end with the rank.

mpiexec waits, after the last rank has exited, for every process holding the job's output
open, and a program a trial starts (subprocess.Popen not waited for) holds it: the study
ends, the job does not, for as long as the program runs. Sandboxed trials are covered by
their worker's process group (mpiopt.objective.sandbox); this covers trials in the rank's own
process (`isolate: false`, functions taking `comm`, Keras models). Only processes that
appeared after the rank took its snapshot are ended, so whatever the MPI library started
at initialisation (a singleton's process manager) is left alone. Linux (/proc) only.

Also here: signals a rank or a trial's worker ignores are not ignored by the programs it
starts nor the processes it forks (see `ignore`), and a record of the signals a process
handled, whoever's handler ran (see `note_signals`).
"""
from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def descendants(root: int | None = None, among=None) -> set[int]:
    """Every live process below `root` (default: this one), from /proc's parent links;
    `among`: only these pids can be below it (every process's entry is read otherwise)."""
    root = os.getpid() if root is None else root
    if among is None:
        try:
            among = [int(e) for e in os.listdir("/proc") if e.isdigit()]
        except OSError:
            return set()
    children: dict[int, list[int]] = {}
    for pid in among:
        ppid = _parent(pid)
        if ppid is not None:
            children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _parent(pid: int) -> int | None:
    """The parent of process `pid` from its /proc stat line, or None (it has ended).
    A bare read of bytes: a buffered text file costs several times as much, paid per
    process of the node where the whole table is read (Detached)."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        stat = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    fields = stat.rsplit(b")", 1)[-1].split(None, 2)   # (the name may hold spaces)
    return int(fields[1]) if len(fields) > 1 else None


def end_started_since(before: set[int]) -> int:
    """SIGKILL this process's descendants that are not in `before`; how many there were.
    All are stopped (SIGSTOP) before any is killed, so none sees another end first: a
    parent cannot restart its killed child, nor exit on its own as its child dies."""
    pids = descendants() - before
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGSTOP)
    ended = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            ended += 1
        except OSError:
            pass
    return ended


def follow_orphans() -> bool:
    """Make this process a child subreaper (Linux's PR_SET_CHILD_SUBREAPER): a process
    below it whose parent dies is adopted by it, not by init, and so stays among its
    `descendants`. Without it a program a trial started with a session of its own
    (`setsid`, `start_new_session=True`) whose parent then exited was no longer below the
    rank: it outlived the job, which mpiexec kept waiting for its output. True if set."""
    prctl = _libc_prctl()
    return prctl is not None and prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


_PR_SET_CHILD_SUBREAPER = 36


WINDOW_LIMIT = 4096    # past that many pids handed out since the last look, read them all


class Detached:
    """Ends, after each trial of a sandbox's worker (mpiopt.objective.sandbox), the
    processes below it that left its process group: those that started a session or a
    group of their own, which a kill of the group misses. SIGKILLed and reaped, so what a
    trial started and detached ends with the trial.

    Each look reads only the /proc entries that can be such a process: those below the
    worker at the last look, and the pids the kernel handed out since (its counter,
    ns_last_pid, counts up, so a process that appeared since has a pid in between). The
    whole table costs milliseconds of CPU on a busy node, at the moment every group's
    trial ends and its leader and rank 0 need the CPU to start the next one. The whole
    table is read where the window cannot be known: no ns_last_pid, the counter wrapped,
    a /proc of another pid namespace, or more than WINDOW_LIMIT pids since."""

    def __init__(self):
        self.last = _last_pid()
        self.below = descendants()

    def end(self) -> int:
        """One look; how many processes it ended."""
        now = _last_pid()
        window = self._window(now)
        below = descendants() if window is None else descendants(among=window | self.below)
        self.last = now
        ended = _end_outside_group(below)
        self.below = below - set(ended)
        return len(ended)

    def _window(self, now: int | None) -> set[int] | None:
        if now is None or self.last is None or not self.last <= now <= self.last + WINDOW_LIMIT:
            return None
        try:
            if os.readlink("/proc/self") != str(os.getpid()):
                return None
        except OSError:
            return None
        return set(range(self.last + 1, now + 1))


def _last_pid() -> int | None:
    """The last pid the kernel handed out in this pid namespace, or None."""
    try:
        with open("/proc/sys/kernel/ns_last_pid", "rb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _end_outside_group(pids) -> list[int]:
    """SIGKILL (and reap) those of `pids` outside this process's group; the ones ended."""
    group, ended = os.getpgrp(), []
    for pid in pids:
        with contextlib.suppress(OSError):
            if os.getpgid(pid) != group:
                os.kill(pid, signal.SIGKILL)
                ended.append(pid)
    for pid in ended:
        with contextlib.suppress(OSError):        # only our own children can be reaped
            os.waitpid(pid, 0)
    return ended


def _libc_prctl():
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def ignore(signals) -> None:
    """Ignore `signals` in this process, but not in the programs it starts nor in the
    processes it forks.

    SIG_IGN passes through exec: a trial's own program would then ignore SIGTERM, and the
    trial's `proc.terminate(); proc.wait()` wait until the trial's deadline. A handler
    that does nothing is reset by exec instead; system
    calls it interrupts are restarted (siginterrupt False), as under SIG_IGN. A fork keeps
    it, so processes forked here get Python's usual handlers back (`usual_signals_in_forks`)."""
    for sig in signals:
        signal.signal(sig, _do_nothing)
        signal.siginterrupt(sig, False)
    usual_signals_in_forks()


def _do_nothing(signum, frame) -> None:
    """(see ignore)"""


@contextlib.contextmanager
def own_stop_handlers():
    """The rank's stop-signal handlers put back after user code in this process replaced
    them. A library that installs its own (a training framework's SIGTERM handler for
    Slurm's requeue, `signal.signal(SIGINT, SIG_DFL)`, SIG_IGN) kept them after its trial:
    in single-process mode a Slurm SIGTERM then never stopped the study (a 30-trial study
    whose objective set a SIGTERM handler ran to its end under SIGTERM, and a real job
    would have been killed at KillWait with its trial lost). A signal that came during
    the trial went to the objective's handler (`stop_signal_seen` still tells of it)."""
    try:
        saved = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    except ValueError:
        saved = {}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is None or signal.getsignal(sig) is handler:
                continue                            # (None: not set from Python)
            try:
                signal.signal(sig, handler)
                if handler is _do_nothing:
                    signal.siginterrupt(sig, False)  # (as `ignore` left it)
            except (ValueError, OSError):            # (not the main thread)
                pass


# ---- what a trial forks: Python's usual handlers -------------------------------------------
_registered = False
_own_fork = False            # true around the forks of mpiopt's own processes (own_fork)


def usual_signals_in_forks() -> None:
    """From now on a process forked here by Python code (a trial's multiprocessing.Pool,
    ProcessPoolExecutor, os.fork) starts with the stop signals' usual handlers: SIGINT
    raises KeyboardInterrupt, SIGTERM and SIGUSR1 end it. Inheriting the rank's or the
    worker's handlers (do nothing, or set a flag), a Pool's workers outlived its
    terminate() (a context manager's exit), which then waited for them for ever. Once per
    process; mpiopt's own forks keep the handlers (own_fork)."""
    global _registered
    if not _registered:
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                            after_in_child=_after_fork_in_child)
        _registered = True


@contextlib.contextmanager
def own_fork():
    """Around a fork of mpiopt's own (a trial's worker, its keeper): the child keeps this
    process's handlers and sets its own up."""
    global _own_fork
    before, _own_fork = _own_fork, True
    try:
        yield
    finally:
        _own_fork = before


# The stop signals are blocked in the forking thread from just before the fork until the
# child has its handlers: one that came in between (a Pool terminated as soon as it was
# made) would otherwise trip the inherited handler and then be dropped by the new one, and
# terminate() waited for ever on that worker. Blocked, it waits and meets the new handler.
_mask_before_fork: set | None = None


def _before_fork() -> None:
    global _mask_before_fork
    _mask_before_fork = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def _after_fork_in_parent() -> None:
    _unblock()


def _after_fork_in_child() -> None:
    global _own_fork
    if _own_fork:
        _own_fork = False              # (the child's own forks are the objective's)
    else:
        for sig in STOP_SIGNALS:
            try:
                signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT
                              else signal.SIG_DFL)
            except (ValueError, OSError):   # (not the main thread: a fork in a thread of
                pass                        # a process started without signals)
    _unblock()


def _unblock() -> None:
    global _mask_before_fork
    if _mask_before_fork is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, _mask_before_fork)
        _mask_before_fork = None


def keep_nohup() -> None:
    """SIGHUP ignored again where the process was started ignoring it (`nohup`), after MPI's
    start: the PyPI MPICH's UCX installs a SIGHUP handler of its own (it switches UCX's log
    to DEBUG), so a `nohup` study whose terminal closed went on printing UCX's debug lines
    into its output (239 lines by the end of a 40-trial study). Python still reports the
    disposition it started with, whatever a C library installed since."""
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)


# ---- which signals reached this process, whoever handled them --------------------------------
_seen_fd: int | None = None            # the pipe's read end
_write_fd: int | None = None
# The signals that stop a study (Ctrl-C, scancel, Slurm's --signal): declared here once
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


def note_signals() -> None:
    """From now on the interpreter writes the number of every signal it handles to a pipe
    (signal.set_wakeup_fd), whichever handler runs: a trial that installs its own (Python's
    default SIGINT handler, `sys.exit` on SIGTERM) still leaves a trace of the signal that
    stopped it (`stop_signal_seen`). Main thread only; a no-op elsewhere or twice."""
    global _seen_fd, _write_fd
    if _seen_fd is not None:
        return
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    try:
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except ValueError:                     # (not the main thread)
        os.close(r)
        os.close(w)
        return
    _seen_fd, _write_fd = r, w


def forget_signals() -> None:
    """Note no more signals (a sandbox worker, forked with the rank's pipe; the end of a
    single-process run). A wakeup fd someone else set since is left as it is."""
    global _seen_fd, _write_fd
    if _seen_fd is None:
        return
    current = signal.set_wakeup_fd(-1)
    if current not in (-1, _write_fd):
        signal.set_wakeup_fd(current)
    for fd in (_seen_fd, _write_fd):
        try:
            os.close(fd)
        except OSError:
            pass
    _seen_fd = _write_fd = None


def stop_signal_seen() -> int | None:
    """A stop signal (SIGINT, SIGTERM, SIGUSR1) handled since the last call, or None; what
    was noted is consumed."""
    seen = set()
    while _seen_fd is not None:
        try:
            chunk = os.read(_seen_fd, 4096)
        except OSError:                    # (BlockingIOError: nothing more)
            break
        if not chunk:
            break
        seen.update(chunk)
    return next((sig for sig in STOP_SIGNALS if sig in seen), None)


def process_alive(pid: int) -> bool:
    """Whether `pid` is a running process on this host (a zombie that nobody reaped has ended: it holds nothing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
