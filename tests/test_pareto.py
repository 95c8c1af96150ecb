"""Several objectives and constraints: the pure parts (fronts, NSGA-II's order, ParEGO,
hypervolume, the spec) and whole studies under mpiexec, with a function and with Keras."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import mpiopt  # noqa: E402
from mpiopt.objective.metrics import Constraint, FrontTracker, parse_constraint  # noqa: E402
from mpiopt.search import make_searcher  # noqa: E402
from mpiopt.search.pareto import (Objectives, front_mask, hypervolume,  # noqa: E402
                                  nsga2_keys)
from mpiopt.space import Space  # noqa: E402

FUNCTIONS = Path(__file__).resolve().parent / "objectives" / "functions.py"


# ---- pure parts ----------------------------------------------------------------------------
def test_hypervolume_is_exact_in_two_and_three_dimensions():
    assert hypervolume([[1, 3], [2, 2], [3, 1]], [4, 4]) == pytest.approx(6.0)
    # a dominated point and one beyond the reference add nothing
    assert hypervolume([[1, 3], [2, 2], [2.5, 2.5], [5, 0]], [4, 4]) == pytest.approx(5.0)
    rng = np.random.default_rng(0)
    points = rng.random((25, 3))
    samples = rng.random((400_000, 3)) * 1.1
    dominated = np.zeros(len(samples), bool)
    for p in points:
        dominated |= np.all(samples >= p, axis=1)
    monte_carlo = dominated.mean() * 1.1 ** 3
    assert hypervolume(points, [1.1] * 3) == pytest.approx(monte_carlo, abs=0.01)


def test_front_and_nsga2_order_put_infeasible_points_last():
    values = [[1, 3], [2, 2], [3, 1], [3, 3], [0, 0]]
    violations = [0, 0, 0, 0, 0.5]              # the best point breaks a constraint
    assert front_mask(values, violations).tolist() == [True, True, True, False, False]
    keys = nsga2_keys(values, violations)
    assert max(keys[:3]) < keys[3] < keys[4]    # front, then the dominated one, then infeasible
    assert keys[0] == keys[2] == 0.0 and keys[1] > 0   # boundary points have infinite crowding


def test_constraints_parse_and_measure_their_violation():
    c = parse_constraint("n_params <= 200000", lambda m: pytest.fail(m))
    assert c == Constraint("n_params", "<=", 200000.0)
    assert c.violation({"n_params": 150000}) == 0.0
    assert c.violation({"n_params": 250000}) == pytest.approx(0.25)
    assert c.violation({}) == 1.0                 # not reported: broken


def test_front_tracker_keeps_only_feasible_non_dominated_trials():
    from mpiopt.spec import ObjectiveSpec
    from mpiopt.trial import FrozenTrial, TrialStatus

    objective = ObjectiveSpec(function="f.py:f", metric="acc", direction="maximize",
                              metrics=(("acc", "maximize"), ("size", "minimize")),
                              constraints=(Constraint("size", "<=", 50),))
    tracker = FrontTracker(objective)

    def trial(n, acc, size):
        return FrozenTrial(id=n, study_id=1, number=n, status=TrialStatus.COMPLETE, params={},
                           value=acc, metrics={"acc": acc, "size": size})

    for t in (trial(0, 0.8, 40), trial(1, 0.9, 45), trial(2, 0.95, 60), trial(3, 0.7, 45),
              trial(4, 0.85, 10)):
        tracker.add(t)
    assert sorted(t.number for t, _ in tracker.front) == [1, 4]   # 2 too big, 0 and 3 beaten
    assert tracker.outcome(trial(2, 0.95, 60)).violation == pytest.approx(0.2)
    assert tracker.hypervolume() > 0


def _zdt1_run(algorithm, seed, budget=60):
    space = Space.from_dict({f"x{i}": {"type": "real", "low": 0.0, "high": 1.0} for i in range(4)})
    s = make_searcher(algorithm, space, {}, seed=seed)
    points = []
    for number in range(0, budget, 4):
        batch = [s.ask(number + k) for k in range(4)]
        for p in batch:
            x = np.array([p[f"x{i}"] for i in range(4)])
            g = 1 + 9 * x[1:].mean()
            v = (x[0], g * (1 - np.sqrt(x[0] / g)))
            points.append(v)
            s.tell(p, Objectives(v))
    return hypervolume(points, [1.1, 11.0])


def test_parego_and_nsga2_beat_random_on_a_front_they_were_not_tuned_on():
    random_hv = np.median([_zdt1_run("random", s) for s in range(3)])
    assert np.median([_zdt1_run("bayesian", s) for s in range(3)]) > random_hv
    assert np.median([_zdt1_run("evolutionary", s, budget=120) for s in range(3)]) > \
        np.median([_zdt1_run("random", s, budget=120) for s in range(3)])


# ---- the spec -------------------------------------------------------------------------------
def _spec(tmp_path, **objective_and_search):
    objective = {"function": f"{FUNCTIONS}:two_objectives",
                 "metrics": {"f1": "minimize", "f2": "minimize"}}
    search = {"algorithm": "evolutionary", "trials": 24, "seed": 1}
    objective.update(objective_and_search.pop("objective", {}))
    search.update(objective_and_search.pop("search", {}))
    spec = {"study": {"name": "mo"}, "objective": objective,
            "search_space": {"x": {"type": "real", "low": 0.0, "high": 1.0},
                             "y": {"type": "real", "low": 0.0, "high": 1.0}},
            "search": search, "resources": {"group_size": 1}}
    path = tmp_path / "mo.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.mark.parametrize("change,field", [
    ({"objective": {"metrics": {"f1": "minimise"}}}, "objective.metrics.f1"),
    ({"objective": {"metric": "f1"}}, "objective.metrics"),
    ({"objective": {"constraints": ["size = 3"]}}, "objective.constraints[0]"),
    ({"objective": {"reference": {"f1": 2}}}, "objective.reference"),
    ({"search": {"algorithm": "cmaes"}}, "search.algorithm"),
    ({"search": {"target": 0.1}}, "search.target"),
])
def test_bad_objectives_are_one_line_naming_the_field(tmp_path, change, field):
    path = _spec(tmp_path, **change)
    proc = mpiopt("search", path, "--storage", f"sqlite:///{tmp_path / 'r.db'}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and f": {field}" in proc.stderr
    assert not (tmp_path / "r.db").exists()


# ---- whole studies ---------------------------------------------------------------------------
def test_two_objective_study_with_a_constraint_under_mpiexec(tmp_path):
    path = _spec(tmp_path, objective={"constraints": ["size <= 60"]})
    url = f"sqlite:///{tmp_path / 'r.db'}"
    proc = mpiopt("search", path, "--storage", url, np=3, cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "front=" in proc.stdout and "Pareto front (f1, f2)" in proc.stdout
    front = json.loads(mpiopt("best", "mo", "--storage", url, "--format", "json",
                              check=True).stdout)
    trials = json.loads(mpiopt("trials", "mo", "--storage", url, "--format", "json",
                               check=True).stdout)
    assert len(trials) == 24 and front
    done = [t for t in trials if t["status"] == "COMPLETE"]
    rows = {t["number"]: t for t in done}
    feasible = [t for t in done if 100 * t["params"]["y"] <= 60]
    points = [(two(t)[0], two(t)[1]) for t in feasible]
    expect = sorted(t["number"] for t, keep in zip(feasible, front_mask(points)) if keep)
    assert sorted(r["number"] for r in front) == expect
    assert all(rows[r["number"]]["params"]["y"] * 100 <= 60 for r in front)
    # a resume replays vectors into NSGA-II and goes on to the larger budget
    more = mpiopt("search", path, "--storage", url, "--resume", "--trials", "32", np=3,
                  cwd=tmp_path, timeout=240)
    assert more.returncode == 0, more.stderr
    assert len(json.loads(mpiopt("trials", "mo", "--storage", url, "--format", "json",
                                 check=True).stdout)) == 32


def two(trial_json):
    x, y = trial_json["params"]["x"], trial_json["params"]["y"]
    g = 1 + 9 * y
    return x, g * (1 - (x / g) ** 0.5)


def test_jets_model_with_accuracy_and_parameter_count(tmp_path):
    pytest.importorskip("tensorflow")
    root = Path(__file__).resolve().parent.parent / "examples" / "jets"
    spec = yaml.safe_load((root / "pareto.yaml").read_text())
    spec["objective"]["model"] = str(root / "model.py") + ":build_model"
    spec["objective"]["data"]["loader"] = str(root / "data.py") + ":load"
    spec["search"].update(trials=3, algorithm="random")
    spec["training"].update(epochs=1)
    spec["resources"]["group_size"] = 1
    path = tmp_path / "jets.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    url = f"sqlite:///{tmp_path / 'j.db'}"
    proc = mpiopt("search", path, "--storage", url, cwd=tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    trials = json.loads(mpiopt("trials", "jets-pareto", "--storage", url, "--format", "json",
                               check=True).stdout)
    front = json.loads(mpiopt("best", "jets-pareto", "--storage", url, "--format", "json",
                              check=True).stdout)
    assert len(trials) == 3 and front
    assert all(r["n_params"] <= 40000 and 0 < r["val_auc"] <= 1 for r in front)
