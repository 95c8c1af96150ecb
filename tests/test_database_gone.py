"""A study's SQLite file deleted or replaced under a real mpiexec job (issue 55): the job
printed "study complete" and every result was lost (`rm`), or laid its write-ahead log
over the file put in its place and another study vanished (`mv other.db study.db`).

Now the job sees that the path no longer leads to the file it opened (storage/
_sqlite_file.py), writes nothing more to it, keeps the study as it last saw it and its
finished results in the recovery file, and ends with one line saying so and how to
resume; the resume printed makes the study again from that file and finishes it.
"""
from __future__ import annotations

import os
import shlex
import signal
import sqlite3
from pathlib import Path

import pytest

from conftest import resume_with, mpiopt, subprocess_env
from test_outage import assert_complete, spec_file, start, wait_finished

from mpiopt.storage import open_storage
from mpiopt.kept import read_line
from mpiopt.trial import TrialStatus

BUDGET = 24


def ended(job) -> tuple[str, str]:
    try:
        return job.communicate(timeout=180)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)


def closing_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("mpiopt:")]
    assert len(lines) == 1, err
    return lines[0]


def kept_in(recovery: Path) -> tuple[dict, dict]:
    """The recovery file's study as the job saw it ({number: value} of its COMPLETE
    trials) and its finished results after that ({number: value})."""
    records = [r for r in map(read_line, recovery.read_text().splitlines()) if r]
    [study] = [r for r in records if r["kind"] == "study"]
    numbers = {t["id"]: t["number"] for t in study["dump"]["trials"]}
    saw = {t["number"]: t["value"] for t in study["dump"]["trials"] if t["status"] == "COMPLETE"}
    later = {numbers[r["trial_id"]]: r.get("value") for r in records
             if r["kind"] == "finish" and r["status"] == "COMPLETE"}
    return saw, later


def resume_printed(line: str, tmp_path: Path):
    """The resume the closing line printed, under mpiexec -n 3."""
    command = shlex.split(line.split("resume with: ", 1)[1])
    assert command[:6] == [*resume_with(3).split(), "o"] and "--recovery" in command, line
    proc = mpiopt(*command[4:], np=3, cwd=tmp_path, timeout=240,
                  env={**subprocess_env(), "MPIOPT_TEST_SLEEP": "0.05"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def assert_imported(url, saw: dict, later: dict):
    """Every result the job had finished is in the resumed study, with its value: none
    ran again."""
    trials = {t.number: t for t in assert_complete(url, BUDGET)}
    for number, value in {**saw, **later}.items():
        assert trials[number].value == value, (number, value, trials[number])
    return trials


@pytest.mark.parametrize("files", [("o.db",), ("o.db", "o.db-wal", "o.db-shm")])
def test_a_database_removed_mid_study_is_noticed_and_nothing_finished_is_lost(tmp_path, files):
    db = tmp_path / "o.db"
    url = f"sqlite:///{db}"
    spec = spec_file(tmp_path, BUDGET)
    job = start(tmp_path, spec, url, env={"MPIOPT_TEST_SLEEP": "0.3"})
    wait_finished(url, 3, job)
    for name in files:
        (tmp_path / name).unlink(missing_ok=True)
    out, err = ended(job)
    line = closing_line(err)
    recovery = tmp_path / "o.mpiopt-recovery.jsonl"
    assert job.returncode != 0 and "study complete" not in out, out + err
    assert f"{db} was deleted while this job ran" in line and \
        f"finished results are kept in {recovery}" in line, line
    assert not db.exists()                        # (nothing made again under the name)
    saw, later = kept_in(recovery)
    assert len(saw) >= 3 and later, (saw, later)
    proc = resume_printed(line, tmp_path)         # into a fresh database at the same path
    assert "made again from" in proc.stdout, proc.stdout
    assert_imported(url, saw, later)
    assert not recovery.exists()


def test_a_database_replaced_mid_study_leaves_the_new_file_intact(tmp_path):
    db, other = tmp_path / "o.db", tmp_path / "other.db"
    url = f"sqlite:///{db}"
    with open_storage(f"sqlite:///{other}", create=True) as st:
        sid = st.create_study("theirs", "maximize", "value", "study: {name: theirs}\n",
                              "1" * 64, "{}")
        for x in range(5):
            t = st.create_trial(sid, {"x": float(x)}, seed=x, group=0)
            st.finish_trial(t.id, TrialStatus.COMPLETE, value=10.0 + x)
    job = start(tmp_path, spec_file(tmp_path, BUDGET), url, env={"MPIOPT_TEST_SLEEP": "0.3"})
    wait_finished(url, 3, job)
    os.replace(other, db)                          # mv other.db o.db
    out, err = ended(job)
    line = closing_line(err)
    assert job.returncode != 0 and "study complete" not in out, out + err
    assert f"{db} was replaced by another file while this job ran" in line, line

    def theirs():       # read as any other program would, with the -wal beside it
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            return (conn.execute("SELECT name FROM studies ORDER BY id").fetchall(),
                    conn.execute("SELECT number, value FROM trials WHERE study_id = "
                                 "(SELECT id FROM studies WHERE name = 'theirs') "
                                 "ORDER BY number").fetchall())

    expected = [(x, 10.0 + x) for x in range(5)]
    assert theirs() == ([("theirs",)], expected)
    saw, later = kept_in(tmp_path / "o.mpiopt-recovery.jsonl")
    assert len(saw) >= 3 and later, (saw, later)
    resume_printed(line, tmp_path)                 # into the file that took its place
    assert_imported(url, saw, later)
    names, rows = theirs()
    assert names == [("theirs",), ("o",)] and rows == expected
