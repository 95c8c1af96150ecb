"""What checkpoints cost: a digits trial with training.checkpoint_every 0 and 1, side by side.

The same parameter sets, one rank (MPI.COMM_SELF), configurations interleaved trial by
trial so machine noise hits both alike. Reported: the median epoch (training and
validation), the median checkpoint write (rank 0's np.savez of every model and optimizer
variable, fsync, rename), their ratio, and the whole trials' ratio (every 1 vs off).
Early stopping is off here so both configurations train the same epochs.

    python benchmarks/checkpoint_overhead.py --trials 6 [--width 512]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import ROOT, machine, table


def one_trial(spec, params, seed, folder, every: int) -> float:
    from mpi4py import MPI

    from mpiopt.artifacts import TrialArtifacts
    from mpiopt.training import run_training

    art = TrialArtifacts(checkpoints=str(folder), every=every) if every else None
    start = time.perf_counter()
    run_training(spec, params, MPI.COMM_SELF, seed, artifacts=art)
    return time.perf_counter() - start


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=6, help="trials per configuration")
    ap.add_argument("--width", type=int, default=None, help="fix the layer width (model size)")
    args = ap.parse_args(argv)
    from mpiopt.artifacts import checkpoint
    from mpiopt.spec import load_spec

    spec = load_spec(ROOT / "examples" / "digits" / "spec.yaml",
                     {"training.early_stopping": None, "training.pruning": None})
    writes: list[float] = []
    original = checkpoint.save

    def timed(*a, **k):
        start = time.perf_counter()
        original(*a, **k)
        writes.append(time.perf_counter() - start)

    checkpoint.save = timed
    rng = np.random.default_rng(3)
    trials = [spec.space.sample(rng) for _ in range(args.trials + 1)]
    if args.width:
        for p in trials:
            p["width"] = args.width
    walls = {0: [], 1: []}
    with tempfile.TemporaryDirectory() as tmp:
        one_trial(spec, trials[0], 0, Path(tmp) / "warm", 0)   # TF's first use
        for i, params in enumerate(trials[1:], 1):
            for every in (0, 1):
                folder = Path(tmp) / f"t{i}-{every}"
                walls[every].append(one_trial(spec, params, i, folder, every))
                if every:
                    size = sum(f.stat().st_size for f in folder.glob("*.npz"))
        from mpi4py import MPI

        from mpiopt.training import run_training

        res = run_training(spec, trials[1], MPI.COMM_SELF, 1)
        epochs = [s["end"] - s["start"] for s in res["spans"] if s["kind"] == "epoch"]
    epoch_s, write_s = float(np.median(epochs)), float(np.median(writes))
    rows = [{"epoch s (median)": epoch_s, "checkpoint write s (median)": write_s,
             "write / epoch": write_s / epoch_s,
             "trial s, every 0": float(np.median(walls[0])),
             "trial s, every 1": float(np.median(walls[1])),
             "trial every 1 / every 0": float(np.median(np.array(walls[1]) / np.array(walls[0]))),
             "checkpoint files (last trial) KiB": size / 1024}]
    report = (f"### Checkpoint overhead (digits, one rank, {args.trials} trials per configuration, "
              f"3 folds x {spec.training.epochs} epochs"
              f"{f', width {args.width}' if args.width else ''})\n\n{machine()}\n\n"
              f"`python benchmarks/checkpoint_overhead.py --trials {args.trials}"
              f"{f' --width {args.width}' if args.width else ''}`\n\n{table(rows)}\n")
    print(report)
    return report


if __name__ == "__main__":
    main()
