"""The docs say what happens (issue 62). Each claim a person acts on is read from its page
and checked against real jobs under `mpiexec -n 3`: what a Ctrl-C prints, how `mpiopt
status` reads a job killed with kill -9 on its machine and from another, and how often
a finished trial runs again, against the benchmarks' own count."""
from __future__ import annotations

import os
import re
import signal
from datetime import datetime, timedelta, timezone

from conftest import BIN, ROOT, mpiopt
from test_status_told import _job, _wait_complete, WAIT_S

GETTING_STARTED = ROOT / "docs" / "getting-started.md"


def _prose(path) -> str:
    """A page's text with its lines joined (a claim may wrap)."""
    return " ".join(path.read_text(encoding="utf-8").split())


def test_ctrl_c_prints_what_getting_started_says(tmp_path):
    text = _prose(GETTING_STARTED)
    example = re.search(r"e\.g\. `(mpiopt: interrupted by SIGINT[^`]+)`", text).group(1)
    assert "four lines: its trials by state, why it stopped, the coordinator's time and " \
           "the best trial so far; then one line on standard error" in text
    job, url = _job(tmp_path)
    try:
        _wait_complete(job, url, 2)
        os.killpg(job.pid, signal.SIGINT)                  # as a terminal's Ctrl-C does
        out, err = job.communicate(timeout=WAIT_S)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
    # the page's example, for this job: its launcher and count, study and database
    expected = (example.replace("mpirun -n 5", f"{BIN / 'mpiexec'} -n 3")
                .replace("resume digits", "resume told")
                .replace("sqlite:///build/digits.db", url))
    assert err.splitlines() == [expected], err
    lines = out.splitlines()
    summary = lines[next(i for i, ln in enumerate(lines) if ln.startswith("study interrupted:")):]
    assert [ln.split(":")[0].split(" ")[0] for ln in summary] == \
        ["study", "interrupted", "coordinator", "best"], out


def test_a_killed_study_reads_as_getting_started_says(tmp_path):
    """On the job's machine: stopped at once. From another machine (the job's host
    renamed in its record): running while its heartbeat is younger than the page's 90 s,
    which is three lease periods, then stopped."""
    from mpiopt import knobs
    from mpiopt.storage import open_storage
    from mpiopt.storage.models import JobModel

    text = _prose(GETTING_STARTED)
    claim = re.search(r"After a `kill -9`, `mpiopt status` on the job's machine says the "
                      r"study stopped at once .*? on another machine it says running until "
                      r"the job's heartbeat is (\d+) s old \(three lease periods\)", text)
    assert claim, "getting-started.md no longer says how a killed study reads"
    assert float(claim.group(1)) == 3 * knobs.LEASE_PERIOD.default
    job, url = _job(tmp_path)
    try:
        _wait_complete(job, url, 2)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.communicate(timeout=WAIT_S)
    assert "(stopped (" in mpiopt("status", "told", "--storage", url, check=True).stdout
    with open_storage(url) as st:
        with st.engine.begin() as conn:
            conn.execute(JobModel.__table__.update().values(host="elsewhere"))
    assert "(running, " in mpiopt("status", "told", "--storage", url, check=True).stdout
    old = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(
        seconds=3 * knobs.LEASE_PERIOD.default + 1)
    with open_storage(url) as st:
        with st.engine.begin() as conn:
            conn.execute(JobModel.__table__.update().values(beat_at=old))
    assert "(stopped (" in mpiopt("status", "told", "--storage", url, check=True).stdout


ABSOLUTE = ("without losing or repeating", "nothing finished is run twice",
            "nothing is run twice", "nothing finished is lost and nothing is run twice")


def test_the_claim_about_reruns_is_the_benchmarks_count():
    """The failure campaigns count finished trials that ran again; while that count is
    not 0, no page says that none does, and the overview pages give the count."""
    row = re.search(r"\| Failure campaigns \| \*\*(\d+)\*\* finished trials ran again in "
                    r"(\d+) kill -9", (ROOT / "docs" / "benchmarks.md").read_text())
    assert row, "docs/benchmarks.md lost its failure campaigns row"
    again, kills = int(row.group(1)), int(row.group(2))
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    if again:
        said = {p.name: [a for a in ABSOLUTE if a in _prose(p)] for p in pages}
        assert not any(said.values()), {k: v for k, v in said.items() if v}
    for overview in (ROOT / "README.md", ROOT / "docs" / "index.md"):
        assert f"{again} in {kills} kill -9" in _prose(overview), overview
