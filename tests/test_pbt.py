"""Population-based training: the searcher's exploit/explore decisions, bounds and resume
(pure, no MPI, no database), the spec's refusals, and the scheduler's lineage records."""
from __future__ import annotations

import copy

import pytest
import yaml

from mpiopt.errors import SpecError
from mpiopt.search import make_searcher
from mpiopt.search.pbt import PBTSearcher
from mpiopt.space import Categorical, Integer, Real, Space
from mpiopt.spec import load_spec

SPACE = Space([Real("lr", 1e-4, 1e-1, prior="log-uniform"), Integer("units", 4, 8),
               Categorical("act", ["relu", "tanh", "elu"])])


def pbt(**options) -> PBTSearcher:
    return make_searcher("pbt", SPACE, {"population": 4, **options}, seed=3)


def test_round_zero_starts_every_member_fresh_then_waits_for_a_free_member():
    s = pbt()
    for n in range(4):
        params = s.ask(n)
        assert SPACE.contains(params)
        assert s.lineage(n) == {"member": n, "round": 0, "parent": None}
    assert s.ask(4) is None            # every member trains: a fifth group waits


def _finish_round_zero(s, values=(0.1, 0.2, 0.3, 0.4)):
    for n, v in enumerate(values):
        s.ask(n)
    for n, v in enumerate(values):
        s.tell_trial(n, s.segments[n].params, v)


def test_the_bottom_member_exploits_a_top_member_and_the_others_continue():
    s = pbt()
    _finish_round_zero(s)
    planned = {}
    for n in range(4, 8):
        params = s.ask(n)
        planned[s.lineage(n)["member"]] = (n, params, s.lineage(n), s.decisions[n])
    # member 0 (best) and the middle ones continue their own trial with their own params
    for m in (0, 1, 2):
        n, params, lineage, decision = planned[m]
        assert decision == "continue"
        assert lineage == {"member": m, "round": 1, "parent": m}
        assert params == s.segments[m].params
    # member 3 (worst, the bottom quarter) copies member 0 (the top quarter) and perturbs it
    n, params, lineage, decision = planned[3]
    assert decision == "exploit" and lineage == {"member": 3, "round": 1, "parent": 0}
    donor = s.segments[0].params
    assert params["lr"] in (pytest.approx(donor["lr"] * 0.8), pytest.approx(donor["lr"] * 1.2))
    assert params["units"] != donor["units"] or donor["units"] in (4, 8)
    assert SPACE.contains(params)


def test_asynchronous_decisions_never_wait_for_the_population():
    """A member that finishes while others still train is planned against the latest
    finished results of whoever has one."""
    s = pbt()
    for n in range(4):
        s.ask(n)
    s.tell_trial(0, s.segments[0].params, 0.9)
    s.tell_trial(1, s.segments[1].params, 0.1)
    s.ask(4)                           # members 2, 3 still train
    assert s.lineage(4) == {"member": 0, "round": 1, "parent": 1}   # 0 is the worst of two
    assert s.decisions[4] == "exploit"
    assert s.ask(5) is not None and s.lineage(5) == {"member": 1, "round": 1, "parent": 1}
    assert s.ask(6) is None


def test_explore_stays_inside_the_bounds_and_resamples_categoricals():
    s = pbt(resample_probability=1.0, perturb=[0.01, 100.0])
    seen = set()
    for i in range(50):
        s._reseed(0, i)
        out = s.explore({"lr": 0.05, "units": 8, "act": "relu"})
        assert 1e-4 <= out["lr"] <= 1e-1 and 4 <= out["units"] <= 8
        seen.add(out["act"])
    assert seen == {"relu", "tanh", "elu"}
    only = pbt(explore=["lr"])
    out = only.explore({"lr": 0.01, "units": 5, "act": "tanh"})
    assert out["units"] == 5 and out["act"] == "tanh" and out["lr"] != 0.01


def test_a_failed_round_makes_its_member_exploit():
    s = pbt()
    _finish_round_zero(s)
    s.ask(4)                                  # member 0 continues
    s.ask(5)                                  # member 1 (a middle one) continues...
    assert s.decisions[5] == "continue"
    s.forget_trial(5, s.segments[5].params)   # ...and fails
    s.ask(6)
    assert s.lineage(6) == {"member": 1, "round": 1, "parent": 0}
    assert s.decisions[6] == "exploit"


def test_checkpoints_needed_are_the_latest_rounds_and_running_parents():
    s = pbt()
    _finish_round_zero(s)
    for n in range(4, 8):
        s.ask(n)
    assert s.needed() == {0, 1, 2, 3}
    s.tell_trial(4, s.segments[4].params, 0.05)      # member 0's round 1: 0 is its parent
    assert s.needed() == {4, 1, 2, 3, 0}
    exploiter = next(n for n in range(4, 8) if s.decisions[n] == "exploit")
    s.tell_trial(exploiter, s.segments[exploiter].params, 0.5)
    for n in range(5, 8):
        if n != exploiter:
            s.tell_trial(n, s.segments[n].params, 0.3)
    assert s.needed() == {4, 5, 6, 7}                   # round 0 may go


def test_resume_rebuilds_the_population_from_told_trials():
    live = pbt()
    _finish_round_zero(live)
    for n in range(4, 7):
        live.ask(n)
    live.tell_trial(4, live.segments[4].params, 0.05)
    stored = [(seg.number, seg.params, seg.value, live.lineage(seg.number), seg.done)
              for seg in sorted(live.segments.values(), key=lambda s: s.number)]
    again = pbt()
    again.replay_numbered(stored, next_number=7)
    assert again.latest == live.latest and again.busy == live.busy
    assert again.needed() == live.needed()
    assert again.ask(7) == live.ask(7) and again.lineage(7) == live.lineage(7)


def test_renumbering_keeps_the_lineage():
    s = pbt()
    s.ask(0)
    s.ask(1)
    s.renumber({0: 1, 1: 2})
    assert s.lineage(1)["member"] == 0 and s.lineage(2)["member"] == 1 and s.lineage(0) == {}
    assert s.busy == {0: 1, 1: 2}


# ----------------------------------------------------------------------------- the spec
PBT_SPEC = {
    "study": {"name": "p"},
    "objective": {"model": "model.py:build_model", "data": {"npz": "train.npz"},
                  "metric": "val_accuracy", "direction": "maximize"},
    "search_space": {"lr": {"type": "real", "low": 1e-4, "high": 1e-1},
                     "units": {"type": "integer", "low": 4, "high": 8}},
    "search": {"algorithm": "pbt", "trials": 8, "pbt": {"population": 2, "interval": 1}},
}


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "obj.py").write_text("def f(params):\n    return 1.0\n")
    (tmp_path / "model.py").write_text("def build_model(params):\n    pass\n")
    __import__("numpy").savez(tmp_path / "train.npz", features=[[0.0]], labels=[0])
    return tmp_path


def _error(folder, edit) -> str:
    data = copy.deepcopy(PBT_SPEC)
    edit(data)
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert "\n" not in message
    return message[len(f"{path}: "):]


def test_a_good_pbt_spec_loads(folder):
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(PBT_SPEC))
    spec = load_spec(path)
    assert spec.search.options == {"population": 2, "interval": 1, "quantile": 0.25,
                                   "perturb": [0.8, 1.2], "resample_probability": 0.25,
                                   "explore": []}


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["training"].update(kfold=2) if "training" in d else d.update(training={"kfold": 2}),
     "training.kfold: pbt trains one model per member"),
    (lambda d: d.update(training={"pruning": {"pruner": "median"}}), "training.pruning: pbt replaces pruning"),
    (lambda d: d.update(training={"early_stopping": {"patience": 2}}), "training.early_stopping:"),
    (lambda d: d.update(training={"checkpoint_every": 0}), "training.checkpoint_every:"),
    (lambda d: d["objective"].update(metric=None, direction=None, metrics={"val_accuracy": "maximize",
                                                                          "n_params": "minimize"}),
     "search.algorithm: pbt optimizes one objective"),
    (lambda d: d["search"]["pbt"].update(explore=["nope"]), "search.pbt.explore: 'nope' is not"),
    (lambda d: d["search"]["pbt"].update(perturb=[0.8, -1]), "search.pbt.perturb: expected a list of positive"),
    (lambda d: d["search"]["pbt"].update(quantile=0.7), "search.pbt.quantile:"),
])
def test_what_pbt_refuses_is_one_line_naming_the_field(folder, edit, field):
    def apply(d):
        edit(d)
        for k in ("metric", "direction"):
            if d["objective"].get(k) is None:
                d["objective"].pop(k, None)
    assert _error(folder, apply).startswith(field)


def test_a_function_objective_is_refused(folder):
    def edit(d):
        d["objective"] = {"function": "obj.py:f"}
    assert _error(folder, edit).startswith("objective.function: pbt continues each round")


# ----------------------------------------------------------------------------- the scheduler
class RecordingKeeper:
    """The Keeper's interface, recording which checkpoints would stay."""

    checkpoints = True

    def __init__(self):
        self.kept: list[set] = []

    def refit_wanted(self):
        return False

    def finished(self, trials, keep=None):
        self.kept.append(set(keep or ()))


def _run(storage, sid, existing=(), budget=12, values=None, stop_after=None):
    """Two groups, population 3: results told as they come (values by member)."""
    from mpiopt.parallel.protocol import Result
    from mpiopt.parallel.scheduler import Dispatch
    from mpiopt.trial import TrialStatus
    from scheduling import scheduler

    keeper = RecordingKeeper()
    sched = scheduler(storage=storage, study_id=sid, searcher=make_searcher(
        "pbt", SPACE, {"population": 3, "interval": 2}, seed=1), direction="minimize",
        budget=budget, n_groups=2, existing=list(existing), artifacts=keeper,
        ask_ahead=True, send_first=True)   # as under MPI: pbt must still never go ahead
    queue = [a for a in sched.start() if isinstance(a, Dispatch)]
    done = 0
    while queue and (stop_after is None or done < stop_after):
        d = queue.pop(0)
        value = 1.0 / (1 + d.trial.round) + 0.1 * d.trial.number % 3
        queue += [a for a in sched.on_result(d.group, Result(d.trial.trial_id, TrialStatus.COMPLETE,
                                                              value=value))
                  if isinstance(a, Dispatch)]
        assert not sched.ahead.trials and sched.prefetch() is False
        done += 1
    return sched, keeper, queue


def test_the_scheduler_records_lineage_and_keeps_only_needed_checkpoints(db_url):
    """On SQLite and on PostgreSQL (the lineage columns, `round` among them)."""
    from mpiopt.storage import open_storage

    with open_storage(db_url, create=True) as st:
        sid = st.create_study("p", "minimize", "v", "s", "0" * 64, "{}")
        sched, keeper, _ = _run(st, sid)
        trials = st.get_trials(sid)
        assert len(trials) == 12 and all(t.status.value == "COMPLETE" for t in trials)
        assert [t.round for t in trials[:3]] == [0, 0, 0] and all(t.parent is None for t in trials[:3])
        for t in trials[3:]:
            parent = trials[t.parent]
            assert t.round == parent.round + 1 and parent.number < t.number
        assert {t.member for t in trials} == {0, 1, 2}
        assert len(keeper.kept[-1]) <= 3              # one checkpoint per member at the end


def test_a_resumed_scheduler_reruns_unfinished_rounds_with_their_lineage(tmp_path):
    from mpiopt.storage import open_storage

    with open_storage(f"sqlite:///{tmp_path / 'p.db'}", create=True) as st:
        sid = st.create_study("p", "minimize", "v", "s", "0" * 64, "{}")
        _, _, queue = _run(st, sid, stop_after=5)     # the job dies with 2 rounds running
        st.interrupt_running(sid)
        before = {t.number: t for t in st.get_trials(sid)}
        running = [d.trial for d in queue]
        assert len(running) == 2 and all(before[t.number].status.value == "INTERRUPTED" for t in running)
        sched, keeper, _ = _run(st, sid, existing=list(before.values()))
        after = st.get_trials(sid)
        assert len(after) == 12
        for t in running:                 # rerun as the same round of the same member
            again = after[t.number]
            assert again.status.value == "COMPLETE" and again.attempt == 1
            assert (again.round, again.parent) == (t.round, t.parent)
        for t in after[7:]:
            assert t.round == after[t.parent].round + 1


# ----------------------------------------------------------------------------- the report
def test_the_report_draws_the_population_and_tabulates_its_lineage(tmp_path):
    from test_reporting import trial, view

    from mpiopt.reporting import static
    from mpiopt.reporting.figures import panel
    from mpiopt.reporting.html import _lineage_table
    from mpiopt.reporting.tables import lineage_line

    p = {"x": 0.5, "lr": 0.01, "act": "relu"}
    rounds = [trial(0, p, 0.5, member=0, round=0), trial(1, p, 0.2, member=1, round=0),
              trial(2, p, 0.4, member=0, round=1, parent=1), trial(3, p, 0.1, member=1, round=1,
                                                                    parent=1)]
    d = panel("lineage", view(rounds)).data
    assert [(m["member"], m["rounds"]) for m in d["members"]] == [(0, [0, 1]), (1, [0, 1])]
    assert [(x["number"], x["exploit"]) for x in d["links"]] == [(2, True), (3, False)]
    assert [r["how"] for r in d["rows"]] == ["start", "start", "exploit member 1", "continue"]
    assert "exploit member 1" in _lineage_table(panel("lineage", view(rounds)))
    static.save(panel("lineage", view(rounds)), tmp_path / "lineage.png")
    assert (tmp_path / "lineage.png").stat().st_size > 5000
    assert "not a pbt study" in panel("lineage", view([trial(0, p, 0.5)])).note
    assert lineage_line(rounds[2], rounds[1]).startswith("pbt: member 0, round 1, exploited member 1")
    assert "continued its own trial 1" in lineage_line(rounds[3], rounds[1])
    from mpiopt.reporting.tables import export_rows

    columns, rows = export_rows(rounds)
    assert {"member", "round", "parent"} <= set(columns) and rows[2]["parent"] == 1


def test_groups_beyond_the_population_wait_and_the_study_still_ends(tmp_path):
    from mpiopt.parallel.protocol import Result
    from mpiopt.parallel.scheduler import Dispatch, StopGroup
    from mpiopt.storage import open_storage
    from mpiopt.trial import TrialStatus
    from scheduling import scheduler

    with open_storage(f"sqlite:///{tmp_path / 'p.db'}", create=True) as st:
        sid = st.create_study("p", "minimize", "v", "s", "0" * 64, "{}")
        sched = scheduler(storage=st, study_id=sid, searcher=make_searcher(
            "pbt", SPACE, {"population": 2}, seed=1), direction="minimize", budget=6,
            n_groups=3, artifacts=RecordingKeeper())
        actions = sched.start()
        queue = [a for a in actions if isinstance(a, Dispatch)]
        assert len(queue) == 2 and sched.idle == [2]          # the third group waits
        stopped = set()
        while queue:
            d = queue.pop(0)
            out = sched.on_result(d.group, Result(d.trial.trial_id, TrialStatus.COMPLETE,
                                                  value=float(d.trial.number)))
            out += sched.tick()
            queue += [a for a in out if isinstance(a, Dispatch)]
            stopped |= {a.group for a in out if isinstance(a, StopGroup)}
        assert sched.done and len(st.get_trials(sid)) == 6 and 2 in stopped


def test_retry_failed_is_refused_for_pbt_before_anything_is_written(folder, capsys):
    from mpiopt.cli.main import main

    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(PBT_SPEC))
    db = folder / "p.db"
    assert main(["search", str(path), "--storage", f"sqlite:///{db}", "--resume",
                 "--retry-failed"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--retry-failed: a pbt round" in err[0]
    assert not db.exists()


def test_enqueue_into_a_pbt_study_is_one_line_and_writes_nothing(folder, capsys):
    from mpiopt.cli.main import main
    from mpiopt.storage import open_storage

    db = folder / "p.db"
    with open_storage(f"sqlite:///{db}", create=True) as st:
        st.create_study("p", "maximize", "val_auc", yaml.safe_dump(PBT_SPEC), "0" * 64, "{}")
    assert main(["enqueue", "p", "--set", "lr=0.01",
                 "--storage", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "search.algorithm pbt" in err[0]
    with open_storage(f"sqlite:///{db}") as st:
        assert st.get_trials(st.get_study("p").id) == []
