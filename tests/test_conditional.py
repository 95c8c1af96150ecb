"""Conditional search spaces (`when`, `for`): the spec's rules and errors, Space.active,
every searcher returning exactly the active parameters, and a real study under mpiexec
whose objective fails on any parameter that should be absent (and the reverse)."""
from __future__ import annotations

import csv
import io
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import ROOT, mpiopt
from mpiopt.errors import SpecError
from mpiopt.search import make_searcher
from mpiopt.space import Space, SpaceError
from mpiopt.spec import Spec, shipped_searchspaces
from mpiopt.trial import StudyStatus, TrialStatus

FUNCTIONS = ROOT / "tests" / "objectives" / "functions.py"
sys.path.insert(0, str(FUNCTIONS.parent))
from functions import conditional  # noqa: E402  (the study's objective, checked here too)

CONDITIONAL_YAML = shipped_searchspaces() / "conditional.yaml"


def spec_of(space: dict, **search) -> Spec:
    return Spec.from_dict({"study": {"name": "c"}, "objective": {"function": f"{FUNCTIONS}:conditional"},
                           "search_space": space, "search": {"trials": 3, **search}})


def shipped_space() -> Space:
    return spec_of(yaml.safe_load(CONDITIONAL_YAML.read_text())).space


# ---- the spec ----------------------------------------------------------------------
def test_shipped_space_expands_for_and_reads_when():
    space = shipped_space()
    assert [n for n in space.names if n.startswith("units_")] == ["units_0", "units_1", "units_2", "units_3"]
    described = space.to_dict()
    assert described["units_2"]["when"] == {"layers": "> 2"}
    assert described["beta1"]["when"] == {"optimizer": ["adam"]}
    assert described["dropout"]["when"] == {"layers": ">= 2"}
    assert Space.from_dict(described) == space                      # the stored form loads back
    assert Space.from_dict(described).fingerprint() == space.fingerprint()


def test_include_by_name_and_list_of_values_and_nested_conditions():
    space = spec_of({"include": "conditional",
                     "optimizer": ["adam", "nadam", "sgd"],
                     "beta1": {"type": "real", "low": 0.8, "high": 0.99, "when": {"optimizer": ["adam", "nadam"]}},
                     "amsgrad": {"type": "categorical", "choices": [True, False], "when": {"beta1": "> 0.9"}},
                     "momentum": {"type": "real", "low": 0.0, "high": 0.99, "when": {"optimizer": "sgd"}}}).space
    on = space.active({"optimizer": "nadam", "beta1": 0.95, "amsgrad": True, "momentum": 0.5})
    assert on == {"optimizer": "nadam", "beta1": 0.95, "amsgrad": True}
    # a child of an absent parent is absent too, whatever its own condition would say
    assert space.active({"optimizer": "sgd", "beta1": 0.95, "amsgrad": True, "momentum": 0.5}) \
        == {"optimizer": "sgd", "momentum": 0.5}
    assert space.order.index("beta1") < space.order.index("amsgrad")


def test_space_active_and_check():
    space = shipped_space()
    full = {"optimizer": "sgd", "learning_rate": 0.01, "beta1": 0.9, "beta2": 0.99, "momentum": 0.5,
            "layers": 2, "units_0": 8, "units_1": 9, "units_2": 10, "units_3": 11, "dropout": 0.1}
    on = space.active(full)
    assert list(on) == ["optimizer", "learning_rate", "momentum", "layers", "units_0", "units_1", "dropout"]
    space.check(on)
    with pytest.raises(SpaceError, match="beta1: absent unless optimizer is adam"):
        space.check({**on, "beta1": 0.9})
    with pytest.raises(SpaceError, match="units_1: missing"):
        space.check({k: v for k, v in on.items() if k != "units_1"})
    assert space.parameter_set(on) == on
    with pytest.raises(SpaceError, match="momentum: absent unless optimizer is sgd"):
        space.parameter_set({**on, "optimizer": "adam", "beta1": 0.9, "beta2": 0.99})
    plain = Space.from_dict({"x": {"type": "real", "low": 0, "high": 1}})
    params = {"x": 0.5}
    assert plain.active(params) is params and not plain.conditional


BAD = [
    ({"beta1": {"type": "real", "low": 0.8, "high": 0.99, "when": {"optimiser": "adam"}}},
     "search_space.beta1.when.optimiser: unknown parameter 'optimiser'; did you mean 'optimizer'?"),
    ({"beta1": {"type": "real", "low": 0.8, "high": 0.99, "when": {"optimizer": ["adam", "adamw"]}}},
     "search_space.beta1.when.optimizer: 'adamw' is a value optimizer cannot take"),
    ({"d": {"type": "real", "low": 0, "high": 1, "when": {"depth": ">= 9"}}},
     "search_space.d.when.depth: \">= 9\" never holds: depth is in [1, 4]"),
    ({"d": {"type": "real", "low": 0, "high": 1, "when": {"depth": "lots"}}},
     "search_space.d.when.depth: expected a value, a list of values or a comparison"),
    ({"a": {"type": "integer", "low": 1, "high": 3, "when": {"b": 2}},
      "b": {"type": "integer", "low": 1, "high": 3, "when": {"a": 1}}},
     "search_space.a.when.b: a cycle of conditions: a -> b -> a"),
    ({"w_{i}": {"type": "integer", "low": 1, "high": 3, "for": {"i": "optimizer"}}},
     "search_space.w_{i}.for.i: expected an integer parameter, 'optimizer' is categorical"),
    ({"w_{i}": {"type": "integer", "low": 1, "high": 3, "for": {"i": "lr"}}},
     "search_space.w_{i}.for.i: expected an integer parameter, 'lr' is real"),
    ({"w_{i}": {"type": "integer", "low": 1, "high": 3, "for": {"j": "depth"}}},
     "search_space.w_{i}.for.j: the name must contain {j}"),
    ({"w_{i}": {"type": "integer", "low": 1, "high": 3, "for": {"i": "depht"}}},
     "search_space.w_{i}.for.i: unknown parameter 'depht'; did you mean 'depth'?"),
    ({"d": {"type": "real", "low": 0, "high": 1, "when": {"lr": 0.5}}},
     "search_space.d.when.lr: a real parameter is tested with a comparison"),
]


@pytest.mark.parametrize("entries,message", BAD, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(BAD)])
def test_spec_errors_name_the_field_on_one_line(entries, message):
    space = {"optimizer": ["adam", "sgd"], "depth": {"type": "integer", "low": 1, "high": 4},
             "lr": {"type": "real", "low": 0.001, "high": 1.0}, **entries}
    with pytest.raises(SpecError) as err:
        spec_of(space)
    text = str(err.value)
    assert message in text and "\n" not in text


def test_validate_refuses_with_exit_2_and_writes_nothing(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({
        "study": {"name": "v"}, "objective": {"function": f"{FUNCTIONS}:conditional"},
        "storage": f"sqlite:///{tmp_path / 'v.db'}",
        "search_space": {"a": {"type": "integer", "low": 1, "high": 3, "when": {"b": 2}},
                         "b": {"type": "integer", "low": 1, "high": 3, "when": {"a": 1}}},
        "search": {"trials": 2}}))
    proc = mpiopt("search", spec, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("search_space.a.when.b: a cycle of conditions: a -> b -> a")
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "v.db").exists()


def test_fingerprint_of_a_space_without_conditions_is_unchanged():
    """The value the code before conditional spaces computed (old studies still resume)."""
    spec = Spec.from_dict({"study": {"name": "fp"}, "objective": {"function": "/nowhere/f.py:f"},
                           "search_space": {"lr": {"type": "real", "low": 1e-4, "high": 1e-1, "prior": "log-uniform"},
                                            "units": {"type": "integer", "low": 8, "high": 512},
                                            "act": ["relu", "tanh"]},
                           "search": {"trials": 3}}, check_files=False)
    assert spec.space.fingerprint() == "33c5b9fdb8da96a741e21c5a253cac5dfe8567ece26a45729e95daebfe714510"
    assert spec.fingerprint() == "bc0c93b3e069ee85cbef49a0b0a95060227f1649ccd1c9c1e067b334d7fd2e6d"
    assert all("when" not in e for e in spec.space.to_dict().values())


def test_a_changed_condition_changes_the_fingerprint_and_shows_in_the_diff():
    base = yaml.safe_load(CONDITIONAL_YAML.read_text())
    other = dict(base, dropout={**base["dropout"], "when": {"layers": ">= 3"}})
    a, b = spec_of(base), spec_of(other)
    assert a.fingerprint() != b.fingerprint()
    assert any(line.startswith("changed dropout") and ">= 3" in line for line in a.diff(b))


# ---- searchers -----------------------------------------------------------------------
CONFIGS = [
    ("random", {}),
    ("bayesian", {"initial_points": 4, "candidates": 300}),
    ("evolutionary", {"population": 6}),
    ("evolutionary", {"mode": "generational", "population": 6}),
    ("tpe", {"startup_trials": 4}),
    ("cmaes", {}),
    ("auto", {}),
]


def drive(searcher, n: int = 20, parallel: int = 3) -> list[dict]:
    asked = [searcher.ask() for _ in range(parallel)]
    pending = list(asked)
    for i in range(n):
        params = pending.pop(0)
        searcher.tell(params, conditional(params))   # raises on a wrong active set
        if i < n - parallel:
            pending.append(searcher.ask())
            asked.append(pending[-1])
    return asked


@pytest.mark.parametrize("algorithm,options", CONFIGS, ids=[a + ("-" + o["mode"] if "mode" in o else "")
                                                          for a, o in CONFIGS])
def test_every_searcher_suggests_exactly_the_active_parameters(algorithm, options):
    space = shipped_space()
    searcher = make_searcher(algorithm, space, options, seed=5, budget=20, parallel=3)
    asked = drive(searcher)
    for params in asked:
        assert params == space.active(params)
        space.check(params)                        # active present, inside range; absent absent
    assert {p["optimizer"] for p in asked} == {"adam", "sgd"}
    assert len({p["layers"] for p in asked}) >= 2
    assert drive(make_searcher(algorithm, space, options, seed=5, budget=20, parallel=3)) == asked
    assert not searcher.pending


@pytest.mark.parametrize("algorithm", ["bayesian", "evolutionary", "tpe", "cmaes"])
def test_replay_of_trials_with_different_active_sets(algorithm):
    space = shipped_space()
    options = {"bayesian": {"initial_points": 3, "candidates": 200}, "tpe": {"startup_trials": 3}}.get(algorithm, {})
    first = make_searcher(algorithm, space, options, seed=2)
    done = []
    for _ in range(8):
        params = first.ask()
        first.tell(params, conditional(params))
        done.append((params, conditional(params)))
    assert len({tuple(sorted(p)) for p, _ in done}) > 1          # several active sets
    resumed = make_searcher(algorithm, space, options, seed=2)
    resumed.replay(done)
    assert [p for p, _ in resumed.told] == [p for p, _ in done]
    for _ in range(3):
        params = resumed.ask()
        space.check(params)
        resumed.tell(params, conditional(params))


@pytest.mark.parametrize("mode", ["steady_state", "generational"])
def test_several_objectives_over_a_conditional_space(mode):
    """NSGA-II works on the same genome (ParEGO on the encoding the GP tests use)."""
    from mpiopt.search.pareto import Objectives

    space = shipped_space()
    searcher = make_searcher("evolutionary", space, {"mode": mode, "population": 6}, seed=1)
    for _ in range(12):
        params = searcher.ask()
        space.check(params)
        searcher.tell(params, Objectives((conditional(params), params["layers"])))
    assert not searcher.pending and len(searcher.told) == 12


def test_absent_is_not_null_in_the_key():
    space = Space.from_dict({"opt": {"type": "categorical", "choices": ["a", "b"]},
                             "x": {"type": "real", "low": 0, "high": 1, "when": {"opt": "a"}},
                             "tag": {"type": "categorical", "choices": ["none", "y"]}})
    searcher = make_searcher("random", space)
    assert searcher.key({"opt": "b", "tag": "none"}) != searcher.key({"opt": "b", "tag": "y"})
    assert searcher.key({"opt": "b", "tag": "y"}) == searcher.key({"opt": "b", "x": 0.3, "tag": "y"})
    assert searcher.key({"opt": "a", "x": 0.3, "tag": "y"})[1] == 0.3


def nested_space() -> Space:
    """Three choices, a real parent, integer values, a boolean child: every kind of test."""
    return spec_of({"opt": ["adam", "nadam", "sgd"], "n": {"type": "integer", "low": 1, "high": 5},
                    "beta1": {"type": "real", "low": 0.8, "high": 0.99, "when": {"opt": ["adam", "nadam"]}},
                    "ams": {"type": "categorical", "choices": [True, False], "when": {"beta1": "> 0.9"}},
                    "k": {"type": "real", "low": 0, "high": 1, "when": {"n": [2, 4], "ams": False}}}).space


@pytest.mark.parametrize("make", [shipped_space, nested_space])
def test_encoder_candidates_are_the_rows_of_their_own_suggestions(make):
    """Absent parameters' columns hold a constant, in told rows and in candidates alike."""
    from mpiopt.search._skopt import Encoder

    space = make()
    enc = Encoder(space)
    rows = enc.perturb(enc.sample(300, np.random.default_rng(0)), 0.1, np.random.default_rng(1))
    suggestions = [space.active(enc.decode(row)) for row in rows]
    assert np.allclose(enc.encode(suggestions), rows)    # the candidate IS the told row
    assert len({tuple(sorted(p)) for p in suggestions}) >= 3


def test_absent_columns_are_constant():
    from mpiopt.search._skopt import Encoder

    space = shipped_space()
    enc = Encoder(space)
    rows = enc.sample(200, np.random.default_rng(0))
    sgd = [space.active(enc.decode(r)) for r in rows]
    sgd = [p for p in sgd if p["optimizer"] == "sgd"]
    beta = enc.blocks[space.names.index("beta1")]["cols"]
    assert sgd and np.all(enc.encode(sgd)[:, beta] == 0.5)


def test_genome_of_absent_parameters_is_neutral_and_mutations_there_change_nothing():
    space = shipped_space()
    params = space.sample(np.random.default_rng(1))
    genome = space.to_genome(params)
    absent = [i for i, n in enumerate(space.names) if n not in params]
    assert absent and all(genome[i] == 0.5 for i in absent)
    moved = list(genome)
    for i in absent:
        moved[i] = 0.9
    assert space.from_genome(moved) == space.from_genome(genome) == params
    assert space.distance(params, space.from_genome(moved)) == 0.0


# ---- a real study ---------------------------------------------------------------------
def write_spec(tmp_path: Path, algorithm: str, trials: int) -> Path:
    spec = {"study": {"name": "c"},
            "objective": {"function": f"{FUNCTIONS}:conditional", "direction": "minimize"},
            "search_space": {"include": "conditional"},
            "search": {"algorithm": algorithm, "trials": trials, "seed": 4,
                       **({"bayesian": {"initial_points": 3}} if algorithm == "bayesian" else {}),
                       **({"evolutionary": {"population": 4, "tournament": 2}}
                          if algorithm == "evolutionary" else {})}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def stored(tmp_path: Path):
    from mpiopt.storage import open_storage

    storage = open_storage(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        study = storage.get_study("c")
        return study, storage.get_trials(study.id)
    finally:
        storage.close()


@pytest.mark.parametrize("algorithm", ["random", "bayesian", "evolutionary"])
def test_a_study_under_mpiexec_stores_absent_parameters_as_absent_and_resumes(tmp_path, algorithm):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    spec = write_spec(tmp_path, algorithm, 6)
    proc = mpiopt("search", spec, "--storage", url, np=3, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    if algorithm == "bayesian":       # resume: replays trials with different active sets
        proc = mpiopt("search", spec, "--storage", url, "--resume", "--trials", "9", np=3, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "6 finished trials kept" in proc.stdout
    study, trials = stored(tmp_path)
    space = shipped_space()
    assert study.status == StudyStatus.COMPLETE
    assert len(trials) == (9 if algorithm == "bayesian" else 6)
    assert {t.status for t in trials} == {TrialStatus.COMPLETE}, [t.error for t in trials]
    for t in trials:                                   # the objective raised on any mistake
        space.check(t.params)
        assert None not in t.params.values()
        assert math.isclose(t.value, conditional(t.params))
    if algorithm != "bayesian":        # the queries once (each is a process start)
        return
    shown = json.loads(mpiopt("trials", "c", "--storage", url, "--format", "json", cwd=tmp_path,
                              check=True).stdout)
    assert [sorted(r["params"]) for r in shown] == [sorted(t.params) for t in sorted(trials, key=lambda t: t.number)]
    table = mpiopt("export", "c", "--storage", url, "--format", "csv", cwd=tmp_path, check=True).stdout
    rows = list(csv.DictReader(io.StringIO(table)))
    for row, t in zip(rows, sorted(trials, key=lambda t: t.number)):
        for name in space.names:
            assert (row.get(f"params_{name}", "") == "") == (name not in t.params)


MODEL = '''
import numpy as np


def build(params):
    import keras
    adam = params["optimizer"] == "adam"
    expected = {"optimizer", "learning_rate", "layers", *(f"units_{i}" for i in range(params["layers"]))}
    expected |= {"beta1", "beta2"} if adam else {"momentum"}
    expected |= {"dropout"} if params["layers"] >= 2 else set()
    if set(params) != expected:
        raise AssertionError(f"build got {sorted(params)}, expected {sorted(expected)}")
    layers = [keras.Input((6,))]
    for i in range(params["layers"]):
        layers.append(keras.layers.Dense(params[f"units_{i}"], activation="tanh"))
        if "dropout" in params:
            layers.append(keras.layers.Dropout(params["dropout"]))
    layers.append(keras.layers.Dense(3, activation="softmax"))
    lr = params["learning_rate"]
    optimizer = (keras.optimizers.Adam(lr, beta_1=params["beta1"], beta_2=params["beta2"]) if adam
                 else keras.optimizers.SGD(lr, momentum=params["momentum"]))
    model = keras.Sequential(layers)
    model.compile(optimizer, "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def load(n=200):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 6)).astype("float32")
    return x, np.digitize(x[:, 0] + 0.5 * x[:, 1], [-0.5, 0.5]).astype("int64")
'''


def test_a_keras_study_over_the_conditional_space(tmp_path):
    """One process, two trials (an adam and an sgd one, queued): build_model raises unless
    it gets exactly the active parameters (the searchers' suggestions are checked above)."""
    pytest.importorskip("tensorflow")
    (tmp_path / "tiny.py").write_text(MODEL)
    adam = {"optimizer": "adam", "learning_rate": 0.02, "beta1": 0.9, "beta2": 0.99, "layers": 1,
            "units_0": 8}
    sgd = {"optimizer": "sgd", "learning_rate": 0.05, "momentum": 0.5, "layers": 2, "units_0": 8,
           "units_1": 4, "dropout": 0.1}
    spec = {"study": {"name": "k"},
            "objective": {"model": "tiny.py:build", "data": {"loader": "tiny.py:load"},
                          "metric": "val_accuracy", "direction": "maximize"},
            "search_space": {"include": "conditional",
                             "layers": {"type": "integer", "low": 1, "high": 2},
                             "units_{i}": {"type": "integer", "low": 2, "high": 8, "for": {"i": "layers"}}},
            "search": {"algorithm": "random", "trials": 2, "seed": 1, "initial_trials": [adam, sgd]},
            "training": {"epochs": 1, "batch_size": 50}}
    path = tmp_path / "k.yaml"
    path.write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{tmp_path / 'k.db'}"
    proc = mpiopt("search", path, "--storage", url, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    from mpiopt.storage import open_storage

    storage = open_storage(url)
    try:
        trials = sorted(storage.get_trials(storage.get_study("k").id), key=lambda t: t.number)
    finally:
        storage.close()
    assert [t.status for t in trials] == [TrialStatus.COMPLETE] * 2, [t.error for t in trials]
    assert trials[0].params == adam and trials[1].params == sgd
