"""Spec loading: defaults, every bad case as one SpecError line, includes, overrides,
file references, and `mpiopt validate` through a subprocess."""
from __future__ import annotations

import copy
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from conftest import mpiopt
from mpiopt.errors import SpecError
from mpiopt.refs import check_ref, load_callable
from mpiopt.spec import Spec, load_spec, parse_overrides, shipped_searchspaces

ROOT = Path(__file__).resolve().parent.parent
MPIOPT = Path(sys.executable).parent / "mpiopt"

GOOD = {
    "study": {"name": "demo"},
    "objective": {"function": "obj.py:f"},
    "search_space": {
        "lr": {"type": "real", "low": 1e-4, "high": 1.0, "prior": "log-uniform"},
        "layers": {"type": "integer", "low": 1, "high": 4},
        "act": {"type": "categorical", "choices": ["relu", "tanh"]},
    },
    "search": {"algorithm": "random", "trials": 5},
}


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "obj.py").write_text("import math\n\ndef f(params):\n    return 1.0\n")
    (tmp_path / "model.py").write_text("import keras_is_not_imported_by_validation\n"
                                       "def build_model(params):\n    pass\n")
    __import__("numpy").savez(tmp_path / "train.npz", features=[[0.0]], labels=[0])
    return tmp_path


def write(folder: Path, data, name="spec.yaml") -> Path:
    path = folder / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def changed(edit) -> dict:
    data = copy.deepcopy(GOOD)
    edit(data)
    return data


def error_of(path: Path, overrides=None) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(path, overrides)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message[len(f"{path}: "):]


# ----------------------------------------------------------------------------- good specs
def test_defaults_are_filled_in(folder):
    spec = load_spec(write(folder, GOOD))
    assert spec.study.name == "demo" and spec.study.description == ""
    assert spec.storage is None
    assert spec.objective.function == f"{folder / 'obj.py'}:f"
    assert spec.objective.metric == "value" and spec.objective.direction == "minimize"
    assert spec.space.names == ["lr", "layers", "act"]
    assert spec.search.seed == 0 and spec.search.target is None and spec.search.time_limit is None
    assert spec.search.max_initial_failures == 5 and spec.search.options == {}
    assert spec.training.epochs == 10 and spec.training.batch_size == 64
    assert spec.training.early_stopping is None and spec.training.pruning is None
    assert spec.resources.group_size == 1
    assert spec.base_dir == folder.resolve()


@pytest.mark.parametrize("name", ["my study", "x;rm -rf ~", "-x", "a/b", "../up", ".hidden",
                                  "a" * 256, ""])
def test_a_study_name_that_would_break_a_file_or_a_printed_command_is_refused(folder, name):
    """Names go into file names (artifacts, the recovery file) and into the resume command
    printed for copying: 'my study' printed `mpiopt resume my study`, '../up' made an
    artifact store outside its folder."""
    message = error_of(write(folder, changed(lambda d: d["study"].update(name=name))))
    assert message.startswith("study.name: ")
    assert any(why in message for why in ("letters, digits", "must not be empty", "at most 255"))


@pytest.mark.parametrize("name", ["étude_2", "run-1.5", "_tmp", "CMS2026"])
def test_a_study_name_of_letters_digits_and_punctuation_that_files_take_is_kept(folder, name):
    assert load_spec(write(folder, changed(lambda d: d["study"].update(name=name)))).study.name == name


def test_algorithm_options_get_defaults(folder):
    spec = load_spec(write(folder, changed(lambda d: d["search"].update(algorithm="bayesian"))))
    assert spec.search.options["estimator"] == "GP" and spec.search.options["initial_points"] == 10
    spec = load_spec(write(folder, changed(lambda d: d["search"].update(
        algorithm="evolutionary", evolutionary={"population": 8, "mode": "generational"}))))
    assert spec.search.options["population"] == 8 and spec.search.options["tournament"] == 5


@pytest.mark.parametrize("algorithm", ["bayesian", "evolutionary", "random", "tpe", "cmaes"])
def test_option_defaults_match_the_searchers(folder, algorithm):
    """The spec fills in each algorithm's options without importing the searcher (which
    costs seconds per rank); this keeps the two tables of defaults in step."""
    if algorithm in ("tpe", "cmaes"):
        from mpiopt.search import optuna_samplers

        cls = {"tpe": optuna_samplers.TPESearcher, "cmaes": optuna_samplers.CmaEsSearcher}[algorithm]
        defaults = {k: v for k, v in cls.defaults.items() if k != "parallel"}
    else:
        module = pytest.importorskip(f"mpiopt.search.{algorithm}")
        defaults = getattr(module, "DEFAULTS", {})
    spec = load_spec(write(folder, changed(lambda d: d["search"].update(algorithm=algorithm))))
    assert spec.search.options == defaults


def test_the_default_algorithm_is_auto(folder):
    assert load_spec(write(folder, changed(lambda d: d["search"].pop("algorithm", None)))) \
        .search.algorithm == "auto"


def test_resolved_dict_round_trips(folder):
    data = changed(lambda d: d.update(training={"early_stopping": {"patience": 2}, "pruning": True,
                                                "kfold": 3}))
    spec = load_spec(write(folder, data))
    resolved = spec.to_dict()
    assert yaml.safe_load(yaml.safe_dump(resolved)) == resolved
    again = Spec.from_dict(resolved)
    assert again.to_dict() == resolved
    assert again.fingerprint() == spec.fingerprint()
    assert Spec.from_text(spec.to_yaml()).to_dict() == resolved
    assert spec.training.pruning.pruner == "median" and spec.training.early_stopping.patience == 2


def test_fingerprint_covers_space_and_objective_only(folder):
    base = load_spec(write(folder, GOOD)).fingerprint()
    budget = changed(lambda d: d["search"].update(trials=50, seed=3))
    assert load_spec(write(folder, budget)).fingerprint() == base
    bounds = changed(lambda d: d["search_space"]["layers"].update(high=5))
    other = load_spec(write(folder, bounds))
    assert other.fingerprint() != base
    assert load_spec(write(folder, GOOD)).diff(other) == [
        "changed layers: integer [1, 4] uniform -> integer [1, 5] uniform"]
    direction = changed(lambda d: d["objective"].update(direction="maximize"))
    assert load_spec(write(folder, direction)).fingerprint() != base


def test_durations_and_yaml_exponents(folder):
    text = textwrap.dedent("""
        study: {name: t}
        objective: {function: obj.py:f}
        search_space: {lr: {type: real, low: 1e-5, high: 1E-1, prior: log-uniform}}
        search: {trials: 3, time_limit: 1h30m, target: -2}
    """)
    spec = load_spec(write(folder, text))
    assert spec.space["lr"].low == 1e-5 and spec.space["lr"].high == 0.1
    assert spec.search.time_limit == 5400.0 and spec.search.target == -2.0
    for given, seconds in [("90s", 90), ("10m", 600), ("2h", 7200), (45, 45), ("1.5h", 5400)]:
        spec = load_spec(write(folder, changed(lambda d: d["search"].update(time_limit=given))))
        assert spec.search.time_limit == seconds


def test_categorical_shorthand_and_choice_types(folder):
    data = changed(lambda d: d["search_space"].update(
        opt=["adam", "sgd"], flag={"type": "categorical", "choices": [True, False]},
        k={"type": "categorical", "choices": [3, 5.5, "same"]}))
    spec = load_spec(write(folder, data))
    assert spec.space["opt"].choices == ("adam", "sgd")
    assert spec.space["flag"].choices == (True, False)
    assert spec.space["k"].choices == (3, 5.5, "same")


def test_model_objective_is_checked_without_importing(folder):
    data = changed(lambda d: d.update(objective={"model": "model.py:build_model",
                                                 "data": {"npz": "train.npz"}}))
    spec = load_spec(write(folder, data))
    assert spec.objective.metric == "val_loss" and spec.objective.function is None
    assert spec.objective.data.npz == [str(folder.resolve() / "train.npz")]
    assert "keras_is_not_imported_by_validation" not in sys.modules


@pytest.mark.parametrize("path", ["examples/branin/spec.yaml", "examples/mixed/spec.yaml"])
def test_example_specs_validate(path):
    spec = load_spec(ROOT / path)
    assert len(spec.space) >= 2
    fn = load_callable(spec.objective.function, spec.base_dir)
    result = fn(spec.space.sample(__import__("numpy").random.default_rng(0)))
    value = result[spec.objective.metric] if isinstance(result, dict) else result
    assert isinstance(value, float)


def test_branin_example_is_as_briefed():
    spec = load_spec(ROOT / "examples/branin/spec.yaml")
    assert (spec.search.algorithm, spec.search.trials, spec.resources.group_size) == ("bayesian", 40, 1)


def test_mixed_example_has_its_optimum_inside():
    spec = load_spec(ROOT / "examples/mixed/spec.yaml")
    module = load_callable(spec.objective.function, spec.base_dir)
    best = sys.modules[module.__module__].BEST
    assert spec.space.contains(best)
    assert module(best)["cost"] == 0.0
    kinds = {type(d).__name__ for d in spec.space}
    assert kinds == {"Real", "Integer", "Categorical"}


@pytest.mark.parametrize("name", ["optimizer", "dense", "conv"])
def test_shipped_searchspaces_include(folder, name):
    assert (shipped_searchspaces() / f"{name}.yaml").is_file()
    data = changed(lambda d: d.update(search_space={"include": name}))
    spec = load_spec(write(folder, data))
    assert len(spec.space) >= 4


# ----------------------------------------------------------------------------- includes
def test_includes_compose_and_inline_entries_override(folder):
    write(folder, {"width": {"type": "integer", "low": 2, "high": 9}}, "mine.yaml")
    data = changed(lambda d: d.update(search_space={
        "include": ["optimizer", "mine.yaml"],
        "learning_rate": {"type": "real", "low": 0.01, "high": 0.5},
        "momentum": None,
        "extra": ["a", "b"],
    }))
    spec = load_spec(write(folder, data))
    assert "momentum" not in spec.space.names
    assert spec.space["learning_rate"].high == 0.5 and spec.space["learning_rate"].prior == "uniform"
    assert spec.space["width"].high == 9
    assert spec.space.names[-1] == "extra"
    assert "include" not in spec.to_dict()["search_space"]


def test_unknown_include_suggests(folder):
    path = write(folder, changed(lambda d: d.update(search_space={"include": "optimiser"})))
    message = error_of(path)
    assert message.startswith("search_space.include: unknown search space 'optimiser'")
    assert "did you mean 'optimizer'?" in message


def test_error_in_included_file_names_that_file(folder):
    bad = write(folder, {"width": {"type": "integer", "low": 9, "high": 2}}, "bad_space.yaml")
    path = write(folder, changed(lambda d: d.update(search_space={"include": "bad_space"})))
    with pytest.raises(SpecError, match=rf"^{bad}: width.low: low \(9\) must be less than high"):
        load_spec(path)


# ----------------------------------------------------------------------------- overrides
def test_overrides(folder):
    path = write(folder, GOOD)
    overrides = parse_overrides(["search.trials=12", "search_space.lr.high=0.5",
                                 "training.shuffle=false", "study.description=a b",
                                 "search.bayesian.estimator=RF"])
    assert overrides["search.trials"] == 12 and overrides["training.shuffle"] is False
    spec = load_spec(path, overrides)
    assert spec.search.trials == 12 and spec.space["lr"].high == 0.5
    assert spec.training.shuffle is False and spec.study.description == "a b"


def test_override_reaches_included_parameter(folder):
    path = write(folder, changed(lambda d: d.update(search_space={"include": "dense"})))
    spec = load_spec(path, {"search_space.units.high": 2048, "search_space.include": ["dense", "conv"]})
    assert spec.space["units"].high == 2048 and "filters" in spec.space.names


def test_bad_overrides(folder):
    path = write(folder, GOOD)
    assert error_of(path, {"search.trails": 3}) == "search.trails: unknown field; did you mean 'trials'?"
    assert error_of(path, {"search.trials": 0}) == "search.trials: must be at least 1, got 0"
    assert "is not a mapping" in error_of(path, {"search.trials.x": 1})
    with pytest.raises(SpecError, match="NAME=VALUE"):
        parse_overrides(["trials"])


# ----------------------------------------------------------------------------- bad specs
def _set(path, value):
    def edit(d):
        node = d
        keys = path.split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return edit


def _drop(path):
    def edit(d):
        node = d
        keys = path.split(".")
        for key in keys[:-1]:
            node = node[key]
        del node[keys[-1]]
    return edit


BAD = [
    # unknown keys, with the closest valid one
    (_set("serach", {}), "serach: unknown field; did you mean 'search'?"),
    (_set("search.trails", 3), "search.trails: unknown field; did you mean 'trials'?"),
    (_set("search_space.lr.pior", "uniform"), "search_space.lr.pior: unknown field; did you mean 'prior'?"),
    (_set("objective.direction_", "maximize"), "objective.direction_: unknown field; did you mean 'direction'?"),
    (_set("training.epoch", 3), "training.epoch: unknown field; did you mean 'epochs'?"),
    (_set("search.bayesian.n_initial", 3), "search.bayesian.n_initial: unknown field; did you mean 'initial_points'?"),
    (_set("search.bayesian.xyz", 3), "search.bayesian.xyz: unknown field; expected one of: estimator, acquisition,"),
    (_set("resources.gruop_size", 2), "resources.gruop_size: unknown field; did you mean 'group_size'?"),
    # wrong types (bool is not an int)
    (_set("search.trials", True), "search.trials: expected an integer, got true (a boolean)"),
    (_set("search.trials", "ten"), "search.trials: expected an integer, got 'ten'"),
    (_set("search.trials", 2.5), "search.trials: expected an integer, got 2.5"),
    (_set("search.seed", -1), "search.seed: must be at least 0"),
    (_set("resources.group_size", False), "resources.group_size: expected an integer"),
    (_set("study.name", 12), "study.name: expected a string, got 12"),
    (_set("study", "demo"), "study: expected a mapping, got 'demo'"),
    (_set("search_space.layers.low", True), "search_space.layers.low: expected an integer, got True"),
    (_set("search_space.layers.high", 4.5), "search_space.layers.high: expected an integer, got 4.5"),
    (_set("search_space.lr.high", "1"), "search_space.lr.high: expected a number, got '1'"),
    (_set("search_space.lr", 0.1), "search_space.lr: expected a mapping with 'type'"),
    (_set("search_space.lr.type", "float"), "search_space.lr.type: expected real, integer or categorical, got 'float'"),
    (_set("search_space.lr.prior", "log"), "search_space.lr.prior: expected one of uniform, log-uniform, got 'log'"),
    (_set("search_space", ["lr"]), "search_space: expected a mapping of parameter name -> definition"),
    (_set("search.algorithm", "grid"), "search.algorithm: expected one of auto, bayesian, cmaes, evolutionary, pbt, random, tpe, got 'grid'"),
    (_set("objective.direction", "down"), "objective.direction: expected one of minimize, maximize"),
    (_set("search.target", "low"), "search.target: expected a finite number, got 'low'"),
    (_set("search.time_limit", "soon"), "search.time_limit: expected seconds or a duration"),
    (_set("search.time_limit", 0), "search.time_limit: must be a positive duration"),
    (_set("training.shuffle", "yes please"), "training.shuffle: expected true or false"),
    (_set("training.holdout", 1.0), "training.holdout: must be in (0.0, 1.0), got 1.0"),
    (_set("training.mode", "sync"), "training.mode: expected one of allreduce, downpour, easgd"),
    (_set("training.pruning", {"pruner": "hyperband"}), "training.pruning.pruner: expected one of median, asha"),
    (_set("training.early_stopping", {"patience": 0}), "training.early_stopping.patience: must be at least 1"),
    (_set("training.early_stopping", 3), "training.early_stopping: expected a mapping, true or null, got 3"),
    (_set("search.evolutionary", {"crossover": 1.5}), "search.evolutionary.crossover: must be in [0.0, 1.0]"),
    (_set("search.evolutionary", {"population": 4, "tournament": 5}), "search.evolutionary.tournament: must not exceed population"),
    (_set("search.evolutionary", {"cma": True}), "search.evolutionary.cma: CMA-ES needs an all-real search space"),
    (_set("search.bayesian", {"estimator": "gp"}), "search.bayesian.estimator: expected one of GP, RF, ET, GBRT, got 'gp'"),
    # missing required fields
    (_drop("study"), "study: required field is missing"),
    (_drop("study.name"), "study.name: required field is missing"),
    (_drop("search.trials"), "search.trials: required field is missing"),
    (_drop("search_space"), "search_space: required field is missing"),
    (_drop("objective"), "objective: required field is missing"),
    (_drop("objective.function"), "objective.function: required field is missing (or give 'model' and 'data')"),
    (_drop("search_space.lr.high"), "search_space.lr.high: required field is missing"),
    (_drop("search_space.lr.type"), "search_space.lr.type: required field is missing"),
    (_set("search_space.act", {"type": "categorical"}), "search_space.act.choices: required field is missing"),
    (_set("study", None), "study: required section is empty"),
    (_set("search_space", {}), "search_space: expected at least one parameter"),
    # bounds and choices
    (_set("search_space.layers.low", 4), "search_space.layers.low: low (4) must be less than high (4)"),
    (_set("search_space.lr.low", 2.0), "search_space.lr.low: low (2.0) must be less than high (1.0)"),
    (_set("search_space.lr.low", 0.0), "search_space.lr.low: a log-uniform prior needs low > 0, got 0.0"),
    (_set("search_space.layers.prior", "log-uniform") , None),  # fine: 1..4 on a log scale
    (_set("search_space.act.choices", []), "search_space.act.choices: expected at least one choice"),
    (_set("search_space.act.choices", ["a", "b", "a"]), "search_space.act.choices[2]: duplicate choice 'a'"),
    (_set("search_space.act.choices", [1, True]), "search_space.act.choices[1]: duplicate choice True"),
    (_set("search_space.act.choices", "relu"), "search_space.act.choices: expected a list, got 'relu'"),
    (_set("search_space.act.choices", [None]), "search_space.act.choices[0]: expected a string, number or boolean"),
    (_set("search_space.2x", {"type": "integer", "low": 1, "high": 2}), "search_space.2x: a parameter name must be an identifier"),
    # trials
    (_set("search.trials", 0), "search.trials: must be at least 1, got 0"),
    (_set("search.trials", -5), "search.trials: must be at least 1, got -5"),
    # file.py:name references
    (_set("objective.function", "missing.py:f"), "objective.function: file not found: "),
    (_set("objective.function", "obj.py:g"), "objective.function: obj.py does not define 'g'"),
    (_set("objective.function", "obj.py"), "objective.function: expected 'file.py:name', got 'obj.py'"),
    (_set("objective.function", "obj:f"), "objective.function: expected 'file.py:name'"),
    (_set("objective.model", "model.py:build_model"), "objective: give either 'function' or 'model'"),
    (_set("objective.data", {"npz": "train.npz"}), "objective.data: is only used with 'model'"),
]


@pytest.mark.parametrize("edit, expected", BAD, ids=[str(e) for _, e in BAD])
def test_bad_spec(folder, edit, expected):
    path = write(folder, changed(edit))
    if expected is None:
        load_spec(path)
        return
    assert error_of(path).startswith(expected)


MODEL = {"model": "model.py:build_model"}
BAD_MODEL = [
    ({}, "objective.data: required field is missing"),
    ({"data": {}}, "objective.data: expected a 'loader' (file.py:name) or data files"),
    ({"data": {"npz": "nope.npz"}}, "objective.data.npz: no file matches 'nope.npz'"),
    ({"data": {"hdf5": ["shards/*.h5"]}}, "objective.data.hdf5: no file matches 'shards/*.h5'"),
    ({"data": {"npz": 3}}, "objective.data.npz: expected a path or a list of paths, got 3"),
    ({"data": {"loader": "obj.py:load"}}, "objective.data.loader: obj.py does not define 'load'"),
    ({"data": {"loader": "obj.py:f", "npz": "train.npz"}}, "objective.data.loader: give either a 'loader'"),
    ({"data": {"npz": "train.npz", "lables": "y"}}, "objective.data.lables: unknown field; did you mean 'labels'?"),
    ({"model": "model.py:build"}, "objective.model: model.py does not define 'build'"),
]


@pytest.mark.parametrize("extra, expected", BAD_MODEL, ids=[e for _, e in BAD_MODEL])
def test_bad_model_objective(folder, extra, expected):
    path = write(folder, changed(lambda d: d.update(objective={**MODEL, **extra})))
    assert error_of(path).startswith(expected)


@pytest.mark.parametrize("text, expected", [
    ("study: {name: x\nsearch: {}\n", "line 2, column 7: invalid YAML"),
    ("study:\n  name: a\n name: b\n", "line 3, column 2: invalid YAML"),
    ("study:\n\tname: a\n", "line 2, column 1: invalid YAML"),
    ("study: {name: a}\nstudy: {name: b}\n", "line 2, column 1: invalid YAML: duplicate key 'study'"),
    ("- study\n- search\n", "(top level): expected a mapping of sections"),
    ("just text\n", "(top level): expected a mapping of sections (study, objective, ...), got 'just text'"),
    ("", "(top level): the spec is empty"),
    ("# only a comment\n", "(top level): the spec is empty"),
])
def test_unreadable_yaml(folder, text, expected):
    assert error_of(write(folder, text)).startswith(expected)


def test_missing_spec_file(folder):
    with pytest.raises(SpecError, match="nope.yaml: cannot read the spec: No such file"):
        load_spec(folder / "nope.yaml")


# ----------------------------------------------------------------------------- references
def test_check_ref_sees_top_level_names_without_running_code(folder):
    code = textwrap.dedent("""
        raise SystemExit("never run")
        from os.path import join as joined
        try:
            import numpy as np
        except ImportError:
            np = None
        if True:
            def inside():
                pass
        lam = lambda p: 0.0
        class Objective:
            pass
    """)
    (folder / "names.py").write_text(code)
    for name in ("joined", "np", "inside", "lam", "Objective"):
        assert check_ref(f"names.py:{name}", folder) == f"{folder.resolve() / 'names.py'}:{name}"
    with pytest.raises(SpecError, match="names.py does not define 'join'"):
        check_ref("names.py:join", folder)
    (folder / "broken.py").write_text("def f(:\n")
    with pytest.raises(SpecError, match=r"broken.py line 1: invalid syntax|broken.py line 1:"):
        check_ref("broken.py:f", folder)


def test_load_callable(folder):
    fn = load_callable("obj.py:f", folder)
    assert fn({}) == 1.0
    assert load_callable(str(folder / "obj.py") + ":f") is fn  # imported once per process
    other = folder / "sub"
    other.mkdir()
    (other / "obj.py").write_text("def f(params):\n    return 2.0\n")
    assert load_callable("sub/obj.py:f", folder)({}) == 2.0  # same file name, own module
    (folder / "boom.py").write_text("x = 1 / 0\n")
    with pytest.raises(SpecError, match="importing boom.py failed: ZeroDivisionError: division by zero"):
        load_callable("boom.py:x", folder)
    (folder / "val.py").write_text("x = 3\n")
    with pytest.raises(SpecError, match="'x' in val.py is not callable"):
        load_callable("val.py:x", folder)
    with pytest.raises(SpecError, match="obj.py does not define 'nope'"):
        load_callable("obj.py:nope", folder)


def test_a_user_file_is_imported_under_the_name_its_folder_gives_it(tmp_path):
    """So that a process started with this sys.path (a spawned pool's worker) imports the
    same module by that name; a name that finds another module gets one of its own."""
    (tmp_path / "nameme_objective.py").write_text("def f(params):\n    return 1.0\n")
    fn = load_callable("nameme_objective.py:f", tmp_path)
    assert fn.__module__ == "nameme_objective"
    assert __import__("nameme_objective").f is fn
    (tmp_path / "json.py").write_text("def f(params):\n    return 2.0\n")
    shadowed = load_callable("json.py:f", tmp_path)
    assert shadowed({}) == 2.0 and shadowed.__module__.startswith("mpiopt_user_json_")
    assert sys.modules["json"].__name__ == "json" and hasattr(sys.modules["json"], "dumps")


# ----------------------------------------------------------------------------- the CLI
def cli(*args, cwd=None):
    return subprocess.run([str(MPIOPT), "validate", *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def test_cli_rejects_a_bad_spec_with_one_line(folder):
    path = write(folder, changed(_set("search.trails", 3)), "bad.yaml")
    proc = cli(path, cwd=folder)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == f"mpiopt: error: {path}: search.trails: unknown field; did you mean 'trials'?\n"
    assert not list(folder.glob("*.db"))  # nothing written


TOO_WIDE = ("search_space.lr: [-1e+308, 1e+308] is too wide: high - low and high + low must "
            "stay within ±1.798e+308, the largest float")


def test_a_range_no_searcher_computes_with_ends_the_job_at_once_with_one_line(folder):
    """Issue 65: -1e308..1e308 passed validate, then tpe and cmaes died of an OverflowError
    and bayesian of a NaN in its model, exit 1, with the study left behind."""
    data = changed(_set("search_space.lr", {"type": "real", "low": -1.0e308, "high": 1.0e308}))
    data["search"]["algorithm"] = "tpe"
    path = write(folder, data)
    proc = mpiopt("search", path, "--storage", f"sqlite:///{folder / 'r.db'}", np=3,
                  cwd=folder, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "" and proc.stderr == f"mpiopt: error: {path}: {TOO_WIDE}\n"
    assert not (folder / "r.db").exists()         # nothing written


@pytest.mark.parametrize("entry, expected", [
    ({"type": "integer", "low": 0, "high": 10**23},
     "search_space.lr.high: 100000000000000000000000 is beyond ±2**53 (9007199254740992)"),
    ({"type": "real", "low": 5e-324, "high": 1e-323},
     "search_space.lr: [5e-324, 1e-323] is too narrow: high - low (4.941e-324) must be at "
     "least 2.225e-308, the smallest normal float"),
])
def test_validate_names_the_field_and_the_limit_of_a_range_searchers_cannot_take(folder, entry,
                                                                                 expected):
    path = write(folder, changed(_set("search_space.lr", entry)))
    proc = cli(path, cwd=folder)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"mpiopt: error: {path}: {expected}")
    assert len(proc.stderr.splitlines()) == 1


def test_cli_rejects_broken_yaml_and_import_errors(folder):
    proc = cli(write(folder, "study: [\n", "broken.yaml"))
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "line 2" in proc.stderr and "Traceback" not in proc.stderr
    (folder / "obj.py").write_text("import no_such_module_here\ndef f(p):\n    return 0.0\n")
    proc = cli(write(folder, GOOD))
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "importing obj.py failed: ModuleNotFoundError" in proc.stderr


def test_cli_prints_the_resolved_spec(folder):
    path = write(folder, GOOD)
    proc = cli(path, "--set", "search.trials=9", "--set", "search_space.lr.high=0.5")
    assert proc.returncode == 0, proc.stderr
    printed = yaml.safe_load(proc.stdout)
    expected = load_spec(path, {"search.trials": 9, "search_space.lr.high": 0.5}).to_dict()
    assert printed == expected
    assert printed["search"]["trials"] == 9 and printed["training"]["epochs"] == 10


@pytest.mark.parametrize("path", ["examples/branin/spec.yaml", "examples/mixed/spec.yaml",
                                  "examples/jets/pbt.yaml", "examples/jets/torch.yaml"])
def test_cli_accepts_the_examples(path):
    proc = cli(ROOT / path)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)["study"]["name"]


def test_a_spec_and_objective_with_non_ascii_text_load_in_any_locale(tmp_path):
    """YAML and Python files are UTF-8 whatever the locale says: under a C locale without
    Python's UTF-8 mode (LC_ALL=C PYTHONUTF8=0, an old cluster's shell) a spec whose
    description named a µ was refused ("'ascii' codec can't decode"), and under a Latin-1
    locale its text would have been stored garbled."""
    from conftest import BIN, subprocess_env

    (tmp_path / "f.py").write_text('# µ-jets\ndef f(p):\n    """Müon."""\n    return p["x"]\n',
                                   encoding="utf-8")
    (tmp_path / "s.yaml").write_text(
        'study: {name: u, description: "Müon jets, µ = 1"}\n'
        "objective: {function: f.py:f}\n"
        "search_space: {x: {type: real, low: 0.0, high: 1.0}}\n"
        "search: {algorithm: random, trials: 2}\n", encoding="utf-8")
    proc = subprocess.run([str(BIN / "mpiopt"), "validate", "s.yaml"], cwd=tmp_path,
                          capture_output=True, timeout=60,
                          env={**subprocess_env(), "LC_ALL": "C", "PYTHONUTF8": "0"})
    assert proc.returncode == 0, proc.stderr
    assert b'"M\\xFCon jets, \\xB5 = 1"' in proc.stdout, proc.stdout   # (YAML's escapes)
