"""storage/resilient.py alone: retries within the limit, gives up with the results kept in
the recovery file, a signal ends the waiting at once, and the file imports on resume."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mpiopt.errors import StorageError, StorageUnavailable
from mpiopt.storage import open_storage
from mpiopt.storage import BaseStorage
from mpiopt.storage.recovery import import_recovery
from mpiopt.storage.resilient import Resilient
from mpiopt.kept import read_line
from mpiopt.trial import TrialStatus


def _unsupported(*args, **kwargs):
    raise NotImplementedError


# A storage that implements nothing: the stand-ins below give the calls a test makes
Stub = type("Stub", (BaseStorage,), dict.fromkeys(BaseStorage.__abstractmethods__, _unsupported))


def kept(path) -> list[dict]:
    """The records of a recovery file, read as an import reads them."""
    return [read_line(line) for line in path.read_text().splitlines()]


class Flaky(Stub):
    """A storage whose calls fail `outage` times, then work."""

    def __init__(self, outage: int):
        super().__init__("sqlite://")
        self.outage, self.calls, self.written = outage, 0, []

    def finish_trial(self, trial_id, status, **kw):
        self.calls += 1
        if self.calls <= self.outage:
            raise StorageUnavailable("db: connection refused")
        self.written.append((trial_id, status, kw))


def wrapped(storage, tmp_path, limit=60.0, stop=lambda: False):
    clock = {"t": 0.0}
    lines = []

    def sleep(s):
        clock["t"] += s

    r = Resilient(storage, limit, [tmp_path / "s.mpiopt-recovery.jsonl"], say=lines.append,
                  should_stop=stop, clock=lambda: clock["t"], sleep=sleep)
    return r, lines, clock


def test_a_short_outage_is_ridden_out_and_said(tmp_path):
    storage = Flaky(outage=4)
    r, lines, clock = wrapped(storage, tmp_path)
    r.finish_trial(7, TrialStatus.COMPLETE, value=1.0)
    assert storage.written == [(7, TrialStatus.COMPLETE, {"value": 1.0})]
    assert lines[0].startswith("database unavailable") and lines[-1].startswith("database back")
    assert 0 < clock["t"] < 60
    # written ahead at the first failed try (a job killed while it retried kept it), and
    # gone at the end of a run that never gave up (it all reached the database)
    ahead = (tmp_path / "s.mpiopt-recovery.jsonl").read_text().splitlines()
    assert [read_line(x)["trial_id"] for x in ahead] == [7]
    r.discard_written_ahead()
    assert not (tmp_path / "s.mpiopt-recovery.jsonl").exists()


def test_past_the_limit_results_go_to_the_recovery_file(tmp_path):
    storage = Flaky(outage=10**6)
    r, lines, clock = wrapped(storage, tmp_path, limit=30.0)
    with pytest.raises(StorageUnavailable, match=r"unavailable for 3\ds .*kept in"):
        r.finish_trial(7, TrialStatus.COMPLETE, value=1.0)
    assert 30 <= clock["t"] < 31
    r.finish_trial(8, TrialStatus.FAILED, error="boom")      # later: kept, no waiting
    assert clock["t"] < 31
    records = kept(tmp_path / "s.mpiopt-recovery.jsonl")
    assert [k["trial_id"] for k in records] == [7, 8] and records[1]["error"] == "boom"


def test_a_recovery_folder_that_cannot_be_written_gives_way_to_the_next(tmp_path):
    """The spec's folder read-only (an Apptainer image's): the job ended on "Read-only file
    system" and the outage's finished results were lost. Here the first place's folder is
    a file (no folder can be made there, whoever runs the test)."""
    (tmp_path / "spec-folder").write_text("")
    first = tmp_path / "spec-folder" / "s.mpiopt-recovery.jsonl"
    second = tmp_path / "cwd" / "s.mpiopt-recovery.jsonl"
    r = Resilient(Flaky(outage=10**6), 0.0, [first, second], say=lambda line: None)
    with pytest.raises(StorageUnavailable, match=f"kept in {second}$"):
        r.finish_trial(7, TrialStatus.COMPLETE, value=1.0)
    r.finish_trial(8, TrialStatus.COMPLETE, value=2.0)
    assert [k["trial_id"] for k in kept(second)] == [7, 8]
    nowhere = Resilient(Flaky(outage=10**6), 0.0, [first], say=lambda line: None)
    with pytest.raises(StorageUnavailable, match="could not be kept: none of .*spec-folder"):
        nowhere.finish_trial(7, TrialStatus.COMPLETE, value=1.0)


full_disk = pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")


@full_disk
def test_a_full_disk_gives_way_to_the_next_place(tmp_path):
    """A full disk (or an exceeded quota) under the spec's folder: its file could be
    created but took no line, and the closing line said the results were kept there."""
    second = tmp_path / "home" / "s.mpiopt-recovery.jsonl"
    r = Resilient(Flaky(outage=10**6), 0.0, [Path("/dev/full"), second], say=lambda line: None)
    with pytest.raises(StorageUnavailable, match=f"kept in {second}$"):
        r.finish_trial(7, TrialStatus.COMPLETE, value=1.0)
    assert [k["trial_id"] for k in kept(second)] == [7]
    assert r.kept_in() == second


@full_disk
def test_results_no_place_takes_are_counted_in_the_closing_line(tmp_path):
    """Where no place takes them, the closing line said "finished results are kept in" a
    file that held nothing; now it counts them (those trials run again on resume), once
    each, and offers no file to resume from."""
    r = Resilient(Flaky(outage=10**6), 0.0, [Path("/dev/full")], say=lambda line: None)
    with pytest.raises(StorageUnavailable, match=r"1 finished result\(s\) could not be kept: "
                       r"none of /dev could take them \(OSError: No space left on device\): "
                       r"those trials run again on resume$"):
        r.finish_trial(7, TrialStatus.COMPLETE, value=1.0)
    assert r.kept_in() is None and r.unkept_note() == ""
    for trial in (8, 7, 8):                  # (7 again, or 8 again: counted once each)
        with pytest.raises(StorageUnavailable):
            r.finish_trial(trial, TrialStatus.COMPLETE, value=2.0)
    assert r.unkept_note() == ("; 1 more finished result(s) could not be kept (OSError: No "
                               "space left on device): those trials run again on resume")


def test_a_line_cut_by_a_full_disk_is_taken_back(tmp_path):
    """A write that fills the disk halfway through a line left the half there, and the
    next line written after it (space freed) was joined to it and lost on import. A file
    size limit (RLIMIT_FSIZE) cuts the write as a full disk does."""
    first, second = tmp_path / "a" / "s.jsonl", tmp_path / "b" / "s.jsonl"
    first.parent.mkdir()
    first.write_text(json.dumps({"op": "finish_trial", "args": [1, "COMPLETE"],
                                 "kwargs": {"error": "y" * 1000}}) + "\n")   # (the limit is
    # per file: this one long, the next place's short one fits under it)
    script = f"""
import resource
from mpiopt.storage.resilient import Resilient
from mpiopt.trial import TrialStatus
from mpiopt.errors import StorageUnavailable
from test_resilient import Flaky
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, ({first.stat().st_size + 40}, hard))
r = Resilient(Flaky(outage=10**6), 0.0, [__import__("pathlib").Path({str(first)!r}),
              __import__("pathlib").Path({str(second)!r})], say=lambda line: None)
try:
    r.finish_trial(2, TrialStatus.COMPLETE, value=1.0, error="x" * 200)
except StorageUnavailable as exc:
    print(exc)
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
r.recovery = r.places[0]                     # (space freed: the first place again)
r.finish_trial(3, TrialStatus.COMPLETE, value=3.0)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=Path(__file__).parent, timeout=60)
    assert proc.returncode == 0 and f"kept in {second}" in proc.stdout, proc.stdout + proc.stderr
    assert [k["trial_id"] for k in kept(first)] == [1, 3]
    assert [k["trial_id"] for k in kept(second)] == [2]


def test_an_ending_job_does_not_wait_out_an_outage(tmp_path):
    r, lines, clock = wrapped(Flaky(outage=10**6), tmp_path, stop=lambda: True)
    with pytest.raises(StorageUnavailable):
        r.finish_trial(1, TrialStatus.COMPLETE, value=2.0)
    assert clock["t"] == 0 and (tmp_path / "s.mpiopt-recovery.jsonl").is_file()


def test_a_signal_during_a_pause_ends_the_wait_within_a_fraction_of_a_second(tmp_path):
    """Pauses grow to 15 s: a stop signal that came in one was acted on only at its end,
    and Slurm's SIGKILL follows its SIGTERM after 30 s."""
    signalled = {"at": None}
    r, lines, clock = wrapped(Flaky(outage=10**6), tmp_path, limit=600.0,
                              stop=lambda: signalled["at"] is not None
                              and clock["t"] >= signalled["at"])
    signalled["at"] = 20.3                 # in the middle of a long pause
    with pytest.raises(StorageUnavailable, match="kept in"):
        r.finish_trial(1, TrialStatus.COMPLETE, value=2.0)
    assert 20.3 <= clock["t"] < 20.6, clock["t"]


def test_the_recovery_file_imports_once_and_skips_what_is_there(tmp_path, db_url):
    with open_storage(db_url, create=True) as st:
        sid = st.create_study("s", "minimize", "value", "s", "0" * 64, "{}")
        a = st.create_trial(sid, {"x": 1.0}, seed=0, group=0)
        b = st.create_trial(sid, {"x": 2.0}, seed=0, group=1)
        st.finish_trial(b.id, TrialStatus.COMPLETE, value=5.0)       # already written
        path = tmp_path / "s.mpiopt-recovery.jsonl"
        r = Resilient(st, 1, [path])
        r.given_up = "down"
        r.finish_trial(a.id, TrialStatus.COMPLETE, value=3.0, fold_values=[2.0, 4.0])
        r.finish_trial(b.id, TrialStatus.COMPLETE, value=9.0)
        with path.open("a") as fh:
            fh.write('{"op": "finish_tri')                              # cut by the crash
        assert import_recovery(st, path) == 1 and not path.exists()
        trials = {t.number: t for t in st.get_trials(sid)}
        assert trials[0].value == 3.0 and trials[0].fold_values == [2.0, 4.0]
        assert trials[1].value == 5.0                                  # not overwritten
        with pytest.raises(StorageError):
            st.finish_trial(a.id, TrialStatus.COMPLETE, value=1.0)


def test_a_batch_that_cannot_be_written_is_kept_one_line_per_result(tmp_path, db_url):
    """Results written together (finish_trials) are journaled one per line, so on import
    one that the database already holds does not hide the others."""
    with open_storage(db_url, create=True) as st:
        sid = st.create_study("s", "minimize", "value", "s", "0" * 64, "{}")
        a, b, c = st.create_trials(sid, [dict(params={"x": float(i)}, seed=i, group=i)
                                         for i in range(3)])
        st.finish_trial(b.id, TrialStatus.COMPLETE, value=5.0)       # already written
        path = tmp_path / "s.mpiopt-recovery.jsonl"
        r = Resilient(st, 1, [path])
        r.given_up = "down"
        r.finish_trials([dict(trial_id=t.id, status=TrialStatus.COMPLETE, value=10.0 + i)
                         for i, t in enumerate((a, b, c))])
        assert len(path.read_text().splitlines()) == 3
        assert import_recovery(st, path) == 2
        assert [t.value for t in st.get_trials(sid)] == [10.0, 5.0, 12.0]


def test_running_trials_a_job_could_not_interrupt_are_interrupted_on_import(tmp_path):
    """A job ending in order during an outage (a signal, the retry limit) could not mark
    its running trials INTERRUPTED: the resume took them for trials of a killed job and
    counted each a lost attempt (after max_attempts, FAILED). The interrupt is journaled
    with the results; a trial whose rank died (`keep`) stays RUNNING, as the job meant."""
    with open_storage(f"sqlite:///{tmp_path / 'r.db'}", create=True) as st:
        sid = st.create_study("s", "minimize", "value", "s", "0" * 64, "{}")
        a, b, c = st.create_trials(sid, [dict(params={"x": float(i)}, seed=i, group=i)
                                         for i in range(3)])
        path = tmp_path / "s.mpiopt-recovery.jsonl"
        r = Resilient(st, 1, [path])
        r.given_up = "down"
        r.finish_trial(a.id, TrialStatus.COMPLETE, value=1.0)
        r.interrupt_running(sid, keep={c.id})
        assert import_recovery(st, path) == 2
        assert [t.status for t in st.get_trials(sid)] == [
            TrialStatus.COMPLETE, TrialStatus.INTERRUPTED, TrialStatus.RUNNING]
        assert [t.number for t in st.take_orphans(sid, count_lost_attempts=True)] == [2]


def test_a_recovery_file_writes_only_to_the_study_it_is_imported_for(tmp_path):
    """Trial ids are a database's own: a file imported into another database (the wrong
    --storage, a copied study) gave a result to whatever trial had that id there, and
    the file was removed. Lines that are not this study's now stay in the file."""
    with open_storage(f"sqlite:///{tmp_path / 'r.db'}", create=True) as st:
        mine = st.create_study("s", "minimize", "value", "s", "0" * 64, "{}")
        other = st.create_study("t", "minimize", "value", "t", "1" * 64, "{}")
        theirs = st.create_trial(other, {"x": 1.0}, seed=0, group=0)
        ours = st.create_trial(mine, {"x": 2.0}, seed=0, group=0)
        path = tmp_path / "t.mpiopt-recovery.jsonl"
        r = Resilient(st, 1, [path])
        r.given_up = "down"
        r.finish_trial(theirs.id, TrialStatus.COMPLETE, value=1.0)
        r.interrupt_running(other)
        foreign = []
        assert import_recovery(st, path, mine, foreign) == 0 and foreign == [2]
        assert st.get_trial_by_id(ours.id).status is TrialStatus.RUNNING     # untouched
        assert len(path.read_text().splitlines()) == 2                         # kept
        assert import_recovery(st, path, other) == 2 and not path.exists()
        assert st.get_trial_by_id(theirs.id).value == 1.0


def test_the_home_folders_place_is_one_per_database(tmp_path, monkeypatch):
    """The last place a recovery file may go (a full disk where the study runs leaves the
    home folder's, a file system of its own on clusters) is named for the database: its
    lines name trial ids, which mean other trials in another one. One database, however
    its URL is spelled, has one place."""
    from mpiopt.run.study_run import _home_recovery_folder

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    same = {_home_recovery_folder(u) for u in (
        "sqlite:///r.db", f"sqlite:///{tmp_path}/r.db", f"sqlite:///{tmp_path}/x/../r.db")}
    assert len(same) == 1 and next(iter(same)).parent == tmp_path / "home" / ".mpiopt" / "recovery"
    pg = {_home_recovery_folder(u) for u in ("postgresql+psycopg://me:secret@db:5432/hpo",
                                             "postgresql://me@db:5432/hpo")}
    assert len(pg) == 1
    others = {_home_recovery_folder(u) for u in ("sqlite:///other.db",
                                                 "postgresql://me@db:5432/hpo2")}
    assert len(same | pg | others) == 4


def test_a_recovery_file_shared_by_two_databases_imports_each_line_into_its_own(tmp_path):
    """The same spec run on two databases from one folder: their studies have the same
    name, so one recovery file, and the same study and trial ids. A resume of one
    imported the other's results into its own trials."""
    path = tmp_path / "s.mpiopt-recovery.jsonl"
    stores, trials = [], []
    for name in ("a.db", "b.db"):
        st = open_storage(f"sqlite:///{tmp_path / name}", create=True)
        sid = st.create_study("s", "minimize", "value", "s", "0" * 64, "{}")
        trials.append(st.create_trial(sid, {"x": 1.0}, seed=0, group=0))
        stores.append((st, sid))
    for (st, sid), trial, value in zip(stores, trials, (1.0, 2.0)):
        r = Resilient(st, 1, [path])
        r.given_up = "down"
        r.finish_trial(trial.id, TrialStatus.COMPLETE, value=value)
    assert trials[0].id == trials[1].id and len(path.read_text().splitlines()) == 2
    try:
        for (st, sid), value in zip(stores, (1.0, 2.0)):
            foreign: list[int] = []
            assert import_recovery(st, path, sid, foreign) == 1
            assert [t.value for t in st.get_trials(sid)] == [value]
        assert foreign == [] and not path.exists()
    finally:
        for st, _ in stores:
            st.close()


def test_a_claim_whose_answer_was_lost_is_answered_and_another_jobs_claim_stays_refused(tmp_path):
    """restart_trial is a claim: a retry after a try that committed but lost its answer
    finds the trial RUNNING for this very job and answers it (not TrialTaken); a trial
    another job claimed is still refused."""
    from mpiopt.errors import TrialTaken

    with open_storage(f"sqlite:///{tmp_path / 'r.db'}", create=True) as st:
        sid = st.create_study("s", "minimize", "value", "s", "0" * 64, "{}")
        a = st.join_study(sid, "n1", 1, 30, shared=True)
        b = st.join_study(sid, "n1", 2, 30, shared=True)
        mine, theirs = st.create_trials(sid, [dict(params={"x": float(i)}, seed=i, group=i)
                                             for i in range(2)])
        st.take_orphans(sid, count_lost_attempts=False)     # (no job ran them)
        st.fence = (b.id, b.token)
        st.restart_trial(theirs.id, group=0)
        st.fence = (a.id, a.token)
        real, calls = st.restart_trial, []

        def answer_lost(*args, **kwargs):
            calls.append(1)
            got = real(*args, **kwargs)
            if len(calls) == 1:
                raise StorageUnavailable("db: connection reset after the commit")
            return got
        st.restart_trial = answer_lost
        r, lines, _ = wrapped(st, tmp_path)
        claimed = r.restart_trial(mine.id, group=1)
        assert (claimed.status, claimed.job, claimed.attempt, len(calls)) == \
            (TrialStatus.RUNNING, a.id, 1, 2)
        with pytest.raises(TrialTaken, match=f"RUNNING for job {b.id}"):
            r.restart_trial(theirs.id, group=1)
