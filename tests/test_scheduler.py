"""The coordinator's decisions without MPI or a database: events in, instructions out
(tests/scheduling.py hands it events and reads the instructions they give)."""
from __future__ import annotations

import itertools

import pytest

from mpiopt.parallel.protocol import Decision, Report, Result
from mpiopt.parallel.scheduler import Answer, Dispatch, StopGroup, Withdraw, trial_seed
from mpiopt.parallel.scheduler.instructions import CreateTrials
from scheduling import Records, scheduler
from mpiopt.trial import FrozenTrial, StudyStatus, TrialStatus


class CountingSearcher:
    """Suggests x = 0, 1, 2, ...; remembers what it was told, in order."""

    numbered, asks_ahead, batches, space = False, True, False, None   # (the searchers' traits)

    def __init__(self):
        self.counter = itertools.count()
        self.told, self.forgotten, self.replayed, self.pending = [], [], [], []
        self.calls, self.numbers, self.rerun, self.next_number = [], [], [], None

    def ask(self, number=None):
        self.calls.append("ask")
        self.numbers.append(number)
        p = {"x": next(self.counter)}
        self.pending.append(p)
        return p

    def ask_batch(self, numbers):
        return [self.ask(n) for n in numbers]

    def tell(self, params, value):
        self.calls.append("tell")
        self.told.append((params["x"], value))

    def forget(self, params):
        self.forgotten.append(params["x"])

    def replay(self, trials, pending=(), next_number=None):
        self.replayed.extend(trials)
        self.rerun.extend(pending)
        self.next_number = next_number

    def take_failures(self):
        return []


def make(n_groups=2, budget=4, **kw):
    storage, searcher = Records(), CountingSearcher()
    sched = scheduler(storage=storage, study_id=1, searcher=searcher,
                      direction=kw.pop("direction", "minimize"), budget=budget, n_groups=n_groups, **kw)
    return sched, storage, searcher


def writes(storage) -> list[tuple]:
    """The log without the reads of the (empty) queue."""
    return [entry for entry in storage.log if entry[0] != "read queue"]


def done(trial_id, value=1.0, status="COMPLETE", error=None):
    return Result(trial_id=trial_id, status=status, value=value, error=error)


def test_start_dispatches_every_idle_group_and_commits_running_first():
    sched, storage, searcher = make(n_groups=3, budget=10)
    actions = sched.start()
    assert searcher.numbers == [0, 1, 2]        # each ask for its own trial number
    assert [a.group for a in actions] == [0, 1, 2]
    assert all(isinstance(a, Dispatch) for a in actions)
    assert [storage.trials[a.trial.trial_id]["status"] for a in actions] == ["RUNNING"] * 3
    assert [a.trial.number for a in actions] == [0, 1, 2]
    assert actions[1].trial.seed == trial_seed(0, 1) != trial_seed(0, 2)


def test_finished_group_gets_prefetched_work_before_searcher_is_told():
    sched, storage, searcher = make(n_groups=2, budget=5)
    first = sched.start()
    assert sched.prefetch() is True and sched.prefetch() is False  # one suggestion ahead
    actions = sched.on_result(0, done(first[0].trial.trial_id, 3.0))
    assert isinstance(actions[0], Dispatch) and actions[0].trial.params == {"x": 2}
    assert searcher.told == [(0, 3.0)]
    assert storage.trials[1]["status"] == "COMPLETE"


def test_the_next_trial_is_sent_before_the_result_is_written_but_committed_first():
    sched, storage, _ = make(n_groups=2, budget=5, send_first=True)
    first = sched.start()
    del storage.log[:]
    actions = sched.on_result(0, done(first[0].trial.trial_id, 3.0))
    assert [a.group for a in actions if isinstance(a, Dispatch)] == [0]
    # RUNNING before it left, and it left before the result was written
    assert writes(storage)[:3] == [("create", 3), ("send", 0), ("batch", 1)]
    assert ("finish", 1) in storage.log
    assert sched.finished == 1 and len(sched.running) == 2


def test_without_send_first_the_result_is_written_before_the_next_trial_is_made():
    """Trials in the ranks' own processes (one may kill the job): the next trial is made
    and sent only once the result that freed the group is written."""
    sched, storage, _ = make(n_groups=2, budget=5)
    first = sched.start()
    del storage.log[:]
    sched.on_result(0, done(first[0].trial.trial_id, 3.0))
    assert writes(storage)[:4] == [("batch", 1), ("finish", 1), ("create", 3), ("send", 0)]


@pytest.mark.parametrize("result", [done(1, None, "FAILED", "boom"), done(1, 0.5)])
def test_a_result_that_may_stop_the_study_is_written_before_the_next_trial(result):
    sched, storage, _ = make(n_groups=1, budget=5, target=1.0, max_initial_failures=1,
                             send_first=True)
    sched.start()
    del storage.log[:]
    actions = sched.on_result(0, result)
    assert writes(storage)[:2] == [("batch", 1), ("finish", 1)] and sched.stop_reason is not None
    assert actions == [StopGroup(0)]


def test_the_budget_counts_a_result_still_being_written():
    sched, storage, _ = make(n_groups=2, budget=2, send_first=True)
    first = sched.start()
    actions = sched.on_result(0, done(first[0].trial.trial_id, 3.0))
    assert actions == [] and len(storage.trials) == 2      # idle until the last trial ends


def test_without_a_prefetched_suggestion_the_result_is_told_before_the_next_ask():
    sched, _, searcher = make(n_groups=1, budget=3)    # single-process mode never prefetches
    a = sched.start()
    sched.on_result(0, done(a[0].trial.trial_id, 3.0))
    assert searcher.calls == ["ask", "tell", "ask"]     # sequential search stays sequential


def test_budget_counts_finished_and_running_then_stops_groups():
    sched, storage, searcher = make(n_groups=2, budget=3)
    a = sched.start()
    b = sched.on_result(0, done(a[0].trial.trial_id))
    assert isinstance(b[0], Dispatch)
    c = sched.on_result(1, done(a[1].trial.trial_id))
    assert c == []           # budget of 3: nothing left to start, group 1 waits for the end
    assert not sched.done
    d = sched.on_result(0, done(b[0].trial.trial_id))
    assert sorted(d, key=lambda a: a.group) == [StopGroup(0), StopGroup(1)] and sched.done
    assert sched.finish() is StudyStatus.COMPLETE and storage.status is StudyStatus.COMPLETE


def test_failed_and_nonfinite_results_are_recorded_but_never_told():
    sched, storage, searcher = make(n_groups=1, budget=3)
    a = sched.start()
    b = sched.on_result(0, done(a[0].trial.trial_id, None, "FAILED", "ValueError: boom"))
    assert storage.trials[1]["status"] == "FAILED" and storage.trials[1]["error"] == "ValueError: boom"
    assert searcher.told == [] and searcher.forgotten == [0]
    sched.on_result(0, done(b[0].trial.trial_id, 2.0))
    assert searcher.told == [(1, 2.0)]


def test_maximize_tells_negated_values_and_tracks_best():
    sched, _, searcher = make(n_groups=1, budget=2, direction="maximize")
    a = sched.start()
    b = sched.on_result(0, done(a[0].trial.trial_id, 0.9))
    sched.on_result(0, done(b[0].trial.trial_id, 0.5))
    assert searcher.told == [(0, -0.9), (1, -0.5)]
    assert sched.best.value == 0.9


def test_target_stops_dispatch_but_running_trials_finish():
    sched, _, _ = make(n_groups=2, budget=10, target=0.5)
    a = sched.start()
    assert sched.on_result(0, done(a[0].trial.trial_id, 0.4)) == []
    assert sched.stop_reason == "target" and not sched.done
    assert sched.on_result(1, done(a[1].trial.trial_id, 0.3)) == [StopGroup(0), StopGroup(1)]
    assert sched.done


def test_initial_failures_stop_the_study():
    sched, storage, _ = make(n_groups=1, budget=50, max_initial_failures=3)
    actions = sched.start()
    for _ in range(3):
        actions = sched.on_result(0, done(actions[0].trial.trial_id, None, "FAILED", "ImportError: x"))
    assert actions == [StopGroup(0)] and sched.done
    assert sched.finish() is StudyStatus.FAILED
    assert "first 3 trials all failed" in sched.message and "ImportError" in sched.message


def test_failures_in_a_row_after_a_success_stop_the_study():
    sched, storage, _ = make(n_groups=1, budget=50, max_failures_in_a_row=3)
    actions = sched.start()
    actions = sched.on_result(0, done(actions[0].trial.trial_id, 1.0))
    for i in range(3):
        assert sched.stop_reason is None
        actions = sched.on_result(0, done(actions[0].trial.trial_id, None, "FAILED", "OSError: gone"))
    assert actions == [StopGroup(0)] and sched.done and sched.finished == 4
    assert sched.finish() is StudyStatus.FAILED
    assert sched.message == ("stopping: the last 3 trials all failed "
                             "(search.max_failures_in_a_row); last error: OSError: gone")


def test_a_success_between_failures_starts_the_count_again():
    sched, _, _ = make(n_groups=1, budget=9, max_failures_in_a_row=3)
    actions = sched.start()
    for value in (1.0, None, None, 2.0, None, None, 3.0, None, None):
        status, error = ("COMPLETE", None) if value else ("FAILED", "e")
        actions = sched.on_result(0, done(actions[0].trial.trial_id, value, status, error))
    assert sched.stop_reason is None and sched.finished == 9


def test_a_budget_below_the_failure_limit_that_all_failed_is_a_failed_study():
    """Three trials, max_initial_failures 5, all three fail: the study is FAILED with the
    reason (it was COMPLETE, and the job exited 0); one success among them and it is not."""
    for succeeds in (False, True):
        sched, storage, _ = make(n_groups=1, budget=3, max_initial_failures=5)
        actions = sched.start()
        for i in range(3):
            ok = succeeds and i == 1
            actions = sched.on_result(0, done(actions[0].trial.trial_id, 1.0 if ok else None,
                                              "COMPLETE" if ok else "FAILED",
                                              None if ok else "ImportError: x"))
            if i < 2:
                assert sched.stop_reason is None
        assert sched.done
        if succeeds:
            assert sched.finish() is StudyStatus.COMPLETE and sched.stop_reason is None
        else:
            assert sched.finish() is StudyStatus.FAILED and sched.stop_reason == "failures"
            assert sched.message == "all 3 trials failed; last error: ImportError: x"


def test_quick_failures_wait_for_an_earlier_trial_that_may_succeed():
    """Settings that fail in seconds (an out-of-memory batch size) report before the trial
    that trains: their failures stop nothing while it runs; it succeeds, the study goes on.
    When it fails too, the failures stop the study."""
    for last in (2.0, None):
        sched, storage, _ = make(n_groups=2, budget=50, max_initial_failures=3)
        first = sched.start()
        slow, quick = first[0].trial, first[1].trial          # trials 0 and 1
        for _ in range(4):
            actions = sched.on_result(1, done(quick.trial_id, None, "FAILED", "OOM"))
            assert sched.stop_reason is None, "stopped while trial 0 may still succeed"
            quick = next(a.trial for a in actions if isinstance(a, Dispatch))
        status = "COMPLETE" if last is not None else "FAILED"
        sched.on_result(0, done(slow.trial_id, last, status, None if last else "OOM"))
        assert (sched.stop_reason == "failures") is (last is None)
        if last is None:
            assert "first 5 trials all failed" in sched.message


def test_time_limit_stops_new_dispatch():
    now = [0.0]
    sched, _, _ = make(n_groups=1, budget=10, time_limit=5.0, clock=lambda: now[0])
    a = sched.start()
    now[0] = 6.0
    assert sched.on_result(0, done(a[0].trial.trial_id)) == [StopGroup(0)]
    assert sched.stop_reason == "time_limit"


def test_reports_are_stored_and_answered_by_the_pruner():
    from mpiopt.search.pruners import Judgement, Pruner

    class PruneAfterTwo(Pruner):
        def _judge(self, step, own, others):
            return Judgement(step.epoch >= 2, step)

    sched, storage, _ = make(n_groups=1, budget=2, pruner=PruneAfterTwo())
    a = sched.start()
    tid = a[0].trial.trial_id
    assert sched.on_report(0, Report(tid, 1, 0.5)) == [Answer(0, Decision(tid))]
    assert sched.on_report(0, Report(tid, 2, 0.4))[0].decision.prune is True
    assert (tid, 0, 2, 0.4) in storage.intermediate
    sched.on_result(0, done(tid, 0.4, "PRUNED"))
    assert storage.trials[tid]["status"] == "PRUNED"


def test_kfold_reports_are_judged_by_fold_and_a_prune_says_where_and_against_what():
    """Issue 62: trial 1 is better than trial 0 on fold 0 and dips at fold 1's first
    epoch (a new model): that dip is judged like with like, on its finished fold, and it
    goes on; trial 1 worse past fold 1's warm-up is pruned, and its record says where
    and against what (in the metric's units: maximised here)."""
    from mpiopt.search import MedianPruner

    sched, storage, _ = make(n_groups=2, budget=2, direction="maximize", folds=3,
                             pruner=MedianPruner(warmup_epochs=1, min_trials=1))
    a, b = (d.trial.trial_id for d in sched.start())
    for fold, epoch, value in [(0, 1, 0.5), (0, 2, 0.9), (0, 3, 0.95), (1, 1, 0.8), (1, 2, 0.93)]:
        assert not sched.on_report(0, Report(a, epoch, value, fold))[0].decision.prune
    for fold, epoch, value in [(0, 1, 0.4), (0, 2, 0.92), (0, 3, 0.97), (1, 1, 0.6)]:
        assert not sched.on_report(1, Report(b, epoch, value, fold))[0].decision.prune
    assert sched.history[1] == {(0, 1): -0.4, (0, 2): -0.92, (0, 3): -0.97, (1, 1): -0.6}
    assert (b, 1, 1, 0.6) in storage.intermediate
    assert sched.on_report(1, Report(b, 2, 0.7, 1))[0].decision.prune    # (0.97+0.7)/2 < 0.94
    sched.on_result(1, done(b, 0.835, "PRUNED"))
    assert storage.trials[b]["error"] == ("pruned at fold 1 epoch 2: its figure so far 0.835 "
                                          "is worse than the median 0.94 of 1 other trial there")
    sched.on_result(0, done(a, 0.5, "PRUNED"))          # (pruned by the objective itself)
    assert storage.trials[a]["error"] is None


def test_a_trial_continued_from_its_checkpoint_is_judged_with_its_folds_before():
    """A trial run again from its checkpoint reports only from where it stopped; its
    finished folds (kept in the database) still count in its figure."""
    from mpiopt.search import MedianPruner

    curve = {(0, 1): 0.5, (0, 2): 0.4, (1, 1): 0.9, (1, 2): 0.3}
    existing = [FrozenTrial(id=1, study_id=1, number=0, status=TrialStatus.COMPLETE,
                            params={"x": 10}, value=0.35, intermediate=curve),
                FrozenTrial(id=2, study_id=1, number=1, status=TrialStatus.RUNNING,
                            params={"x": 11})]
    storage, searcher = Records(), CountingSearcher()
    storage.put({"x": 10}, TrialStatus.COMPLETE, seed=1, value=0.35, intermediate=curve)
    storage.put({"x": 11}, TrialStatus.RUNNING, seed=2, intermediate={(0, 1): 0.3, (0, 2): 0.1})
    sched = scheduler(storage=storage, study_id=1, searcher=searcher, direction="minimize",
                      budget=2, n_groups=1, existing=existing, checkpoints=True,
                      pruner=MedianPruner(warmup_epochs=1, min_trials=1))
    [rerun] = sched.start()
    assert rerun.trial.trial_id == 2 and sched.history[1] == {(0, 1): 0.3, (0, 2): 0.1}
    # fold 1's first epoch: its figure is fold 0's 0.1 against trial 0's 0.4, not 0.95
    assert not sched.on_report(0, Report(2, 1, 0.95, 1))[0].decision.prune
    assert not sched.on_report(0, Report(2, 2, 0.5, 1))[0].decision.prune   # 0.3 <= 0.35


def test_resume_replays_finished_and_reruns_unfinished_first():
    existing = [
        FrozenTrial(id=1, study_id=1, number=0, status=TrialStatus.COMPLETE, params={"x": 10}, value=2.0),
        FrozenTrial(id=2, study_id=1, number=1, status=TrialStatus.RUNNING, params={"x": 11}),
        FrozenTrial(id=3, study_id=1, number=2, status=TrialStatus.FAILED, params={"x": 12}, error="e"),
    ]
    storage, searcher = Records(), CountingSearcher()
    storage.put({"x": 10}, TrialStatus.COMPLETE, seed=1, value=2.0)
    storage.put({"x": 11}, TrialStatus.RUNNING, seed=2)
    storage.put({"x": 12}, TrialStatus.FAILED, seed=3, error="e")
    sched = scheduler(storage=storage, study_id=1, searcher=searcher, direction="minimize",
                      budget=4, n_groups=2, existing=existing)
    assert searcher.replayed == [({"x": 10}, 2.0), ({"x": 12}, None)]
    assert searcher.rerun == [{"x": 11}] and searcher.next_number == 3  # pending from the start
    assert sched.finished == 2 and sched.best.number == 0
    actions = sched.start()
    assert actions[0].trial.trial_id == 2 and actions[0].trial.attempt == 1   # same trial, new attempt
    assert actions[1].trial.number == 3                                       # then new numbers
    assert searcher.numbers == [3]                          # asked for trial 3 by number
    assert len(actions) == 2


def test_interrupt_marks_running_and_study():
    sched, storage, searcher = make(n_groups=2, budget=10)
    sched.start()
    sched.interrupt()
    assert {t["status"] for t in storage.trials.values()} == {"INTERRUPTED"}
    assert storage.status is StudyStatus.INTERRUPTED and sched.done
    assert sorted(searcher.forgotten) == [0, 1]


# ---- a slow searcher asked in the background ------------------------------------------------
class BlockingSearcher(CountingSearcher):
    """CountingSearcher whose asks after the first `free` wait for `gate` (a model fit that
    takes as long as the test wants); a space and pending dict as mpiopt's searchers have."""

    def __init__(self, free: int):
        super().__init__()
        import threading

        from mpiopt.space import Space

        self.free, self.gate = free, threading.Event()
        self.space, self.seed, self.pending = Space.from_dict({"x": {"type": "real", "low": 100.0, "high": 200.0}}), 0, {}

    def key(self, params):
        return tuple(sorted(params.items()))

    def ask(self, number=None):
        if len(self.numbers) >= self.free:
            assert self.gate.wait(30), "the test never opened the gate"
        self.calls.append("ask")
        self.numbers.append(number)
        p = {"x": next(self.counter)}
        self.pending[self.key(p)] = p
        return p

    def tell(self, params, value):
        self.pending.pop(self.key(params), None)
        super().tell(params, value)


def _until(predicate, what: str, limit_s: float = 30.0):
    """Poll until predicate() is truthy; the limit only turns a hang into a failure."""
    import time

    end = time.monotonic() + limit_s
    while not (value := predicate()):
        assert time.monotonic() < end, f"never happened: {what}"
        time.sleep(0.001)
    return value


def _run_with_guard(fn, limit_s: float = 30.0):
    """fn() in a thread; fails (instead of hanging the suite) if it does not return."""
    import threading

    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("value", fn()), daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), "the scheduler waited for the searcher's fit"
    return out["value"]


def test_groups_get_work_while_the_searcher_is_stuck_in_a_fit():
    from mpiopt.search.background import BackgroundSearcher

    inner = BlockingSearcher(free=3)
    storage = Records()
    searcher = BackgroundSearcher(inner, max_stock=2, min_fill_wait_s=0.0)   # (a time limit)
    sched = scheduler(storage=storage, study_id=1, searcher=searcher, direction="minimize",
                      budget=8, n_groups=2)
    dispatched = _until(lambda: sched.start() or sched.tick(), "a first dispatch")
    dispatched += _until(lambda: sched.tick(), "a second dispatch") if len(dispatched) < 2 else []
    assert sorted(a.group for a in dispatched) == [0, 1]
    _until(lambda: len(inner.numbers) == 3 and searcher.ready >= 1,   # asked, and in stock
           "the third (stocked) suggestion")                             # (not only asked)
    # the 4th ask is now stuck in its "fit": results still come in, are recorded and told,
    # and the finished group gets the stocked suggestion at once
    ids = {a.group: a.trial.trial_id for a in dispatched}
    first = _run_with_guard(lambda: sched.on_result(0, done(ids[0], 3.0)))
    assert [a.trial.params for a in first if isinstance(a, Dispatch)] == [{"x": 2}]
    second = _run_with_guard(lambda: sched.on_result(1, done(ids[1], 2.0)))
    assert not [a for a in second if isinstance(a, Dispatch)]   # a young study: group 1 waits
    filler = _run_with_guard(sched.tick)          # then, the model still busy: a random point
    assert [a.group for a in filler] == [1] and 100 <= filler[0].trial.params["x"] <= 200
    assert searcher.fillers == 1 and not sched.idle
    assert storage.trials[ids[0]]["status"] == storage.trials[ids[1]]["status"] == "COMPLETE"
    inner.gate.set()
    _until(lambda: len(inner.told) == 2, "the queued tells")
    assert inner.told == [(0, 3.0), (1, 2.0)]
    _until(lambda: inner.key(filler[0].trial.params) in inner.pending, "the filler pending")
    sched.finish()
    assert not searcher._thread.is_alive()


def test_building_a_scheduler_starts_no_thread_the_first_ask_starts_the_searcher_s():
    """The machine is pure: its background searcher's thread is the executor's, started
    with the first Ask and ended with CloseSearcher (the study's Finish)."""
    import threading

    from mpiopt.search.background import BackgroundSearcher

    def searcher_threads():
        return [t for t in threading.enumerate() if t.name == "mpiopt-searcher" and t.is_alive()]
    before = searcher_threads()
    searcher = BackgroundSearcher(BlockingSearcher(free=10), max_stock=2)
    sched = scheduler(storage=Records(), study_id=1, searcher=searcher, direction="minimize",
                      budget=2, n_groups=1)
    assert searcher_threads() == before                 # built: nothing runs beside it
    _until(lambda: sched.start() or sched.tick(), "a first dispatch")
    assert len(searcher_threads()) == len(before) + 1  # asked: the executor started it
    sched.stop("interrupted", "test")
    sched.interrupt()
    sched.finish()
    assert searcher_threads() == before


def test_a_broken_invariant_fails_at_its_event_with_the_events_before_it():
    """validate_state after every event (the tests' schedulers): a group RUNNING with no
    trial fails at the event that finds it, and the message tells the last events."""
    sched, _, _ = make(n_groups=2, budget=10)
    first = sched.start()
    sched.groups.running.pop(first[0].group)   # (a bug's doing: the group runs a trial)
    with pytest.raises(AssertionError, match="but RUNNING groups") as failed:
        sched.tick()
    assert "last events:" in str(failed.value) and "Start: [" in str(failed.value)
    assert [type(e).__name__ for e, _ in sched.stimulus_log][:1] == ["Start"]


def test_each_group_has_one_state_and_idle_groups_wait_in_the_order_they_were_freed():
    """groups.py: RUNNING while a trial runs, IDLE once its result is written and no work
    is left, STOPPED at the end in the order they became idle; LET_GO under a stop
    signal."""
    from mpiopt.parallel.scheduler.groups import GroupState as S

    sched, _, _ = make(n_groups=3, budget=3)
    first = sched.start()
    assert sched.groups.state == [S.RUNNING] * 3
    sched.on_result(2, done(first[2].trial.trial_id))
    sched.on_result(0, done(first[0].trial.trial_id))
    assert sched.groups.state == [S.IDLE, S.RUNNING, S.IDLE] and sched.idle == [2, 0]
    assert sched.on_result(1, done(first[1].trial.trial_id)) == [StopGroup(2), StopGroup(0),
                                                                 StopGroup(1)]
    assert sched.groups.state == [S.STOPPED] * 3
    sched, _, _ = make(n_groups=2, budget=10)
    sched.start()
    sched.interrupt()
    assert sched.groups.state == [S.LET_GO] * 2 and not sched.running


def test_a_failing_background_searcher_ends_the_study_with_its_error():
    from mpiopt.search.background import BackgroundSearcher

    class Broken(CountingSearcher):
        def ask(self, number=None):
            raise ValueError("singular matrix")

    sched = scheduler(storage=Records(), study_id=1, searcher=BackgroundSearcher(Broken(), 2),
                      direction="minimize", budget=4, n_groups=1)
    with pytest.raises(RuntimeError, match="searcher failed: ValueError: singular matrix"):
        _until(lambda: sched.start() or sched.tick(), "the error")


def test_a_searcher_s_failure_is_said_once_and_the_study_goes_on():
    """A suggestion the searcher fails to make is drawn at random (mpiopt.search._base):
    the study ends COMPLETE, and the failure is said once per run, not with every trial."""
    from mpiopt.search import make_searcher
    from mpiopt.space import Real, Space

    def broken():
        raise RuntimeError("broken in the coordinator's process")

    searcher = make_searcher("random", Space([Real("x", 0.0, 1.0)]), {}, 0)
    searcher._suggest = broken
    storage = Records()
    sched = scheduler(storage=storage, study_id=1, searcher=searcher, direction="minimize",
                      budget=3, n_groups=1)
    sent = [a for a in sched.start() if isinstance(a, Dispatch)]
    while sent:
        trial = sent[0].trial
        sent = [a for a in sched.on_result(0, done(trial.trial_id, trial.params["x"]))
                if isinstance(a, Dispatch)]
    assert sched.finish() is StudyStatus.COMPLETE and sched.finished == 3
    assert storage.said == ["warning: random could not make a suggestion (RuntimeError: broken "
                            "in the coordinator's process): such a trial's parameters are "
                            "drawn at random (said once)"]


def test_the_stock_follows_results_per_ask():
    from mpiopt.search.background import BackgroundSearcher

    clock = iter(range(0, 10_000, 1))
    searcher = BackgroundSearcher(CountingSearcher(), max_stock=16, clock=lambda: next(clock))
    assert searcher.stock_target == 1                     # nothing measured yet
    searcher._ask_s, searcher._gap_s = 0.5, 0.1           # 5 results during one ask
    assert searcher.stock_target == 6
    searcher._ask_s = 100.0
    assert searcher.stock_target == 16                    # never more than the groups
    # a group waits for the model when that costs under 1% of a trial (0.1 s x 16 groups)
    searcher._ask_s = 0.005
    assert not searcher._waiting_costs_too_much()
    searcher._ask_s = 0.05                                # with a time limit, that is
    assert not searcher._waiting_costs_too_much()         # too much; without, it is not
    searcher.min_fill_wait_s = 0.0
    assert searcher._waiting_costs_too_much()
    searcher.min_fill_wait_s, searcher._ask_s = 1.0, 2.0  # a wait of seconds is too much
    assert searcher._waiting_costs_too_much()


def test_a_background_searcher_without_its_thread_is_stepped_by_its_caller():
    """threaded=False (benchmarks/simulate_model.py drives it on a simulated clock): no
    thread starts; the caller applies what was queued and asks, and the machine takes
    the stock as it takes the thread's."""
    import threading

    from mpiopt.search.background import BackgroundSearcher

    inner = CountingSearcher()
    searcher = BackgroundSearcher(inner, max_stock=2, clock=lambda: 0.0, threaded=False)
    sched = scheduler(storage=Records(), study_id=1, searcher=searcher, direction="minimize",
                      budget=3, n_groups=1)
    before = threading.active_count()
    assert sched.start() == [] and threading.active_count() == before   # the group waits
    assert searcher.ask_due() and searcher.queued == 0 and inner.calls == []
    searcher.end_ask(searcher.begin_ask(0.0), 0.5)
    first = sched.tick()
    assert [a.trial.params for a in first] == [{"x": 0}]
    sched.on_result(0, done(first[0].trial.trial_id, 2.0))
    assert searcher.queued == 1 and inner.told == []       # queued, not yet applied
    searcher.apply_queued()
    assert inner.told == [(0, 2.0)] and searcher.queued == 0
    sched.stop("interrupted", "test")
    sched.finish()


class BatchingSearcher(CountingSearcher):
    """CountingSearcher that makes its suggestions in batches (one fit, many points)."""

    batches = True

    def __init__(self):
        super().__init__()
        self.batch_sizes = []

    def ask_batch(self, numbers):
        numbers = list(numbers)
        self.batch_sizes.append(len(numbers))
        return [self.ask(n) for n in numbers]


def test_a_batching_searcher_is_asked_once_for_the_groups_waiting():
    """Five groups wait for suggestions: one batch (one fit) makes them all, and the
    stock's one, instead of one ask per group in a queue."""
    from mpiopt.search.background import BackgroundSearcher

    inner = BatchingSearcher()
    searcher = BackgroundSearcher(inner, max_stock=8, clock=lambda: 0.0)
    assert searcher.take(waiting=5) is None            # nothing made yet: the groups wait
    searcher.start(0)
    try:
        _until(lambda: searcher.ready == 6, "the batch")
        assert inner.batch_sizes == [6] and inner.numbers == list(range(6))
        assert [searcher.take(waiting=w) for w in range(5, 0, -1)] == [{"x": i} for i in range(5)]
    finally:
        searcher.close()


def test_a_batching_searcher_keeps_two_asks_of_results_in_stock():
    """Its suggestions come when the whole batch is made: the stock covers the results
    during the ask in progress and during the one that refills them. The wait it weighs
    for fillers is that ask's, not one ask per group in the queue."""
    from mpiopt.search.background import BackgroundSearcher

    one = BackgroundSearcher(CountingSearcher(), max_stock=100, clock=lambda: 0.0)
    many = BackgroundSearcher(BatchingSearcher(), max_stock=100, clock=lambda: 0.0)
    for searcher in (one, many):
        searcher._ask_s, searcher._gap_s = 0.5, 0.1       # 5 results during one ask
    assert (one.stock_target, many.stock_target) == (6, 11)
    many._asking_for = 20                                # a batch of 20 in progress
    many._ask_s, many._gap_s = 0.2, 0.01                # 0.2 s a batch, 1,000 groups of 10 s
    one._ask_s, one._gap_s = 0.2, 0.01
    assert not many._waiting_costs_too_much(waiting=20, training=1000)
    assert one._waiting_costs_too_much(waiting=20, training=1000)     # 20 asks in a row


def test_a_burst_of_results_finds_its_suggestions_made():
    """Sixteen groups of equal trials finish within milliseconds of each other, then
    nothing for a trial's time: when the next burst begins, the spacing of results just
    seen says one per ask, but the stock covers the burst (the most results within one
    ask's time, lately)."""
    from mpiopt.search.background import BackgroundSearcher

    now = [0.0]
    searcher = BackgroundSearcher(BatchingSearcher(), max_stock=64, clock=lambda: now[0])
    searcher._ask_s = 0.05
    for wave in range(3):
        for group in range(16):
            now[0] = 0.3 * wave + 0.001 * group
            searcher.tell({"x": group}, 1.0)
    now[0] = 0.9                                        # the next wave's first result
    searcher.tell({"x": 0}, 1.0)
    assert searcher._ask_s / searcher._gap_s < 1        # Little's law alone: one per ask
    assert searcher._per_ask() == 16 and searcher.stock_target == 33


def test_a_queue_of_waiting_groups_is_a_wait_too():
    """1,000 groups of 35 s trials finishing within 135 ms asks: one ask is under a
    second, but the 100th group in the queue waits 13.5 s, far past 1% of a trial; and
    the trial is the spacing of results times the groups that train, not all groups."""
    from mpiopt.search.background import BackgroundSearcher

    searcher = BackgroundSearcher(CountingSearcher(), max_stock=1000, clock=lambda: 0.0)
    searcher._ask_s, searcher._gap_s = 0.135, 0.035
    assert not searcher._waiting_costs_too_much(waiting=1, training=1000)
    assert not searcher._waiting_costs_too_much(waiting=3, training=1000)   # 0.4 s
    assert searcher._waiting_costs_too_much(waiting=100, training=900)
    searcher._gap_s = 0.1            # 430 groups training, results 0.1 s apart: 43 s trials
    assert searcher._waiting_costs_too_much(waiting=8, training=430)        # 1.1 s > 0.43 s
    assert not searcher._waiting_costs_too_much(waiting=8, training=430 * 10_000)


def test_results_are_kept_when_the_next_trial_cannot_be_created():
    from mpiopt.errors import StorageUnavailable

    sched, storage, _ = make(n_groups=2, budget=6)
    first = sched.start()

    storage.failing[CreateTrials] = StorageUnavailable("db: connection refused")
    with pytest.raises(StorageUnavailable):
        sched.on_result(0, done(first[0].trial.trial_id, 3.0))
    assert storage.trials[1]["status"] == "COMPLETE" and 0 in sched.idle


def test_queued_sets_run_before_suggestions_are_told_and_count_toward_the_budget():
    storage, searcher = Records(), CountingSearcher()
    storage.enqueue({"x": 100})
    sched = scheduler(storage=storage, study_id=1, searcher=searcher, direction="minimize",
                      budget=3, n_groups=1)
    first = sched.start()
    assert first[0].trial.params == {"x": 100} and first[0].trial.seed == trial_seed(0, 0)
    assert searcher.calls == []                       # the searcher was not asked
    tid = storage.enqueue({"x": 200})                 # enqueued while the study runs
    nxt = sched.on_result(0, Result(first[0].trial.trial_id, TrialStatus.COMPLETE, value=5.0))
    assert nxt[0].trial.trial_id == tid               # the very next dispatch takes it
    assert searcher.told == [(100, 5.0)]              # told like any other result
    last = sched.on_result(0, Result(tid, TrialStatus.COMPLETE, value=4.0))
    assert last[0].trial.params == {"x": 0} and searcher.calls[-1] == "ask"
    sched.on_result(0, Result(last[0].trial.trial_id, TrialStatus.COMPLETE, value=6.0))
    assert sched.done and sched.finished == 3


def test_an_empty_queue_is_read_on_dispatch_but_not_on_every_tick():
    clock = [0.0]
    storage = Records()
    sched = scheduler(storage=storage, study_id=1, searcher=CountingSearcher(),
                      direction="minimize", budget=10, n_groups=1, clock=lambda: clock[0])
    sched.start()                        # read the (empty) queue, then asked the searcher

    def idle_again():                    # an idle group (waiting for a model fit, say)
        sched.groups.end(0)
        sched.groups.free(0)
    reads = lambda: sum(1 for entry in storage.log if entry[0] == "read queue")  # noqa: E731
    assert reads() == 1
    for _ in range(5):
        idle_again()
        sched.tick()                     # within QUEUE_POLL_S of the last read: no query
    assert reads() == 1
    sched.on_result(0, done(sched.running[0].trial_id))   # a dispatch after a result always reads
    clock[0] += 1.0
    idle_again()
    sched.tick()                         # and a tick once QUEUE_POLL_S has passed
    assert reads() == 3


def test_retried_and_pending_trials_are_neither_replayed_nor_counted():
    existing = [
        FrozenTrial(id=1, study_id=1, number=0, status=TrialStatus.RETRIED, params={"x": 1}, error="e"),
        FrozenTrial(id=2, study_id=1, number=1, status=TrialStatus.COMPLETE, params={"x": 2}, value=1.0),
        FrozenTrial(id=3, study_id=1, number=2, status=TrialStatus.PENDING, params={"x": 1}),
    ]
    searcher = CountingSearcher()
    sched = scheduler(storage=Records(), study_id=1, searcher=searcher, direction="minimize",
                      budget=4, n_groups=1, existing=existing, warm=[({"x": 7}, 3.0)])
    assert searcher.replayed == [({"x": 7}, 3.0), ({"x": 2}, 1.0)]   # warm start first
    assert sched.reruns == [] and sched.finished == 1 and sched.next_number == 3


# ---- asking ahead (the MPI loop's mode for searchers that answer at once) ---------------
def _ahead(n_groups, budget, **kw):
    """A scheduler that asks ahead, as for a study that already has a success."""
    sched, storage, searcher = make(n_groups=n_groups, budget=budget, ask_ahead=True,
                                    send_first=True, **kw)
    sched.outcomes.any_success = True
    return sched, storage, searcher


def test_nothing_is_sent_ahead_before_a_trial_succeeds():
    sched, storage, _ = make(n_groups=2, budget=10, max_initial_failures=2, ask_ahead=True,
                             send_first=True)
    first = sched.start()
    assert [a.group for a in first] == [0, 1]
    failed = sched.on_result(0, done(first[0].trial.trial_id, None, "FAILED", "bug"))
    assert [a.group for a in failed if isinstance(a, Dispatch)] == [0] and not sched.ahead.trials
    second = sched.on_result(1, done(first[1].trial.trial_id, 2.0))   # a success (recorded
    assert not sched.ahead.trials                      # after this dispatch): from the next result on,
    sched.on_result(0, done(failed[0].trial.trial_id, 1.0))        # one ahead per group
    assert set(sched.ahead.trials) == {0, 1} and second


def test_each_busy_group_holds_its_next_trial_and_starts_it_without_a_dispatch():
    sched, storage, searcher = _ahead(2, 10)
    first = sched.start()
    assert [a.group for a in first] == [0, 1, 0, 1]          # two now, two sent ahead
    assert [storage.trials[a.trial.trial_id]["started"] for a in first] == [True, True, False, False]
    searcher.calls.clear()
    actions = sched.on_result(0, done(first[0].trial.trial_id, 3.0))
    assert sched.running[0].trial_id == first[2].trial.trial_id   # promoted: it runs now
    assert storage.trials[first[2].trial.trial_id]["started"]     # noted with the result
    assert ("one commit", 1, 1) in storage.log      # result, start and next trial together
    assert searcher.calls == ["tell", "ask"]        # nobody waits: told before the ask
    assert [(a.group, a.trial.number) for a in actions if isinstance(a, Dispatch)] == [(0, 4)]
    assert 0 not in sched.idle and sched.ahead.trials[0].number == 4


def test_the_last_wave_is_not_queued_behind_busy_groups():
    sched, storage, _ = _ahead(2, 5)
    first = sched.start()
    assert [a.group for a in first] == [0, 1, 0]     # 5 - 3 = 2 left: not more than groups
    actions = sched.on_result(1, done(first[1].trial.trial_id))
    assert [a.group for a in actions if isinstance(a, Dispatch)] == [1]   # idle: a fresh one
    assert not sched.ahead.trials or set(sched.ahead.trials) == {0}
    assert sum(1 for _ in storage.trials) == 4


def test_a_stop_withdraws_trials_not_begun_and_records_them_interrupted():
    sched, storage, searcher = _ahead(2, 10, target=0.5)
    first = sched.start()
    ids = [a.trial.trial_id for a in first]
    assert sched.on_result(0, done(ids[0], 0.4)) == []     # target: group 0 runs its next
    assert sched.stop_reason == "target"
    withdrawn = sched.withdraw_ahead()
    assert withdrawn == [Withdraw(1, ids[3])] and sched.withdraw_ahead() == []
    assert sched.on_result(1, done(ids[1], 0.9)) == []      # promoted, but called back
    assert not storage.trials[ids[3]]["started"]
    answer = sched.on_result(1, Result(ids[3], TrialStatus.INTERRUPTED, error="not started"))
    assert answer == [] and storage.trials[ids[3]]["status"] == "INTERRUPTED"
    assert {"x": 3}["x"] in searcher.forgotten
    assert sched.on_result(0, done(ids[2], 0.7)) == [StopGroup(1), StopGroup(0)] and sched.done


def test_a_cancelled_trial_does_not_note_its_successor_as_started():
    sched, storage, _ = _ahead(2, 10)
    first = sched.start()
    sched.on_result(0, Result(first[0].trial.trial_id, TrialStatus.INTERRUPTED))
    assert not storage.trials[first[2].trial.trial_id]["started"]
    assert sched.running[0].trial_id == first[2].trial.trial_id


def test_a_trial_sent_ahead_to_a_stuck_group_is_not_noted_as_begun():
    clock = {"t": 0.0}
    sched, storage, searcher = _ahead(2, 10, trial_timeout=1.0, stuck_grace=1.0,
                                      clock=lambda: clock["t"])
    first = sched.start()
    clock["t"] = 5.0
    assert "did not stop" in sched.overdue()
    never = first[2].trial.trial_id                     # group 0's trial sent ahead
    assert storage.trials[never]["status"] == "INTERRUPTED" and not storage.trials[never]["started"]
    assert 0 not in sched.running and {"x": 2}["x"] in searcher.forgotten
    assert sched.given_up == {0}       # the wind-down does not wait for its ranks' BYE


def test_a_second_result_for_a_settled_trial_changes_nothing():
    """A member records its group's trial FAILED when the leader is stuck in a collective
    (mpiopt.parallel.together); a later word on that trial must not settle the group's
    next one."""
    sched, storage, searcher = make(n_groups=1, budget=5)
    first = sched.start()
    tid = first[0].trial.trial_id
    sched.on_result(0, done(tid, None, "FAILED", "MemoryError (world rank 2 on n1)"))
    running = sched.running[0].trial_id
    assert running != tid
    assert sched.on_result(0, done(tid, 9.0)) is not None
    assert sched.running[0].trial_id == running
    assert storage.trials[tid]["status"] == "FAILED" and storage.trials[running]["status"] == "RUNNING"
    assert searcher.told == []


def test_the_recorded_error_is_the_failing_ranks_own_not_an_echo():
    from mpiopt.errors import OTHERS_FAILED
    from mpiopt.parallel.together import _cause

    echo = f"RuntimeError: 1 {OTHERS_FAILED} (world rank 1 on n1)\n  File ..."
    own = "MemoryError: out of memory (world rank 2 on n1)\n  File ..."
    assert _cause([echo, own]) == own
    assert _cause([echo]) == echo
    assert _cause([own, "ValueError: x (world rank 4 on n1)"]) == own


def test_a_handler_is_its_instructions_in_order_and_does_no_io_itself():
    """The scheduler asks; the test answers each instruction by hand, as the next event:
    nothing happens between them, and the trial is sent only once its row exists."""
    from mpiopt.parallel.scheduler import Scheduler
    from mpiopt.parallel.scheduler import events as ev
    from mpiopt.parallel.scheduler import instructions as ins

    searcher = CountingSearcher()
    sched = Scheduler(study_id=7, searcher=searcher, direction="minimize", budget=3, n_groups=1,
                      validate=True)
    [read] = sched.handle(ev.Start())
    assert read == ins.ReadQueue(7, 1) and sched.waiting_for is read
    [ask] = sched.handle(ev.QueueRead(read, ()))     # an empty queue: the searcher is asked
    assert ask == ins.Ask(0, 1, 0) and searcher.calls == []
    [create] = sched.handle(ev.Suggested(ask, {"x": 0}, 0.0))
    assert isinstance(create, ins.CreateTrials) and create.study_id == 7
    assert [r["params"] for r in create.requests] == [{"x": 0}] and not sched.running
    row = FrozenTrial(id=41, study_id=7, number=0, status=TrialStatus.RUNNING, params={"x": 0})
    [sent] = sched.handle(ev.TrialsCreated(create, (row,)))
    assert sent == Dispatch(0, sent.trial) and sent.trial.trial_id == 41
    assert sched.running[0].trial_id == 41 and sched.waiting_for is None
    [write] = sched.handle(ev.Results(((0, done(41, 2.5)),)))
    assert isinstance(write, ins.WriteResults) and write.outcomes[0]["trial_id"] == 41
    assert searcher.told == [] and sched.finished == 0      # told and counted once written
    rest = sched.handle(ev.Written(write))
    answers = {ins.ReadQueue: lambda i: ev.QueueRead(i, ()),
               ins.Ask: lambda i: ev.Suggested(i, {"x": 1}, 0.0),
               ins.CreateTrials: lambda i: ev.TrialsCreated(i, (FrozenTrial(
                   id=42, study_id=7, number=1, status=TrialStatus.RUNNING, params={"x": 1}),))}
    while type(rest[-1]) in answers:
        rest += sched.handle(answers[type(rest[-1])](rest[-1]))
    kinds = [type(i).__name__ for i in rest]
    assert kinds[:2] == ["TrialDone", "TrialsSettled"] and searcher.told == [(0, 2.5)]
    assert kinds[-4:] == ["ReadQueue", "Ask", "CreateTrials", "Dispatch"] and sched.finished == 1


def test_the_machine_is_built_of_parts_that_share_one_state_and_hold_no_other_part():
    """Composition, not mixins: the Scheduler inherits from no part; each part it holds
    keeps the one shared State and the Loop, never another part (so no part can reach
    another's privates: where one's work follows another's, the machine plans both)."""
    from mpiopt.parallel.scheduler import Scheduler

    assert Scheduler.__bases__ == (object,)
    from mpiopt.parallel.scheduler.state import State
    from mpiopt.parallel.scheduler.stepping import Loop

    sched, _, _ = make()
    held = vars(sched.sched).values()
    parts = [v for v in held if not isinstance(v, (State, Loop)) and hasattr(v, "loop")]
    [state] = [v for v in held if isinstance(v, State)]
    [loop] = [v for v in held if isinstance(v, Loop)]
    assert len(parts) >= 4
    for part in parts:
        assert part.st is state and part.loop is loop
        others = [v for v in vars(part).values() if any(v is p for p in parts)]
        assert others == [], f"{type(part).__name__} holds another part"
