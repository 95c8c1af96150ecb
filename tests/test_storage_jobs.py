"""The storage contract of many jobs on one study (issue 51): jobs as rows (join_study,
job_heartbeat, end_job, list_jobs), the fence per job, orphaned trials taken over
(take_orphans), claims (restart_trial), the budget and distinct parameter sets decided in
the database, and changes(). Each case runs on every implementation (test_storage's
`storage` fixture: SQL and the outage wrapper, on SQLite and on PostgreSQL); the race
runs real processes against one database."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone

import pytest

from mpiopt.errors import LeaseLost, StorageError, StudyBusyError, TrialTaken
from mpiopt.storage import open_storage
from mpiopt.storage.models import JobModel
from mpiopt.trial import TrialStatus
from test_storage import new_study, sql_storage, storage, url  # noqa: F401  (fixtures)


def sql(st):
    """The SQL storage under the outage wrapper (where the fence and the engine are)."""
    return getattr(st, "storage", st)


def age(st, job, seconds: float = 120.0) -> None:
    """The job fell silent `seconds` ago (its last beat moved back)."""
    with sql(st).engine.begin() as conn:
        conn.execute(JobModel.__table__.update().where(JobModel.id == job.id).values(
            beat_at=datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(seconds=seconds)))


def as_job(st, job) -> None:
    sql(st).fence = None if job is None else (job.id, job.token)


def test_a_job_is_a_row_that_names_its_launcher_and_groups(storage):
    sid = new_study(storage)
    job = storage.join_study(sid, "n1", 11, 30, groups=4, launcher="slurm 4242_3")
    assert job.token and job.live and not job.shared and (job.groups, job.launcher) == (4, "slurm 4242_3")
    listed, = storage.list_jobs(sid)
    assert (listed.id, listed.token, listed.running, listed.launcher, listed.period_s) == \
        (job.id, None, 0, "slurm 4242_3", 30.0)
    assert storage.get_study("s").lease.id == job.id
    with pytest.raises(StorageError, match="no study with id 999"):
        storage.join_study(999, "n1", 11, 30)


def test_a_job_alone_is_refused_beside_a_live_one_and_takes_over_when_told(storage):
    sid = new_study(storage)
    first = storage.join_study(sid, "n1", 11, 30)
    with pytest.raises(StudyBusyError, match=r"host n1, pid 11, .*last heartbeat \d+s ago") as busy:
        storage.join_study(sid, "n2", 22, 30)
    assert busy.value.lease.id == first.id
    with pytest.raises(StudyBusyError, match="did not --join"):
        storage.join_study(sid, "n1", 33, 30, shared=True)
    second = storage.join_study(sid, "n2", 22, 30, takeover=True)
    assert [(j.id, j.end, j.taken_by) for j in storage.list_jobs(sid)] == \
        [(first.id, "lost", second.id), (second.id, None, None)]
    with pytest.raises(LeaseLost):
        storage.job_heartbeat(first.id, first.token)
    with pytest.raises(LeaseLost):
        storage.job_heartbeat(second.id, "0" * 32)        # a token not its own


def test_joined_jobs_share_a_study_and_a_stale_one_is_lost_to_the_next(storage):
    sid = new_study(storage)
    a = storage.join_study(sid, "n1", 11, 30, shared=True)
    b = storage.join_study(sid, "n1", 22, 30, shared=True)
    with pytest.raises(StudyBusyError, match="being run by another job"):
        storage.join_study(sid, "n1", 33, 30)            # alone: not beside joined ones
    age(storage, a)
    c = storage.join_study(sid, "n1", 33, 30, shared=True)
    assert [(j.id, j.end, j.taken_by) for j in storage.list_jobs(sid)] == \
        [(a.id, "lost", c.id), (b.id, None, None), (c.id, None, None)]
    assert storage.get_study("s").lease.live


def test_sqlite_serves_joined_jobs_on_one_host_only(storage):
    sid = new_study(storage)
    storage.join_study(sid, "n1", 11, 30, shared=True)
    if storage.location.backend != "sqlite":
        assert storage.join_study(sid, "n2", 22, 30, shared=True).live
        return
    with pytest.raises(StorageError, match=r"SQLite serves jobs on one host \(a live job of study "
                                           r"'s' runs on n1\); jobs on several hosts need PostgreSQL"):
        storage.join_study(sid, "n2", 22, 30, shared=True)
    assert len(storage.list_jobs(sid)) == 1                # nothing written


def test_a_job_that_beat_after_it_was_seen_stale_is_not_marked_lost(sql_storage):
    """Marking a stale job lost checks, in the UPDATE itself, that its beat is still the
    one read: a job that beat at the last moment lives on."""
    from mpiopt.storage._jobs import mark_lost

    sid = new_study(sql_storage)
    a = sql_storage.join_study(sid, "n1", 1, 30, shared=True)
    age(sql_storage, a)
    seen, = sql_storage.list_jobs(sid)
    assert seen.is_stale(datetime.now(timezone.utc))
    sql_storage.job_heartbeat(a.id, a.token)                 # it wakes and beats
    with sql_storage.engine.begin() as conn:
        assert mark_lost(conn, [seen], datetime.now(timezone.utc), None) == []
    assert sql_storage.list_jobs(sid)[0].live
    assert sql_storage.take_orphans(sid, count_lost_attempts=True) == []
    assert sql_storage.list_jobs(sid)[0].live


def test_end_job_counts_the_other_live_jobs_and_ends_only_a_live_one(storage):
    sid = new_study(storage)
    a, b, c = (storage.join_study(sid, "n1", pid, 30, shared=True) for pid in (1, 2, 3))
    age(storage, c)
    assert storage.end_job(a.id, a.token) == 1             # b; c is stale
    assert storage.end_job(a.id, a.token, "failed") == 1   # again: nothing changes
    assert storage.end_job(b.id, "0" * 32) == 0            # not its token: nothing
    assert storage.list_jobs(sid)[1].live
    assert storage.end_job(b.id, b.token, "interrupted") == 0
    assert [j.end for j in storage.list_jobs(sid)] == ["ended", "interrupted", None]
    with pytest.raises(StorageError, match="not 'gone'"):
        storage.end_job(c.id, c.token, "gone")


def test_the_fence_makes_trials_the_jobs_own_and_interrupts_only_its_own(storage):
    sid = new_study(storage)
    a = storage.join_study(sid, "n1", 1, 30, shared=True)
    b = storage.join_study(sid, "n1", 2, 30, shared=True)
    queued, = storage.enqueue_trials(sid, [{"x": 9.0}])
    as_job(storage, a)
    mine = storage.create_trial(sid, {"x": 1.0}, seed=1, group=0)
    taken, = storage.take_pending([dict(trial_id=queued.id, seed=2, group=1)])
    _, made = storage.finish_and_create([], sid, [dict(params={"x": 3.0}, seed=3, group=2)])
    as_job(storage, b)
    theirs = storage.create_trial(sid, {"x": 2.0}, seed=4, group=0)
    assert [t.job for t in (mine, taken, made[0], theirs)] == [a.id, a.id, a.id, b.id]
    assert [(j.id, j.running) for j in storage.list_jobs(sid)] == [(a.id, 3), (b.id, 1)]
    assert storage.interrupt_running(sid) == 1             # b's only
    assert storage.get_trial_by_id(mine.id).status is TrialStatus.RUNNING
    assert storage.get_trial_by_id(theirs.id).job == b.id
    as_job(storage, None)


def test_take_orphans_interrupts_the_trials_of_jobs_that_are_gone(storage):
    sid = new_study(storage)
    a = storage.join_study(sid, "n1", 1, 30, shared=True)
    b = storage.join_study(sid, "n1", 2, 30, shared=True)
    unowned = storage.create_trial(sid, {"x": 0.0}, seed=0, group=0)     # no job: an orphan
    as_job(storage, a)
    began = storage.create_trial(sid, {"x": 1.0}, seed=1, group=0)
    ahead, = storage.create_trials(sid, [dict(params={"x": 2.0}, seed=2, group=0, started=False)])
    as_job(storage, b)
    theirs = storage.create_trial(sid, {"x": 3.0}, seed=3, group=1)
    assert storage.take_orphans(sid, count_lost_attempts=True) == \
        [storage.get_trial_by_id(unowned.id)]              # a is live: its trials stay
    assert storage.get_trial_by_id(began.id).status is TrialStatus.RUNNING
    age(storage, a)
    counted = storage.take_orphans(sid, count_lost_attempts=True)
    assert [(t.id, t.lost_attempts, t.status) for t in counted] == \
        [(began.id, 1, TrialStatus.INTERRUPTED)]
    left = storage.get_trial_by_id(ahead.id)               # sent ahead, never begun
    assert (left.status, left.lost_attempts) == (TrialStatus.INTERRUPTED, 0)
    assert storage.get_trial_by_id(theirs.id).status is TrialStatus.RUNNING
    assert [(j.end, j.taken_by) for j in storage.list_jobs(sid)] == [("lost", b.id), (None, None)]
    assert storage.take_orphans(sid, count_lost_attempts=True) == []
    as_job(storage, None)


def test_an_interrupted_trial_is_claimed_by_one_job_only(storage):
    sid = new_study(storage)
    a = storage.join_study(sid, "n1", 1, 30, shared=True)
    b = storage.join_study(sid, "n1", 2, 30, shared=True)
    t = storage.create_trial(sid, {"x": 1.0}, seed=1, group=0)
    storage.add_intermediate(t.id, 0, 5.0)
    storage.take_orphans(sid, count_lost_attempts=False)   # (it had no job)
    as_job(storage, a)
    claimed = storage.restart_trial(t.id, group=3, host="n1", rank=4, keep_intermediate=True)
    assert (claimed.status, claimed.job, claimed.attempt, claimed.intermediate) == \
        (TrialStatus.RUNNING, a.id, 1, {(0, 0): 5.0})
    as_job(storage, b)
    with pytest.raises(TrialTaken, match=f"trial 0 is RUNNING for job {a.id}"):
        storage.restart_trial(t.id, group=0)
    assert storage.get_trial_by_id(t.id).job == a.id
    as_job(storage, None)


def test_the_budget_counts_what_is_neither_queued_nor_retried(storage):
    sid = new_study(storage)
    queued = storage.enqueue_trials(sid, [{"x": 8.0}, {"x": 9.0}])       # not counted
    made = storage.create_trials(sid, [dict(params={"x": float(i)}, seed=i, group=i)
                                       for i in range(3)], limit=4)
    assert [t.number for t in made] == [2, 3, 4]
    more = storage.create_trials(sid, [dict(params={"x": 5.0 + i}, seed=i, group=0)
                                       for i in range(2)], limit=4)
    assert more[0].number == 5 and more[1] is None
    storage.finish_trial(made[0].id, TrialStatus.FAILED, error="boom")
    storage.retry_failed(sid)          # RETRIED (not counted) and its set queued again
    taken = storage.take_pending([dict(trial_id=q.id, seed=0, group=0) for q in queued], limit=4)
    assert taken[0].id == queued[0].id and taken[1] is None
    assert storage.changes(sid, None).counted == 4
    finished, created = storage.finish_and_create(
        [dict(trial_id=made[1].id, status=TrialStatus.COMPLETE, value=1.0)], sid,
        [dict(params={"x": 7.0}, seed=7, group=0)], limit=5)
    assert finished[0].value == 1.0 and created[0].number == 7
    assert storage.create_trials(sid, [dict(params={"x": 0.5}, seed=0, group=0)], limit=5) == [None]
    assert storage.create_trials(sid, [], limit=5) == []
    assert [t.number for t in storage.get_trials(sid)] == list(range(8))


def test_distinct_keys_create_a_parameter_set_once(storage):
    sid = new_study(storage)

    def asked(*keys, **kw):
        return storage.create_trials(sid, [dict(params={"k": k}, seed=0, group=0, key=k)
                                           for k in keys], distinct=True, **kw)
    first = asked("a", "b", "a")
    assert [t and t.params["k"] for t in first] == ["a", "b", None]
    assert [t and t.params["k"] for t in asked("b", "c", limit=3)] == [None, "c"]
    assert asked("d", limit=3) == [None]                    # the budget: 3 made
    storage.finish_trial(first[0].id, TrialStatus.FAILED, error="x")
    storage.retry_failed(sid)          # "a" RETRIED (its queued copy carries no key)
    assert [t and t.params["k"] for t in asked("a", "e")] == ["a", "e"]
    last = storage.get_trials(sid, ["RUNNING"])[-1]
    done, made = storage.finish_and_create(
        [dict(trial_id=last.id, status=TrialStatus.COMPLETE, value=1.0)], sid,
        [dict(params={"k": k}, seed=0, group=0, key=k) for k in ("e", "f")], distinct=True)
    assert done[0].value == 1.0 and [t and t.params["k"] for t in made] == [None, "f"]
    plain = storage.create_trials(sid, [dict(params={"k": "a"}, seed=0, group=0, key="a")])
    assert len(plain) == 1 and plain[0] is not None          # without distinct: as asked


def test_changes_tell_what_finished_what_runs_and_what_waits(storage):
    sid = new_study(storage)
    storage.enqueue_trials(sid, [{"x": 9.0}])
    a = storage.join_study(sid, "n1", 1, 30)
    as_job(storage, a)
    t0, t1, t2 = storage.create_trials(sid, [dict(params={"x": float(i)}, seed=i, group=i)
                                             for i in range(3)])
    storage.finish_trial(t0.id, TrialStatus.COMPLETE, value=0.5, intermediate={0: 1.0, 1: 0.5},
                         fold_values=[0.4, 0.6], metrics={"acc": 0.9})
    storage.interrupt_running(sid, keep={t1.id})
    first = storage.changes(sid, None)
    assert [(t.number, t.value, t.params, t.intermediate, t.job) for t in first.finished] == \
        [(1, 0.5, {"x": 0.0}, {(0, 0): 1.0, (0, 1): 0.5}, a.id)]
    assert [t.number for t in first.running] == [2] and [t.number for t in first.interrupted] == [3]
    assert first.counted == 3 and first.at.tzinfo is not None
    for got, statuses in ((first.finished, ["COMPLETE", "PRUNED", "FAILED"]),
                          (first.running, ["RUNNING"]), (first.interrupted, ["INTERRUPTED"])):
        assert got == tuple(storage.get_trials(sid, statuses))     # every field as read
    assert first.at <= datetime.now(timezone.utc)
    time.sleep(0.01)
    later = storage.changes(sid, first.at)
    assert later.finished == () and [t.number for t in later.running] == [2]
    storage.finish_trial(t1.id, TrialStatus.PRUNED, value=3.0)
    again = storage.changes(sid, first.at)
    assert [(t.number, t.status) for t in again.finished] == [(2, TrialStatus.PRUNED)]
    assert again.running == () and again.counted == 3
    as_job(storage, None)


# ---- real processes racing for one budget ------------------------------------------------
RACER = textwrap.dedent("""
    import json, os, sys, time
    from mpiopt.storage import open_storage
    url, sid, limit, start, me = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    with open_storage(url) as st:
        job = st.join_study(sid, "n1", os.getpid(), 30, shared=True)
        st.fence = (job.id, job.token)
        deadline = time.monotonic() + 60
        while not os.path.exists(start) and time.monotonic() < deadline:
            time.sleep(0.005)
        made, k = [], me
        while True:
            keys = [f"k{(k + i) % 40}" for i in range(3)]
            k += 7
            got = st.create_trials(sid, [dict(params={"k": key}, seed=0, group=0, key=key)
                                         for key in keys], limit=limit, distinct=True)
            made += [t.number for t in got if t is not None]
            if st.changes(sid, None).counted >= limit:
                break
        st.end_job(job.id, job.token)
    print(json.dumps(made))
""")


def test_racing_jobs_create_exactly_the_budget_with_dense_numbers_and_no_repeat(url, tmp_path):
    """Three processes, each its own job, ask for trials at once with overlapping keys:
    exactly `limit` trials exist afterwards, numbered 0..limit-1 with none twice, their
    keys distinct, and each process got only trials that exist."""
    limit = 24
    with open_storage(url, create=True) as st:
        sid = new_study(st)
    start = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", RACER, url, str(sid), str(limit), str(start),
                               str(me)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for me in range(3)]
    time.sleep(1.0)
    start.touch()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    with open_storage(url) as st:
        trials = st.get_trials(sid)
        jobs = st.list_jobs(sid)
    assert [t.number for t in trials] == list(range(limit))
    assert len({t.params["k"] for t in trials}) == limit
    assert sorted(n for made in outs for n in made) == list(range(limit))
    assert {t.job for t in trials} <= {j.id for j in jobs} and len(jobs) == 3
    assert all(j.end == "ended" for j in jobs)


JOINER = textwrap.dedent("""
    import json, os, sys, time
    from mpiopt.errors import StudyBusyError
    from mpiopt.storage import open_storage
    url, sid, start = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open_storage(url) as st:
        deadline = time.monotonic() + 60
        while not os.path.exists(start) and time.monotonic() < deadline:
            time.sleep(0.005)
        try:
            print(json.dumps(st.join_study(sid, "n1", os.getpid(), 30).id))
        except StudyBusyError as exc:
            print(json.dumps(None if exc.lease is None else -exc.lease.id))
""")


def test_jobs_that_start_alone_at_once_let_exactly_one_in(url, tmp_path):
    """Three processes join one study without --join at the same moment: one job is
    live, the other two are refused naming it."""
    with open_storage(url, create=True) as st:
        sid = new_study(st)
    start = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", JOINER, url, str(sid), str(start)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    time.sleep(1.0)
    start.touch()
    answers = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        answers.append(json.loads(out.strip().splitlines()[-1]))
    winners = [a for a in answers if a > 0]
    assert len(winners) == 1 and sorted(answers) == sorted([winners[0]] + [-winners[0]] * 2)
    with open_storage(url) as st:
        assert [(j.id, j.live) for j in st.list_jobs(sid)] == [(winners[0], True)]


def test_a_study_deleted_or_copied_takes_no_job_of_another_with_it(storage):
    """Delete takes the study's job rows too; a copy (dump and load) holds no job, and its
    trials name none (job ids are the original database's)."""
    sid, other = new_study(storage), new_study(storage, "t")
    a = storage.join_study(sid, "n1", 1, 30)
    kept = storage.join_study(other, "n1", 2, 30)
    as_job(storage, a)
    storage.create_trial(sid, {"x": 1.0}, seed=1, group=0)
    as_job(storage, None)
    copy = storage.load_study_dump(storage.dump_study(sid), "c", "study: {name: c}")
    assert storage.list_jobs(copy) == [] and storage.get_study("c").lease is None
    assert [t.job for t in storage.get_trials(copy)] == [None]
    assert storage.delete_study(sid) == 1
    assert storage.list_jobs(sid) == [] and [j.id for j in storage.list_jobs(other)] == [kept.id]


def test_the_last_job_to_end_records_the_study_status(storage):
    """Jobs that end at once take turns in end_job: the last writes the study's end."""
    from mpiopt.trial import StudyStatus

    sid = new_study(storage)
    a = storage.join_study(sid, "h", 1, 30.0, shared=True)
    b = storage.join_study(sid, "h", 2, 30.0, shared=True)
    assert storage.end_job(a.id, a.token, "ended", study_status=StudyStatus.COMPLETE) == 1
    assert storage.get_study("s").status is StudyStatus.RUNNING
    assert storage.end_job(b.id, b.token, "ended", study_status=StudyStatus.COMPLETE) == 0
    assert storage.get_study("s").status is StudyStatus.COMPLETE


def test_jobs_creating_one_study_at_once_get_one_study_and_the_others_a_duplicate(url):
    """The tasks of an array all start the study at once (--join): one creates it, every
    other one is told it exists (and joins it), on PostgreSQL too, where the name's
    unique index, not the look before the insert, settles it."""
    import threading

    from mpiopt.errors import DuplicateStudyError

    open_storage(url, create=True).close()
    barrier, answers = threading.Barrier(4, timeout=60), []   # a thread that died breaks it

    def create():
        st = open_storage(url)
        try:
            barrier.wait()
            answers.append(st.create_study("race", "minimize", "loss", "", "0" * 64, "{}"))
        except DuplicateStudyError:
            answers.append("duplicate")
        except Exception as exc:           # (any other answer fails the test below)
            answers.append(repr(exc))
        finally:
            st.close()

    threads = [threading.Thread(target=create) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(a == "duplicate" for a in answers) == [False, True, True, True], answers


def test_a_job_killed_without_a_word_keeps_no_study_running(storage):
    """A job whose row is live but whose beat stopped (kill -9) three periods ago and more
    does not count: the last live job to end records the study's end."""
    from mpiopt.trial import StudyStatus

    sid = new_study(storage)
    a = storage.join_study(sid, "h", 1, 30.0, shared=True)
    b = storage.join_study(sid, "h", 2, 30.0, shared=True)
    age(storage, b, 2 * 30.0)                          # late, but within its lease
    assert storage.end_job(a.id, a.token, "interrupted",
                           study_status=StudyStatus.INTERRUPTED) == 1
    assert storage.get_study("s").status is StudyStatus.RUNNING
    c = storage.join_study(sid, "h", 3, 30.0, shared=True)
    age(storage, b, 4 * 30.0)                          # gone
    assert storage.end_job(c.id, c.token, "interrupted",
                           study_status=StudyStatus.INTERRUPTED) == 0
    assert storage.get_study("s").status is StudyStatus.INTERRUPTED
