"""benchmarks/quality_suite.py's report: the summary lines a change to a searcher is judged by."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import quality_suite as Q  # noqa: E402


def _runs(final: float, seeds: int = 5) -> list[list[float]]:
    return [[final + 1.0, final] for _ in range(seeds)]


def test_report_counts_each_searchers_shortfalls_when_taken_as_the_default():
    # branin's optimum 0.398, camel's -1.032: on branin `a` is best and `b` far behind,
    # on camel the other way round, `c` is behind on both; random median is the zero
    results = {
        ("branin", "a", 1): _runs(0.4), ("branin", "b", 1): _runs(5.0),
        ("branin", "c", 1): _runs(3.0), ("branin", "random", 1): _runs(10.0),
        ("camel", "a", 1): _runs(-0.2), ("camel", "b", 1): _runs(-1.03),
        ("camel", "c", 1): _runs(-0.5), ("camel", "random", 1): _runs(0.0),
    }
    text = Q.report(results, ["branin", "camel"], ["a", "b", "c", "random"], [1], 5)
    line = next(t for t in text.splitlines() if t.startswith("Problems where a searcher"))
    assert "a 1/2" in line and "b 1/2" in line and "c 2/2" in line
    assert "random" not in line.split(":", 1)[1]



def test_the_best_mean_rank_is_resampled_over_seeds():
    """`a` always beats `c`; `a` and `b` trade the lead seed by seed (each best on half of
    its own runs), so resampled seeds give the best mean rank to either, never to `c`."""
    import numpy as np

    firm = Q.best_rank_shares([{"a": np.array([1.0] * 6), "c": np.array([2.0] * 6)}],
                              np.random.default_rng(0))
    assert firm == {"a": 1.0, "c": 0.0}
    mixed = Q.best_rank_shares([{"a": np.array([1.0, 3.0] * 3), "b": np.array([3.0, 1.0] * 3),
                                 "c": np.array([4.0] * 6)}], np.random.default_rng(0))
    assert mixed["c"] == 0.0 and 0.2 < mixed["a"] < 0.8 and abs(sum(mixed.values()) - 1) < 1e-9

def test_shifted_twins_move_the_centre_optimum_away():
    """Rastrigin, Ackley and Griewank have their optimum (0) at the centre of the domain,
    where CMA-ES starts; their held-out twins do not, and are held out of the suite."""
    import problems as P

    catalogue = P.catalogue()
    for name in ("rastrigin4", "ackley5", "griewank8"):
        for problem, centre_is_optimal in ((catalogue[name], True),
                                           (catalogue[f"{name}-shifted"], False)):
            centre = {d.name: (d.low + d.high) / 2 for d in problem.space.dimensions}
            assert (problem.objective(centre) < 1e-9) is centre_is_optimal, problem.name
    assert {"rastrigin4-shifted", "levy6-shifted"} <= P.HELD_OUT


def test_real_tasks_give_cross_val_scores_numbers():
    """The real tasks' error is computed on folds scaled once (problems._cv_error); it must
    stay exactly the error of scikit-learn's cross_val_score on the scaled pipeline, or the
    stored runs the suite is compared with no longer hold."""
    import numpy as np
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    import problems as P

    models = [(P._tree({"max_depth": 4, "min_samples_leaf": 3, "min_samples_split": 9,
                        "criterion": "entropy", "max_features": 0.37}), "breast_cancer"),
              (P._sgd({"loss": "modified_huber", "alpha": 3e-4, "l1_ratio": 0.2, "eta0": 0.05}),
               "wine"),
              (SVC(C=3.0, gamma=2e-3, kernel="rbf"), "digits")]
    for model, data in models:
        x, y = P._data(data)
        expected = 1.0 - float(np.mean(cross_val_score(make_pipeline(StandardScaler(), model),
                                                       x, y, cv=3)))
        assert P._cv_error(model, data) == expected, data


def test_runs_the_suite_copies_instead_of_running_are_the_same_runs():
    """quality_suite.same_run skips random search at every pending level but the first, and
    `auto` where it picks the GP alone: both must give the very curve they are copied from."""
    levels, names = [1, 4, 16], ["auto", "bayesian", "random"]
    assert Q.same_run(("branin", "random", 3, 16), levels, names) == ("branin", "random", 3, 1)
    assert Q.same_run(("branin", "auto", 3, 4), levels, names) == ("branin", "bayesian", 3, 4)
    assert Q.same_run(("hartmann3", "auto", 3, 4), levels, names) is None   # auto's pair
    assert Q.same_run(("branin", "auto", 3, 4), levels, ["auto", "random"]) is None
    assert Q.run(("camel", "random", 0, 1))[1] == Q.run(("camel", "random", 0, 16))[1]
    assert Q.run(("camel", "auto", 1, 4))[1] == Q.run(("camel", "bayesian", 1, 4))[1]


def test_seeds_saved_in_two_files_are_joined_and_their_halves_compared(tmp_path, capsys):
    """Ten more seeds (--first-seed 10, --save) join the ten saved before (--load both);
    at 20 seeds the report says on which problems a searcher's two halves of 10 seeds are
    more than 10% apart: how far the same code moves with other seeds."""
    import json

    first = {"branin|a|1": _runs(0.4, 10), "branin|random|1": _runs(10.0, 10),
             "camel|a|1": _runs(-1.0, 10), "camel|random|1": _runs(0.0, 10)}
    more = {"branin|a|1": _runs(0.4, 10), "branin|random|1": _runs(10.0, 10),
            "camel|a|1": _runs(-0.5, 10), "camel|random|1": _runs(0.0, 10)}
    paths = []
    for i, runs in enumerate((first, more)):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(runs))
    Q.main(["--load", str(paths[0]), "--load", str(paths[1]), "--seeds", "20", "--pending",
            "1", "--problems", "branin", "camel", "--searchers", "a", "random", "--workers", "1"])
    out = capsys.readouterr().out
    assert "20 seeds" in out
    line = next(t for t in out.splitlines() if t.startswith("The same searcher against itself"))
    assert "halves of 10" in line and "a 1/2 (camel)" in line
    assert Q.halves_apart([1.0] * 10 + [1.05] * 10, 10, 10.0, 0.0) is False


def test_batched_runs_are_judged_against_one_at_a_time_runs_seed_by_seed():
    """NAME/batch beside NAME: on branin every seed's batched run ends worse (a paired
    test finds it), on camel they trade places (nothing significant); and a batched run
    is the suite's own drive with the stock of a quarter of the pending suggestions."""
    worse = [[0.5 + 0.01 * i] for i in range(10)]
    results = {("branin", "a", 16): [[0.4 + 0.01 * i] for i in range(10)],
               ("branin", "a/batch", 16): worse,
               ("camel", "a", 16): [[-1.0], [-0.9]] * 5, ("camel", "a/batch", 16): [[-0.9], [-1.0]] * 5}
    line = Q.batch_comparison(results, ["branin", "camel"], "a", "a/batch", 16)
    assert "better median on 0 problem(s), worse on 1" in line
    assert "(one-sided Wilcoxon, p < 0.05): branin (p = 0.001)" in line
    assert line.endswith("over 2 problems: branin (p = 0.002).")
    text = Q.report({**results, ("branin", "random", 16): _runs(10.0, 10),
                     ("camel", "random", 16): _runs(0.0, 10)},
                    ["branin", "camel"], ["a", "a/batch", "random"], [16], 10)
    assert line in text
    assert Q.batch_size(16) == 4 and Q.batch_size(64) == 16 and Q.batch_size(4) == 2
    task, curve, _ = Q.run(("camel", "bayesian/batch", 2, 16))
    assert len(curve) == Q.P.catalogue()["camel"].budget and curve != Q.run(("camel", "bayesian", 2, 16))[1]
