"""Plain objectives the MPI tests run: fast, sleeping, failing, and MPI-aware ones."""
import math
import os
import signal
import time

# tests/test_chaos.py: one rank slow to set up (its import takes a while)
if os.environ.get("PMI_RANK") and os.environ.get("PMI_RANK") == os.environ.get("MPIOPT_TEST_SLOW_RANK"):
    open(os.environ["MPIOPT_TEST_SLOW_MARK"], "w").close()     # the test knows it began
    time.sleep(float(os.environ.get("MPIOPT_TEST_SLOW_IMPORT_S", "0")))


def branin(params):
    x, y = params["x"], params["y"]
    a, b, c, r, s, t = 1.0, 5.1 / (4 * math.pi**2), 5 / math.pi, 6.0, 10.0, 1 / (8 * math.pi)
    return a * (y - b * x**2 + c * x - r) ** 2 + s * (1 - t) * math.cos(x) + s


def sleepy(params):
    """Sleeps for SLEEP seconds (env MPIOPT_TEST_SLEEP, default 0.3); returns timings too."""
    start = time.time()
    time.sleep(float(os.environ.get("MPIOPT_TEST_SLEEP", "0.3")))
    return {"value": branin(params), "t_start": start, "t_end": time.time(), "pid": os.getpid()}


def flaky(params):
    """Fails for x < -2, returns NaN for x > 8, a string for 6 < x <= 8; fine otherwise."""
    if params["x"] < -2:
        raise RuntimeError("deliberate failure for x < -2")
    if params["x"] > 8:
        return float("nan")
    if params["x"] > 6:
        return "not a number"
    return branin(params)


def always_fails(params):
    raise ImportError("module 'physics' is not installed")


def breaks_after_one(params):
    """Succeeds once, then fails for good (its data file gone): the file
    MPIOPT_TEST_BROKEN marks that the first trial ran (created exclusively, so of two
    groups' first trials running at once, one succeeds)."""
    try:
        os.close(os.open(os.environ["MPIOPT_TEST_BROKEN"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        raise FileNotFoundError("events.h5: no such file") from None
    return branin(params)


def group_sum(params, comm):
    """Uses the whole group: every rank contributes; the value is the same on all ranks.
    `database_imported`: how many of the group's ranks had imported SQLAlchemy."""
    import sys

    total = comm.allreduce(comm.Get_rank() + 1)
    database = comm.allreduce(int("sqlalchemy" in sys.modules))
    return {"value": branin(params), "group_ranks": comm.Get_size(), "rank_sum": total,
            "database_imported": database}


# ---- misbehaving objectives for tests/test_chaos.py: each misbehaves for x > 0 only ----
def exits(params):
    """sys.exit(3) inside user code."""
    if params["x"] > 0:
        import sys

        sys.exit(3)
    return branin(params)


def kills_its_process(params):
    """os._exit(1): no exception, no cleanup, the process is simply gone."""
    if params["x"] > 0:
        os._exit(1)
    return branin(params)


def kills_its_process_after_a_slow_write(params):
    """kills_its_process, but a trial that completes runs 0.5 s (the coordinator sends the
    next trial ahead meanwhile, where it does), then asks the test to hold the database's
    write lock (a file `finished`) and returns once it is held (a file `held`, waited for
    20 s at most): the coordinator's write of its result is slow, as on a loaded
    PostgreSQL server (tests/test_chaos.py)."""
    if params["x"] > 0:
        os._exit(1)
    time.sleep(0.5)
    _ask_for_the_write_lock()
    return branin(params)


def _ask_for_the_write_lock():
    """`finished` asks the test to hold the database's write lock; back once it is
    (`held`, waited for 20 s at most)."""
    open("finished", "w").close()
    end = time.monotonic() + 20
    while not os.path.exists("held") and time.monotonic() < end:
        time.sleep(0.01)
    os.unlink("finished")


def asks_for_a_held_write_once(params):
    """Runs 0.2 s and notes that it ran (a line in `ran`); the first trial then asks the
    test to hold the database's write lock (`finished`, as kills_its_process_after_a_slow_write)
    and returns once it is held: its result reaches rank 0, whose write of it waits."""
    time.sleep(0.2)
    with open("ran", "a") as fh:
        fh.write(f"{params['x']!r}\n")
    if not os.path.exists("asked"):
        open("asked", "w").close()
        _ask_for_the_write_lock()
    return branin(params)


def stops_its_process(params):
    """SIGSTOP: the process neither dies nor answers (as one stuck in a driver call); no
    launcher notices, only the missing heartbeats do."""
    if params["x"] > 0:
        os.kill(os.getpid(), signal.SIGSTOP)
    return branin(params)


def never_returns(params):
    """Sleeps for ever (a sleep is interrupted by the timeout's signal)."""
    if params["x"] > 0:
        while True:
            time.sleep(1)
    return branin(params)


def starts_a_program(params):
    """Starts an external program that outlives the trial (its output goes to the job's):
    left running where x > 0 (a Popen not waited for; a second one is stopped with
    terminate() and waited for, which must not take until the deadline), waited for where
    x <= 0, as a simulation would be, so a trial_timeout kills the trial while the program
    runs. The program is `sleep MPIOPT_TEST_MARK`, a duration the test knows it by."""
    import subprocess

    program = ["sleep", os.environ["MPIOPT_TEST_MARK"]]
    if params["x"] > 0:
        subprocess.Popen(program)
        stopped = subprocess.Popen(program)
        stopped.terminate()
        stopped.wait()
        return branin(params)
    subprocess.run(program)
    return branin(params)


def raises_keyboard_interrupt(params):
    """A KeyboardInterrupt raised by the objective itself (or a library it calls), not by a
    signal: where x > 0."""
    if params["x"] > 0:
        raise KeyboardInterrupt
    return branin(params)


def raises_cancelled(params):
    """asyncio's CancelledError, a BaseException since Python 3.8: where x > 0."""
    import asyncio

    if params["x"] > 0:
        raise asyncio.CancelledError("the data server went away")
    return branin(params)


def handles_sigint_itself(params):
    """Puts Python's own SIGINT handler back (as some libraries do) and runs a while, so a
    Ctrl-C raises KeyboardInterrupt inside the trial."""
    import signal
    import time

    signal.signal(signal.SIGINT, signal.default_int_handler)
    time.sleep(30)
    return branin(params)


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text")


def raises_unprintable(params):
    """An exception whose str() raises in turn: where x > 0."""
    if params["x"] > 0:
        raise Unprintable()
    return branin(params)


def leaves_a_thread(params):
    """Starts a (non-daemon) thread that outlives the trial by minutes, as a logger's
    writer or a prefetching loader left running would."""
    import threading
    import time

    threading.Thread(target=time.sleep, args=(300,), name="left-running").start()
    return branin(params)


_EXIT_HOOK = []


def blocks_the_exit(params):
    """Registers (once per process) an atexit function that blocks for minutes, as an
    experiment tracker's final upload to a server it cannot reach would."""
    if not _EXIT_HOOK:
        import atexit

        atexit.register(time.sleep, 300)
        _EXIT_HOOK.append(True)
    return branin(params)


def deaf(params):
    """Never returns and ignores the signal a timeout would use (as a library that installs
    its own handler, or a long C call, would)."""
    if params["x"] > 0:
        import signal

        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        while True:
            time.sleep(1)
    return branin(params)


def holds_the_lock(params):
    """A C call that holds Python's interpreter lock for an hour and ignores the timeout's
    SIGALRM (a library that never releases the lock): no Python thread can run meanwhile."""
    import ctypes
    import signal

    if params["x"] > 0:
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        ctypes.PyDLL(None).sleep(3600)
    return branin(params)


def stubborn(params):
    """Never returns, and swallows every exception a stop signal raises in it (a retry loop
    with a bare `except:`)."""
    while True:
        try:
            time.sleep(0.2)
        except BaseException:
            pass


def own_handlers(params):
    """Installs handlers of its own for the stop signals, as training frameworks do (one
    that only notes SIGTERM, for Slurm's requeue; SIGINT ignored), and leaves them."""
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    time.sleep(0.3)
    return branin(params)


def one_rank_fails(params, comm):
    """A group objective whose part fails on one rank only, between two collectives (a GPU
    out of memory on one rank): for x > 0 on group rank MPIOPT_TEST_FAILING_RANK; the
    others wait in the second all-reduce, which that rank never joins."""
    total = comm.allreduce(1)
    if params["x"] > 0 and comm.Get_rank() == int(os.environ.get("MPIOPT_TEST_FAILING_RANK", "1")):
        raise MemoryError("out of memory on this rank's device")
    total += comm.allreduce(comm.Get_rank())
    return {"value": branin(params), "ranks": total}


def fails_after_the_collectives(params, comm):
    """A group objective whose part fails on group rank 1 only for 0 < x <= 5, after its
    last collective (the others return their value), and on every rank for x > 5."""
    total = comm.allreduce(1)
    if params["x"] > 5:
        raise ValueError("deliberate failure on every rank")
    if params["x"] > 0 and comm.Get_rank() == 1:
        raise MemoryError("out of memory on this rank's device after the last collective")
    return {"value": branin(params), "ranks": total}


def reports_every_step(params, comm, report):
    """A group objective with a collective and a report at every step, as a simulation
    or a training loop of the user's own: x > 0 is slow (0.3 s a step, 8 steps), so a
    trial_timeout of 1 s stops it at a report, which must stop every rank there. The
    slow step's work is on the members, so the leader spends that time inside the
    collective (where a signal cannot reach it) and the members in Python."""
    from mpiopt.objective.evaluate import Pruned

    value = branin(params)
    for step in range(8):
        time.sleep(0.3 if params["x"] > 0 and comm.Get_rank() > 0 else 0.01)
        value = comm.allreduce(branin(params) + 10.0 / (step + 1)) / comm.Get_size()
        if not report(step, value):
            raise Pruned()
    return value


def steady(params):
    """A deterministic objective that takes a little while (kill campaigns hit it mid-run)."""
    time.sleep(float(os.environ.get("MPIOPT_TEST_SLEEP", "0.2")))
    return branin(params)


def fails_while_told(params):
    """Branin, but fails for x < 0 while MPIOPT_TEST_FAIL=1 (a failure --retry-failed fixes)."""
    if os.environ.get("MPIOPT_TEST_FAIL") == "1" and params["x"] < 0:
        raise RuntimeError("deliberate failure for x < 0 while MPIOPT_TEST_FAIL=1")
    time.sleep(float(os.environ.get("MPIOPT_TEST_SLEEP", "0")))
    return branin(params)


def two_objectives(params):
    """ZDT1-like on (x, y): f1 = x, f2 = g (1 - sqrt(x / g)); both minimized, the front at y = 0."""
    x, y = params["x"], params["y"]
    g = 1 + 9 * y
    return {"f1": x, "f2": g * (1 - (x / g) ** 0.5), "size": 100 * y}


def conditional(params):
    """For a space like searchspaces/conditional.yaml: raises if a parameter is present
    when its condition does not hold, or missing when it does (a FAILED trial shows it)."""
    adam = params["optimizer"] == "adam"
    for name, wanted in (("beta1", adam), ("beta2", adam), ("momentum", not adam),
                         ("dropout", params["layers"] >= 2)):
        if (name in params) != wanted:
            raise AssertionError(f"{name} {'missing' if wanted else 'present'} in {params}")
    widths = sorted(k for k in params if k.startswith("units_"))
    if widths != [f"units_{i}" for i in range(params["layers"])]:
        raise AssertionError(f"layer widths {widths} for {params['layers']} layers")
    loss = (math.log10(params["learning_rate"]) + 2.5) ** 2
    loss += (params["beta1"] - 0.9) ** 2 if adam else 0.2 + (params["momentum"] - 0.9) ** 2
    loss += sum((math.log2(params[k]) - 5) ** 2 for k in widths) / 10
    return loss + abs(params["layers"] - 2) * 0.3 + params.get("dropout", 0.0)


def uses_the_world(params, comm):
    """A function taking `comm` that calls MPI.COMM_WORLD (code written for a whole job):
    a barrier for x > 0, which the coordinator and the other groups never join; its
    rank and size as before otherwise."""
    from mpi4py import MPI

    if params["x"] > 0:
        MPI.COMM_WORLD.Barrier()
    return {"value": branin(params), "world_rank": MPI.COMM_WORLD.Get_rank(),
            "world_size": MPI.COMM_WORLD.Get_size()}


def uses_the_kept_world(params):
    """A function without `comm` (run in a forked worker) that all-reduces on the world
    communicator its module keeps, as scripts do (`comm = MPI.COMM_WORLD` at the top;
    here only with MPIOPT_TEST_KEEP_WORLD, so other tests never import mpi4py here)."""
    if params["x"] > 0:
        return KEPT_WORLD.allreduce(branin(params))   # noqa: F821 (defined below)
    return branin(params)


if os.environ.get("MPIOPT_TEST_KEEP_WORLD"):
    from mpi4py import MPI as _MPI

    KEPT_WORLD = _MPI.COMM_WORLD


def bad_report(params, report):
    """report() with an epoch that is not an integer for x > 0 (a label instead of a
    step), a good report otherwise; the function lets report's error through."""
    report("warm-up" if params["x"] > 0 else 0, branin(params))
    return branin(params)


def returns_extras(params):
    """A dict with the value, a number, and things that are not numbers (a path, a list, a
    flag), as Ray Tune users return; `n_leaves` a string for x > 5 (used as a constraint)."""
    return {"value": branin(params), "n_params": 1234, "model_path": "/tmp/model.keras",
            "history": [1.0, 0.5], "converged": True,
            "n_leaves": "many" if params["x"] > 5 else 3}


def grid(params):
    """A deterministic objective of a small discrete space (opt x layers: 6 sets)."""
    time.sleep(float(os.environ.get("MPIOPT_TEST_SLEEP", "0.05")))
    return {"adam": 0.1, "sgd": 0.3}[params["opt"]] + 0.01 * params["layers"]


def _note_pid(directory):
    """A Pool worker's initializer: its pid, for the test to find it after the job."""
    open(os.path.join(directory, str(os.getpid())), "w").close()


def uses_processes(params):
    """Processes in a trial: a child forked by hand that ends with sys.exit (not os._exit);
    for x > 0 a Pool (its context manager terminates it), else a ProcessPoolExecutor; for
    x > 7 first a Pool whose tasks outlast the trial's timeout. Pool workers note their
    pids in MPIOPT_TEST_PIDS."""
    import concurrent.futures
    import multiprocessing
    import sys

    pids, x = os.environ["MPIOPT_TEST_PIDS"], params["x"]
    child = os.fork()
    if child == 0:
        sys.exit(3)
    if os.waitpid(child, 0)[1] != 3 << 8:
        raise AssertionError("the forked child did not end with its sys.exit status")
    if x > 7:
        with multiprocessing.Pool(2, initializer=_note_pid, initargs=(pids,)) as pool:
            pool.map(time.sleep, [300, 300])
    if x > 0:
        with multiprocessing.Pool(2, initializer=_note_pid, initargs=(pids,)) as pool:
            total = sum(pool.map(abs, range(-4, 4)))
    else:
        with concurrent.futures.ProcessPoolExecutor(2) as pool:
            total = sum(pool.map(abs, range(-4, 4)))
    return branin(params) + 0 * total


def heap_frozen(params):
    """1.0 where the process that runs the trial froze its start-up heap (gc.freeze), else 0.0."""
    import gc

    return 1.0 if gc.get_freeze_count() > 0 else 0.0
