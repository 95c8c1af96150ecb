"""The storage conformance suite: every implementation of storage/_base.BaseStorage (SQL
on SQLite, on a real PostgreSQL server and in memory, see conftest.storage_url, and the
outage wrapper Resilient around each: the `storage` fixture) passes the same cases:
round trips of every field, status transitions, dense numbers under concurrent writers,
best trials, one transaction per write, leases. Cases that look into the SQL
implementation (its engine, its lease fence) take `sql_storage`; cases that open the
database again (a fresh engine, other processes) take `url`, the engines that outlive
an open; engine-specific ones (SQLite's settings and files) say so in their names."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sqlite3
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from sqlalchemy import event, text

from mpiopt.errors import (ResumeError, StorageError, StorageUnavailable, TrialTaken,
                           UnknownStudyError)
from mpiopt.storage import DuplicateStudyError, open_storage
from mpiopt.trial import FrozenTrial, StudyStatus, TrialStatus

SPEC = "study: {name: s}\nsearch: {algorithm: random, trials: 10}\n"


@pytest.fixture
def url(db_url):
    return db_url


@pytest.fixture
def sql_storage(storage_url):
    with open_storage(storage_url, create=True) as st:
        yield st


@pytest.fixture(params=["sql", "resilient"])
def storage(request, sql_storage, tmp_path):
    """Every implementation of the contract: the SQL storage on each engine, and the
    coordinator's outage wrapper around it (which keeps the contract when no outage
    happens)."""
    if request.param == "sql":
        return sql_storage
    from mpiopt.storage.resilient import Resilient

    return Resilient(sql_storage, 60.0, [tmp_path / "s.mpiopt-recovery.jsonl"],
                     say=lambda line: None)


@pytest.fixture
def sqlite_storage(tmp_path):
    with open_storage(f"sqlite:///{tmp_path / 'results.db'}", create=True) as st:
        yield st


def test_every_engine_keeps_the_storage_contract(storage):
    from mpiopt.storage import BaseStorage

    assert isinstance(storage, BaseStorage)


def new_study(st, name="s", direction="minimize") -> int:
    return st.create_study(name, direction, "value", SPEC, "ab" * 32, '{"x": "real"}')


def finished(st, sid, value, status=TrialStatus.COMPLETE, **kw) -> FrozenTrial:
    trial = st.create_trial(sid, {"x": value}, seed=1, group=0)
    return st.finish_trial(trial.id, status, value=value, **kw)


# ---- opening ---------------------------------------------------------------------------
def test_missing_file_is_an_error_naming_it_and_nothing_is_created(tmp_path):
    path = tmp_path / "nope.db"
    with pytest.raises(StorageError, match="nope.db"):
        open_storage(f"sqlite:///{path}")
    assert not path.exists()


def test_create_makes_the_file_but_never_its_directory(tmp_path):
    path = tmp_path / "deep" / "dir" / "r.db"
    with pytest.raises(StorageError, match=r"directory .*deep/dir .*does not exist"):
        open_storage(f"sqlite:///{path}", create=True)
    assert not (tmp_path / "deep").exists()
    path.parent.mkdir(parents=True)
    open_storage(f"sqlite:///{path}", create=True).close()
    assert path.is_file()
    open_storage(f"sqlite:///{path}").close()      # now it opens without create


@pytest.mark.parametrize("create", [False, True])
def test_another_applications_database_is_refused_and_left_untouched(db_url, create):
    from sqlalchemy import create_engine, inspect

    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("create table events (id integer primary key, what text)"))
    before = _snapshot(db_url)
    with pytest.raises(StorageError, match=r"not an mpiopt results database: it holds other "
                                           r"tables \(events\)"):
        open_storage(db_url, create=create)
    assert inspect(engine).get_table_names() == ["events"] and _snapshot(db_url) == before
    engine.dispose()


def test_an_empty_file_is_refused_and_stays_empty(tmp_path):
    path = tmp_path / "empty.db"
    path.touch()
    with pytest.raises(StorageError, match="empty file, not an mpiopt results database"):
        open_storage(f"sqlite:///{path}", create=True)
    assert path.stat().st_size == 0 and not list(tmp_path.glob("empty.db-*"))


def test_read_only_opens_never_write(tmp_path):
    path = tmp_path / "r.db"
    with open_storage(f"sqlite:///{path}", create=True) as st:
        finished(st, new_study(st), 1.0)
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode = DELETE")      # as another tool might have left it
    con.close()
    before = path.read_bytes()
    with open_storage(f"sqlite:///{path}", read_only=True) as st:
        assert [t.value for t in st.get_trials(st.get_study("s").id)] == [1.0]
        with pytest.raises(StorageError):
            new_study(st, "other")
    assert path.read_bytes() == before and not list(tmp_path.glob("r.db-*"))


def test_read_only_opens_of_an_older_schema_say_to_upgrade(db_url):
    from mpiopt.storage import migrate
    from mpiopt.storage._engine import make_engine

    engine = make_engine(db_url)
    migrate.upgrade(engine, "0001")
    engine.dispose()
    with pytest.raises(StorageError, match=r"revision 0001, older .* run `mpiopt db upgrade"):
        open_storage(db_url, read_only=True)
    with open_storage(db_url) as st:                 # a writer (a study) upgrades it
        assert migrate.current_revision(st.engine) == migrate.head_revision()


def _snapshot(url):
    path = url.removeprefix("sqlite:///")
    return Path(path).read_bytes() if url.startswith("sqlite") else None


def test_garbage_file_is_a_storage_error(tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StorageError, match="junk.db"):
        open_storage(f"sqlite:///{path}")


def test_bad_url_is_a_storage_error():
    with pytest.raises(StorageError, match="not a database URL"):
        open_storage("no-such-scheme", create=True)


def test_every_sqlite_connection_is_wal_with_busy_timeout(sqlite_storage):
    conns = [sqlite_storage.engine.connect() for _ in range(3)]   # distinct pooled connections
    try:
        for conn in conns:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 1000
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    finally:
        for conn in conns:
            conn.close()


def test_in_memory_url_works_the_same_way():
    with open_storage("sqlite://", create=True) as st:
        sid = new_study(st)
        assert finished(st, sid, 1.5).value == 1.5
        assert st.get_trials(sid)[0].params == {"x": 1.5}


# ---- studies ---------------------------------------------------------------------------
def test_study_round_trip(storage):
    sid = storage.create_study("s", "maximize", "acc", SPEC, "f" * 64, {"x": {"type": "real"}})
    rec = storage.get_study("s")
    assert (rec.id, rec.name, rec.direction, rec.metric, rec.spec_text, rec.fingerprint) == \
        (sid, "s", "maximize", "acc", SPEC, "f" * 64)
    assert rec.space_json == '{"x": {"type": "real"}}'
    assert rec.status is StudyStatus.RUNNING
    assert rec.created_at.tzinfo is not None and rec.created_at == rec.updated_at
    storage.set_study_status(sid, StudyStatus.COMPLETE)
    storage.update_study_spec(sid, SPEC + "# more\n")
    rec2 = storage.get_study("s")
    assert rec2.status is StudyStatus.COMPLETE and rec2.spec_text.endswith("# more\n")
    assert rec2.updated_at > rec.updated_at and rec2.created_at == rec.created_at


def test_duplicate_study_is_refused_as_storage_and_resume_error(storage):
    new_study(storage)
    with pytest.raises(DuplicateStudyError, match="already exists") as info:
        new_study(storage)
    assert isinstance(info.value, StorageError) and isinstance(info.value, ResumeError)


def test_unknown_study_lists_the_known_ones(storage):
    with pytest.raises(UnknownStudyError, match="holds no studies"):
        storage.get_study("x")
    new_study(storage, "beta")
    new_study(storage, "alpha")
    with pytest.raises(UnknownStudyError, match="known studies: alpha, beta$"):
        storage.get_study("gamma")


def test_bad_direction_and_unknown_ids(storage):
    with pytest.raises(StorageError, match="direction"):
        storage.create_study("s", "sideways", "v", SPEC, "0", "{}")
    with pytest.raises(StorageError, match="no study with id 99"):
        storage.set_study_status(99, StudyStatus.FAILED)
    with pytest.raises(StorageError, match="no study with id 99"):
        storage.create_trial(99, {}, seed=0, group=0)
    with pytest.raises(StorageError, match="no trial with id 99"):
        storage.finish_trial(99, TrialStatus.COMPLETE, value=1.0)


def test_list_studies_counts_and_best(storage):
    a, b = new_study(storage, "a"), new_study(storage, "b", "maximize")
    finished(storage, a, 3.0)
    finished(storage, a, 1.0)
    finished(storage, a, None, TrialStatus.FAILED, error="boom")
    finished(storage, b, 3.0)
    finished(storage, b, 5.0)
    storage.create_trial(b, {"x": 0.0}, seed=0, group=1)
    by_name = {r.name: r for r in storage.list_studies()}
    assert by_name["a"].counts[TrialStatus.COMPLETE] == 2
    assert by_name["a"].counts[TrialStatus.FAILED] == 1
    assert by_name["a"].best_value == 1.0
    assert by_name["b"].best_value == 5.0 and by_name["b"].counts[TrialStatus.RUNNING] == 1
    assert storage.count_trials(b) == {**{s: 0 for s in TrialStatus},
                                       TrialStatus.COMPLETE: 2, TrialStatus.RUNNING: 1}


# ---- trials ----------------------------------------------------------------------------
PARAMS = {"lr": 1.2345678901234567e-7, "units": 2**40 + 1, "opt": "adam", "bn": True,
          "dropout": 0.0, "neg": -3, "nobn": False, "txt": "1e-3"}


def test_trial_round_trip_of_every_field(url):
    with open_storage(url, create=True) as st:
        sid = new_study(st)
        started = st.create_trial(sid, PARAMS, seed=2**40 + 7, group=3, host="node17")
        assert started.status is TrialStatus.RUNNING and started.number == 0
        assert started.attempt == 0 and isinstance(started.started_at, datetime)
        done = st.finish_trial(
            started.id, TrialStatus.COMPLETE, value=0.125, value_std=0.0625,
            fold_values=[0.1, 0.15], metrics={"acc": 0.9, "loss": 0.125}, error=None,
            duration=12.5, intermediate={0: 0.5, 1: 0.25, 2: 0.125},
            fold_metrics=[{"acc": 0.91}, {"acc": 0.89}])
    with open_storage(url) as st:                        # a fresh engine reads it back
        again = st.get_trial(sid, 0)
        assert st.get_trial_by_id(started.id) == again
    assert again == done
    assert again.params == PARAMS
    assert [type(v) for v in again.params.values()] == [type(v) for v in PARAMS.values()]
    assert (again.value, again.value_std, again.seed, again.group, again.host) == \
        (0.125, 0.0625, 2**40 + 7, 3, "node17")
    assert again.fold_values == [0.1, 0.15] and again.metrics == {"acc": 0.9, "loss": 0.125}
    assert again.intermediate == {(0, 0): 0.5, (0, 1): 0.25, (0, 2): 0.125}
    assert again.duration == 12.5 and again.started_at == started.started_at
    assert again.finished_at >= again.started_at and again.finished_at.tzinfo is not None


def test_every_field_of_a_trial_survives_a_write_and_a_read(storage_url):
    """Every FrozenTrial field set (none left at its default: a field added to the record
    must be written too), and the record each write returns equal to what every read
    gives back (by id, by number, the study's list, changes()), on every engine."""
    import dataclasses

    from test_storage_jobs import age, as_job

    with open_storage(storage_url, create=True) as st:
        sid = new_study(st)
        a = st.join_study(sid, "n1", 1, 30, shared=True)
        as_job(st, a)
        made, = st.create_trials(sid, [dict(params=PARAMS, seed=2**40 + 7, group=3, host="node17",
                                             rank=5, suggest_seconds=0.25, member=1, round=2,
                                             parent=0)])
        b = st.join_study(sid, "n1", 2, 30, shared=True)
        age(st, a)
        as_job(st, b)
        lost, = st.take_orphans(sid, count_lost_attempts=True)
        again = st.restart_trial(made.id, group=4, host="node18", rank=6)
        st.add_intermediate(made.id, 1, 0.5, fold=1)
        done = st.finish_trial(made.id, TrialStatus.PRUNED, value=0.125, value_std=0.0625,
                               fold_values=[0.1, 0.15], metrics={"acc": 0.9}, error="pruned",
                               duration=12.5, intermediate={(1, 2): 0.25}, device="cpu: x",
                               spans=[{"kind": "fold", "fold": 0, "epoch": None, "start": 0.0,
                                       "end": 1.5}])
        reads = [st.get_trial_by_id(made.id), st.get_trial(sid, 0), *st.get_trials(sid),
                 *st.changes(sid, None).finished]
        as_job(st, None)
    defaults = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(FrozenTrial)
                if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}
    assert [name for name, default in defaults.items() if getattr(done, name) == default] == []
    assert all(read == done for read in reads)
    assert (made.job, lost.lost_attempts, again.attempt, again.job) == (a.id, 1, 1, b.id)
    assert (done.lost_attempts, done.attempt, done.group, done.rank, done.job) == (1, 1, 4, 6, b.id)
    assert done.intermediate == {(1, 1): 0.5, (1, 2): 0.25} and done.params == PARAMS


def test_failed_trial_keeps_error_text_and_non_finite_values_become_none(storage):
    sid = new_study(storage)
    t = storage.create_trial(sid, {"x": 1.0}, seed=None, group=None)
    err = "Traceback (most recent call last):\n  ...\nValueError: bad x\n(rank 3 on node2)"
    done = storage.finish_trial(t.id, TrialStatus.FAILED, value=math.nan, error=err,
                                fold_values=[math.nan, 1.0])
    assert done.error == err and done.value is None and done.fold_values == [None, 1.0]
    assert done.duration is not None and done.duration >= 0      # computed when not given
    assert storage.get_trial(sid, 0) == done


def test_status_transitions(storage):
    sid = new_study(storage)
    t = storage.create_trial(sid, {"x": 1.0}, seed=5, group=0)
    storage.add_intermediate(t.id, 0, 2.0)
    with pytest.raises(StorageError, match="final status"):
        storage.finish_trial(t.id, TrialStatus.RUNNING)
    assert storage.interrupt_running(sid) == 1
    assert storage.get_trial(sid, 0).status is TrialStatus.INTERRUPTED
    again = storage.restart_trial(t.id, group=2, host="h2")
    assert (again.status, again.attempt, again.group, again.host, again.number) == \
        (TrialStatus.RUNNING, 1, 2, "h2", 0)
    assert again.intermediate == {} and again.seed == 5 and again.finished_at is None
    pruned = storage.finish_trial(t.id, TrialStatus.PRUNED, value=3.0, intermediate={(0, 0): 3.0})
    assert pruned.status is TrialStatus.PRUNED and pruned.attempt == 1
    with pytest.raises(StorageError, match="already PRUNED"):
        storage.finish_trial(t.id, TrialStatus.COMPLETE, value=1.0)
    with pytest.raises(TrialTaken, match="trial 0 is PRUNED; only an INTERRUPTED trial"):
        storage.restart_trial(t.id, group=0)
    assert storage.interrupt_running(sid) == 0
    assert len(storage.get_trials(sid)) == 1


def test_intermediate_values_merge_and_replace(storage):
    sid = new_study(storage)
    t = storage.create_trial(sid, {"x": 1.0}, seed=0, group=0)
    for epoch, value in [(0, 5.0), (1, 4.0), (1, 3.5)]:
        storage.add_intermediate(t.id, epoch, value)
    done = storage.finish_trial(t.id, TrialStatus.COMPLETE, value=3.0, intermediate={2: 3.0})
    assert done.intermediate == {(0, 0): 5.0, (0, 1): 3.5, (0, 2): 3.0}


def test_each_fold_keeps_its_own_epochs(storage):
    """Issue 62: a value is stored under its fold and the epoch within it, so fold 1's
    epoch 1 is its own row beside fold 0's (never one step number), read back in fold
    then epoch order; the same fold and epoch again replaces it."""
    sid = new_study(storage)
    t = storage.create_trial(sid, {"x": 1.0}, seed=0, group=0)
    for fold, epoch, value in [(0, 1, 0.5), (0, 2, 0.7), (1, 1, 0.4), (1, 1, 0.45), (1, 2, 0.8)]:
        storage.add_intermediate(t.id, epoch, value, fold=fold)
    assert storage.get_trial(sid, 0).intermediate == {(0, 1): 0.5, (0, 2): 0.7, (1, 1): 0.45,
                                                     (1, 2): 0.8}
    done = storage.finish_trial(t.id, TrialStatus.PRUNED, value=0.75,
                                intermediate={(2, 1): 0.3, (1, 2): 0.85})
    assert list(done.intermediate.items()) == [((0, 1), 0.5), ((0, 2), 0.7), ((1, 1), 0.45),
                                               ((1, 2), 0.85), ((2, 1), 0.3)]
    assert [(s.fold, s.epoch) for s in done.intermediate] == list(done.intermediate)
    assert storage.get_trial(sid, 0) == done


def test_finish_replaces_folds_left_on_an_unfinished_trial_and_returns_what_is_stored(sql_storage):
    storage = sql_storage          # (its SQL engine, its lease fence)
    sid = new_study(storage)
    t = storage.create_trial(sid, {"x": 1.0, "k": "a"}, seed=0, group=0)
    storage.finish_trial(t.id, TrialStatus.COMPLETE, value=1.0, fold_values=[1.0, 2.0, 3.0])
    with storage.engine.begin() as conn:                 # e.g. a hand-edited database
        conn.execute(text("update trials set status = 'RUNNING' where id = :i"), {"i": t.id})
    done = storage.finish_trial(t.id, TrialStatus.COMPLETE, value=2.0, fold_values=[4.0],
                                intermediate={1: 2.0, 0: 1.0})
    assert done.fold_values == [4.0] and list(done.intermediate) == [(0, 0), (0, 1)]
    assert storage.get_trial(sid, 0) == done
    with pytest.raises(StorageError, match="no trial with id 99"):
        storage.add_intermediate(99, 0, 1.0)


def test_dense_numbers_per_study(storage):
    a, b = new_study(storage, "a"), new_study(storage, "b")
    numbers = {a: [], b: []}
    for i in range(12):
        sid = a if i % 3 else b
        numbers[sid].append(storage.create_trial(sid, {"i": i}, seed=i, group=0).number)
    assert numbers[a] == list(range(8)) and numbers[b] == list(range(4))


def test_dense_numbers_with_concurrent_writers(url):
    with open_storage(url, create=True) as st:
        sid = new_study(st)
    got, errors = [], []

    def write():
        try:
            with open_storage(url) as mine:           # separate engines, like processes
                got.extend(mine.create_trial(sid, {}, seed=0, group=0).number for _ in range(8))
        except Exception as exc:                      # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(got) == list(range(32))


def test_one_instance_serves_several_threads_at_once(storage):
    """The contract's threads: one instance used from several threads at once (the
    coordinator's heartbeat beside its loop), each call its own transaction, numbers
    still dense; on the in-memory database too, whose one connection they share."""
    sid = new_study(storage)
    got, errors = [], []

    def write():
        try:
            got.extend(storage.create_trial(sid, {}, seed=0, group=0).number for _ in range(8))
        except Exception as exc:                      # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(got) == list(range(32))


def test_one_transaction_per_trial_write(sql_storage):
    storage = sql_storage          # (its SQL engine, its lease fence)
    sid = new_study(storage)
    begins = []
    event.listen(storage.engine, "begin", lambda conn: begins.append(1))
    t = storage.create_trial(sid, {"a": 1.0, "b": "x", "c": 3}, seed=0, group=0)
    assert len(begins) == 1
    storage.finish_trial(t.id, TrialStatus.COMPLETE, value=1.0, fold_values=[1.0, 1.0, 1.0],
                         metrics={"m": 1.0}, intermediate={e: 1.0 for e in range(10)})
    assert len(begins) == 2
    with storage.engine.connect() as conn:
        rows = {table: conn.execute(text(f"select count(*) from {table}")).scalar()
                for table in ("trial_params", "trial_folds", "trial_intermediate")}
    assert rows == {"trial_params": 3, "trial_folds": 3, "trial_intermediate": 10}


def test_batches_of_creates_and_finishes_are_one_transaction_each(sql_storage):
    storage = sql_storage          # (its SQL engine, its lease fence)
    sid = new_study(storage)
    storage.create_trial(sid, {"x": 0.0}, seed=0, group=0)
    begins = []
    event.listen(storage.engine, "begin", lambda conn: begins.append(1))
    made = storage.create_trials(sid, [dict(params={"x": float(i)}, seed=i, group=i, host="n1")
                                       for i in range(1, 5)])
    assert len(begins) == 1 and [t.number for t in made] == [1, 2, 3, 4]
    assert [t.params for t in made] == [{"x": float(i)} for i in range(1, 5)]
    assert all(t.status is TrialStatus.RUNNING for t in made)
    done = storage.finish_trials([
        dict(trial_id=made[0].id, status=TrialStatus.COMPLETE, value=1.0, fold_values=[1.0, 2.0]),
        dict(trial_id=made[1].id, status="FAILED", error="boom"),
        dict(trial_id=made[2].id, status=TrialStatus.PRUNED, value=3.0, intermediate={0: 3.0})])
    assert len(begins) == 2
    assert [storage.get_trial(sid, n) for n in (1, 2, 3)] == done
    assert [t.status for t in done] == [TrialStatus.COMPLETE, TrialStatus.FAILED, TrialStatus.PRUNED]
    with pytest.raises(StorageError, match="already"):   # all or nothing
        storage.finish_trials([dict(trial_id=made[3].id, status="COMPLETE", value=4.0),
                               dict(trial_id=made[0].id, status="COMPLETE", value=9.0)])
    assert storage.get_trial(sid, 4).status is TrialStatus.RUNNING
    assert storage.get_trial(sid, 1).value == 1.0


def test_a_batch_costs_the_same_statements_whatever_its_size(sql_storage):
    """Many groups finishing together: a fixed number of statements per batch, with
    earlier per-epoch values merged and earlier folds replaced, as one by one."""
    storage = sql_storage          # (its SQL engine, its lease fence)
    sid = new_study(storage)
    counts = []
    for n in (2, 8):
        made = storage.create_trials(sid, [dict(params={"x": float(i)}, seed=i, group=i)
                                           for i in range(n)])
        for t in made:
            storage.add_intermediate(t.id, 1, 5.0)
        statements = []
        listener = lambda *args: statements.append(1)  # noqa: E731
        event.listen(storage.engine, "before_cursor_execute", listener)
        done = storage.finish_trials([
            dict(trial_id=t.id, status=TrialStatus.COMPLETE, value=float(i),
                 fold_values=[1.0, 2.0], intermediate={1: 1.0, 2: 0.5}, metrics={"m": i})
            for i, t in enumerate(made)])
        event.remove(storage.engine, "before_cursor_execute", listener)
        counts.append(len(statements))
        for t, again in zip(done, (storage.get_trial(sid, t.number) for t in made)):
            assert again == t and t.intermediate == {(0, 1): 1.0, (0, 2): 0.5}
            assert t.fold_values == [1.0, 2.0] and t.params == {"x": float(t.number - made[0].number)}
    assert counts[0] == counts[1], counts


def test_get_trials_filters_sorts_limits(storage):
    sid = new_study(storage)
    for v in (3.0, 1.0, 2.0):
        finished(storage, sid, v)
    finished(storage, sid, None, TrialStatus.FAILED, error="x")
    storage.create_trial(sid, {"x": 9.0}, seed=0, group=0)
    by_value = storage.get_trials(sid, order_by="value")
    assert [t.value for t in by_value] == [1.0, 2.0, 3.0, None, None]
    down = storage.get_trials(sid, order_by="value", descending=True)
    assert [t.value for t in down][:3] == [3.0, 2.0, 1.0] and down[-1].value is None
    assert [t.number for t in storage.get_trials(sid, limit=2)] == [0, 1]
    only = storage.get_trials(sid, statuses=["FAILED", TrialStatus.RUNNING])
    assert [t.status for t in only] == [TrialStatus.FAILED, TrialStatus.RUNNING]
    with pytest.raises(StorageError, match="no trial 7"):
        storage.get_trial(sid, 7)


@pytest.mark.parametrize("direction, expected", [("minimize", [-1.0, 0.5, 2.0]),
                                                  ("maximize", [7.0, 2.0, 0.5])])
def test_best_trials_follow_the_direction(storage, direction, expected):
    sid = new_study(storage, direction=direction)
    for v in (2.0, -1.0, 7.0, 0.5):
        finished(storage, sid, v)
    finished(storage, sid, -100.0 if direction == "minimize" else 100.0, TrialStatus.PRUNED)
    finished(storage, sid, None, TrialStatus.FAILED)
    assert [t.value for t in storage.best_trials(sid, 3)] == expected
    assert storage.best_trials(sid)[0].value == expected[0]
    assert len(storage.best_trials(sid, 50)) == 4
    assert storage.best_trials(new_study(storage, "empty", direction)) == []


# ---- the Python API ----------------------------------------------------------------------
def test_load_study(url, monkeypatch):
    import builtins

    import mpiopt

    with open_storage(url, create=True) as st:
        sid = new_study(st, "api", "maximize")
        for v in (1.0, 3.0, 2.0):
            finished(st, sid, v, fold_values=[v, v], metrics={"m": v})
    with mpiopt.load_study("api", storage=url) as study:
        assert (study.name, study.direction, study.metric) == ("api", "maximize", "value")
        assert [t.number for t in study.trials] == [0, 1, 2]
        assert study.best_trial.value == 3.0
        assert [t.value for t in study.best_trials(2)] == [3.0, 2.0]
        real_import = builtins.__import__

        def no_pandas(name, *args, **kw):
            if name == "pandas":
                raise ImportError(name)
            return real_import(name, *args, **kw)

        monkeypatch.setattr(builtins, "__import__", no_pandas)
        rows = study.to_dataframe()
        assert [r["params_x"] for r in rows] == [1.0, 3.0, 2.0]
        assert rows[0]["fold_1"] == 1.0 and rows[0]["user_attrs_m"] == 1.0
    with pytest.raises(UnknownStudyError, match="known studies: api"):
        mpiopt.load_study("nope", storage=url)


def test_lost_attempts_are_counted_and_an_interrupted_trial_can_be_failed(storage):
    """A job that died leaves RUNNING trials: each counts a lost attempt (with the rank it
    ran on) and becomes INTERRUPTED; one that lost too many is FAILED from there."""
    sid = new_study(storage)
    a = storage.create_trial(sid, {"x": 1.0}, seed=1, group=0, host="n1", rank=3)
    storage.create_trial(sid, {"x": 2.0}, seed=2, group=1, host="n2", rank=5)
    storage.finish_trial(a.id, TrialStatus.COMPLETE, value=1.0)
    lost = storage.take_orphans(sid, count_lost_attempts=True)
    assert [(t.number, t.lost_attempts, t.rank, t.status) for t in lost] == \
        [(1, 1, 5, TrialStatus.INTERRUPTED)]
    storage.restart_trial(lost[0].id, group=0, host="n3", rank=1)
    again = storage.take_orphans(sid, count_lost_attempts=True)
    assert [(t.lost_attempts, t.rank, t.host) for t in again] == [(2, 1, "n3")]
    failed = storage.finish_trial(again[0].id, TrialStatus.FAILED, error="killed its process 2 times")
    assert failed.status is TrialStatus.FAILED
    assert storage.take_orphans(sid, count_lost_attempts=True) == []



def test_interrupting_keeps_the_trials_whose_rank_died_running(storage):
    """A job ending because a rank went silent interrupts the other running trials; the
    dead rank's stays RUNNING, so the resume counts it as a lost attempt."""
    sid = new_study(storage)
    dead = storage.create_trial(sid, {"x": 1.0}, seed=1, group=0, host="n1", rank=1)
    storage.create_trial(sid, {"x": 2.0}, seed=2, group=1, host="n1", rank=2)
    assert storage.interrupt_running(sid, keep={dead.id}) == 1
    assert [t.status for t in storage.get_trials(sid)] == [TrialStatus.RUNNING,
                                                            TrialStatus.INTERRUPTED]
    assert [(t.number, t.lost_attempts) for t in
            storage.take_orphans(sid, count_lost_attempts=True)] == [(0, 1)]

# ---- one coordinator per study ---------------------------------------------------------
def _age(storage, job, seconds: float) -> None:
    """The job fell silent `seconds` ago (its last beat moved back)."""
    from datetime import timedelta

    from mpiopt.storage.models import JobModel

    with storage.engine.begin() as conn:
        conn.execute(JobModel.__table__.update().where(JobModel.id == job.id).values(
            beat_at=job.beat_at.replace(tzinfo=None) - timedelta(seconds=seconds)))


def test_a_fresh_lease_refuses_a_second_job_and_a_stale_one_is_taken_over(sql_storage):
    storage = sql_storage          # (its SQL engine, its lease fence)
    from mpiopt.errors import LeaseLost, StudyBusyError

    sid = new_study(storage)
    first = storage.join_study(sid, "n12", 4242, 30)
    with pytest.raises(StudyBusyError, match=r"host n12, pid 4242.*last heartbeat \d+s ago") as busy:
        storage.join_study(sid, "n13", 77, 30)
    assert busy.value.lease.id == first.id and busy.value.lease.token is None
    storage.job_heartbeat(first.id, first.token)
    lease = storage.get_study("s").lease
    assert (lease.host, lease.pid, lease.period_s, lease.live) == ("n12", 4242, 30.0, True)
    _age(storage, lease, 120)                   # the job died: no beat for 2 minutes
    assert storage.get_study("s").lease.is_stale(datetime.now(lease.beat_at.tzinfo))
    second = storage.join_study(sid, "n13", 77, 30)
    with pytest.raises(LeaseLost, match="lost its lease"):
        storage.job_heartbeat(first.id, first.token)    # the dead job, back, learns it lost
    assert storage.end_job(first.id, first.token) == 1  # and its end changes nothing
    jobs = storage.list_jobs(sid)
    assert [(j.host, j.end, j.taken_by) for j in jobs] == [("n12", "lost", second.id),
                                                          ("n13", None, None)]
    assert storage.get_study("s").lease.host == "n13"
    assert storage.end_job(second.id, second.token) == 0
    ended = storage.get_study("s").lease
    assert (ended.id, ended.end, ended.live) == (second.id, "ended", False)
    assert ended.is_stale(datetime.now(ended.beat_at.tzinfo))     # (an ended job is gone)
    third = storage.join_study(sid, "n14", 1, 30)
    assert storage.end_job(third.id, third.token, "interrupted") == 0


@pytest.mark.parametrize("holder", ["killed", "alive", "signal"])
def test_a_holder_on_another_host_is_watched_before_the_study_is_refused(sqlite_storage, holder):
    """A job killed without a word (kill -9, the OOM killer) on another host leaves a fresh
    lease: a requeued or chained job that started at once was refused. Now it watches the
    holder (take_lease's wait): no heartbeat for three of its periods means it is gone and
    the study is taken over; a heartbeat means it lives (refused at once); a stop signal
    ends the wait (held meanwhile, as in the start-up)."""
    import signal
    import threading

    from mpiopt.run import startup_signals
    from mpiopt.errors import StudyBusyError
    from mpiopt.run.study_run import take_lease

    storage, said = sqlite_storage, []
    sid = new_study(storage)
    held = storage.join_study(sid, "n12", 4242, 0.5)
    with pytest.raises(StudyBusyError):                 # no wait: refused as before
        take_lease(storage, sid, 30.0)
    done = threading.Event()
    if holder == "alive":
        def beat():
            while not done.wait(0.1):
                storage.job_heartbeat(held.id, held.token)
        threading.Thread(target=beat, daemon=True).start()
    if holder == "signal":      # (Python's own handler: another test may have left one)
        before = signal.signal(signal.SIGINT, signal.default_int_handler)
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    try:
        if holder == "killed":
            mine = take_lease(storage, sid, 30.0, wait_s=60, say=lambda *a, **k: said.append(a[0]))
            assert storage.get_study("s").lease.host != "n12"
            storage.end_job(mine.id, mine.token)
        elif holder == "alive":
            with pytest.raises(StudyBusyError, match="host n12, pid 4242"):
                take_lease(storage, sid, 30.0, wait_s=60, say=lambda *a, **k: said.append(a[0]))
        else:
            with pytest.raises(KeyboardInterrupt):
                with startup_signals.deferred():
                    take_lease(storage, sid, 30.0, wait_s=60,
                               say=lambda *a, **k: said.append(a[0]))
    finally:
        done.set()
        if holder == "signal":
            signal.signal(signal.SIGINT, before)
    took = time.monotonic() - start
    assert said and re.search(r"\(host n12, pid 4242\) has not given it up; waiting up to \d+s", said[0])
    assert took < (3.0 if holder == "killed" else 1.0), took
    assert took > (1.4 if holder == "killed" else 0.0), took


def test_a_dead_holder_on_this_host_is_taken_over_at_once(sqlite_storage):
    """Its process is gone (asked, not waited for), with or without a wait for others."""
    import socket

    from mpiopt.run.study_run import take_lease

    gone = subprocess.Popen(["true"])
    gone.wait()
    sid = new_study(sqlite_storage)
    sqlite_storage.join_study(sid, socket.gethostname(), gone.pid, 30)
    start = time.monotonic()
    take_lease(sqlite_storage, sid, 30.0)
    assert sqlite_storage.get_study("s").lease.pid == os.getpid()
    assert time.monotonic() - start < 1.0


def test_a_job_whose_lease_was_taken_over_writes_nothing_more(sql_storage):
    """The fence (Storage.fence): a job stopped past its lease (Ctrl-Z, a suspended node)
    while another took the study over must not finish, interrupt or create trials: its
    writes mixed with the other job's (a result over a trial the other ran again, the
    other's running trial marked INTERRUPTED, the study's status)."""
    storage = sql_storage          # (its SQL engine, its lease fence)
    from mpiopt.errors import LeaseLost

    sid = new_study(storage)
    job = storage.join_study(sid, "n12", 4242, 30)
    storage.fence = (job.id, job.token)
    mine = storage.create_trial(sid, {"x": 1.0}, seed=1, group=0)     # while it holds it
    assert mine.job == job.id
    _age(storage, job, 120)                     # silent for 2 minutes: taken over
    storage.fence = None                        # (this storage acts as the other job)
    other = storage.join_study(sid, "n13", 77, 30)
    storage.fence = (other.id, other.token)
    theirs = storage.create_trial(sid, {"x": 2.0}, seed=2, group=0)
    storage.fence = (job.id, job.token)
    for write in (lambda: storage.finish_trial(mine.id, TrialStatus.COMPLETE, value=1.0),
                  lambda: storage.interrupt_running(sid),
                  lambda: storage.create_trial(sid, {"x": 3.0}, seed=3, group=0),
                  lambda: storage.set_study_status(sid, StudyStatus.INTERRUPTED),
                  lambda: storage.take_orphans(sid, count_lost_attempts=True),
                  lambda: storage.job_heartbeat(job.id, job.token)):
        with pytest.raises(LeaseLost, match="lost its lease"):
            write()
    assert storage.lost and "another job took it over" in storage.lost
    assert [t.status for t in storage.get_trials(sid)] == [TrialStatus.RUNNING] * 2
    assert storage.get_study("s").status is StudyStatus.RUNNING     # reads go on
    storage.fence = (other.id, other.token)     # the job that holds it writes as before
    assert storage.finish_trial(theirs.id, TrialStatus.COMPLETE, value=2.0).value == 2.0


def test_eight_jobs_starting_at_once_on_an_empty_database_all_open_it(db_url, tmp_path):
    """The first migration under concurrency: one job migrates, the others wait and find
    the schema current (SQLite: BEGIN IMMEDIATE; PostgreSQL: an advisory lock)."""
    from conftest import BIN, subprocess_env

    script = ("import sys\nfrom mpiopt.storage import open_storage\n"
              "with open_storage(sys.argv[1], create=True) as st:\n"
              "    st.create_study(sys.argv[2], 'minimize', 'value', 's', '0' * 64, '{}')\n")
    jobs = [subprocess.Popen([str(BIN / "python"), "-c", script, db_url, f"s{i}"], cwd=tmp_path,
                             env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for i in range(8)]
    outcomes = [(job.wait(timeout=120), job.stderr.read()) for job in jobs]
    assert all(rc == 0 for rc, _ in outcomes), [err for rc, err in outcomes if rc]
    with open_storage(db_url) as st:
        assert sorted(s.name for s in st.list_studies()) == [f"s{i}" for i in range(8)]


# ---- whole studies and the queue (mpiopt study ..., mpiopt enqueue, --retry-failed) -----
SPACE = {"x": {"type": "real", "low": -5.0, "high": 10.0},
         "k": {"type": "integer", "low": 1, "high": 4},
         "act": {"type": "categorical", "choices": ["relu", "tanh"]}}


def manage_study(st, name="s") -> int:
    import json

    spec = SPEC.replace("name: s", f"name: {name}")
    return st.create_study(name, "minimize", "value", spec, "ab" * 32, json.dumps(SPACE))


def fill_study(st, sid) -> None:
    """Every kind of row: folds with metrics, per-epoch values, metrics, errors, states."""
    a = st.create_trial(sid, {"x": 1.5, "k": 2, "act": "relu"}, seed=11, group=0, host="n1", rank=1)
    st.finish_trial(a.id, TrialStatus.COMPLETE, value=0.5, value_std=0.1, fold_values=[0.4, 0.6],
                    fold_metrics=[{"acc": 0.8}, {"acc": 0.7}], metrics={"acc": 0.75},
                    intermediate={0: 1.0, 1: 0.5}, duration=2.5)
    b = st.create_trial(sid, {"x": -4.0, "k": 1, "act": "tanh"}, seed=12, group=1, host="n2")
    st.finish_trial(b.id, TrialStatus.FAILED, error="Traceback ...\nValueError: boom")
    st.create_trial(sid, {"x": 3.0, "k": 4, "act": "relu"}, seed=13, group=0)      # RUNNING
    st.enqueue_trials(sid, [{"x": 0.0, "k": 3, "act": "tanh"}])                    # PENDING


def row_counts(url: str) -> dict:
    with open_storage(url) as st, st.engine.connect() as conn:
        return {t: conn.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar()
                for t in ("trials", "trial_params", "trial_folds", "trial_intermediate")}


def test_delete_takes_every_row_of_the_study_and_nothing_else(db_url):
    with open_storage(db_url, create=True) as st:
        keep, gone = manage_study(st, "keep"), manage_study(st, "gone")
        fill_study(st, keep)
        before = row_counts(db_url)
        fill_study(st, gone)
        assert st.study_name(gone) == "gone"
        assert st.delete_study(gone) == 4
        assert [s.name for s in st.list_studies()] == ["keep"]
        assert st.study_name(gone) is None and st.study_name(keep) == "keep"
    assert row_counts(db_url) == before


def test_rename_rewrites_the_stored_spec_and_refuses_a_taken_name(db_url):
    from mpiopt.study import manage

    with open_storage(db_url, create=True) as st:
        fill_study(st, manage_study(st, "a"))
        manage_study(st, "b")
        with pytest.raises(DuplicateStudyError, match="'b' already exists"):
            manage.rename_study(st, "a", "b")
        manage.rename_study(st, "a", "c")
        record = st.get_study("c")
        assert st.study_name(record.id) == "c"
        assert yaml.safe_load(record.spec_text)["study"]["name"] == "c"
        assert len(st.get_trials(record.id)) == 4


def test_the_queue_is_taken_exactly_once_in_order(db_url):
    with open_storage(db_url, create=True) as st:
        sid = new_study(st)
        done = st.create_trial(sid, {"x": 1.0, "k": 1, "act": "relu"}, seed=1, group=0)
        queued = st.enqueue_trials(sid, [{"x": float(i), "k": 1, "act": "relu"} for i in range(3)])
        assert [(t.number, t.status, t.seed, t.group) for t in queued] == \
            [(1, TrialStatus.PENDING, None, None), (2, TrialStatus.PENDING, None, None),
             (3, TrialStatus.PENDING, None, None)]
        assert [t.number for t in st.pending_trials(sid, limit=2)] == [1, 2]
        taken = st.take_pending([dict(trial_id=queued[0].id, seed=5, group=1, host="n1", rank=2)])
        assert [(t.number, t.status, t.seed, t.group, t.rank) for t in taken] == \
            [(1, TrialStatus.RUNNING, 5, 1, 2)]
        assert st.take_pending([dict(trial_id=queued[0].id, seed=5, group=0)]) == []  # once
        assert st.interrupt_running(sid) == 2      # RUNNING ones; the queue stays queued
        assert [t.number for t in st.pending_trials(sid)] == [2, 3]
        assert st.get_trial(sid, done.number).status is TrialStatus.INTERRUPTED


def test_retry_failed_marks_and_queues_in_one_go(db_url):
    with open_storage(db_url, create=True) as st:
        sid = new_study(st)
        fill_study(st, sid)
        assert st.retry_failed(sid) == [1]
        assert st.get_trial(sid, 1).status is TrialStatus.RETRIED
        assert st.get_trial(sid, 1).error.endswith("boom")           # kept for the record
        again = st.pending_trials(sid)[-1]
        assert (again.number, again.params) == (4, {"x": -4.0, "k": 1, "act": "tanh"})
        assert st.retry_failed(sid) == []


def test_initial_trials_are_queued_with_the_study(db_url):
    with open_storage(db_url, create=True) as st:
        sid = st.create_study("s", "minimize", "value", SPEC, "ab" * 32, SPACE,
                              enqueued=[{"x": 1.0, "k": 1, "act": "relu"}])
        assert [(t.number, t.params["x"]) for t in st.pending_trials(sid)] == [(0, 1.0)]


def test_results_starts_and_trials_sent_ahead_are_one_transaction(sql_storage):
    """Asking ahead: a trial sent ahead has no start time until its group begins it; the
    results, that start and the next trials sent ahead are one commit; a job killed
    before a trial sent ahead began counts no lost attempt against it."""
    storage = sql_storage          # (its SQL engine, its lease fence)
    sid = new_study(storage)
    now, = storage.create_trials(sid, [dict(params={"x": 0.0}, seed=0, group=0)])
    ahead, = storage.create_trials(sid, [dict(params={"x": 1.0}, seed=1, group=0, started=False)])
    assert now.started_at is not None and ahead.started_at is None
    begins = []
    event.listen(storage.engine, "begin", lambda conn: begins.append(1))
    finished, made = storage.finish_and_create(
        [dict(trial_id=now.id, status=TrialStatus.COMPLETE, value=1.0, duration=2.0)], sid,
        [dict(params={"x": 2.0}, seed=2, group=0, started=False)], started=[ahead.id])
    assert len(begins) == 1
    assert finished[0].status is TrialStatus.COMPLETE and storage.get_trial(sid, 0).value == 1.0
    assert storage.get_trial(sid, 1).started_at is not None            # begun now
    assert made[0].number == 2 and storage.get_trial(sid, 2).started_at is None
    lost = storage.take_orphans(sid, count_lost_attempts=True)         # the job died here
    assert [t.number for t in lost] == [1] and lost[0].lost_attempts == 1
    never = storage.get_trial(sid, 2)
    assert never.status is TrialStatus.INTERRUPTED and never.lost_attempts == 0


def test_a_trial_finished_without_a_noted_start_gets_one_from_its_duration(storage):
    sid = new_study(storage)
    ahead, = storage.create_trials(sid, [dict(params={"x": 1.0}, seed=1, group=0, started=False)])
    done, = storage.finish_trials([dict(trial_id=ahead.id, status="COMPLETE", value=1.0,
                                        duration=30.0)])
    again = storage.get_trial(sid, 0)
    assert again.started_at is not None and done.started_at is not None
    span = (again.finished_at - again.started_at).total_seconds()
    assert 29.0 <= span <= 31.0


def test_the_queue_read_on_every_dispatch_does_not_walk_the_study(tmp_path):
    """SQLite plans the queue's SELECT as one range scan of ix_trials_queue (migration
    0007), not as a walk of (study_id, number) through every trial, which made the
    coordinator's cost per trial grow from 0.85 ms at 100 trials to 1.7 ms at 10,000."""
    from mpiopt.storage._studies import _PENDING

    with open_storage(f"sqlite:///{tmp_path / 'q.db'}", create=True) as st:
        compiled = _PENDING.compile(st.engine)
        values = {**compiled.params, "sid": 1, "n": 4}
        args = tuple(values[name] for name in compiled.positiontup)
        with st.engine.connect() as conn:
            plan = " ".join(str(row) for row in
                            conn.exec_driver_sql("EXPLAIN QUERY PLAN " + str(compiled), args))
    assert "ix_trials_queue" in plan and "autoindex" not in plan, plan


def test_group_activity_tells_the_running_trial_from_the_ones_sent_ahead(storage):
    """A trial sent ahead is RUNNING without a start; `mpiopt status` counted it as
    running (4 running with 2 groups) and could name it as the group's running trial."""
    import os
    import socket

    from mpiopt.reporting.tables import status_lines, status_summary

    sid = new_study(storage)
    job = storage.join_study(sid, socket.gethostname(), os.getpid(), 30.0)   # a live job's
    sql_of(storage).fence = (job.id, job.token)
    runs = storage.create_trials(sid, [{"params": {"x": 0.1}, "seed": 1, "group": 0},
                                       {"params": {"x": 0.2}, "seed": 1, "group": 1}])
    ahead = storage.create_trials(sid, [{"params": {"x": 0.3}, "seed": 1, "group": 0,
                                         "started": False},
                                        {"params": {"x": 0.4}, "seed": 1, "group": 1,
                                         "started": False}])
    groups = storage.group_activity(sid)
    assert [(g["group"], g["running"], g["ahead"]) for g in groups] == [
        (0, runs[0].number, 1), (1, runs[1].number, 1)]
    record = storage.get_study("s")
    summary = status_summary(record, storage.count_trials(sid), None, groups,
                             jobs=storage.list_jobs(sid))
    assert (summary["running"], summary["sent_ahead"], summary["stranded"]) == (2, 2, 0)
    lines = status_lines(summary)
    assert "2 running (+2 sent ahead), 0 failed" in lines[1], lines[1]
    assert lines[-2].endswith(f"running trial {runs[0].number}, 1 sent ahead")
    assert ahead[0].status is TrialStatus.RUNNING


def sql_of(storage):
    """The SQL storage itself (under the outage wrapper, where it has one): its fence."""
    return getattr(storage, "storage", storage)


@pytest.mark.parametrize("message, transient", [
    ("database is locked", True),
    ("database or disk is full", True),          # a full disk or quota: freed, it goes on
    ("disk I/O error", True),                    # a network file system's hiccup
    ("attempt to write a readonly database", True),   # remounted read-only
    ("unable to open database file", True),
    ("no such table: trials", False),            # the statement's own fault
    ("UNIQUE constraint failed: trials.number", False),
])
def test_what_sqlite_says_decides_whether_a_write_is_retried(message, transient):
    """A failure of the file (not the statement) is ridden out like an outage, so the
    result waits and then goes to the recovery file; a full disk ended the job with "the
    study's loop failed" and the finished trial ran again on resume."""
    from sqlalchemy import exc as sa_exc

    from mpiopt.storage._session import is_transient

    error = sa_exc.OperationalError("INSERT ...", {}, sqlite3.OperationalError(message))
    assert is_transient(error) is transient


def test_a_postgresql_server_that_stops_answering_fails_the_call_and_a_slow_one_does_not(
        pg_server, monkeypatch):
    """A statement waiting on a server frozen in its tracks (mpiopt.storage._stall) fails
    as an outage within seconds, and the next call after the thaw works; a statement that
    waits on a live server (a lock another session holds) is left to finish. The watch
    keeps no thread once idle, and no engine once its storage is closed."""
    import gc
    import weakref

    import psycopg

    from mpiopt.storage import _stall
    from mpiopt.storage._stall import _WATCHES

    monkeypatch.setattr(_stall, "IDLE_S", 1.0)

    url = pg_server.new_database()
    with open_storage(url, create=True) as st:
        sid = st.create_study("s", "minimize", "value", "{}", "ab" * 32, "{}")
        watch = _WATCHES[st.engine.pool]
        watch.stall_s = 2.0        # (STALL_S is 5 s; shorter here, the same path, 7 s less)
        # a lock held for 3.5 s, past the stall limit: the server answers the watch's probe
        held = threading.Event()

        def hold():
            dsn = url.replace("postgresql+psycopg", "postgresql")
            with psycopg.connect(dsn) as other:
                other.execute("SELECT 1 FROM studies WHERE id = %s FOR UPDATE", (sid,))
                held.set()
                time.sleep(3.5)

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(10)
        started = time.monotonic()
        st.set_study_status(sid, StudyStatus.RUNNING)          # waits for the lock
        holder.join(30)
        assert time.monotonic() - started > 3 and watch.shut == 0
        outcome = {}

        def call():          # (in a thread: without the watch it would wait for the thaw)
            started = time.monotonic()
            try:
                st.list_studies()
                outcome["how"] = "answered"
            except StorageUnavailable:
                outcome["how"] = "unavailable"
            outcome["took"] = time.monotonic() - started

        with pg_server.frozen():
            caller = threading.Thread(target=call, daemon=True)
            caller.start()
            caller.join(30)
        caller.join(30)
        assert outcome.get("how") == "unavailable" and outcome["took"] < 20, outcome
        assert watch.shut >= 1
        assert [s.name for s in st.list_studies()] == ["s"]    # (after the thaw)
        end = time.monotonic() + 10
        while watch._thread is not None and time.monotonic() < end:
            time.sleep(0.2)
        assert watch._thread is None                           # idle: the thread ended
        pool = weakref.ref(st.engine.pool)
    del st, watch
    gc.collect()
    assert pool() is None                                      # closed: nothing kept


def test_a_server_with_every_connection_taken_says_so(pg_server):
    """A job array's tasks can take all of a server's max_connections: the job that finds
    none left ends at once (exit 2) with PostgreSQL's 'too many clients', now with what
    to do about it."""
    import psycopg

    url = pg_server.new_database()
    hogs = []
    try:
        while True:
            try:
                hogs.append(psycopg.connect(f"host=127.0.0.1 port={pg_server.port} "
                                            "user=mpiopt dbname=postgres connect_timeout=10"))
            except psycopg.OperationalError as exc:
                assert "too many clients" in str(exc)
                break
            assert len(hogs) < 1000
        with pytest.raises(StorageError, match=r"too many clients.*raise the server's "
                                               r"max_connections"):
            open_storage(url, create=True)
    finally:
        for conn in hogs:
            conn.close()
    with open_storage(url, create=True) as st:          # connections free: it opens
        assert st.list_studies() == []
