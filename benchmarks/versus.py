"""Any benchmark here, run by two versions of mpiopt side by side in one run.

    python benchmarks/versus.py --base main~3 -- scheduling.py --groups 2 4 --duration 0.2

checks out `--base` and `--this` (git revisions; `--this` is HEAD unless given, so commit
what you measure) into temporary worktrees, then runs the benchmark script `--rounds`
times from each in turn (base, this, base, ...), with
PYTHONPATH pointing at that tree so every process the benchmark starts (mpiexec, the
`mpiopt` command, here `python -m mpiopt`) imports that tree's mpiopt. `--harness this`
runs this revision's script against both (benchmarks that only start `mpiopt` jobs, whose
measuring code should be the same for both); by default each tree runs its own (those
that call mpiopt's Python API, which may have changed between them). The Markdown tables the script prints are
read back; for every numeric cell it prints the median over rounds of each version and
the ratio this / base. The machine's noise hits both alike, so the ratio is the figure
to read; a ratio within the rounds' own spread is "no change".
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, machine, table

HERE = Path(__file__).resolve().parent


def parse_tables(text: str) -> dict[tuple, dict[str, float]]:
    """{(table index, row key): {column: value}} for the numeric cells of every Markdown
    table in `text`; a row's key is its first cell and its other non-numeric cells (and,
    where that repeats in a table, its place among the rows that share it)."""
    out, index, header = {}, -1, None
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if cells is None:
            header = None
            continue
        if header is None:
            header, index = cells, index + 1
            continue
        if all(set(c) <= {"-", ":"} for c in cells):
            continue
        numbers, key = {}, [index, cells[0]]
        for i, (column, cell) in enumerate(zip(header, cells)):
            try:
                numbers[column] = float(cell.rstrip("%x"))
            except ValueError:
                if i:
                    key.append(cell)
        while tuple(key) in out:
            key.append("again")
        out[tuple(key)] = numbers
    return out


def run_once(tree: Path, harness: Path, script: str, args: list[str], command: Path) -> str:
    env = dict(os.environ, PYTHONPATH=str(tree), MPIOPT_COMMAND=str(command))
    proc = subprocess.run([sys.executable, str(harness / "benchmarks" / script), *args],
                          cwd=harness, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{script} failed in {tree}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc.stdout


def compare(runs: dict[str, list[dict]]) -> list[dict]:
    rows = []
    for key in runs["this"][0]:
        for column in runs["this"][0][key]:
            values = {v: [r[key][column] for r in runs[v] if key in r and column in r[key]]
                      for v in ("base", "this")}
            if not values["base"] or not values["this"]:
                continue
            base, this = statistics.median(values["base"]), statistics.median(values["this"])
            rows.append({"row": " ".join(map(str, key[1:])) or str(key[0]), "column": column,
                         "base": base, "this": this,
                         "this / base": this / base if base else None,
                         "base spread": (max(values["base"]) - min(values["base"])) / base
                         if base else None})
    return rows


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="main", help="the git revision to compare with")
    ap.add_argument("--this", default="HEAD", help="the git revision to measure")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--harness", choices=("own", "this"), default="own",
                    help="whose benchmark script runs: each tree's own, or this tree's for both")
    ap.add_argument("script", help="a benchmark script of benchmarks/, e.g. scheduling.py")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="its arguments (after --)")
    a = ap.parse_args(argv)
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    with tempfile.TemporaryDirectory(prefix="mpiopt-versus-") as tmp:
        trees = {"base": Path(tmp) / "base", "this": Path(tmp) / "this"}
        command = Path(tmp) / "mpiopt"
        command.write_text(f"#!{sys.executable}\nimport runpy\n"
                           "runpy.run_module('mpiopt', run_name='__main__', alter_sys=True)\n")
        command.chmod(0o755)
        for version, revision in (("base", a.base), ("this", a.this)):
            subprocess.run(["git", "worktree", "add", "--detach", str(trees[version]), revision],
                           cwd=ROOT, check=True, capture_output=True)
        try:
            runs = {"base": [], "this": []}
            for _ in range(a.rounds):
                for version, tree in trees.items():
                    harness = trees["this"] if a.harness == "this" else tree
                    runs[version].append(parse_tables(run_once(tree, harness, a.script, args,
                                                               command)))
        finally:
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT,
                               capture_output=True)
    report = (f"`python benchmarks/versus.py --base {a.base} --this {a.this} --rounds {a.rounds} "
              f"--harness "
              f"{a.harness} -- {a.script} "
              f"{' '.join(args)}`\n\n{machine()}\n\n{table(compare(runs))}")
    print(report)
    return report


if __name__ == "__main__":
    main()
