"""Pruning on the digits study: does it keep the trials that would end best, what does it save?

For each seed, the digits example (examples/digits: 3 folds one after another) runs three
times with the same spec, seed and number of trials: without pruning, with the median
pruner and with ASHA; only training.pruning changes (early stopping is off in all three,
so the epochs saved are pruning's own). Then every trial a pruner stopped is trained
again to its end, unpruned, with its own parameters and seed (in one process on one rank,
as a group of one rank trains it: --group-size 1 makes that the study's own training),
for the value it would have ended at.

Per pruner, over the seeds:
- "best vs none": the study's best value less the best without pruning at the same seed
  and number of trials (signed so that more is better), its mean and 95% t-interval over
  the seeds. The stated test, "best within noise": the interval's upper end is at least 0,
  that is, pruning's best is not below no pruning's by more than the seeds' noise.
- "epochs saved": 1 less the epochs run over the epochs the same trials run unpruned
  (trials x folds x epochs), all seeds together.
- "pruned" and "top-quarter pruned": how many trials were pruned, and of those, how many
  would have ended in the top quarter of their study (its trials' final values, each
  pruned trial at its unpruned value: the best quarter, ties in); "top-quarter pruned
  at": where those were stopped, as fold/epoch (fold from 0, epoch from 1) and count.
- "wall vs none": the study's time (first trial start to last trial end) over the same
  seed's without pruning, the median over the seeds.

    python benchmarks/pruning.py                   # 10 seeds x 12 trials: 15-25 min on 2 cores
    python benchmarks/pruning.py --seeds 20 --trials 30 --np 9 --group-size 2
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy

from _common import ROOT, env, machine, mpiopt, table, write_spec

PRUNERS = {
    "none": None,
    "median": {"pruner": "median", "warmup_epochs": 2, "min_trials": 3},
    "asha": {"pruner": "asha", "reduction_factor": 3, "min_epoch": 2},
}


def study(tmp: Path, name: str, seed: int, args) -> tuple[dict, Path, Path]:
    """One digits study: its spec as run, the spec's file and the database."""
    from mpiopt.spec import load_spec

    spec = load_spec(ROOT / "examples" / "digits" / "spec.yaml").to_dict()
    spec["study"]["name"] = f"digits-{name}-{seed}"
    spec["search"].update(trials=args.trials, seed=seed)
    if args.algorithm:
        spec["search"]["algorithm"] = args.algorithm
    spec["training"].update(pruning=PRUNERS[name], early_stopping=None, epochs=args.epochs)
    spec["resources"]["group_size"] = args.group_size
    path = write_spec(tmp / f"{name}-{seed}.yaml", **spec)   # (its files' paths: absolute)
    db = tmp / f"{name}-{seed}.db"
    proc = mpiopt(["search", path, "--storage", f"sqlite:///{db}", "--quiet"], np=args.np,
                  cwd=tmp)
    if proc.returncode != 0:
        raise SystemExit(f"{name} (seed {seed}) failed:\n{proc.stdout}\n{proc.stderr}")
    return spec, path, db


def trials_of(db: Path, name: str):
    from mpiopt.storage import open_storage

    with open_storage(f"sqlite:///{db}", read_only=True) as st:
        return st.get_trials(st.get_study(name).id)


def unpruned(spec_path: Path, pruned) -> dict[str, float]:
    """{_key(trial): the value it ends at, trained to its end}: one process, one rank."""
    jobs = [{"key": _key(t), "params": t.params, "seed": t.seed} for t in pruned]
    proc = subprocess.run([sys.executable, __file__, "--unpruned", str(spec_path)],
                          input=json.dumps(jobs), capture_output=True, text=True, env=env(),
                          timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"training the pruned trials again failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def train_unpruned(spec_path: str) -> None:
    """--unpruned SPEC: the trials on stdin trained to their end; {key: value} out."""
    from mpi4py import MPI

    from mpiopt.spec import load_spec
    from mpiopt.training import run_training

    spec = load_spec(spec_path)          # (the study's without pruning)
    out = {t["key"]: run_training(spec, t["params"], MPI.COMM_SELF, t["seed"])["value"]
           for t in json.loads(sys.stdin.read())}
    print(json.dumps(out))


def one_seed(tmp: Path, seed: int, args) -> dict[str, dict]:
    """Each pruner's figures at this seed."""
    runs = {}
    for name in args.pruners:
        spec, path, db = study(tmp, name, seed, args)
        runs[name] = (spec, path, trials_of(db, spec["study"]["name"]))
    sign = -1.0 if runs["none"][0]["objective"]["direction"] == "maximize" else 1.0
    base = runs["none"][2]
    ends = _ends(runs)
    out = {}
    for name, (spec, path, trials) in runs.items():
        pruned = [t for t in trials if t.status.value == "PRUNED"]
        final = [float(ends[_key(t)] if t in pruned else t.value)
                 for t in trials if t.value is not None]
        # the best quarter of the study's final values (lower is better after the sign)
        cut = float(numpy.percentile([sign * v for v in final], 25)) if final else math.nan
        out[name] = {
            "best": _best(base, sign) - _best(trials, sign),      # more is better
            "epochs": sum(len(t.intermediate) for t in trials),
            "full": len(trials) * spec["training"]["kfold"] * spec["training"]["epochs"],
            "pruned": len(pruned), "trials": len(trials),
            "top": int(sum(sign * ends[_key(t)] <= cut for t in pruned)),
            "missed": _where([t for t in pruned if sign * ends[_key(t)] <= cut]),
            "wall": _wall(trials) / _wall(base),
        }
    return out


def _ends(runs: dict) -> dict:
    """{(params, seed): the value it ends at unpruned} for every pruned trial of the runs:
    the run without pruning's own result where it ran the same parameters with the same
    seed (a bayesian search's first points, any random search), else trained again."""
    ends = {_key(t): t.value for t in runs["none"][2] if t.status.value == "COMPLETE"}
    missing = {_key(t): t for name, (_, _, trials) in runs.items() for t in trials
               if t.status.value == "PRUNED" and _key(t) not in ends}
    if missing:
        ends.update(unpruned(runs["none"][1], list(missing.values())))
    return ends


def _where(trials) -> dict[str, int]:
    """{"fold/epoch": how many of these trials were pruned there} (their last report)."""
    out: dict[str, int] = {}
    for t in trials:
        last = max(t.intermediate)
        out[f"{last.fold}/{last.epoch}"] = out.get(f"{last.fold}/{last.epoch}", 0) + 1
    return out


def _key(t) -> str:
    return json.dumps([t.params, t.seed], sort_keys=True)


def _best(trials, sign: float) -> float:
    """The best COMPLETE value, lower-is-better after `sign`."""
    return min(sign * t.value for t in trials if t.status.value == "COMPLETE")


def _wall(trials) -> float:
    return (max(t.finished_at for t in trials) - min(t.started_at for t in trials)).total_seconds()


def summary(per_seed: list[dict[str, dict]], names: list[str]) -> list[dict]:
    rows = []
    for name in names:
        got = [s[name] for s in per_seed]
        diffs = numpy.array([g["best"] for g in got])
        half = _t95(len(diffs)) * diffs.std(ddof=1) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.nan
        pruned = sum(g["pruned"] for g in got)
        rows.append({
            "pruner": name, "seeds": len(got), "trials": sum(g["trials"] for g in got),
            "best vs none": float(diffs.mean()),
            "95% interval": f"{diffs.mean() - half:+.4f} .. {diffs.mean() + half:+.4f}",
            "best within noise": ("-" if name == "none" or len(diffs) < 2
                                  else "yes" if diffs.mean() + half >= 0 else "NO"),
            "epochs saved": 1 - sum(g["epochs"] for g in got) / sum(g["full"] for g in got),
            "pruned": pruned,
            "top-quarter pruned": (f"{sum(g['top'] for g in got)} of {pruned}"
                                   if name != "none" else "-"),
            "top-quarter pruned at": _at(got) if name != "none" else "-",
            "wall vs none": float(numpy.median([g["wall"] for g in got])),
        })
    return rows


def _at(got: list[dict]) -> str:
    """Where the top-quarter trials were pruned, over the seeds: 'fold/epoch: count'."""
    where: dict[str, int] = {}
    for g in got:
        for step, n in g["missed"].items():
            where[step] = where.get(step, 0) + n
    order = sorted(where, key=lambda k: tuple(map(int, k.split("/"))))
    return ", ".join(f"{k}: {where[k]}" for k in order) or "-"


def _t95(n: int) -> float:
    """Student's t at 97.5% for n - 1 degrees of freedom (a two-sided 95% interval)."""
    from scipy.stats import t

    return float(t.ppf(0.975, n - 1))


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--np", type=int, default=3, help="MPI processes (1 coordinator + the groups)")
    ap.add_argument("--group-size", type=int, default=1, help="ranks per group")
    ap.add_argument("--algorithm", default=None, help="search.algorithm (the example's: bayesian)")
    ap.add_argument("--pruners", nargs="+", default=list(PRUNERS))
    ap.add_argument("--keep", type=Path, help="keep the studies' databases in this folder")
    ap.add_argument("--unpruned", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.unpruned:
        train_unpruned(args.unpruned)
        return ""
    names = ["none"] + [n for n in args.pruners if n != "none"]
    args.pruners = names
    per_seed = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) if args.keep is None else args.keep
        folder.mkdir(parents=True, exist_ok=True)
        for seed in range(1, args.seeds + 1):
            per_seed.append(one_seed(folder, seed, args))
            print(f"seed {seed}: " + json.dumps(per_seed[-1]), flush=True)
    rows = summary(per_seed, names)
    algorithm = args.algorithm or "bayesian"
    report = (f"### Pruning (digits, {algorithm}, val_accuracy, maximize)\n\n{machine()}\n\n"
              f"`python benchmarks/pruning.py --seeds {args.seeds} --trials {args.trials} "
              f"--epochs {args.epochs} --np {args.np} --group-size {args.group_size}"
              + (f" --algorithm {args.algorithm}" if args.algorithm else "") + "`\n\n"
              f"{table(rows)}\n")
    print(report)
    return report


if __name__ == "__main__":
    main()
