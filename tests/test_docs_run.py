"""The walkthroughs run as written: every shell block marked `<!-- docs-test: run -->` in
README.md and the docs is run, as one bash script with `set -e`, in a fresh folder holding a copy of
examples/, with the venv's `mpirun` and `mpiopt` first on the PATH. A page's marked
blocks run in order in the same folder, as a reader following it would.
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from conftest import ROOT, subprocess_env

MARK = re.compile(r"^<!-- docs-test: run -->\n```bash\n(.*?)^```", re.S | re.M)
PAGES = sorted(p for p in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
               if MARK.search(p.read_text()))


def test_the_readme_and_getting_started_are_run():
    assert {ROOT / "README.md", ROOT / "docs/getting-started.md"} <= set(PAGES)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_marked_blocks_run_as_written(page, tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples",
                    ignore=shutil.ignore_patterns("data", "__pycache__", "*.db*"))
    outputs = []
    for number, block in enumerate(MARK.findall(page.read_text()), 1):
        proc = subprocess.run(["bash", "-c", "set -euo pipefail\n" + block], cwd=tmp_path,
                              env=subprocess_env(), capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (f"{page.relative_to(ROOT)}, run block {number} exited "
                                      f"{proc.returncode}:\n{block}\n{proc.stdout[-2000:]}"
                                      f"\n{proc.stderr[-2000:]}")
        assert "mpiopt: error" not in proc.stderr, proc.stderr[-2000:]
        outputs.append(proc.stdout)
    if page.name == "getting-started.md":      # what the page says the reader will see
        assert outputs[0].count("study complete: 40 trials (40 complete)") == 2, outputs[0][-2000:]
        assert "4 groups x 1 rank + coordinator" in outputs[0]
        assert "branin" in outputs[1] and (tmp_path / "build/branin.html").stat().st_size > 0
