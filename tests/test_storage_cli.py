"""What users of a shared database see, on SQLite and on a real PostgreSQL server: one job
per study (a second search refused naming the holder), a dead study told from a live
one, `db current` on a newer schema, MPIOPT_STORAGE, paths that mean one thing."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from conftest import BIN, ROOT, mpiopt, resume_with, subprocess_env
from mpiopt.objective.processes import descendants
from mpiopt.storage import open_storage
from mpiopt.trial import TrialStatus

FUNCTIONS = ROOT / "tests" / "objectives" / "functions.py"


def spec_file(folder: Path, function="steady", trials=6, storage=None) -> Path:
    spec = {"study": {"name": "s"},
            "objective": {"function": f"{FUNCTIONS}:{function}", "direction": "minimize"},
            "search_space": {"x": {"type": "real", "low": -5.0, "high": 10.0},
                             "y": {"type": "real", "low": 0.0, "high": 15.0}},
            "search": {"algorithm": "random", "trials": trials, "seed": 2}}
    if storage:
        spec["storage"] = storage
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def wait_running(url, job, limit_s=90):
    end = time.monotonic() + limit_s
    while time.monotonic() < end and job.poll() is None:
        try:
            with open_storage(url) as st:
                if any(t.status is TrialStatus.RUNNING for t in st.get_trials(st.get_study("s").id)):
                    return
        except Exception:
            pass
        time.sleep(0.2)
    raise AssertionError("the study never started a trial")


def test_one_job_per_study_and_a_dead_one_told_from_a_live_one(tmp_path, db_url):
    spec = spec_file(tmp_path, "never_returns", trials=4)
    job = subprocess.Popen([str(BIN / "mpiexec"), "-n", "3", str(BIN / "mpiopt"), "search", str(spec),
                            "--storage", db_url], cwd=tmp_path, env=subprocess_env(), text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_running(db_url, job)
        second = mpiopt("search", spec, "--storage", db_url, "--resume", np=3, cwd=tmp_path,
                        timeout=120)
        assert second.returncode == 2, second.stdout + second.stderr
        assert "is being run by another job (host " in second.stderr
        assert "pid " in second.stderr and "Traceback" not in second.stderr
        status = mpiopt("status", "s", "--storage", db_url, "--format", "json", cwd=tmp_path)
        summary = json.loads(status.stdout)
        assert summary["state"].startswith("running (host ")
        assert summary["groups"] and all(g["since"] < 120 for g in summary["groups"])
        assert any(g["running"] is not None for g in summary["groups"])
        os.killpg(job.pid, signal.SIGKILL)          # the job dies without a word
        job.communicate(timeout=30)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    with open_storage(db_url) as st:                # as if its last beat was 5 minutes ago
        from mpiopt.storage.models import JobModel

        with st.engine.begin() as conn:
            conn.execute(JobModel.__table__.update().values(
                host="n12", beat_at=datetime.now(timezone.utc).replace(tzinfo=None)
                - timedelta(minutes=5)))
    table = mpiopt("studies", "--storage", db_url, cwd=tmp_path)
    assert "stopped (" in table.stdout and "n12" in table.stdout, table.stdout
    text = mpiopt("status", "s", "--storage", db_url, cwd=tmp_path).stdout
    assert "stopped without a word (last heartbeat" in text and "host n12" in text
    assert f"resume with: {resume_with(3)} s --storage" in text      # (the job's own layout)


def test_db_current_on_a_newer_schema_exits_2_and_says_to_upgrade_mpiopt(tmp_path, db_url):
    open_storage(db_url, create=True).close()
    with open_storage(db_url) as st:
        with st.engine.begin() as conn:
            conn.exec_driver_sql("update alembic_version set version_num = '0099'")
    proc = mpiopt("db", "current", "--storage", db_url, cwd=tmp_path)
    assert proc.returncode == 2 and "0099" in proc.stderr and "upgrade mpiopt" in proc.stderr
    studies = mpiopt("studies", "--storage", db_url, cwd=tmp_path)
    assert studies.returncode == 2 and "newer mpiopt" in studies.stderr


def test_mpiopt_storage_gives_the_url_to_every_command(tmp_path, db_url):
    spec = spec_file(tmp_path, "branin", trials=3)
    env = {**subprocess_env(), "MPIOPT_STORAGE": db_url}
    assert mpiopt("search", spec, cwd=tmp_path, env=env).returncode == 0
    best = mpiopt("best", "s", "--format", "json", cwd=tmp_path, env=env)
    assert best.returncode == 0 and len(json.loads(best.stdout)) == 1
    assert not (tmp_path / "mpiopt.db").exists()      # the default was not used


@pytest.mark.parametrize("np,action", [(None, "delete"), (3, "delete"), (3, "rename")])
def test_a_study_deleted_or_renamed_under_its_job_ends_it_with_a_true_closing_line(
        tmp_path, np, action):
    """`mpiopt study delete|rename --force` while a job runs the study: the job ends on its
    next write (delete) or its stop signal (rename), and its closing line must not offer to
    resume a study that is gone, nor under its old name."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    spec = spec_file(tmp_path, trials=200)
    cmd = [str(BIN / "mpiopt"), "search", str(spec), "--storage", url]
    if np:
        cmd = [str(BIN / "mpiexec"), "-n", str(np), *cmd]
    job = subprocess.Popen(cmd, cwd=tmp_path, env={**subprocess_env(), "MPIOPT_TEST_SLEEP": "0.2"},
                           text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           start_new_session=True)
    try:
        wait_running(url, job)
        change = ("delete", "s", "--yes") if action == "delete" else ("rename", "s", "t")
        assert mpiopt("study", *change, "--force", "--storage", url).returncode == 0
        if action == "rename":
            time.sleep(1)
            os.killpg(job.pid, signal.SIGINT)
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    closing = [ln for ln in err.splitlines() if ln.startswith("mpiopt:")]
    assert len(closing) == 1, out + err
    if action == "delete":
        assert job.returncode == 1, out + err
        assert "study 's' was deleted from" in closing[0] and "nothing is left to resume" in closing[0]
        assert "resume with" not in err
    else:
        assert job.returncode == 130, out + err
        assert closing[0].endswith(f"resume with: {resume_with(np)} t --storage {url}")


def _finished(url) -> int:
    try:
        with open_storage(url) as st:
            return sum(t.status.is_finished() for t in st.get_trials(st.get_study("s").id))
    except Exception:
        return 0


def _wait_finished(url, n, job, limit_s=90):
    end = time.monotonic() + limit_s
    while _finished(url) < n:
        if job.poll() is not None:              # (what it said: why it ended is the finding)
            out, err = job.communicate()
            raise AssertionError(f"the job ended ({job.returncode}) before {n} trials were "
                                 f"finished:\n{out[-1500:]}\n{err[-1500:]}")
        assert time.monotonic() < end, "the study did not get going"
        time.sleep(0.2)


def _freeze_between_writes(job, db: Path, tries=50) -> list[int]:
    """SIGSTOP the job's processes at a moment none holds SQLite's write lock. A job
    stopped inside a write transaction keeps the lock, and every other writer gives up
    on it after its busy timeout (exit 2, 'database is locked': a resume cannot take a
    lock a stopped process holds); that is another case than the lease's."""
    import sqlite3
    for _ in range(tries):
        frozen = [job.pid, *descendants(job.pid)]       # (mpiexec's ranks: not its group)
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        probe = sqlite3.connect(db, timeout=0.3, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return frozen
        except sqlite3.OperationalError:            # stopped mid-write: let it finish
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
            time.sleep(0.05)
        finally:
            probe.close()
    raise AssertionError(f"the job held the write lock at each of {tries} tries")


@pytest.mark.parametrize("np", [None, 3])
def test_a_job_stopped_past_its_lease_and_taken_over_writes_nothing_when_it_wakes(tmp_path, np):
    """Ctrl-Z (or a suspended node) past the lease, a resume takes the study over, then the
    first job goes on: it wrote a result over a trial the other had run again, marked the
    other's running trial INTERRUPTED (run twice) and offered a resume. Now its first write
    finds the lease gone (Storage.fence), it ends with one line and no resume, and the
    study is what the second job alone would have made."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    spec = spec_file(tmp_path, trials=20)
    env = {**subprocess_env(), "MPIOPT_TEST_SLEEP": "0.2", "MPIOPT_LEASE_PERIOD": "1"}

    def start(*extra):
        cmd = [str(BIN / "mpiopt"), "search", str(spec), "--storage", url, *extra]
        if np:
            cmd = [str(BIN / "mpiexec"), "-n", str(np), *cmd]
        return subprocess.Popen(cmd, cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)

    first = start()
    second = None
    try:
        _wait_finished(url, 3, first)
        frozen = _freeze_between_writes(first, tmp_path / "r.db")
        time.sleep(4.5)                         # three periods without a beat: stale
        second = start("--resume")
        _wait_finished(url, _finished(url) + 4, second)
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        out1, err1 = first.communicate(timeout=120)
        out2, err2 = second.communicate(timeout=120)
    finally:
        for job in (first, second):
            if job is not None and job.poll() is None:
                for pid in [job.pid, *descendants(job.pid)]:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
    assert second.returncode == 0, out2 + err2
    assert first.returncode == 1, out1 + err1
    closing = [ln for ln in err1.splitlines() if ln.startswith("mpiopt:")]
    assert len(closing) == 1 and "lost its lease" in closing[0], err1
    assert "resume with" not in err1
    with open_storage(url) as st:
        trials = st.get_trials(st.get_study("s").id)
        assert st.get_study("s").status.value == "COMPLETE"
    assert sorted(t.number for t in trials) == list(range(20))
    assert all(t.status is TrialStatus.COMPLETE for t in trials)
    assert len({(t.params["x"], t.params["y"]) for t in trials}) == 20


def test_resume_refuses_a_recovery_file_that_is_missing_or_another_studys(tmp_path):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    assert mpiopt("search", spec_file(tmp_path, trials=2), "--storage", url).returncode == 0
    other = tmp_path / "t.mpiopt-recovery.jsonl"
    other.write_text("")
    for given, why in ((other, "is not study 's''s recovery file"),
                       (tmp_path / "s.mpiopt-recovery.jsonl", "no file")):
        proc = mpiopt("resume", "s", "--storage", url, "--recovery", given, "--trials", "3")
        assert proc.returncode == 2 and why in proc.stderr and proc.stderr.count("\n") == 1
    with open_storage(url) as st:
        assert len(st.get_trials(st.get_study("s").id)) == 2       # nothing ran


def test_a_relative_sqlite_path_in_a_spec_counts_from_the_spec_file(tmp_path):
    spec = spec_file(tmp_path / "project", "branin", trials=3, storage="sqlite:///results.db")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert mpiopt("search", spec, cwd=elsewhere).returncode == 0
    assert (tmp_path / "project" / "results.db").is_file() and not list(elsewhere.iterdir())
    data = yaml.safe_load(spec.read_text())
    data["search"]["trials"] = 5
    spec.write_text(yaml.safe_dump(data))
    again = mpiopt("search", spec, "--resume", cwd=tmp_path)   # from yet another directory
    assert again.returncode == 0, again.stderr
    with open_storage(f"sqlite:///{tmp_path / 'project' / 'results.db'}") as st:
        assert len(st.get_trials(st.get_study("s").id)) == 5
        assert f"{tmp_path / 'project' / 'results.db'}" in st.get_study("s").spec_text


def test_a_sqlite_path_that_starts_with_a_tilde_is_in_the_home_folder(tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    (home / "runs").mkdir(parents=True)
    work.mkdir()
    env = {**subprocess_env(), "HOME": str(home)}
    spec = spec_file(work, "branin", trials=2, storage="sqlite:///~/runs/spec.db")
    assert mpiopt("search", spec, cwd=work, env=env).returncode == 0
    listed = mpiopt("studies", "--storage", "sqlite:///~/runs/spec.db", cwd=work, env=env)
    assert listed.returncode == 0 and "s" in listed.stdout.split()
    proc = mpiopt("search", spec, "--storage", "sqlite:///~/runs/cli.db", cwd=work, env=env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (home / "runs").glob("*.db")) == ["cli.db", "spec.db"]
    assert [p.name for p in work.iterdir()] == ["s.yaml"]       # no folder named "~"


def test_resume_of_a_study_that_does_not_exist_names_those_that_do(tmp_path, db_url):
    spec = spec_file(tmp_path, "branin", trials=2)
    assert mpiopt("search", spec, "--storage", db_url, cwd=tmp_path).returncode == 0
    data = yaml.safe_load(spec.read_text())
    data["study"]["name"] = "typo"
    spec.write_text(yaml.safe_dump(data))
    proc = mpiopt("search", spec, "--storage", db_url, "--resume", cwd=tmp_path)
    assert proc.returncode == 2
    assert "no study 'typo'" in proc.stderr and "it holds: s" in proc.stderr
    with open_storage(db_url) as st:
        assert [s.name for s in st.list_studies()] == ["s"]


def test_resume_of_a_database_that_does_not_exist_is_one_line_and_creates_nothing(tmp_path):
    spec = spec_file(tmp_path, "branin", trials=2)
    typo = tmp_path / "typo.db"
    proc = mpiopt("search", spec, "--storage", f"sqlite:///{typo}", "--resume", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (f"mpiopt: error: no results database at {typo} (sqlite:///"
                                   f"{typo}): check --storage, or start a study with `mpiopt "
                                   "search`")
    assert not typo.exists()


def test_a_missing_storage_directory_is_an_error_not_a_new_tree(tmp_path):
    spec = spec_file(tmp_path, "branin", trials=2)
    proc = mpiopt("search", spec, "--storage", f"sqlite:///{tmp_path / 'no' / 'such' / 'r.db'}",
                  cwd=tmp_path)
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    assert not (tmp_path / "no").exists()


def test_jobs_started_together_with_resume_or_start_resume_the_one_study(tmp_path):
    """Jobs of an array, all `--resume-or-start`: the one that lost the race to create the
    study was refused with "study 'r' already exists" (exit 2), as if it had not asked to
    resume it. Now it resumes it, and the lease decides which job runs it."""
    from mpiopt.errors import DuplicateStudyError, UnknownStudyError
    from mpiopt.spec import load_spec
    from mpiopt.study.opening import open_study

    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({
        "study": {"name": "r"},
        "objective": {"function": f"{ROOT / 'tests' / 'objectives' / 'functions.py'}:branin"},
        "search_space": {"x": {"type": "real", "low": 0.0, "high": 1.0}},
        "search": {"algorithm": "random", "trials": 3}}))
    spec, url = load_spec(path), f"sqlite:///{tmp_path / 'r.db'}"
    with open_storage(url, create=True) as st:
        assert not open_study(st, spec, "auto", url).resumed      # the job that won
        looked = st.get_study

        def before_the_other_jobs_create(name, _calls=[]):
            _calls.append(name)
            if len(_calls) % 2:                 # each open's first look: not there yet
                raise UnknownStudyError(name)
            return looked(name)

        st.get_study = before_the_other_jobs_create
        assert open_study(st, spec, "auto", url).resumed
        with pytest.raises(DuplicateStudyError):                  # (no resume asked)
            open_study(st, spec, False, url)


def test_the_printed_resume_command_works_pasted_into_a_shell_for_a_folder_with_a_space(tmp_path):
    """The closing line's command is for copying: a results file in `my runs/` printed
    `--storage sqlite:////.../my runs/r.db` unquoted, which a shell splits in two."""
    folder = tmp_path / "my runs"
    url = f"sqlite:///{folder / 'r.db'}"
    spec = spec_file(folder, trials=12)
    env = {**subprocess_env(), "MPIOPT_TEST_SLEEP": "0.2"}
    job = subprocess.Popen([str(BIN / "mpiopt"), "search", str(spec), "--storage", url],
                           cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    _wait_finished(url, 2, job)
    job.send_signal(signal.SIGINT)
    _, err = job.communicate(timeout=60)
    assert job.returncode == 130, err
    command = err.strip().splitlines()[-1].split("resume with: ", 1)[1]
    status = mpiopt("status", "s", "--storage", url, "--format", "json", cwd=tmp_path)
    assert json.loads(status.stdout)["state"] == f"interrupted; resume with: {command}"
    resumed = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, text=True,
                             capture_output=True, timeout=120)
    assert resumed.returncode == 0, command + "\n" + resumed.stderr
    assert _finished(url) == 12
