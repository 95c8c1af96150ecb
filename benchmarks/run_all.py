"""`make bench`: run every benchmark at its default size and write benchmarks/RESULTS.md.

Each script measures what it compares side by side in one run and prints ratios; this
collects their reports under the machine description. Run one script alone with its own
options to go bigger on a cluster.
"""
from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ["scheduling.py", "coordinator_cost.py", "searcher_cost.py", "training_throughput.py",
           "quality_suite.py", "pruning.py", "trial_overhead.py", "multiobjective.py", "storage.py",
           "simulate.py", "checkpoint_overhead.py", "conditional.py", "pbt.py"]


def final_report(stdout: str) -> str:
    """A script's report (from its first '### ' heading on, after any progress lines),
    else all it printed."""
    start = stdout.find("\n### ")
    return (stdout[start + 1:] if start >= 0 else stdout).strip()


def main() -> int:
    sys.path.insert(0, str(HERE))
    from _common import env, machine

    parts = [f"# Benchmark results\n\nWritten by `make bench` on "
             f"{datetime.datetime.now().isoformat(timespec='minutes')}.\nMachine: {machine()}\n"]
    failed = []
    for script in sys.argv[1:] or SCRIPTS:
        print(f"== {script}", flush=True)
        proc = subprocess.run([sys.executable, str(HERE / script)], cwd=HERE, env=env(),
                              capture_output=True, text=True)
        print(proc.stdout[-4000:], proc.stderr[-2000:] if proc.returncode else "", flush=True)
        if proc.returncode != 0:
            failed.append(script)
            parts.append(f"## {script}\n\nfailed with exit status {proc.returncode}:\n\n```\n{proc.stderr[-2000:]}\n```\n")
            continue
        parts.append(f"## {script}\n\n`python benchmarks/{script}`\n\n{final_report(proc.stdout)}\n")
    (HERE / "RESULTS.md").write_text("\n".join(parts))
    print(f"wrote {HERE / 'RESULTS.md'}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
