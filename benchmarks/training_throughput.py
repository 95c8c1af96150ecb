"""Training throughput: plain Keras model.fit against the mpiopt trainer and its algorithms.

For the digits and the jets example models, in the same run:
  fit                 Keras model.fit in one process (it also computes the training metrics
                      at every step, which the trainer does not)
  fit, loss only      model.fit of the same model compiled without metrics
  trainer 1           the mpiopt trainer on 1 rank
  allreduce 2         synchronous data parallel on 2 ranks
  allreduce 3         the same on 3 ranks, to compare with downpour at equal rank count
  downpour 3          master + 2 workers
  easgd 3             3 elastic-averaging workers
Every configuration gets the same total number of intra-op threads (--threads, default the
usable cores), divided among its ranks (at least one each, so 3 ranks on 2 cores use 3).
"trainer 1, 1 thread" is the reference for scaling when each rank gets its own core.
An untimed warm-up epoch (tracing) comes first; each configuration then reports its best
timed epoch, which filters out the other load of a shared machine. Printed: samples/s,
ratios, and milliseconds per step in compute and in communication (averaged over the
ranks that compute; for downpour, the workers; communication includes waiting for the
slowest rank).

    python benchmarks/training_throughput.py                 # both models, a few minutes
    python benchmarks/training_throughput.py --models jets --repeat 3    # a shared machine
    python benchmarks/training_throughput.py --models jets --epochs 5 --threads 32
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

MODELS = {
    "digits": dict(model="examples/digits/model.py:build_model", data="examples/digits/data.py:load",
                   batch=64, params=dict(width=64, depth=2, learning_rate=1e-3, dropout=0.1,
                                         activation="relu")),
    "jets": dict(model="examples/jets/model.py:build_model", data="examples/jets/data.py:load",
                 batch=128, params=dict(filters=8, kernel_size=3, dense_units=32,
                                        learning_rate=1e-3, dropout=0.1)),
}
# (name, mode, ranks, threads per rank: None = the total divided among the ranks)
CONFIGS = [("fit", "fit", 1, None), ("fit, loss only", "fit-loss", 1, None),
           ("trainer 1", "allreduce", 1, None), ("trainer 1, 1 thread", "allreduce", 1, 1),
           ("allreduce 2", "allreduce", 2, None),
           ("allreduce 3", "allreduce", 3, None), ("downpour 3", "downpour", 3, None),
           ("easgd 3", "easgd", 3, None)]


# --------------------------------------------------------------------------- one configuration
def worker(model_name: str, mode: str, epochs: int, out: Path) -> None:
    from mpi4py import MPI

    from mpiopt.training import threads

    comm = MPI.COMM_WORLD
    threads.pin_threads(comm)
    from mpiopt.refs import load_callable
    from mpiopt.training.frameworks import keras_model as backend

    cfg = MODELS[model_name]
    x, y = load_callable(str(ROOT / cfg["data"]))()
    model = backend.build_model(load_callable(str(ROOT / cfg["model"])), cfg["params"], 0)
    if mode.startswith("fit"):
        if mode == "fit-loss":
            model.compile(optimizer=model.optimizer, loss=model.loss)
        result = _fit(model, x, y, cfg["batch"], epochs)
    else:
        result = _trainer(backend.KerasModel(model, x), comm, mode, x, y, cfg["batch"], epochs)
        gathered = comm.gather(result, root=0)
        if comm.Get_rank() == 0 and comm.Get_size() > 1:
            result = _combine(gathered, mode)
    if comm.Get_rank() == 0:
        result["threads"] = threads.pinned_threads()
        out.write_text(json.dumps(result))


def _fit(model, x, y, batch, epochs) -> dict:
    import keras

    times = []

    class EpochTimer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times.append(time.perf_counter() - self.start)

    model.fit(x, y, batch_size=batch, epochs=epochs + 1, verbose=0, callbacks=[EpochTimer()])
    return {"samples_s": len(x) / min(times[1:]), "steps": -(-len(x) // batch)}


def _trainer(model, comm, mode, x, y, batch, epochs) -> dict:
    from types import SimpleNamespace

    import numpy as np

    from mpiopt.training.trainer import make_algorithm

    training = SimpleNamespace(batch_size=batch, mode=mode, sync_every=1, easgd_alpha=0.5,
                               easgd_period=4)
    algorithm = make_algorithm(model, comm, training)
    algorithm.start()
    order = lambda e: np.random.default_rng(e).permutation(len(x))  # noqa: E731
    algorithm.train_epoch(x, y, order(0))
    best = None
    for epoch in range(1, epochs + 1):
        comm.Barrier()
        start = time.perf_counter()
        stats = algorithm.train_epoch(x, y, order(epoch))
        comm.Barrier()
        wall = comm.allreduce(time.perf_counter() - start, op=_max())
        if best is None or wall < best[0]:
            best = wall, stats
    wall, stats = best
    steps = max(1, stats.steps)
    return {"samples_s": len(x) / wall, "compute_ms": 1e3 * stats.compute_s / steps,
            "comm_ms": 1e3 * stats.comm_s / steps, "steps": stats.steps, "rank": comm.Get_rank()}


def _max():
    from mpi4py import MPI

    return MPI.MAX


def _combine(per_rank: list, mode: str) -> dict:
    """Group throughput from rank 0; per-step times averaged over the computing ranks."""
    computing = [r for r in per_rank if not (mode == "downpour" and r["rank"] == 0)]
    out = dict(per_rank[0])
    for key in ("compute_ms", "comm_ms"):
        out[key] = sum(r[key] for r in computing) / len(computing)
    if mode == "downpour":
        out["master_apply_ms"] = per_rank[0]["compute_ms"]
    return out


# --------------------------------------------------------------------------- the driver
def run_config(model_name: str, mode: str, ranks: int, epochs: int, threads: int, tmp: Path) -> dict:
    out = tmp / f"{model_name}-{mode}-{ranks}-{threads}.json"
    env = dict(os.environ, MPIOPT_THREADS=str(threads), TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, __file__, "--worker", model_name, mode, str(epochs), str(out)]
    if not mode.startswith("fit"):
        cmd = [str(BIN / "mpiexec"), "-n", str(ranks), *cmd]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


def table(model_name: str, rows: dict, total_threads: int) -> str:
    fit, one = rows["fit"]["samples_s"], rows["trainer 1"]["samples_s"]
    lines = [f"### {model_name} (global batch {MODELS[model_name]['batch']}, {total_threads} threads in all)", "",
             "| configuration | ranks x threads | samples/s | vs fit | vs trainer 1 | compute ms/step | comm ms/step |",
             "|---|---|---|---|---|---|---|"]
    for name, mode, ranks, _ in CONFIGS:
        r = rows[name]
        ms = lambda k: f"{r[k]:.2f}" if k in r else "-"  # noqa: E731
        lines.append(f"| {name} | {ranks} x {r['threads']} | {r['samples_s']:.0f} | {r['samples_s'] / fit:.2f} | "
                     f"{r['samples_s'] / one:.2f} | {ms('compute_ms')} | {ms('comm_ms')} |")
    scale = rows["allreduce 2"]["samples_s"] / rows["trainer 1, 1 thread"]["samples_s"]
    lines.append(f"\nallreduce 2 ranks x 1 thread against 1 rank x 1 thread: {scale:.2f}x")
    if "master_apply_ms" in rows["downpour 3"]:
        lines.append(f"downpour master: {rows['downpour 3']['master_apply_ms']:.2f} ms per update "
                     "(apply + read weights)")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="digits,jets")
    parser.add_argument("--epochs", type=int, default=4,
                        help="timed epochs per configuration (the best one counts)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="total intra-op threads of every configuration")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every configuration this many times, interleaved, and keep "
                        "the best (use 3 or more on a shared machine)")
    parser.add_argument("--json", help="also write the raw numbers here")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        name, mode, epochs, out = args.worker
        worker(name, mode, int(epochs), Path(out))
        return 0
    import tempfile

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model_name in args.models.split(","):
            rows = {}
            for _ in range(args.repeat):
                for name, mode, ranks, threads in CONFIGS:
                    threads = threads or max(1, args.threads // ranks)
                    row = run_config(model_name, mode, ranks, args.epochs, threads, Path(tmp))
                    print(f"  {model_name:7s} {name:20s} {row['samples_s']:9.0f} samples/s", file=sys.stderr)
                    if name not in rows or row["samples_s"] > rows[name]["samples_s"]:
                        rows[name] = row
            results[model_name] = rows
            print(table(model_name, rows, args.threads) + "\n", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
