"""Searchers: the ask/tell contract every strategy follows, then each strategy's own rules.

Pure objects, no MPI and no database. Quality is measured by benchmarks/quality_suite.py;
here only what must always hold (and small, fast problems). No timing assertions.
"""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from mpiopt.errors import SpecError
from mpiopt.search import (BayesianSearcher, EvolutionarySearcher, RandomSearcher,
                           Searcher, make_searcher)
from mpiopt.space import Categorical, Integer, Real, Space

MIXED = Space([
    Real("lr", 1e-4, 1.0, prior="log-uniform"),
    Integer("units", 1, 64, prior="log-uniform"),
    Integer("depth", 1, 4),
    Categorical("act", ["relu", "tanh", "elu"]),
    Categorical("bn", [True, False]),
])
SQUARE = Space([Real("x", -2.0, 2.0), Real("y", -1.0, 3.0)])

CONFIGS = [
    ("random", {}),
    ("evolutionary", {}),
    ("evolutionary", {"mode": "generational", "population": 6}),
    ("bayesian", {"initial_points": 4}),
    ("bayesian", {"initial_points": 4, "estimator": "RF", "candidates": 200}),
    ("tpe", {}),
    ("cmaes", {}),
    ("portfolio", {}),
]
IDS = [f"{a}-{'-'.join(f'{k}={v}' for k, v in o.items()) or 'default'}" for a, o in CONFIGS]


def mixed_objective(p: dict) -> float:
    return ((math.log10(p["lr"]) + 2) ** 2 + (math.log2(p["units"]) - 4) ** 2 / 4
            + {"relu": 0.0, "tanh": 0.5, "elu": 0.2}[p["act"]] + (0.0 if p["bn"] else 0.3)
            + abs(p["depth"] - 2) * 0.1)


def square_objective(p: dict) -> float:
    return (p["x"] - 0.5) ** 2 + (p["y"] - 1.0) ** 2


def drive(searcher: Searcher, objective, n: int, parallel: int = 3) -> list[dict]:
    """Keep `parallel` suggestions pending, tell the oldest, ask one more; all asks in order."""
    asked = [searcher.ask() for _ in range(parallel)]
    pending = list(asked)
    for i in range(n):
        params = pending.pop(0)
        searcher.tell(params, objective(params))
        if i < n - parallel:
            pending.append(searcher.ask())
            asked.append(pending[-1])
    return asked


# ---- the contract, for every strategy ------------------------------------------------
@pytest.mark.parametrize("algorithm,options", CONFIGS, ids=IDS)
def test_suggestions_are_inside_the_space_with_native_types(algorithm, options):
    searcher = make_searcher(algorithm, MIXED, options, seed=3)
    for params in drive(searcher, mixed_objective, 16):
        MIXED.check(params)
        assert type(params["lr"]) is float and type(params["units"]) is int
        assert type(params["bn"]) is bool and type(params["act"]) is str


# (skopt's random forest refits 100 trees per suggestion, 16 s for this test's three runs:
# its seeding is checked by test_replay_gives_the_same_next_suggestions, two searchers of
# one seed asked alike)
SEEDED = [(a, o) for a, o in CONFIGS if o.get("estimator") != "RF"]
SEEDED_IDS = [i for i, c in zip(IDS, CONFIGS) if c in SEEDED]


@pytest.mark.parametrize("algorithm,options", SEEDED, ids=SEEDED_IDS)
def test_same_seed_gives_the_same_sequence(algorithm, options):
    first = drive(make_searcher(algorithm, MIXED, options, seed=11), mixed_objective, 14)
    again = drive(make_searcher(algorithm, MIXED, options, seed=11), mixed_objective, 14)
    other = drive(make_searcher(algorithm, MIXED, options, seed=12), mixed_objective, 14)
    assert first == again
    assert first != other


@pytest.mark.parametrize("algorithm,options", CONFIGS, ids=IDS)
def test_replay_gives_the_same_next_suggestions(algorithm, options):
    """Resume: two searchers replaying the same stored history continue identically."""
    source = make_searcher(algorithm, MIXED, options, seed=5)
    asked = drive(source, mixed_objective, 12, parallel=1)
    history = [(p, mixed_objective(p)) for p in asked[:10]] + [(asked[10], None)]
    a = make_searcher(algorithm, MIXED, options, seed=5)
    b = make_searcher(algorithm, MIXED, options, seed=5)
    a.replay(history)
    b.replay(history)
    assert len(a.told) == 10 and not a.pending
    assert [a.ask() for _ in range(4)] == [b.ask() for _ in range(4)]


EXACT = [("random", {}), ("evolutionary", {}), ("tpe", {}),
         ("evolutionary", {"mode": "generational", "population": 4}),
         ("evolutionary", {"cma": True, "population": 4})]


def sequential(searcher, objective, numbers):
    """One group: ask trial n, tell it, ask n + 1 (the told order is the number order)."""
    out = []
    for n in numbers:
        params = searcher.ask(n)
        searcher.tell(params, objective(params))
        out.append(params)
    return out


@pytest.mark.parametrize("algorithm,options", EXACT, ids=[f"{a}-{o}" for a, o in EXACT])
@pytest.mark.parametrize("cut", [3, 5, 9])
def test_a_resumed_study_gets_the_suggestions_of_an_uninterrupted_one(algorithm, options, cut):
    """Trial `cut` was running when the job died: it is pending (not suggested again) from
    the replay on, runs again, and every later suggestion is the uninterrupted one."""
    space = SQUARE
    whole = sequential(make_searcher(algorithm, space, options, seed=7), square_objective, range(14))
    resumed = make_searcher(algorithm, space, options, seed=7)
    resumed.replay([(p, square_objective(p)) for p in whole[:cut]], [whole[cut]], cut + 1)
    assert resumed.key(whole[cut]) in resumed.pending
    resumed.tell(whole[cut], square_objective(whole[cut]))   # the re-run finishes
    assert sequential(resumed, square_objective, range(cut + 1, 14)) == whole[cut + 1:]


@pytest.mark.parametrize("algorithm,options", CONFIGS, ids=IDS)
def test_reruns_are_pending_and_repeated_interruptions_draw_new_suggestions(algorithm, options):
    """Interrupted twice at the same count, the new trials (new numbers) get new draws,
    and no suggestion repeats a finished or re-run parameter set."""
    space = MIXED
    first = make_searcher(algorithm, space, options, seed=3)
    done = sequential(first, mixed_objective, range(6))
    rerun = first.ask(6)
    history = [(p, mixed_objective(p)) for p in done]
    a = make_searcher(algorithm, space, options, seed=3)
    a.replay(history, [rerun], 7)
    after_first = [a.ask() for _ in range(3)]           # trials 7, 8, 9: then killed again
    b = make_searcher(algorithm, space, options, seed=3)
    b.replay(history, [rerun, *after_first], 10)        # 6..9 interrupted: all run again
    after_second = [b.ask() for _ in range(3)]
    keys = {b.key(p) for p in done + [rerun]}
    assert not keys & {b.key(p) for p in after_first + after_second}
    assert {b.key(p) for p in after_first}.isdisjoint({b.key(p) for p in after_second})


@pytest.mark.parametrize("algorithm,options", CONFIGS, ids=IDS)
def test_forget_and_tell_keep_pending_in_step(algorithm, options):
    searcher = make_searcher(algorithm, MIXED, options, seed=0)
    a, b, c = searcher.ask(), searcher.ask(), searcher.ask()
    assert len(searcher.pending) == 3
    searcher.forget(b)
    searcher.forget(b)  # twice is harmless
    searcher.tell(dict(a), 1.0)  # a copy, as it comes back from the database
    assert list(searcher.pending.values()) == [c]
    searcher.tell({**c, "lr": float(repr(c["lr"]))}, 2.0)  # float round trip through text
    assert not searcher.pending and len(searcher.told) == 2
    searcher.tell(MIXED.sample(np.random.default_rng(0)), 3.0)  # a re-run nobody asked for
    assert len(searcher.told) == 3


@pytest.mark.parametrize("algorithm,options", CONFIGS, ids=IDS)
def test_a_failed_suggestion_is_not_made_again(algorithm, options):
    """Half the square fails (a diverging loss): no parameter set is suggested twice,
    neither in the run nor after a resume that replays the failures. The GP's design gave
    a failed point out again at every ask (a study's 30 trials were 19 repeats of 5)."""
    def run(searcher, n=30):
        asked, pending, done = [], [], []
        for i in range(n):
            pending.append(searcher.ask())
            asked.append(pending[-1])
            if len(pending) == 3 or i == n - 1:
                params = pending.pop(0)
                if params["x"] > 0.0:
                    searcher.forget(params)
                    done.append((params, None))
                else:
                    searcher.tell(params, square_objective(params))
                    done.append((params, square_objective(params)))
        return asked, done, pending

    searcher = make_searcher(algorithm, SQUARE, options, seed=5)
    asked, done, pending = run(searcher)
    keys = [searcher.key(p) for p in asked]
    assert len(set(keys)) == len(keys), f"{len(keys) - len(set(keys))} repeated suggestion(s)"
    resumed = make_searcher(algorithm, SQUARE, options, seed=5)
    resumed.replay(done, pending)
    more = [resumed.key(resumed.ask()) for _ in range(10)]
    assert not set(more) & set(keys), "a failed or told suggestion came again after a resume"


def drive_batches(searcher: Searcher, objective, n: int, parallel: int = 6,
                  batch: int = 3) -> list[list[dict]]:
    """Keep `parallel` suggestions pending; whenever `batch` of them were told, ask that
    many in one batch (as the background thread asks for groups that finish together).
    Returns the batches, in order."""
    batches = [searcher.ask_batch(range(parallel))]
    pending, asked = list(batches[0]), parallel
    for told in range(1, n + 1):
        params = pending.pop(0)
        searcher.tell(params, objective(params))
        if told % batch == 0 and asked < n:
            more = min(batch, n - asked)
            batches.append(searcher.ask_batch(range(asked, asked + more)))
            pending += batches[-1]
            asked += more
    return batches


@pytest.mark.parametrize("algorithm,options", SEEDED, ids=SEEDED_IDS)
def test_batches_keep_the_contract(algorithm, options):
    """Suggestions asked in batches: inside the space with native types, pending until
    told, distinct, and the same again from the same seed."""
    searcher = make_searcher(algorithm, MIXED, options, seed=4)
    batches = drive_batches(searcher, mixed_objective, 18)
    asked = [p for b in batches for p in b]
    assert len(asked) == 18 and [len(b) for b in batches][:2] == [6, 3]
    for params in asked:
        MIXED.check(params)
        assert type(params["lr"]) is float and type(params["units"]) is int
    assert len({searcher.key(p) for p in asked}) == 18
    assert not searcher.pending and len(searcher.told) == 18
    again = drive_batches(make_searcher(algorithm, MIXED, options, seed=4), mixed_objective, 18)
    assert again == batches


@pytest.mark.parametrize("algorithm,options", SEEDED, ids=SEEDED_IDS)
def test_a_batch_of_one_is_an_ask(algorithm, options):
    a, b = (make_searcher(algorithm, MIXED, options, seed=9) for _ in range(2))
    for searcher in (a, b):
        drive(searcher, mixed_objective, 12, parallel=2)
    assert a.ask_batch([20]) == [b.ask(20)] and a.pending.keys() == b.pending.keys()


def test_a_bayesian_batch_is_one_fit_its_suggestions_apart(monkeypatch):
    """Eight suggestions from one posterior (the told points and the pending ones, lied
    in once), each at least min_distance from the pending points and from each other."""
    from mpiopt.search import _gp

    searcher = BayesianSearcher(SQUARE, {"initial_points": 5}, seed=3)
    drive(searcher, square_objective, 12, parallel=3)
    pending = [searcher.ask() for _ in range(3)]
    built = []
    monkeypatch.setattr(_gp.Posterior, "__init__", lambda self, kernel, X, y, _init=_gp.Posterior.__init__:
                        built.append(len(X)) or _init(self, kernel, X, y))
    batch = searcher.ask_batch(range(20, 28))
    assert built == [12, 15]          # the told points (for the lies), then with the pending
    assert len({searcher.key(p) for p in batch}) == 8
    for i, params in enumerate(batch):
        others = pending + batch[:i] + batch[i + 1:]
        assert min(SQUARE.distance(params, other) for other in others) >= 0.01
    assert all(searcher.key(p) in searcher.pending for p in batch + pending)


def test_a_believed_point_lowers_the_variance_as_adding_it_to_the_posterior_does():
    """_gp.Believed's one column per pick is the exact posterior with the picks added at
    their believed values: the same variance everywhere (a variance does not depend on
    the values, so the believed mean never enters)."""
    from mpiopt.search import _gp

    rng = np.random.default_rng(1)
    X = rng.random((12, 2))
    y = np.sin(4 * X[:, 0]) + X[:, 1] ** 2
    kernel = _gp.fit_kernel(_gp.default_kernel(2), X, y, restarts=0, seed=0)
    post = _gp.Posterior(kernel, X, y)
    rows = rng.random((40, 2))
    believed = _gp.Believed(post, rows, picks=2)
    for i in (3, 17, 29):                        # (a third pick: the columns grow)
        believed.add(i)
    added = rows[[3, 17, 29]]
    exact = _gp.Posterior(kernel, np.vstack([X, added]),
                          np.concatenate([y, post.predict(added)[0]]))
    _, var, _ = exact.moments(rows)                # (in the kernel's units: y plays no part)
    assert np.allclose(var, believed.var, rtol=1e-6, atol=1e-10)
    assert np.all(believed.var <= post.moments(rows)[1])


def test_a_local_posterior_is_the_exact_one_on_few_points_and_never_surer_on_many():
    """_gp.Believed.local (the screen for steps round a pick) conditions on the
    LOCAL_POINTS model points and picks nearest its centre: with no more than that it is
    the believed posterior exactly (picks at their believed values); with more, its
    variance is never below the exact one (fewer points conditioned on)."""
    from mpiopt.search import _gp

    rng = np.random.default_rng(3)
    for n, exact_expected in ((20, True), (300, False)):
        X = rng.random((n, 3))
        y = np.sin(4 * X[:, 0]) + X[:, 1] ** 2 - X[:, 2]
        kernel = _gp.fit_kernel(_gp.default_kernel(3), X[:60], y[:60], restarts=0, seed=0)
        post = _gp.Posterior(kernel, X, y)
        believed = _gp.Believed(post, rng.random((40, 3)), picks=3)
        for i in (5, 11, 23):
            believed.add(i)
        steps = np.clip(believed.rows[11] + 0.05 * rng.standard_normal((16, 3)), 0, 1)
        mean, var = believed.local(steps, centre=11)
        exact_mean, exact_var, _, _ = believed.candidates(steps)
        if exact_expected:
            assert np.allclose(mean, exact_mean, atol=1e-6)
            assert np.allclose(var, exact_var, rtol=1e-5, atol=1e-9)
        else:
            assert np.all(var >= exact_var - 1e-9)
            assert np.corrcoef(mean, exact_mean)[0, 1] > 0.9


def test_the_leave_one_out_agreement_runs_on_one_blas_thread(monkeypatch):
    """auto asks the model's leave-one-out agreement (an inverse of up to max_points rows)
    at every suggestion's turn: like a fit, it must keep to one BLAS thread, or on a node
    shared with training ranks the searcher's thread fights them for the cores."""
    from threadpoolctl import threadpool_info

    from mpiopt.search import _gp

    searcher = BayesianSearcher(SQUARE, {"initial_points": 5}, seed=0)
    drive(searcher, square_objective, 8, parallel=1)
    threads = []
    real = _gp.loo_agreement
    monkeypatch.setattr(_gp, "loo_agreement", lambda *a: threads.extend(
        i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas") or real(*a))
    searcher._agreement = None
    assert searcher.loo_agreement() is not None
    assert threads and set(threads) == {1}


def test_only_the_latest_pending_points_enter_the_model_but_all_keep_their_distance(monkeypatch):
    """With thousands of groups, thousands of points are pending: the model takes the
    `max_points` most recent (so a fit's cost stays bounded); the distance rule keeps new
    suggestions away from every one of them."""
    from mpiopt.search import _gp

    searcher = BayesianSearcher(SQUARE, {"initial_points": 5, "max_points": 8}, seed=0)
    drive(searcher, square_objective, 10, parallel=1)
    rng = np.random.default_rng(0)
    held = [SQUARE.sample(rng) for _ in range(30)]
    for params in held:
        searcher.hold(params)
    built = []
    monkeypatch.setattr(_gp.Posterior, "__init__", lambda self, kernel, X, y, _init=_gp.Posterior.__init__:
                        built.append(X.copy()) or _init(self, kernel, X, y))
    batch = searcher.ask_batch(range(40, 44))
    latest = searcher.encoder.encode(held[-8:])
    assert len(built[-1]) == 8 + 8 and np.allclose(built[-1][8:], latest)
    for params in batch:
        assert min(SQUARE.distance(params, other) for other in held) >= 0.01


def test_a_batchs_thompson_turns_share_one_factorisation(monkeypatch):
    """Thompson turns in a batch are independent draws from the fit's posterior
    (Kandasamy et al. 2018): one factorisation of the rows' covariance serves every turn,
    and the turns still land apart from each other and from the other picks."""
    from mpiopt.search import _gp

    searcher = BayesianSearcher(SQUARE, {"initial_points": 5}, seed=3)
    drive(searcher, square_objective, 12, parallel=3)
    roots = []
    monkeypatch.setattr(_gp, "root", lambda cov, _root=_gp.root: roots.append(len(cov)) or _root(cov))
    batch = searcher.ask_batch(range(20, 28))         # turns 21, 23, 25, 27: Thompson's
    assert len(roots) == 1
    assert len({searcher.key(p) for p in batch}) == 8
    for i, params in enumerate(batch):
        assert min(SQUARE.distance(params, other) for other in batch[:i] + batch[i + 1:]) >= 0.01


def test_the_first_fit_starts_once_and_the_next_restarts(monkeypatch):
    """Under MPI every group waits for the first model batch (the design's results come
    together): its kernel fit starts from the default kernel alone, and the random
    restarts come with the next fit, made while the groups train."""
    from mpiopt.search import _gp

    starts = []
    monkeypatch.setattr(_gp, "fit_kernel", lambda kernel, X, y, restarts, seed, _fit=_gp.fit_kernel:
                        starts.append(restarts) or _fit(kernel, X, y, restarts, seed))
    searcher = BayesianSearcher(SQUARE, {"initial_points": 4}, seed=0)
    drive_batches(searcher, square_objective, 10, parallel=4, batch=4)
    assert starts[:2] == [0, 2]


def test_the_gp_never_suggests_a_failed_point_again():
    """A failed suggestion is not told (the model never learns of it), so only the
    distance rule keeps the model from suggesting it again: one at a time, in a batch and
    after a resume that replays the failure."""
    corner = {"x": 2.0, "y": -1.0}                  # where the told values lead

    def toward(params: dict) -> float:
        return (params["x"] - 2.0) ** 2 + (params["y"] + 1.0) ** 2

    for batch in (False, True):
        searcher = BayesianSearcher(SQUARE, {"initial_points": 4}, seed=1)
        for params in searcher.ask_batch(range(8)):
            searcher.tell(params, toward(params))
        searcher.pending[searcher.key(corner)] = corner
        searcher.forget(corner)
        resumed = BayesianSearcher(SQUARE, {"initial_points": 4}, seed=1)
        resumed.replay([*searcher.told, (corner, None)])
        for s in (searcher, resumed):
            asked = s.ask_batch(range(10, 18)) if batch else [s.ask(10 + i) for i in range(8)]
            assert corner not in asked


def test_a_warm_up_pays_the_first_costs_and_changes_no_suggestion():
    """Every group waits for the first design batch, and again for the first model batch:
    the one-time costs (the thread-pool controller: tens of milliseconds to make) are
    paid by warm_up instead, and a warmed-up searcher suggests what a cold one does."""
    from mpiopt.search import _blas

    _blas._THREADS = None
    warm = BayesianSearcher(SQUARE, {"initial_points": 4}, seed=0)
    warm.warm_up()
    assert _blas._THREADS is not None
    cold = BayesianSearcher(SQUARE, {"initial_points": 4}, seed=0)
    assert drive_batches(warm, square_objective, 10) == drive_batches(cold, square_objective, 10)


@pytest.mark.parametrize("algorithm", ["bayesian", "portfolio", "auto"])
def test_preload_warms_up_the_studys_searcher(algorithm):
    """Rank 0 preloads while the groups start up (mpiopt.run.startup): the searcher the
    study builds next finds its one-time costs paid. A spec error is left to the study's
    own build of the searcher."""
    from mpiopt.search import _blas, preload

    space = Space([Real(f"x{i}", 0.0, 1.0) for i in range(6)])
    _blas._THREADS = None
    preload(algorithm, space, 40, 4, False, {})
    assert _blas._THREADS is not None
    preload("bayesian", space, 40, 4, False, {"no_such_option": 1})


def test_a_portfolio_batch_asks_each_member_once_the_partner_first():
    """One batch: the trials' members drawn as for single asks, then CMA-ES's share asked,
    then the GP's in one batch that keeps away from CMA-ES's (held in the GP first)."""
    searcher = make_searcher("auto", Space([Real(f"x{i}", 0.0, 1.0) for i in range(3)]), {},
                             seed=0, budget=60, parallel=8)
    gp, cma = searcher.members
    bowl = lambda p: sum((p[f"x{i}"] - 0.3) ** 2 for i in range(3))      # noqa: E731
    drive(searcher, bowl, 24, parallel=4)
    calls = []
    for member in (gp, cma):
        def ask_batch(numbers, _member=member, _ask=member.ask_batch):
            calls.append((_member.algorithm, list(numbers), set(gp.pending)))
            return _ask(numbers)
        member.ask_batch = ask_batch
    batch = searcher.ask_batch(range(30, 38))
    assert [c[0] for c in calls] == ["cmaes", "bayesian"]
    assert sorted(calls[0][1] + calls[1][1]) == list(range(30, 38))
    made_by_cma = {searcher.key(p) for p in batch if searcher.owner[searcher.key(p)] is cma}
    assert made_by_cma <= calls[1][2]                 # pending in the GP before its batch
    assert {searcher.key(p) for p in batch} <= set(gp.pending) & set(cma.pending)


def test_a_batch_that_fails_is_drawn_at_random_and_said_once():
    searcher = BayesianSearcher(SQUARE, {"initial_points": 3}, seed=0)
    drive(searcher, square_objective, 6, parallel=1)

    def broken(numbers):
        raise np.linalg.LinAlgError("not positive definite")
        yield

    searcher._believed_batch = broken
    batch = searcher.ask_batch(range(10, 15))
    assert len({searcher.key(p) for p in batch}) == 5 and len(searcher.pending) == 5
    assert [kind for kind, _ in searcher.take_failures()] == ["suggest"]


@pytest.mark.parametrize("algorithm", ["random", "evolutionary", "bayesian"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_tell_refuses_non_finite_values(algorithm, bad):
    searcher = make_searcher(algorithm, SQUARE, {}, seed=0)
    params = searcher.ask()
    with pytest.raises(AssertionError):
        searcher.tell(params, bad)


def _fails(*args):
    raise FloatingPointError("underflow encountered in exp")


def test_a_searcher_that_fails_draws_at_random_and_keeps_what_it_is_told():
    """A failure that comes from the study's history (what a model cannot fit, a library
    broken in the coordinator's process) comes back on every resume, which replays that
    history: it costs one guided suggestion, not the study. The draw is the trial's own
    (the same after a resume); the failure is taken once, for the coordinator to say."""
    a, b = (make_searcher("bayesian", SQUARE, {"initial_points": 2}, seed=0) for _ in range(2))
    for searcher in (a, b):
        for number in range(2):
            params = searcher.ask(number)
            searcher.tell(params, square_objective(params))
        searcher._suggest = _fails
    drawn = a.ask(2)
    assert drawn == b.ask(2) and SQUARE.contains(drawn) and a.key(drawn) in a.pending
    assert a.take_failures() == [("suggest", "bayesian could not make a suggestion "
                                  "(FloatingPointError: underflow encountered in exp): such "
                                  "a trial's parameters are drawn at random")]
    assert a.take_failures() == []
    a._on_tell = _fails
    a.tell(drawn, 0.5)
    assert a.told[-1] == (drawn, 0.5) and a.key(drawn) not in a.pending
    assert [kind for kind, _ in a.take_failures()] == ["learn"]


def test_a_portfolio_gives_its_members_failures():
    searcher = make_searcher("portfolio", SQUARE, {}, seed=0)
    for member in searcher.members:
        member._suggest = _fails
    assert SQUARE.contains(searcher.ask(0))
    assert [kind for kind, _ in searcher.take_failures()] == ["suggest"]


def test_searchers_leave_global_random_state_alone():
    """DEAP draws from the global generators; a searcher must not disturb (or depend on) them."""
    random.seed(1)
    np.random.seed(1)
    expected = (random.random(), np.random.random())
    random.seed(1)
    np.random.seed(1)
    for algorithm, options in [("evolutionary", {}), ("evolutionary", {"cma": True})]:
        drive(make_searcher(algorithm, SQUARE, options, seed=0), square_objective, 30)
    assert (random.random(), np.random.random()) == expected


def test_make_searcher_names_and_errors():
    assert isinstance(make_searcher("random", SQUARE, {}, 0), RandomSearcher)
    assert isinstance(make_searcher("evolutionary", SQUARE, None, 0), EvolutionarySearcher)
    assert isinstance(make_searcher("bayesian", SQUARE, {}, 0), BayesianSearcher)
    with pytest.raises(SpecError, match="grid"):
        make_searcher("grid", SQUARE, {}, 0)
    with pytest.raises(SpecError, match="popsize"):
        make_searcher("evolutionary", SQUARE, {"popsize": 3}, 0)
    with pytest.raises(SpecError, match="estimator"):
        make_searcher("bayesian", SQUARE, {"estimator": "SVM"}, 0)
    with pytest.raises(SpecError, match="cma"):
        make_searcher("evolutionary", MIXED, {"cma": True}, 0)


def test_every_algorithm_is_declared_once_with_its_traits():
    """The registry names each algorithm, its class and its traits; the spec's choices,
    the options' sections and each class's traits all come from it."""
    import subprocess
    import sys

    from mpiopt.search import ALGORITHMS, VECTOR_ALGORITHMS, traits
    from mpiopt.search._registry import REGISTRY, TRAIT_NAMES
    from mpiopt.search.options import OPTIONS
    from mpiopt.spec import ALGORITHMS as SPEC_ALGORITHMS

    assert SPEC_ALGORITHMS == ALGORITHMS == tuple(sorted(OPTIONS))
    assert VECTOR_ALGORITHMS == ("auto", "bayesian", "evolutionary", "random")
    assert traits("pbt").numbered and traits("pbt").rounds and not traits("pbt").asks_ahead
    assert traits("bayesian").slow and not traits("random").slow and not traits("tpe").rounds
    with pytest.raises(SpecError, match="grid"):
        traits("grid")
    for name in ALGORITHMS:
        if name == "auto":
            continue
        built = make_searcher(name, SQUARE, {}, 0)
        assert type(built).__name__ == REGISTRY[name].cls
        assert {t: getattr(built, t) for t in TRAIT_NAMES} == vars(traits(name))
    portfolio = make_searcher("auto", Space([Real(f"x{i}", 0.0, 1.0) for i in range(3)]), {}, 0)
    assert portfolio.slow and portfolio.algorithm == "portfolio" and not portfolio.numbered
    # asking an algorithm's traits imports no strategy (scikit-learn, Optuna: seconds a rank)
    code = ("import sys; from mpiopt.search import traits; traits('bayesian').slow; "
            "print(sorted(m for m in sys.modules if m.startswith(('sklearn', 'optuna', 'skopt'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_registered_class_that_sets_a_trait_itself_is_refused():
    with pytest.raises(TypeError, match="_registry"):
        class Twice(RandomSearcher):        # noqa: F841
            algorithm = "random"
            slow = True


def test_a_direction_gives_the_sign_searchers_are_told_with():
    from mpiopt.trial import Direction

    assert Direction.parse("minimize").sign == 1.0 and Direction.parse("maximize").sign == -1.0
    assert Direction.parse(Direction.MAXIMIZE) is Direction.MAXIMIZE == "maximize"
    with pytest.raises(ValueError, match="minimize or maximize, got 'max'"):
        Direction.parse("max")


def test_search_modules_import_neither_mpi_nor_sqlalchemy():
    import ast
    import pathlib

    import mpiopt.search as pkg

    for path in pathlib.Path(pkg.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in names if m.split(".")[0] in ("mpi4py", "sqlalchemy")], path


# ---- random ---------------------------------------------------------------------------
def test_random_respects_log_priors():
    space = Space([Real("lr", 1e-6, 1.0, prior="log-uniform")])
    searcher = RandomSearcher(space, {}, seed=0)
    logs = np.log10([searcher.ask()["lr"] for _ in range(2000)])
    assert abs(np.mean(logs) + 3.0) < 0.15  # uniform in log space: mean exponent -3
    assert np.mean(logs < -3.0) == pytest.approx(0.5, abs=0.05)


# ---- bayesian ---------------------------------------------------------------------------
def test_bayesian_pending_suggestions_keep_their_distance():
    searcher = BayesianSearcher(SQUARE, {"initial_points": 5}, seed=2)
    pending = [searcher.ask() for _ in range(4)]
    for i in range(25):
        params = pending.pop(0)
        searcher.tell(params, square_objective(params))
        new = searcher.ask()
        assert min(SQUARE.distance(new, other) for other in pending) >= 0.01
        pending.append(new)


def test_bayesian_gets_close_on_a_smooth_bowl():
    searcher = BayesianSearcher(SQUARE, {"initial_points": 5}, seed=0)
    drive(searcher, square_objective, 25, parallel=2)
    assert searcher.best[1] < 0.01


def test_bayesian_refits_hyperparameters_on_a_schedule():
    searcher = BayesianSearcher(SQUARE, {"initial_points": 3, "refit_every": 5}, seed=0)
    fits = []
    for _ in range(16):
        params = searcher.ask()
        searcher.tell(params, square_objective(params))
        fits.append(searcher._kernel_n)
    assert len(set(fits) - {0}) < 8  # not after every tell


@pytest.mark.parametrize("acquisition", ["EI", "LCB", "PI", "gp_hedge"])
@pytest.mark.parametrize("liar", ["believer", "mean", "min", "max"])
def test_bayesian_acquisitions_and_liars_work(acquisition, liar):
    searcher = BayesianSearcher(SQUARE, {"initial_points": 3, "acquisition": acquisition,
                                         "liar": liar, "candidates": 100}, seed=1)
    for params in drive(searcher, square_objective, 8):
        SQUARE.check(params)


@pytest.mark.parametrize("estimator", ["ET", "GBRT"])
def test_bayesian_tree_estimators_run(estimator):
    searcher = BayesianSearcher(MIXED, {"initial_points": 3, "estimator": estimator,
                                        "candidates": 100}, seed=1)
    for params in drive(searcher, mixed_objective, 7):
        MIXED.check(params)


def test_bayesian_caps_the_points_in_the_model():
    searcher = BayesianSearcher(SQUARE, {"max_points": 20, "output_warping": False}, seed=0)
    searcher.replay([(SQUARE.sample(np.random.default_rng(i)), float(i)) for i in range(50)])
    X, y = searcher._training_set()
    assert len(y) == 20 and set(range(10)) <= set(y.astype(int))  # the best half is kept
    assert 49 in set(y.astype(int))  # and the most recent


def test_bayesian_all_categorical_space_runs_out_gracefully():
    space = Space([Categorical("a", [1, 2]), Categorical("b", ["x", "y"])])
    searcher = BayesianSearcher(space, {"initial_points": 2}, seed=0)
    for _ in range(8):  # more asks than points in the space
        params = searcher.ask()
        searcher.tell(params, float(params["a"]) + (params["b"] == "y"))
        space.check(params)


# ---- evolutionary -----------------------------------------------------------------------
def test_steady_state_first_population_is_random_then_bred():
    searcher = EvolutionarySearcher(SQUARE, {"population": 6}, seed=0)
    drive(searcher, square_objective, 30, parallel=2)
    assert len(searcher.pool) == 6
    assert min(v for _, v in searcher.pool) == searcher.best[1]  # elitism
    assert searcher.best[1] < 0.1


def test_generational_closes_a_generation_when_it_is_told():
    searcher = EvolutionarySearcher(SQUARE, {"mode": "generational", "population": 4}, seed=0)
    gen0 = [searcher.ask() for _ in range(4)]
    for p in gen0[:3]:
        searcher.tell(p, square_objective(p))
    assert searcher.generation == 0 and not searcher.queue
    extra = searcher.ask()  # a group would otherwise wait: an extra member of generation 0
    searcher.tell(gen0[3], square_objective(gen0[3]))
    assert searcher.generation == 1 and len(searcher.queue) == 4
    searcher.tell(extra, square_objective(extra))  # late: counts as told, not as generation 1
    assert searcher.current == [] and len(searcher.told) == 5


def test_cma_improves_on_a_bowl():
    searcher = EvolutionarySearcher(SQUARE, {"cma": True, "population": 6}, seed=0)
    drive(searcher, square_objective, 60, parallel=3)
    assert searcher.generation >= 5
    assert searcher.best[1] < 0.05


def test_evolutionary_replay_rebuilds_the_population():
    rng = np.random.default_rng(0)
    history = [(SQUARE.sample(rng), None if i == 3 else float(i)) for i in range(12)]
    searcher = EvolutionarySearcher(SQUARE, {"population": 5}, seed=0)
    searcher.replay(history)
    assert len(searcher.pool) == 5 and min(v for _, v in searcher.pool) == 0.0


def test_expected_and_probable_improvement_are_skopts_to_the_bit():
    """_skopt.acquisition computes EI and PI itself (scipy.stats' per-call overhead
    dominated a batch's picks): the numbers must stay skopt's, zero spreads included."""
    from skopt.acquisition import gaussian_ei, gaussian_pi

    from mpiopt.search import _skopt

    rng = np.random.default_rng(0)
    mu, std = rng.standard_normal(500), np.abs(rng.standard_normal(500))
    std[:5] = 0.0
    model, rows = _skopt._Cached(mu, std), np.zeros((500, 1))
    for name, theirs in (("EI", gaussian_ei), ("PI", gaussian_pi)):
        ours = _skopt.acquisition(name, mu, std, -0.5, 0.01, 1.96)
        assert np.array_equal(ours, theirs(rows, model, y_opt=-0.5, xi=0.01))


def test_the_kernel_fit_finds_what_scikit_learns_fit_finds():
    """_gp._Likelihood computes scikit-learn's log marginal likelihood and its gradient
    (normalize_y=True) for default_kernel's shape itself: the same values at any
    hyperparameters, and so the same fitted kernel, restarts included."""
    from sklearn.gaussian_process import GaussianProcessRegressor

    from mpiopt.search import _gp

    rng = np.random.default_rng(3)
    X = rng.random((20, 3))
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + 0.05 * rng.standard_normal(20)
    kernel = _gp.default_kernel(3)
    likelihood = _gp._Likelihood.of(kernel, X, y)
    gpr = GaussianProcessRegressor(kernel=kernel, normalize_y=True, optimizer=None).fit(X, y)
    for _ in range(4):
        theta = rng.uniform(kernel.bounds[:, 0], kernel.bounds[:, 1]) / 2
        value, grad = gpr.log_marginal_likelihood(theta, eval_gradient=True)
        ours, our_grad = likelihood(theta)
        assert np.isclose(ours, -value, rtol=1e-9)
        assert np.allclose(our_grad, -grad, rtol=1e-7, atol=1e-9)
    for restarts in (0, 2):
        fitted = _gp.fit_kernel(kernel, X, y, restarts=restarts, seed=0)
        scikit = _gp._fit_sklearn(kernel, X, y, restarts, 0)
        assert np.allclose(fitted.theta, scikit.theta, atol=1e-6)
    assert _gp._Likelihood.of(_skopt_hamming(3), X, y) is None   # (scikit-learn's fit)


def _skopt_hamming(n_cols):
    from mpiopt.search import _gp, _skopt

    return _gp.default_kernel(n_cols, _skopt.hamming_kernel(n_cols))


def test_gp_posterior_interpolates_and_samples():
    from mpiopt.search import _gp

    rng = np.random.default_rng(0)
    X = rng.random((15, 2))
    y = np.sin(3 * X[:, 0]) + X[:, 1]
    kernel = _gp.fit_kernel(_gp.default_kernel(2), X, y, restarts=1, seed=0)
    post = _gp.Posterior(kernel, X, y)
    mu, std = post.predict(X)
    assert np.allclose(mu, y, atol=1e-3) and np.all(std < 1e-2)
    far_mu, far_std = post.predict(np.array([[3.0, 3.0]]))
    assert far_std[0] > 10 * std.max()
    draw = post.sample(X, rng)
    finite = np.isfinite(draw)          # rows that cannot hold the draw's minimum: +inf
    assert finite[np.argmin(y)] and np.allclose(draw[finite], y[finite], atol=1e-2)
    assert np.argmin(draw) == np.argmin(y)
    many = rng.random((3000, 2))            # a joint draw is made on a few hundred rows only
    wide = post.sample(many, rng)
    assert 0 < np.isfinite(wide).sum() <= _gp._SAMPLE_ROWS
    best_mean = np.argmin(post.predict(many)[0])
    assert np.isfinite(wide[best_mean])


def test_in_place_matern_gives_scikit_learns_numbers_exactly():
    """_gp.Matern52 computes scikit-learn's Matern-5/2 in place for speed; bit for bit the
    same kernel, gradient and cross-kernel, or the suite's stored runs would not hold."""
    from sklearn.gaussian_process.kernels import Matern

    from mpiopt.search import _gp

    rng = np.random.default_rng(2)
    for n, d in ((1, 3), (30, 1), (60, 20)):
        X, Y = rng.random((n, d)), rng.random((45, d))
        for scale in (rng.uniform(0.05, 3.0, d), 0.7):
            ours, theirs = _gp.Matern52(scale, nu=2.5), Matern(scale, nu=2.5)
            for args, kw in (((X,), {}), ((X,), {"eval_gradient": True}), ((Y, X), {})):
                a, b = ours(*args, **kw), theirs(*args, **kw)
                pairs = zip(a, b) if isinstance(a, tuple) else [(a, b)]
                assert all(np.array_equal(x, y) for x, y in pairs), (n, d, kw)


def test_cma_replay_before_any_ask():
    rng = np.random.default_rng(1)
    history = [(p, square_objective(p)) for p in (SQUARE.sample(rng) for _ in range(13))]
    searcher = EvolutionarySearcher(SQUARE, {"cma": True, "population": 6}, seed=0)
    searcher.replay(history)
    assert searcher.generation == 2
    SQUARE.check(searcher.ask())


def test_output_warping_keeps_the_order_and_tames_huge_values():
    from mpiopt.search._warping import warp

    y = np.array([0.5, 3.0, 1e5, 12.0, 0.1, 4e3, 2.0])      # a valley's floor and its walls
    w = warp(y)
    assert list(np.argsort(w)) == list(np.argsort(y))      # monotone: the best stays best
    spread = lambda v: (np.sort(v)[-1] - np.median(v)) / (np.median(v) - np.sort(v)[0])
    assert spread(w) < spread(y) / 5                        # the walls no longer set the scale


def test_yeojohnson_exponent_is_scipys_maximum_likelihood_exponent():
    """The warping's own exponent search (without scipy's per-call wrapper) must find what
    scipy.stats.yeojohnson_normmax finds: skewed either way, heavy-tailed and tied data,
    standardised as the warping uses it and raw, and values so large that the bounds against
    overflow bind (they differ for all-negative and all-positive data)."""
    from scipy import stats

    from mpiopt.search._warping import yeojohnson_exponent

    rng = np.random.default_rng(3)
    samples = [rng.normal(size=40), rng.lognormal(sigma=3, size=60), -rng.lognormal(size=25),
               rng.standard_cauchy(size=80), np.round(rng.normal(size=30), 1)]
    cases = [(y - y.mean()) / y.std() for y in samples] + samples + [
        -rng.lognormal(size=20) * 1e300, rng.lognormal(size=20) * 1e300]  # (bounds bind)
    for z in cases:
        assert yeojohnson_exponent(z) == pytest.approx(stats.yeojohnson_normmax(z), abs=1e-9)
    assert yeojohnson_exponent(np.zeros(5)) == stats.yeojohnson_normmax(np.zeros(5))
    with pytest.raises(ValueError):
        yeojohnson_exponent(np.array([0.0, np.inf, 1.0]))


def test_auto_chooses_by_the_space():
    from mpiopt.space import Space

    cube = Space([Real(f"x{i}", 0.0, 1.0) for i in range(3)])
    many = make_searcher("auto", cube, {}, seed=0, budget=50, parallel=16)
    one = make_searcher("auto", cube, {}, seed=0, budget=50, parallel=1)
    assert many.algorithm == one.algorithm == "portfolio" and "cmaes" in many.choice
    chosen = make_searcher("auto", MIXED, {}, seed=0, budget=50, parallel=4)   # a choice in it
    assert chosen.algorithm == "portfolio" and "bayesian + tpe" in chosen.choice
    assert {type(m).__name__ for m in chosen.members} == {"BayesianSearcher", "TPESearcher"}
    labels = Space.from_dict({"a": {"type": "categorical", "choices": ["x", "y", "z"]},
                              "b": {"type": "categorical", "choices": [1, 2]},
                              "c": {"type": "real", "low": 0.0, "high": 1.0}})
    few = make_searcher("auto", labels, {}, seed=0, budget=50, parallel=4)
    assert few.algorithm == "bayesian" and few.choice.startswith("auto chose bayesian")
    plane = make_searcher("auto", SQUARE, {}, seed=0, budget=40, parallel=16)
    assert plane.algorithm == "bayesian" and "2 numeric" in plane.choice
    asked = [many.ask() for _ in range(6)]
    assert {type(m).__name__ for m in many.members} == {"BayesianSearcher", "CmaEsSearcher"}
    gp = next(m for m in many.members if m.algorithm == "bayesian")
    assert gp.thompson_every == 0 and one.members[0].thompson_every == 0  # CMA-ES explores
    assert make_searcher("bayesian", MIXED, {}, seed=0).thompson_every == 2
    assert len({many.key(p) for p in asked}) == 6


def test_preload_imports_the_modules_the_searcher_will_use(monkeypatch):
    """Rank 0 imports these while the other ranks set up (mpiopt/run/launch.py): the modules
    of the searchers make_searcher then builds, auto resolved; a wrong algorithm name is
    left for make_searcher to refuse."""
    import importlib

    from mpiopt.search import preload

    cube = [Real(f"x{i}", 0.0, 1.0) for i in range(3)]
    spaces = [Space(cube), Space(cube + [Categorical("c", ["a", "b"])]), SQUARE, MIXED]
    for space in spaces:
        for algorithm in ("auto", "bayesian", "evolutionary", "tpe", "random"):
            searcher = make_searcher(algorithm, space, {}, seed=0, budget=50, parallel=4)
            built = {type(m).__module__ for m in getattr(searcher, "members", [searcher])}
            loaded = []
            with monkeypatch.context() as patch:
                patch.setattr(importlib, "import_module", loaded.append)
                preload(algorithm, space, budget=50, parallel=4)
            assert set(loaded) == built, (algorithm, space, loaded, built)
    loaded = []
    with monkeypatch.context() as patch:
        patch.setattr(importlib, "import_module", loaded.append)
        preload("no-such", SQUARE)
    assert loaded == []
    with pytest.raises(SpecError, match="search.algorithm"):
        make_searcher("no-such", SQUARE)
    from mpiopt.run import launch

    for module in launch._RUN_MODULES:       # (a wrong name would be skipped in silence)
        importlib.import_module(module)


def test_cmaes_is_told_its_space_and_suggests_as_optuna_would(monkeypatch):
    """Optuna's CmaEsSampler works out the space CMA-ES models from every finished trial
    (a scan of the whole study, for each new sampler: one per ask here); ours is told
    it. The suggestions are those Optuna's own inference gives, and no ask scans."""
    import optuna.search_space.intersection as intersection

    from mpiopt.search import optuna_samplers

    scans = []
    calculate = intersection._calculate
    monkeypatch.setattr(intersection, "_calculate",
                        lambda *a, **k: scans.append(1) or calculate(*a, **k))

    def asked() -> list[dict]:
        return drive(make_searcher("cmaes", MIXED, {}, seed=0), mixed_objective, 30, parallel=3)

    told = asked()
    assert not scans
    monkeypatch.setattr(optuna_samplers, "_fixed_space_cmaes",
                        lambda optuna: optuna.samplers.CmaEsSampler)
    assert asked() == told and scans


def test_cmaes_on_numbers_runs_the_cmaes_package_and_keeps_no_study():
    """Every parameter a number: the state is one cmaes.CMA in memory (Optuna's sampler
    reads the whole study at every ask), by Optuna's rules: random until a result, then
    draws from the distribution, which moves to its next generation after `population`
    results of its own; a result of an earlier generation changes nothing."""
    searcher = make_searcher("cmaes", SQUARE, {"population": 4}, seed=0)
    first = searcher.ask()
    assert searcher.direct.cma is None                   # nothing told: a random point
    searcher.tell(first, square_objective(first))
    asked = [searcher.ask() for _ in range(6)]
    assert {searcher.direct.generation_of[searcher.key(p)] for p in asked} == {0}
    for params in asked[:4]:
        searcher.tell(params, square_objective(params))
    assert searcher.direct.cma.generation == 1 and not searcher.direct.results
    searcher.tell(asked[4], square_objective(asked[4]))
    assert not searcher.direct.results and not searcher.study.trials
    drive(searcher, square_objective, 60, parallel=3)
    assert searcher.best[1] < 0.05


def test_portfolio_partners_hold_each_others_pending_points():
    from optuna.trial import TrialState

    searcher = make_searcher("auto", MIXED, {}, seed=0, budget=50, parallel=4)
    gp, tpe = searcher.members
    asked = [searcher.ask() for _ in range(4)]
    study = tpe.study
    # every pending point, whoever suggested it, is RUNNING in TPE's study (its liar sees it)
    running = [t for t in study.trials if t.state == TrialState.RUNNING]
    assert len(running) == 4 and set(tpe.pending) == set(gp.pending) == {searcher.key(p) for p in asked}
    searcher.tell(asked[0], 1.0)
    searcher.forget(asked[1])
    states = [t.state for t in study.trials]
    assert states.count(TrialState.COMPLETE) == 1 and states.count(TrialState.FAIL) == 1
    assert states.count(TrialState.RUNNING) == 2 and len(tpe.pending) == len(gp.pending) == 2


def test_portfolio_gives_the_gp_the_turns_its_predictions_earn():
    """On a smooth bowl the GP predicts held-out values well and gets most turns; on values
    that do not depend on the point it predicts nothing and CMA-ES gets most of them."""
    space = Space([Real(f"x{i}", 0.0, 1.0) for i in range(4)])
    bowl = lambda p: sum((p[f"x{i}"] - 0.3) ** 2 for i in range(4))      # noqa: E731
    noise = random.Random(0)

    def gp_share(objective) -> float:
        searcher = make_searcher("auto", space, {}, seed=0, budget=80, parallel=1)
        gp, turns = searcher.members[0], []
        for _ in range(60):
            params = searcher.ask()
            turns.append(searcher.owner[searcher.key(params)] is gp)
            searcher.tell(params, objective(params))
        return sum(turns[30:]) / 30

    assert gp_share(bowl) >= 0.6
    assert gp_share(lambda p: noise.random()) <= 0.4


def test_portfolio_on_a_plateau_warns_nothing_and_keeps_suggesting_new_points():
    """Every result alike (a model that never learns): the GP's agreement is undefined,
    which gives CMA-ES most turns, and nothing is written to stderr at each suggestion."""
    import warnings

    space = Space([Real(f"x{i}", 0.0, 1.0) for i in range(4)])
    searcher = make_searcher("auto", space, {}, seed=0, budget=40, parallel=1)
    keys = set()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(30):
            params = searcher.ask()
            keys.add(searcher.key(params))
            searcher.tell(params, 0.5)
    assert len(keys) == 30 and searcher.members[0].loo_agreement() == 0.0


@pytest.mark.parametrize("algorithm", ["bayesian", "auto"])
def test_model_searchers_take_finite_values_of_any_size(algorithm):
    """Finite values up to 1.8e308 (a diverging simulation's) are valid results: from 1e154
    their squares overflow, and the GP's predictions were NaN ("Probabilities contain
    NaN" ended the study). Ordinary values reach the model unchanged, bit for bit."""
    from mpiopt.search.scaling import in_range
    from mpiopt.search.pareto import Objectives

    space = Space([Real(f"x{i}", 0.0, 1.0) for i in range(3)])
    huge = lambda p: 1e300 * (1 + p["x0"]) if p["x1"] > 0.5 else -1e300 * p["x0"]  # noqa: E731
    searcher = make_searcher(algorithm, space, {}, seed=0, budget=30, parallel=2)
    for _ in range(25):
        params = searcher.ask()
        searcher.tell(params, huge(params))
    assert searcher.best[1] <= -0.999e300   # the model found the lowest (random: -0.992e300)
    vector = make_searcher("bayesian", space, {}, seed=0)
    for _ in range(14):
        params = vector.ask()
        vector.tell(params, Objectives((huge(params), -huge(params) / 1e200)))
    ordinary = np.array([0.3, -2.5e40, 7.0])
    assert in_range(ordinary) is ordinary
    scaled = in_range(np.array([3e300, -1.5e300, 1.0]))
    assert np.all(np.abs(scaled) < 1) and scaled[0] == -2 * scaled[1]


def test_bayesian_initial_design_covers_the_space_evenly():
    """The first 8 points of a Sobol design put 2 in each quadrant (random samples
    rarely do), whatever the seed; the random design stays available."""
    def quadrants(searcher):
        asked = [searcher.ask() for _ in range(8)]
        return sorted(sum((p["x"] > 0, 2 * (p["y"] > 1))) for p in asked)

    for seed in range(3):
        assert quadrants(BayesianSearcher(SQUARE, {"initial_points": 8}, seed)) == [0, 0, 1, 1, 2, 2, 3, 3]
    uneven = [quadrants(BayesianSearcher(SQUARE, {"initial_points": 8, "initial_design": "random"}, s))
              for s in range(3)]
    assert any(q != [0, 0, 1, 1, 2, 2, 3, 3] for q in uneven)



# ---- the edges of what a space holds (mpiopt.space.limits) -----------------------------
TOP, NORMAL = 1.7976931348623157e308, 2.2250738585072014e-308   # the largest, smallest normal float
EDGES = {
    "a width of the largest float": Real("x", -TOP / 2, TOP / 2),
    "zero to the largest float": Real("x", 0.0, TOP),
    "the largest float to zero": Real("x", -TOP, 0.0),
    "a width of the smallest normal float": Real("x", 0.0, NORMAL),
    "subnormal bounds, a normal width": Real("x", -1e-310, 3e-308),
    "two neighbouring floats": Real("x", 1.0, math.nextafter(1.0, 2.0)),
    "log from the smallest float to the largest": Real("x", 5e-324, TOP, "log-uniform"),
    "log where low x high is the smallest float": Real("x", 5e-324, 1.0, "log-uniform"),
    "integers to 2**53 each side": Integer("x", -2**53, 2**53),
    "the two top integers": Integer("x", 2**53 - 1, 2**53),
    "log integers to 2**53": Integer("x", 1, 2**53, "log-uniform"),
}
EDGE_ALGORITHMS = [("random", 2), ("bayesian", 2), ("tpe", 2), ("cmaes", 2),
                   ("evolutionary", 2), ("auto", 1), ("auto", 4), ("pbt", 2)]


@pytest.mark.parametrize("edge", EDGES)
@pytest.mark.parametrize("algorithm, groups", EDGE_ALGORITHMS,
                         ids=[f"{a}-{g}" for a, g in EDGE_ALGORITHMS])
def test_every_algorithm_works_at_the_edges_of_the_ranges_a_space_takes(algorithm, groups, edge):
    """Past these edges the space refuses a range (tests/test_space.py); up to them every
    searcher suggests native values inside it, past its random start (auto on one group
    and on four: each of its choices)."""
    space = Space([EDGES[edge], Real("y", 0.0, 1.0)])
    objective = lambda p: (space["x"].encode(p["x"]) - 0.3) ** 2 + p["y"]   # noqa: E731
    searcher = make_searcher(algorithm, space, {"population": 4} if algorithm == "pbt" else {},
                             seed=1, budget=16, parallel=groups)
    for number in range(16):
        params = searcher.ask(number)
        space.check(params)
        assert type(params["x"]) is type(EDGES[edge].low)
        if algorithm == "pbt":
            searcher.tell_trial(number, params, objective(params))
        else:
            searcher.tell(params, objective(params))


@pytest.mark.parametrize("kind", ["RF", "ET"])
def test_the_forest_spread_is_skopts_own(kind):
    """The tree surrogates' mean and spread from one apply of the forest equal skopt's
    predict(return_std=True) (law of total variance over the trees)."""
    import skopt.space
    from skopt.utils import cook_estimator

    from mpiopt.search._skopt import _ForestSpread

    rng = np.random.default_rng(0)
    X = rng.random((40, 3))
    y = np.sin(X @ np.array([3.0, 1.0, 2.0])) + rng.normal(0.0, 0.1, 40)
    model = cook_estimator(kind, space=skopt.space.Space([(0.0, 1.0)] * 3), random_state=3)
    model.set_params(n_jobs=1, min_variance=0.01)
    model.fit(X, y)
    rows = rng.random((300, 3))
    mu, std = _ForestSpread(model).predict(rows, return_std=True)
    want_mu, want_std = model.predict(rows, return_std=True)
    np.testing.assert_allclose(mu, want_mu, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(std, want_std, rtol=1e-10, atol=1e-12)
    assert std.min() >= 0.1 - 1e-12, "each tree's variance is at least min_variance"
