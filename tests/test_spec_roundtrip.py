"""The resolved spec loads back as the same spec: on every MPI rank (rank 0 sends it) and
from the database on resume. A spec that did not (a null loader) hung npz/HDF5 studies
under mpirun and broke every resume of them."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import EXAMPLES, ROOT
from mpiopt.errors import SpecError
from mpiopt.spec import Spec, load_spec, stored
from mpiopt.study.opening import spec_text

SEARCHSPACES = sorted((ROOT / "searchspaces").glob("*.yaml"))


def roundtrip(spec: Spec) -> Spec:
    again = Spec.from_dict(spec.to_dict(), source="<from rank 0>")
    assert again.to_dict() == spec.to_dict() and again.fingerprint() == spec.fingerprint()
    kept = stored(spec_text(spec)).spec      # the one reader of a study's stored spec
    assert kept is not None and kept.fingerprint() == spec.fingerprint()
    return again


def test_a_stored_text_that_makes_no_spec_is_read_as_far_as_it_goes():
    """A stored text that makes no Spec (another version's, a database written by hand)
    gives its fields as written and no Spec; one that is no mapping, or no YAML, gives
    nothing, and a reader of the whole gets one line naming <stored>."""
    part = stored("study: {name: s}\nsearch: {algorithm: pbt, trials: 10}\n")
    assert part.spec is None and part.get("search", "trials") == 10
    assert part.section("objective") == {} and part.data["study"] == {"name": "s"}
    for text in ("- a list", "x: [", None):
        assert stored(text).get("search", "trials") is None and stored(text).spec is None
    with pytest.raises(SpecError, match="<stored>"):
        stored("- a list").data


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*/spec.yaml")), ids=lambda p: p.parent.name)
def test_every_example_round_trips(path, tmp_path):
    data = yaml.safe_load(path.read_text())
    spec = Spec.from_dict(data, source=str(path), base_dir=path.parent, check_files=False)
    again = Spec.from_dict(spec.to_dict(), check_files=False)
    assert again.to_dict() == spec.to_dict() and again.fingerprint() == spec.fingerprint()


@pytest.mark.parametrize("space", SEARCHSPACES, ids=lambda p: p.stem)
def test_every_shipped_search_space_round_trips(space, tmp_path):
    (tmp_path / "f.py").write_text("def f(params):\n    return 0.0\n")
    spec_file = tmp_path / "s.yaml"
    spec_file.write_text(yaml.safe_dump({
        "study": {"name": "s"}, "objective": {"function": "f.py:f"},
        "search_space": {"include": [space.stem]}, "search": {"trials": 3}}))
    roundtrip(load_spec(spec_file))


def _model_spec(tmp_path: Path, data: dict) -> Spec:
    (tmp_path / "model.py").write_text("def build(params):\n    return None\n")
    (tmp_path / "loader.py").write_text("def load():\n    return None\n")
    import numpy as np

    import h5py

    for name in ("a.npz", "b.npz", "va.npz"):     # real files: the spec opens their headers
        np.savez(tmp_path / name, features=np.zeros((2, 3)), labels=np.arange(2))
    for name in ("x1.h5", "x2.h5", "vx.h5"):
        with h5py.File(tmp_path / name, "w") as h5:
            for x_name, y_name in (("features", "labels"), ("jets", "is_w")):
                h5[x_name], h5[y_name] = np.zeros((2, 3)), np.arange(2)
    spec_file = tmp_path / "s.yaml"
    spec_file.write_text(yaml.safe_dump({
        "study": {"name": "s"}, "objective": {"model": "model.py:build", "data": data},
        "search_space": {"lr": {"type": "real", "low": 1e-4, "high": 1e-1, "prior": "log-uniform"}},
        "search": {"trials": 3, "trial_timeout": "10m", "grace": "1m", "max_attempts": 3},
        "training": {"epochs": 2, "kfold": 3}}))
    return load_spec(spec_file)


@pytest.mark.parametrize("data", [
    {"loader": "loader.py:load"},
    {"npz": "a.npz"},
    {"npz": ["a.npz", "b.npz"], "val_npz": "va.npz"},
    {"hdf5": ["x1.h5", "x2.h5"], "features": "jets", "labels": "is_w"},
    {"hdf5": "x*.h5", "val_hdf5": ["vx.h5"]},
], ids=["loader", "npz", "npz-lists-val", "hdf5-list-names", "hdf5-glob-val"])
def test_every_data_form_round_trips(tmp_path, data):
    spec = roundtrip(_model_spec(tmp_path, data))
    sent = spec.to_dict()["objective"]["data"]
    assert None not in sent.values() and [] not in sent.values()


def test_the_stored_spec_keeps_no_password(tmp_path):
    (tmp_path / "f.py").write_text("def f(params):\n    return 0.0\n")
    spec_file = tmp_path / "s.yaml"
    spec_file.write_text(yaml.safe_dump({
        "study": {"name": "s"}, "storage": "postgresql+psycopg://lab:hunter2@db.example/opt",
        "objective": {"function": "f.py:f"},
        "search_space": {"x": {"type": "real", "low": 0.0, "high": 1.0}}, "search": {"trials": 3}}))
    text = spec_text(load_spec(spec_file))
    assert "hunter2" not in text and "lab:***@db.example" in text


# ---- a generated corpus (property test) ----------------------------------------------------
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True)
FLOATS = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=32)


@st.composite
def dimensions(draw):
    kind = draw(st.sampled_from(["real", "integer", "categorical"]))
    if kind == "categorical":
        choices = draw(st.lists(st.one_of(st.integers(-50, 50), NAMES, st.booleans(), FLOATS),
                                min_size=1, max_size=5, unique=True))  # 0 == False: a duplicate
        return {"type": "categorical", "choices": choices}
    log = draw(st.booleans())
    if kind == "integer":
        low = draw(st.integers(1 if log else -1000, 1000))
        high = draw(st.integers(low + 1, low + 10_000))
    else:
        low = draw(st.floats(1e-6, 1e3) if log else FLOATS)
        high = low + draw(st.floats(1e-3, 1e6)) * max(1.0, abs(low))
    return {"type": kind, "low": low, "high": high,
            "prior": "log-uniform" if log else "uniform"}


@st.composite
def specs(draw):
    space = draw(st.dictionaries(NAMES, dimensions(), min_size=1, max_size=5))
    all_real = all(d["type"] == "real" for d in space.values())
    algorithm = draw(st.sampled_from(["random", "bayesian", "evolutionary"]))
    search = {"algorithm": algorithm, "trials": draw(st.integers(1, 10_000)),
              "seed": draw(st.integers(0, 2**31)),
              "max_attempts": draw(st.integers(1, 5))}
    for key, text in (("time_limit", "2h"), ("trial_timeout", "90s"), ("grace", "5m"),
                      ("target", draw(FLOATS))):
        if draw(st.booleans()):
            search[key] = text
    if algorithm == "bayesian":
        search["bayesian"] = {"estimator": draw(st.sampled_from(["GP", "RF", "ET", "GBRT"])),
                              "liar": draw(st.sampled_from(["mean", "min", "max", "believer"])),
                              "initial_points": draw(st.integers(1, 50))}
    elif algorithm == "evolutionary":
        population = draw(st.integers(2, 40))
        search["evolutionary"] = {
            "mode": draw(st.sampled_from(["steady_state", "generational"])),
            "population": population, "tournament": draw(st.integers(1, population)),
            "elitism": draw(st.integers(0, population - 1)),
            "crossover": draw(st.floats(0, 1)), "cma": all_real and draw(st.booleans())}
    objective = {"direction": draw(st.sampled_from(["minimize", "maximize"]))}
    training = None
    if draw(st.booleans()):
        objective["function"] = "f.py:f"
        objective["isolate"] = draw(st.booleans())
    else:
        objective["model"] = "model.py:build"
        objective["data"] = draw(st.sampled_from([
            {"loader": "loader.py:load"}, {"npz": ["a.npz", "b.npz"], "val_npz": "va.npz"},
            {"hdf5": "x*.h5", "features": "jets", "labels": "is_w"}]))
        objective["metric"] = draw(st.sampled_from(["val_loss", "val_accuracy", "val_auc"]))
        training = {"epochs": draw(st.integers(1, 500)), "batch_size": draw(st.integers(1, 4096)),
                    "kfold": draw(st.integers(1, 10)),
                    "mode": draw(st.sampled_from(["allreduce", "downpour", "easgd"]))}
        if draw(st.booleans()):
            training["early_stopping"] = {"patience": draw(st.integers(1, 20))}
        if draw(st.booleans()):
            training["pruning"] = {"pruner": draw(st.sampled_from(["median", "asha"]))}
    spec = {"study": {"name": draw(NAMES)}, "objective": objective, "search_space": space,
            "search": search, "resources": {"group_size": draw(st.integers(1, 8))}}
    if training:
        spec["training"] = training
    return spec


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    _model_spec(folder, {"npz": "a.npz"})
    (folder / "f.py").write_text("def f(params):\n    return 0.0\n")
    return folder


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=specs())
def test_a_generated_corpus_of_specs_round_trips(corpus_dir, data):
    spec = Spec.from_dict(data, source="<generated>", base_dir=corpus_dir)
    roundtrip(spec)
