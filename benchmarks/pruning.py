"""Pruning: the digits study without pruning, with the median pruner and with ASHA.

Same spec, seed and budget for each; only training.pruning changes, and early stopping is
off in all three so that the figures show what pruning alone saves. Reports the wall time
of the study (from the database: first trial start to last trial end), the best value,
how many trials were pruned, the share of all epochs that ran ("epochs run"), the time
the groups spent in trials other than each group's first ("steady trial s": the first
carries the rank's start-up, TensorFlow's import and the data, which pruning cannot save;
the steady saving should follow the epochs run once a trial's fixed cost is small), and
the median fixed cost of a steady trial that ran to the end (its duration less its
epochs), with ratios against the run without pruning. "fixed-cost model" is the steady
ratio expected if pruning saved exactly the epochs it cut while every trial still paid
the fixed cost (F + share x E) / (F + E), with F and F + E the median fixed cost and
duration of a full trial of the run without pruning: where "steady vs none" is close to
it, pruning saves all it can and the rest of the gap to "epochs run" is the fixed cost.

    python benchmarks/pruning.py --trials 16 --np 5
    python benchmarks/pruning.py --np 3 --group-size 1   # a core for each training rank here
"""
from __future__ import annotations

import argparse
import tempfile

import numpy
from pathlib import Path

from _common import ROOT, machine, mpiopt, table, write_spec

PRUNERS = {
    "none": None,
    "median": {"pruner": "median", "warmup_epochs": 2, "min_trials": 3},
    "asha": {"pruner": "asha", "reduction_factor": 3, "min_epoch": 2},
}


def run(tmp: Path, name: str, pruning, trials: int, np: int, epochs: int, group_size: int) -> dict:
    from mpiopt.spec import load_spec

    spec = load_spec(ROOT / "examples" / "digits" / "spec.yaml").to_dict()
    spec["study"]["name"] = f"digits-{name}"
    spec["search"]["trials"] = trials
    spec["training"]["pruning"] = pruning
    spec["training"]["early_stopping"] = None
    spec["training"]["epochs"] = epochs
    spec["resources"]["group_size"] = group_size
    path = write_spec(tmp / f"{name}.yaml", **spec)
    url = f"sqlite:///{tmp / (name + '.db')}"
    proc = mpiopt(["search", path, "--storage", url, "--quiet"], np=np, cwd=tmp)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stdout}\n{proc.stderr}")
    from mpiopt.storage import open_storage

    storage = open_storage(url)
    study = storage.get_study(f"digits-{name}")
    rows = storage.get_trials(study.id)
    best = storage.best_trials(study.id, 1)[0]
    storage.close()
    wall = (max(t.finished_at for t in rows) - min(t.started_at for t in rows)).total_seconds()
    # Each group's first trial carries the rank's start-up (TensorFlow's import, the data,
    # the first tracing: seconds), which pruning cannot save; the steady figures leave it out.
    first = {}
    for t in sorted(rows, key=lambda t: t.started_at):
        first.setdefault(t.group, t.number)
    steady = [t for t in rows if first.get(t.group) != t.number and t.duration]
    # a trial's fixed cost: its duration less its epochs at their median length (the first
    # epoch's extra time is tracing: fixed); from the trainer's spans, which a pruned trial
    # does not record, so only trials that ran to the end count
    fixed = [t.duration - len(ep) * float(numpy.median(ep)) for t in steady if t.spans
             for ep in [[s["end"] - s["start"] for s in t.spans if s["kind"] == "epoch"]]]
    epochs_run = sum(len(t.intermediate) for t in rows)
    most = len(rows) * epochs * spec["training"]["kfold"]
    return {"pruner": name, "wall s": wall, "best value": best.value,
            "pruned": sum(t.status.value == "PRUNED" for t in rows), "trials": len(rows),
            "epochs run": epochs_run / most,
            "steady trial s": sum(t.duration for t in steady),
            "fixed s/trial": float(numpy.median(fixed)) if fixed else float("nan"),
            "full trial s": float(numpy.median([t.duration for t in steady if t.spans]))
            if fixed else float("nan")}


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--np", type=int, default=5, help="MPI processes (1 coordinator + the groups)")
    ap.add_argument("--group-size", type=int, default=2, help="ranks per group (the demo's 2)")
    ap.add_argument("--pruners", nargs="+", default=list(PRUNERS))
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.pruners:
            rows.append(run(Path(tmp), name, PRUNERS[name], args.trials, args.np, args.epochs,
                            args.group_size))
            print(table(rows[-1:]), flush=True)
    base = rows[0]
    fixed, full = base["fixed s/trial"], base["full trial s"]
    for r in rows:
        r["wall vs none"] = r["wall s"] / base["wall s"]
        r["steady vs none"] = r["steady trial s"] / base["steady trial s"]
        # what the steady trials would take if pruning saved exactly the epochs it cut and
        # every trial still paid the fixed cost of the run without pruning
        r["fixed-cost model"] = (fixed + r["epochs run"] * (full - fixed)) / full
        del r["full trial s"]                  # (an input of the model, not a column)
    report = (f"### Pruning (digits, val_accuracy, maximize)\n\n{machine()}\n\n"
              f"`python benchmarks/pruning.py --trials {args.trials} --epochs {args.epochs} --np {args.np}"
              f" --group-size {args.group_size}`\n\n"
              f"{table(rows)}\n")
    print(report)
    return report


if __name__ == "__main__":
    main()
