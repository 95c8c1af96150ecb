"""A trial's fixed cost: what a digits trial spends beyond its epochs, and where it goes.

Fixed cost = a trial's wall time minus epochs x its median epoch (the first epoch's extra
time is tracing, so it counts as fixed). Trials run in this one process (MPI.COMM_SELF on
one rank), on random parameter sets of the digits space. The goal: at most 0.5 s a trial.

For each --ranks N (default 1 and 2) one report: with N > 1 the trials run data-parallel
on N ranks, as a group of N ranks trains them (the script starts itself under mpiexec).
On one rank it also breaks the fixed cost down: building the model, wrapping it in flat
buffers, the first training step (tracing), the first validation (tracing).

    python benchmarks/trial_overhead.py --trials 8              # on 1 rank, then on 2
    python benchmarks/trial_overhead.py --trials 8 --ranks 4
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

import numpy as np

from _common import BIN, ROOT, env, machine, table


def one_trial(spec, params, seed, comm) -> tuple[float, float]:
    """(wall s, fixed s) of one trial on the ranks of comm (rank 0's figures)."""
    from mpiopt.training import run_training

    comm.Barrier()
    start = time.perf_counter()
    res = run_training(spec, params, comm, seed)
    wall = time.perf_counter() - start
    epochs = [s["end"] - s["start"] for s in res["spans"] if s["kind"] == "epoch"]
    return wall, wall - len(epochs) * float(np.median(epochs))


def breakdown(spec, params, seed) -> dict:
    """Seconds of each fixed part of one trial."""
    from mpiopt.refs import load_callable
    from mpiopt.training.frameworks import keras_model as backend
    from mpiopt.training.data import load_data

    data = load_data(spec.objective.data, spec.base_dir)
    build = load_callable(spec.objective.model, spec.base_dir)
    marks = [time.perf_counter()]
    model = backend.build_model(build, params, seed)
    marks.append(time.perf_counter())
    km = backend.KerasModel(model, data.x, data.y)
    marks.append(time.perf_counter())
    b = spec.training.batch_size
    km.train_step(data.x[:b], data.y[:b])
    marks.append(time.perf_counter())
    km.train_step(data.x[:b], data.y[:b])
    marks.append(time.perf_counter())
    km.metric_state(data.x[:b], data.y[:b], b)
    marks.append(time.perf_counter())
    km.metric_state(data.x[:b], data.y[:b], b)
    marks.append(time.perf_counter())
    d = np.diff(marks)
    return {"build s": d[0], "flat buffers s": d[1], "first step s": d[2] - d[3],
            "first validation s": d[4] - d[5]}


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=8, help="trials measured")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2],
                    help="ranks that train each trial (one report each)")
    args = ap.parse_args(argv)
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_size() > 1:          # started by the lines below, under mpiexec
        return measure(args.trials, MPI.COMM_WORLD)
    reports = []
    for ranks in args.ranks:
        if ranks == 1:
            reports.append(measure(args.trials, MPI.COMM_SELF))
            continue
        proc = subprocess.run([str(BIN / "mpiexec"), "-n", str(ranks), sys.executable, __file__,
                               "--trials", str(args.trials)],
                              env=env(), capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"trial_overhead.py on {ranks} ranks failed:\n{proc.stderr[-3000:]}")
        print(proc.stdout)
        reports.append(proc.stdout.strip())
    return "\n\n".join(reports)


def measure(trials_n: int, comm) -> str:
    """The report for trials trained on the ranks of comm (printed on its rank 0)."""
    from mpiopt.spec import load_spec

    spec = load_spec(ROOT / "examples" / "digits" / "spec.yaml")
    rng = np.random.default_rng(7)
    trials = [spec.space.sample(rng) for _ in range(trials_n + 1)]
    one_trial(spec, trials[0], 0, comm)    # TensorFlow's import and first use: not a trial's
    got = [one_trial(spec, params, i, comm) for i, params in enumerate(trials[1:], 1)]
    if comm.Get_rank() != 0:
        return ""
    walls, fixed = np.array(got).T
    rows = [{"trial s (median)": float(np.median(walls)), "fixed s (median)": float(np.median(fixed)),
             "fixed s (p90)": float(np.quantile(fixed, 0.9))}]
    ranks = comm.Get_size()
    where = "one rank" if ranks == 1 else f"{ranks} ranks, allreduce"
    report = (f"### A digits trial's fixed cost ({where}, {trials_n} trials, "
              f"3 folds x up to {spec.training.epochs} epochs)\n\n{machine()}\n\n"
              f"`python benchmarks/trial_overhead.py --trials {trials_n} --ranks {ranks}`"
              f"\n\n{table(rows)}\n")
    if ranks == 1:
        parts = [breakdown(spec, p, i) for i, p in enumerate(trials[1:4])]
        split = {k: float(np.median([p[k] for p in parts])) for k in parts[0]}
        report += f"\nWhere the fixed cost goes (median of 3 trials):\n\n{table([split])}\n"
    print(report)
    return report


if __name__ == "__main__":
    main()
