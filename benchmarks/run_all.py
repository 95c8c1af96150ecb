"""`make bench`: run every benchmark at its default size and write its results file,
benchmarks/results/SCRIPT.md (one per script; benchmarks/RESULTS.md is the index, and
docs/benchmarks.md the headline table, written by hand from these files).

Each script measures what it compares side by side in one run and prints ratios; this
writes each one's report under the machine description and the command. Run one script
alone with its own options to go bigger on a cluster.

What people wrote by hand survives a run: a file's text between `<!-- notes -->` and
`<!-- /notes -->` (what a table means, the figures a change replaced) is carried over
from the old file, under the new report.

    make bench                                  # everything (about an hour on 2 cores)
    python benchmarks/run_all.py simulate.py    # some scripts; the others' files stay
"""
from __future__ import annotations

import datetime
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SCRIPTS = ["scheduling.py", "coordinator_cost.py", "searcher_cost.py", "training_throughput.py",
           "quality_suite.py", "pruning.py", "trial_overhead.py", "startup.py", "multiobjective.py",
           "storage.py", "simulate.py", "checkpoint_overhead.py", "conditional.py", "pbt.py",
           "failures.py", "torch_training.py"]


def final_report(stdout: str) -> str:
    """A script's report (from its first '### ' heading on, after any progress lines),
    else all it printed."""
    text = "\n" + stdout                 # a report may begin on the very first line
    start = text.find("\n### ")
    return (text[start + 1:] if start >= 0 else stdout).strip()


NOTES = re.compile(r"<!-- notes -->.*?<!-- /notes -->", re.S)


def results_file(script: str) -> Path:
    """benchmarks/results/SCRIPT.md: where a script's report and notes live."""
    return RESULTS / (Path(script).stem + ".md")


def notes_of(section: str) -> str:
    return "\n\n".join(NOTES.findall(section))


def run_one(script: str, now: str, machine: str) -> bool:
    """Run `script`, write its results file (keeping its notes); False if it failed."""
    print(f"== {script}", flush=True)
    from _common import env

    proc = subprocess.run([sys.executable, str(HERE / script)], cwd=HERE, env=env(),
                          capture_output=True, text=True)
    print(proc.stdout[-4000:], proc.stderr[-2000:] if proc.returncode else "", flush=True)
    if proc.returncode != 0:                   # the last good results stay as they were
        print(f"{script} failed with exit status {proc.returncode}:\n{proc.stderr[-2000:]}")
        return False
    out = results_file(script)
    notes = notes_of(out.read_text()) if out.exists() else ""
    out.write_text(f"# {script}\n\nMachine: {machine}\n\n`python benchmarks/{script}` ({now})\n\n"
                   f"{final_report(proc.stdout)}\n" + (f"\n{notes}\n" if notes else ""))
    print(f"wrote {out}", flush=True)
    return True


def main() -> int:
    sys.path.insert(0, str(HERE))
    from _common import machine

    now = datetime.datetime.now().isoformat(timespec='minutes')
    RESULTS.mkdir(exist_ok=True)
    failed = [s for s in (sys.argv[1:] or SCRIPTS) if not run_one(s, now, machine())]
    if failed:
        print(f"failed: {', '.join(failed)}")
    print("where a headline figure moved: update docs/benchmarks.md, then run benchmarks/plots.py")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
