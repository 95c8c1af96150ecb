"""`make bench`: run every benchmark at its default size and write benchmarks/RESULTS.md.

Each script measures what it compares side by side in one run and prints ratios; this
collects their reports under the machine description. Run one script alone with its own
options to go bigger on a cluster.

What people wrote by hand survives a run: a section's text between `<!-- notes -->` and
`<!-- /notes -->` (the figures a change replaced, what a table means) is carried over
from the old RESULTS.md, under the new report of the same script.

    make bench                                  # everything (about an hour on 2 cores)
    python benchmarks/run_all.py simulate.py    # some scripts; the others' sections stay
"""
from __future__ import annotations

import datetime
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ["scheduling.py", "coordinator_cost.py", "searcher_cost.py", "training_throughput.py",
           "quality_suite.py", "pruning.py", "trial_overhead.py", "startup.py", "multiobjective.py",
           "storage.py", "simulate.py", "checkpoint_overhead.py", "conditional.py", "pbt.py",
           "failures.py"]


def final_report(stdout: str) -> str:
    """A script's report (from its first '### ' heading on, after any progress lines),
    else all it printed."""
    text = "\n" + stdout                 # a report may begin on the very first line
    start = text.find("\n### ")
    return (text[start + 1:] if start >= 0 else stdout).strip()


NOTES = re.compile(r"<!-- notes -->.*?<!-- /notes -->", re.S)


def old_sections(text: str) -> dict[str, str]:
    """{script: its section} of an existing RESULTS.md."""
    parts = re.split(r"^## (\S+\.py)\n", text, flags=re.M)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2])}


def notes_of(section: str) -> str:
    return "\n\n".join(NOTES.findall(section))


def main() -> int:
    sys.path.insert(0, str(HERE))
    from _common import env, machine

    now = datetime.datetime.now().isoformat(timespec='minutes')
    chosen = sys.argv[1:] or SCRIPTS
    scope = "" if chosen == SCRIPTS else (f" for {', '.join(chosen)} (the other sections are "
                                          "from earlier runs)")
    parts = [f"# Benchmark results\n\nWritten by `make bench` on {now}{scope}.\n"
             f"Machine: {machine()}\n"]
    failed = []
    results = HERE / "RESULTS.md"
    old = old_sections(results.read_text()) if results.exists() else {}
    for script in SCRIPTS + [s for s in chosen if s not in SCRIPTS]:
        if script not in chosen:                 # not run this time: its section stays
            if script in old:
                parts.append(f"## {script}\n\n{old[script]}\n")
            continue
        print(f"== {script}", flush=True)
        proc = subprocess.run([sys.executable, str(HERE / script)], cwd=HERE, env=env(),
                              capture_output=True, text=True)
        print(proc.stdout[-4000:], proc.stderr[-2000:] if proc.returncode else "", flush=True)
        if proc.returncode != 0:
            failed.append(script)
            parts.append(f"## {script}\n\nfailed with exit status {proc.returncode}:\n\n```\n{proc.stderr[-2000:]}\n```\n")
            continue
        notes = notes_of(old.get(script, ""))
        parts.append(f"## {script}\n\n`python benchmarks/{script}` ({now})\n\n"
                     f"{final_report(proc.stdout)}\n"
                     + (f"\n{notes}\n" if notes else ""))
    results.write_text("\n".join(parts))
    print(f"wrote {results}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
