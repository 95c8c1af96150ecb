"""What a group's trial end costs since its ranks settle each trial together
(mpiopt/parallel/together.py: a non-blocking all-reduce of "did my part fail", waited for
with short sleeps), beside a plain MPI barrier on the same ranks, interleaved in rounds:

    mpiexec -n 2 python benchmarks/group_trial_end.py
    mpiexec -n 4 python benchmarks/group_trial_end.py

Microseconds per trial end; a trial of a group objective takes seconds or more.
"""
import time
from mpi4py import MPI
from mpiopt.parallel.together import finish_together
from mpiopt.parallel.protocol import Result, Trial
from mpiopt.trial import TrialStatus

comm = MPI.COMM_WORLD
trial, ok = Trial(1, 0, {}, 0), Result(1, TrialStatus.COMPLETE, value=1.0)
N = 2000
for _ in range(100):
    finish_together(comm, comm, trial, ok)
res = {}
for rnd in range(3):
    for name, fn in (("finish_together", lambda: finish_together(comm, comm, trial, ok)),
                     ("Barrier", comm.Barrier)):
        comm.Barrier()
        s = time.perf_counter()
        for _ in range(N):
            fn()
        res.setdefault(name, []).append((time.perf_counter() - s) / N * 1e6)
if comm.rank == 0:
    for k, v in res.items():
        print(f"{k}: median {sorted(v)[1]:.1f} us per trial end (runs {', '.join(f'{x:.1f}' for x in v)})")
