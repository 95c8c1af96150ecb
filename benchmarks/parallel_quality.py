"""Does running under mpirun cost the search anything? The same study, the same number of
trials, in one process and under `mpiexec -n N` (N - 1 groups asking in parallel), over
several seeds: the best value each reaches, and the medians side by side.

    python benchmarks/parallel_quality.py                       # examples/branin, -n 5, 10 seeds
    python benchmarks/parallel_quality.py --spec examples/mixed/spec.yaml --seeds 5

With groups busy at once the searcher suggests with pending points (a constant liar) and,
where results come faster than the model, a group may get a random filler
(mpiopt.search.background); both can cost quality at equal trials, which this measures.
"""
from __future__ import annotations

import argparse
import re
import statistics
import tempfile
from pathlib import Path

import yaml

from _common import ROOT, machine, mpiopt, table

BEST = re.compile(r"best value ([-\d.e+]+)")


def best_of(spec: Path, seed: int, np: int | None, tmp: Path) -> tuple[float, int]:
    """(best value, fillers) of one study with this seed."""
    data = yaml.safe_load(spec.read_text())
    data["study"]["name"] = f"s{seed}-{np or 1}"
    data["search"]["seed"] = seed
    data.pop("storage", None)
    base = spec.parent.resolve()
    fn = data["objective"].get("function")
    if fn and not Path(fn.split(":")[0]).is_absolute():
        data["objective"]["function"] = f"{base / fn.split(':')[0]}:{fn.split(':')[1]}"
    path = tmp / f"{data['study']['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = mpiopt(["search", path, "--storage", f"sqlite:///{tmp / 'q.db'}"], np=np, cwd=tmp)
    found = BEST.search(proc.stdout)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"{path} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    fillers = re.search(r"(\d+) trial\(s\) got a random point", proc.stdout)
    return float(found.group(1)), int(fillers.group(1)) if fillers else 0


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "examples" / "branin" / "spec.yaml")
    ap.add_argument("--np", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=10)
    a = ap.parse_args(argv)
    a.spec = a.spec.resolve()
    rows = []
    with tempfile.TemporaryDirectory(prefix="mpiopt-pq-") as tmp:
        for seed in range(a.seeds):
            one, _ = best_of(a.spec, seed, None, Path(tmp))
            many, fillers = best_of(a.spec, seed, a.np, Path(tmp))
            rows.append({"seed": seed, "one process": one, f"-n {a.np}": many,
                         "fillers": fillers})
            print(table(rows[-1:]), flush=True)
    medians = {"seed": "median", "one process": statistics.median(r["one process"] for r in rows),
               f"-n {a.np}": statistics.median(r[f"-n {a.np}"] for r in rows),
               "fillers": statistics.median(r["fillers"] for r in rows)}
    report = (f"`python benchmarks/parallel_quality.py --spec {a.spec.relative_to(ROOT)} "
              f"--np {a.np} --seeds {a.seeds}`\n\n{machine()}\n\n{table([*rows, medians])}")
    print(report)
    return report


if __name__ == "__main__":
    main()
