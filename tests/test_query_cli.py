"""The query commands through subprocess, on databases filled through the Storage API."""
from __future__ import annotations

import csv
import io
import json
import sqlite3
import threading

import pytest

from conftest import mpiopt
from mpiopt.storage import open_storage
from mpiopt.trial import StudyStatus, TrialStatus

SPEC = "study: {name: %s}\nsearch: {algorithm: random, trials: 10}\n"
ERROR = "Traceback (most recent call last):\nValueError: lr too large\n(rank 2 on node1)"


def _fill(url: str) -> None:
    with open_storage(url, create=True) as st:
        a = st.create_study("alpha", "minimize", "val_loss", SPEC % "alpha", "a" * 64, "{}")
        b = st.create_study("beta", "maximize", "acc", SPEC % "beta", "b" * 64, "{}")
        rows = [  # (params, status, value, extra)
            ({"lr": 0.01, "units": 32, "opt": "adam"}, TrialStatus.COMPLETE, 0.5,
             dict(fold_values=[0.4, 0.6], value_std=0.1, metrics={"acc": 0.8},
                  intermediate={0: 1.0, 1: 0.7, 2: 0.5})),
            ({"lr": 0.001, "units": 64, "opt": "sgd"}, TrialStatus.COMPLETE, 0.2, {}),
            ({"lr": 1.0, "units": 8, "opt": "sgd"}, TrialStatus.FAILED, None, dict(error=ERROR)),
            ({"lr": 0.1, "units": 16, "opt": "adam"}, TrialStatus.PRUNED, 0.9,
             dict(intermediate={0: 0.9})),
            ({"lr": 0.003, "units": 128, "opt": "adam"}, TrialStatus.COMPLETE, 0.3, {}),
        ]
        for i, (params, status, value, extra) in enumerate(rows):
            t = st.create_trial(a, params, seed=100 + i, group=i % 2, host="node1")
            st.finish_trial(t.id, status, value=value, duration=1.5, **extra)
        st.create_trial(a, {"lr": 0.02, "units": 4, "opt": "adam"}, seed=7, group=1)
        for v in (0.7, 0.9, 0.8):
            st.finish_trial(st.create_trial(b, {"depth": 3}, seed=0, group=0).id,
                            TrialStatus.COMPLETE, value=v)
        st.set_study_status(b, StudyStatus.COMPLETE)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('q') / 'results.db'}"
    _fill(url)
    return url


def run_json(db, *args):
    proc = mpiopt(*args, "--storage", db, "--format", "json", check=True)
    return json.loads(proc.stdout)


def test_studies(db):
    rows = {r["name"]: r for r in run_json(db, "studies")}
    assert rows["alpha"]["trials"] == 6 and rows["alpha"]["complete"] == 3
    assert rows["alpha"]["running"] == 1 and rows["alpha"]["failed"] == 1
    assert rows["alpha"]["best"] == 0.2 and rows["beta"]["best"] == 0.9
    assert rows["beta"]["status"] == "COMPLETE" and rows["beta"]["state"] == "complete"
    assert rows["alpha"]["status"] == "RUNNING"          # but no job holds it: no lease
    assert rows["alpha"]["state"].startswith("stopped (")
    table = mpiopt("studies", "--storage", db, check=True).stdout.splitlines()
    assert table[0].split()[:3] == ["name", "state", "direction"] and len(table) == 3


def test_trials_filter_sort_limit(db):
    rows = run_json(db, "trials", "alpha")
    assert [r["number"] for r in rows] == list(range(6))
    assert rows[0]["params"] == {"lr": 0.01, "units": 32, "opt": "adam"}
    assert rows[2]["status"] == "FAILED" and rows[5]["status"] == "RUNNING"
    some = run_json(db, "trials", "alpha", "--status", "complete", "FAILED")
    assert [r["number"] for r in some] == [0, 1, 2, 4]
    best_first = run_json(db, "trials", "alpha", "--status", "COMPLETE", "--sort", "value",
                          "--limit", "2")
    assert [r["value"] for r in best_first] == [0.2, 0.3]
    assert [r["value"] for r in run_json(db, "trials", "beta", "--sort", "value")] == \
        [0.9, 0.8, 0.7]
    table = mpiopt("trials", "alpha", "--storage", db, check=True).stdout
    assert "lr=0.01 units=32 opt=adam" in table and len(table.splitlines()) == 7


def test_best(db):
    top = run_json(db, "best", "alpha", "--top", "2")
    assert [(r["rank"], r["number"], r["value"]) for r in top] == [(1, 1, 0.2), (2, 4, 0.3)]
    assert run_json(db, "best", "beta")[0]["value"] == 0.9


def test_show(db):
    trial = run_json(db, "show", "alpha", "0")
    assert trial["fold_values"] == [0.4, 0.6] and trial["value_std"] == 0.1
    assert trial["intermediate"] == {"0": {"0": 1.0, "1": 0.7, "2": 0.5}}    # fold: epoch: value
    assert trial["metrics"] == {"acc": 0.8} and trial["seed"] == 100
    assert run_json(db, "show", "alpha", "2")["error"] == ERROR
    text = mpiopt("show", "alpha", "0", "--storage", db, check=True).stdout
    assert "per-epoch values (3 epochs" in text and "*" in text and "folds:" in text
    failed = mpiopt("show", "alpha", "2", "--storage", db, check=True).stdout
    assert "ValueError: lr too large" in failed and "FAILED" in failed


def test_show_of_a_kfold_trial_lists_each_fold_and_says_where_it_was_pruned(tmp_path):
    """Issue 62: `mpiopt show` of a trial of 3 folds gives each fold's curve with its
    epochs from 1 (not one curve of steps 1..9) and, for a pruned trial, where the
    pruner stopped it and against what; JSON nests the values as {fold: {epoch: value}}."""
    url = f"sqlite:///{tmp_path / 'k.db'}"
    why = ("pruned at fold 2 epoch 1: its figure so far 0.913 is worse than the median "
           "0.95 of 4 other trials there")
    with open_storage(url, create=True) as st:
        sid = st.create_study("kf", "maximize", "val_accuracy", SPEC % "kf", "k" * 64, "{}")
        t = st.create_trial(sid, {"lr": 0.01}, seed=1, group=0)
        curve = {(f, e): 0.8 + 0.05 * e for f in (0, 1) for e in (1, 2, 3)} | {(2, 1): 0.81}
        st.finish_trial(t.id, TrialStatus.PRUNED, value=0.913, intermediate=curve, error=why)
    out = mpiopt("show", "kf", "0", "--storage", url, check=True).stdout
    assert "per-epoch values (3 folds, 7 epochs in all" in out
    assert "fold 0 (epochs 1..3)" in out and "fold 2 (epochs 1..1)" in out
    assert "  fold  epoch  value" in out and "     2      1  0.81" in out
    assert out.rstrip().endswith("pruned:\n  " + why) and "error:" not in out
    trial = json.loads(mpiopt("show", "kf", "0", "--storage", url, "--format", "json",
                              check=True).stdout)
    assert trial["intermediate"]["2"] == {"1": 0.81} and list(trial["intermediate"]["1"]) == \
        ["1", "2", "3"] and trial["error"] == why


def test_export_csv_and_json(db, tmp_path):
    rows = list(csv.DictReader(io.StringIO(mpiopt("export", "alpha", "--storage", db,
                                                  check=True).stdout)))
    assert len(rows) == 6 and rows[1]["params_units"] == "64" and rows[0]["fold_1"] == "0.6"
    assert rows[5]["value"] == "" and rows[0]["user_attrs_acc"] == "0.8"
    assert rows[2]["state"] == "FAIL" and rows[5]["state"] == "RUNNING"
    out = tmp_path / "alpha.json"
    proc = mpiopt("export", "alpha", "--storage", db, "--format", "json", "-o", out, check=True)
    assert proc.stdout == "" and "wrote 6 trials" in proc.stderr
    data = json.loads(out.read_text())
    assert [t["number"] for t in data] == list(range(6)) and data[2]["error"] == ERROR


def test_status(db):
    s = run_json(db, "status", "alpha")
    # (no job holds the study: its RUNNING trial was left by one that died, and runs no more)
    assert (s["done"], s["budget"], s["running"], s["failed"], s["pruned"]) == (5, 10, 0, 1, 1)
    assert s["stranded"] == 1
    assert s["best"] == {"number": 1, "value": 0.2, "params": {"lr": 0.001, "units": 64,
                                                                "opt": "sgd"}}
    text = mpiopt("status", "alpha", "--storage", db, check=True).stdout
    assert "5/10 done, 0 running, 1 left RUNNING by a job that died (they run again), " \
        "1 failed" in text and "0.2 (trial 1)" in text


COMMANDS = [("studies",), ("trials", "alpha"), ("best", "alpha"), ("show", "alpha", "0"),
            ("export", "alpha"), ("status", "alpha"), ("db", "current"), ("db", "upgrade")]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_missing_database_is_one_line_exit_2_and_never_created(tmp_path, command):
    path = tmp_path / "absent.db"
    proc = mpiopt(*command, "--storage", f"sqlite:///{path}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and proc.stderr.count("\n") == 1
    assert "absent.db" in proc.stderr and "Traceback" not in proc.stderr
    assert not path.exists()


def test_default_storage_is_not_created_in_the_working_directory(tmp_path):
    proc = mpiopt("studies", cwd=tmp_path)
    assert proc.returncode == 2 and "mpiopt.db" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["trials", "best", "export", "status", "show"])
def test_unknown_study_lists_the_known_ones(db, command):
    extra = ("0",) if command == "show" else ()
    proc = mpiopt(command, "gamma", *extra, "--storage", db)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "mpiopt: error: unknown study 'gamma'; known studies: alpha, beta\n"


def test_unknown_trial_number(db):
    proc = mpiopt("show", "alpha", "42", "--storage", db)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no trial 42" in proc.stderr


# ---- reading while a study writes --------------------------------------------------------
def test_read_while_a_writer_holds_a_transaction_open(tmp_path):
    """WAL: `mpiopt trials` sees the last commit while a write transaction is open."""
    path = tmp_path / "busy.db"
    url = f"sqlite:///{path}"
    _fill(url)
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")                       # holds the write lock
        writer.execute("INSERT INTO trials (study_id, number, status, attempt) "
                       "VALUES (1, 99, 'RUNNING', 0)")
        for command in (("trials", "alpha"), ("status", "alpha")):
            proc = mpiopt(*command, "--storage", url, "--format", "json", timeout=60)
            assert proc.returncode == 0, proc.stderr
            assert "locked" not in proc.stderr
        numbers = [t["number"] for t in json.loads(
            mpiopt("trials", "alpha", "--storage", url, "--format", "json", check=True).stdout)]
        assert numbers == list(range(6))                        # not the uncommitted 99
        assert writer.in_transaction
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_read_while_trials_are_written_continuously(tmp_path):
    url = f"sqlite:///{tmp_path / 'live.db'}"
    _fill(url)
    stop, written, errors = threading.Event(), [], []

    def write():
        try:
            with open_storage(url) as st:
                sid = st.get_study("alpha").id
                while not stop.is_set():
                    t = st.create_trial(sid, {"lr": 0.5, "units": 2, "opt": "sgd"}, seed=1,
                                        group=0)
                    st.finish_trial(t.id, TrialStatus.COMPLETE, value=1.0, fold_values=[1.0] * 3,
                                    intermediate={e: 1.0 for e in range(5)})
                    written.append(t.number)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        for _ in range(3):
            proc = mpiopt("trials", "alpha", "--storage", url, "--format", "json", timeout=60)
            assert proc.returncode == 0, proc.stderr
            assert len(json.loads(proc.stdout)) >= 6
    finally:
        stop.set()
        thread.join()
    assert not errors and written
    with open_storage(url) as st:
        numbers = [t.number for t in st.get_trials(st.get_study("alpha").id)]
    assert numbers == list(range(len(numbers)))


def test_a_database_in_a_folder_that_cannot_be_written_is_read(db, tmp_path):
    """Results on a read-only share or archive, or in a colleague's folder: SQLite's
    reader of a WAL database must create the -shm file beside it, and every query said
    `unable to open database file`. A read-only mount (in a mount namespace of its own,
    so that whoever runs the test can make one) holds a copy; the queries read it."""
    import shutil
    import subprocess

    from conftest import BIN, subprocess_env

    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    shared = tmp_path / "share"
    shared.mkdir()
    source = db.removeprefix("sqlite:///")
    script = (f'mount -t tmpfs -o size=8m tmpfs "{shared}" && cp "{source}" "{shared}/r.db" '
              f'&& mount -o remount,ro "{shared}" && touch "{shared}/x" 2>/dev/null; '
              f'test ! -e "{shared}/x" || exit 99; '
              f'"{BIN / "mpiopt"}" best alpha --storage "sqlite:///{shared}/r.db" --format json')
    for flags in ("-rm", "-m"):                # (as a user, or as root where user
        proc = subprocess.run(["unshare", flags, "sh", "-c", script], capture_output=True,
                              text=True, env=subprocess_env(), timeout=120)   # namespaces are off)
        if "mount" not in proc.stderr and "unshare" not in proc.stderr:
            break
    else:
        pytest.skip(f"no read-only mount can be made here: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r["value"] for r in json.loads(proc.stdout)] == [0.2]


def test_output_in_an_ascii_encoding_shows_what_it_can(db):
    """`mpiopt show` of a cross-validated trial printed `0.5 ± 0.1`: on an ASCII terminal
    (PYTHONIOENCODING=ascii, a C locale without UTF-8) it ended in a traceback."""
    from conftest import subprocess_env

    proc = mpiopt("show", "alpha", "0", "--storage", db,
                  env={**subprocess_env(), "PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "0.5 ? 0.1" in proc.stdout, proc.stdout
