"""Population-based training against bayesian with ASHA and bayesian alone, at equal compute.

The jets example (val_auc, maximize) on `mpiexec -n 3`: a coordinator and two groups of
one rank. Compute is counted in group-epochs (one group training one epoch); every method
gets the same G = trials x epochs of the bayesian run:

- bayesian: `--trials` trials of `--epochs` epochs (no early stopping, no pruning);
- bayesian + ASHA: the same, with ASHA pruning (reduction factor 3, from epoch 2) and twice
  the trials, cut at G group-epochs (pruned trials free compute for more trials);
- pbt: G / interval rounds of `--interval` epochs, population `--population`, exploring
  learning_rate and dropout (the other parameters change the network's shape).

All use one fold (a holdout), as pbt needs. For each, in the order trials finished, the
group-epochs are summed until G; the best value reached within G, and the time from the
study's first start to the end of the trial that reached it, are reported per seed, with
the median over seeds. A bayesian trial's value is its best epoch; a pbt round's is its
last epoch (the model it leaves behind).

    python benchmarks/pbt.py --seeds 2
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _common import ROOT, machine, mpiopt, table, write_spec


def _spec(name: str, method: str, seed: int, args) -> dict:
    from mpiopt.spec import load_spec

    spec = load_spec(ROOT / "examples" / "jets" / "spec.yaml").to_dict()
    spec["study"]["name"] = name
    spec["objective"]["model"] = str(ROOT / "examples" / "jets" / "model.py") + ":build_model"
    spec["objective"]["data"] = {"loader": str(ROOT / "examples" / "jets" / "data.py") + ":load"}
    spec["resources"] = {"group_size": 1}
    t = spec["training"]
    t.update(kfold=1, early_stopping=None, pruning=None, epochs=args.epochs)
    s = spec["search"]
    s.update(seed=seed, trials=args.trials)
    for other in ("evolutionary", "bayesian", "pbt"):
        s.pop(other, None)
    if method in ("bayesian", "bayesian+asha"):
        s.update(algorithm="bayesian", bayesian={"initial_points": 4})
    if method == "bayesian+asha":
        s["trials"] = 2 * args.trials
        t["pruning"] = {"pruner": "asha", "reduction_factor": 3, "min_epoch": 2}
    if method == "pbt":
        s.update(algorithm="pbt", trials=args.trials * args.epochs // args.interval,
                 pbt={"population": args.population, "interval": args.interval,
                      "explore": ["learning_rate", "dropout"]})
    return spec


def run(tmp: Path, method: str, seed: int, args) -> dict:
    name = f"jets-{method.replace('+', '-')}-{seed}"
    path = write_spec(tmp / f"{name}.yaml", **_spec(name, method, seed, args))
    url = f"sqlite:///{tmp / (name + '.db')}"
    start = time.perf_counter()
    proc = mpiopt(["search", path, "--storage", url, "--quiet"], np=3, cwd=tmp)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stdout}\n{proc.stderr}")
    from mpiopt.storage import open_storage

    with open_storage(url) as st:
        trials = st.get_trials(st.get_study(name).id)
    budget = args.trials * args.epochs
    t0 = min(t.started_at for t in trials)
    used, best, best_at, counted = 0, None, None, 0
    for t in sorted((t for t in trials if t.finished_at), key=lambda t: t.finished_at):
        epochs = args.interval if t.round is not None else len(t.intermediate)
        if used + epochs > budget:
            break
        used += epochs
        counted += 1
        if t.value is not None and t.status.value in ("COMPLETE", "PRUNED") and \
                (best is None or t.value > best):
            best, best_at = t.value, (t.finished_at - t0).total_seconds()
    return {"method": method, "seed": seed, "best val_auc": f"{best:.5f}",
            "1 - auc": f"{1 - best:.2e}", "time to best s": best_at,
            "group-epochs": used, "trials counted": counted, "job wall s": wall}


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--trials", type=int, default=8, help="bayesian trials (G = trials x epochs)")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--population", type=int, default=4)
    ap.add_argument("--interval", type=int, default=2)
    ap.add_argument("--methods", nargs="+", default=["pbt", "bayesian+asha", "bayesian"])
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            for method in args.methods:
                rows.append(run(Path(tmp), method, seed, args))
                print(table(rows[-1:]), flush=True)
    summary = []
    for method in args.methods:
        mine = [r for r in rows if r["method"] == method]
        summary.append({"method": method,
                        "median best val_auc": f'{statistics.median(float(r["best val_auc"]) for r in mine):.5f}',
                        "median 1 - auc": f'{statistics.median(float(r["1 - auc"]) for r in mine):.2e}',
                        "median time to best s": statistics.median(r["time to best s"] for r in mine),
                        "median job wall s": statistics.median(r["job wall s"] for r in mine)})
    command = (f"python benchmarks/pbt.py --seeds {args.seeds} --trials {args.trials} "
               f"--epochs {args.epochs} --population {args.population} --interval {args.interval}")
    report = (f"### PBT against bayesian + ASHA and bayesian (jets, val_auc, maximize; "
              f"{args.trials * args.epochs} group-epochs each)\n\n{machine()}\n\n`{command}`\n\n"
              f"{table(summary)}\n\nPer seed:\n\n{table(rows)}\n")
    print(report)
    return report


if __name__ == "__main__":
    main()
