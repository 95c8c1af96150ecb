"""Data in the shape physicists keep it (issue 61): ROOT files as TTrees or RNTuples,
per-object collections padded with a mask, event weights and a selection.

Files are written the way users write them, with uproot: `f["Events"] = {...}` (an
RNTuple) or `f.mktree(...)` then `extend` (a TTree), in several clusters. Every bad input
is refused in one line naming the file and the field."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from mpiopt.errors import DataError, SpecError
from mpiopt.spec import DataSpec
from mpiopt.training import data as D

sys.path.insert(0, str(Path(__file__).resolve().parent))

uproot = pytest.importorskip("uproot")
ak = pytest.importorskip("awkward")

FORMS = ["rntuple", "ttree"]


def events(n: int = 120, seed: int = 0) -> dict:
    """n events: jets with a list of particles each (signal: more, harder particles), a
    generator weight (a tenth of them negative), a label."""
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 2, n)
    count = rng.poisson(3 + 3 * label)
    flat = int(count.sum())
    pt = ak.unflatten(rng.exponential(10.0, flat).astype(np.float32), count)
    pt = pt * (1 + ak.values_astype(ak.broadcast_arrays(label, pt)[0], np.float32))
    eta = ak.unflatten(rng.normal(0.0, 1.5, flat).astype(np.float32), count)
    weight = np.where(rng.random(n) < 0.1, -0.5, 1.0) * rng.uniform(0.5, 1.5, n)
    return {"jet_pt": ak.to_numpy(ak.sum(pt, axis=1)).astype(np.float32),
            "jet_eta": rng.normal(0.0, 1.0, n).astype(np.float32),
            "n_part": count.astype(np.int32), "weight": weight.astype(np.float64),
            "label": label.astype(np.int64), "part_pt": pt, "part_eta": eta}


def write_events(path: Path, form: str, ev: dict, clusters: int = 3) -> Path:
    """ev in `clusters` pieces, as an RNTuple (uproot's default) or a TTree."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = len(ev["label"])
    cuts = np.linspace(0, n, clusters + 1).astype(int)
    pieces = [{k: v[a:b] for k, v in ev.items()} for a, b in zip(cuts[:-1], cuts[1:])]
    with uproot.recreate(path) as f:
        if form == "rntuple":
            f["Events"] = pieces[0]
        else:
            f.mktree("Events", {k: (str(ak.type(v).content) if isinstance(v, ak.Array)
                                    else v.dtype) for k, v in ev.items()})
            f["Events"].extend(pieces[0])
        for piece in pieces[1:]:
            f["Events"].extend(piece)
    return path


PARTICLES = {"branches": ["part_pt", "part_eta"], "length": 4, "sort_by": "part_pt"}


def data_spec(tmp_path: Path, form: str, parts=2, **fields) -> DataSpec:
    """A DataSpec over `parts` files of the form, read through the spec's own reader."""
    from mpiopt.spec import Spec

    files = [tmp_path / form / f"ev{i}.root" for i in range(parts)]
    for i, f in enumerate(files):
        if not f.exists():      # written once: a study refuses files changed under it
            write_events(f, form, events(120, seed=i))
    raw = {"study": {"name": "s"}, "search_space": {"lr": {"type": "real", "low": 0.1,
                                                           "high": 1.0}},
           "search": {"algorithm": "random", "trials": 1},
           "objective": {"model": "m.py:build", "data": {
               "root": [str(f) for f in files], "labels": "label", **fields}}}
    (tmp_path / "m.py").write_text("def build(params):\n    pass\n")
    return Spec.from_dict(raw, base_dir=tmp_path).objective.data


def reference(ev: dict, length: int, keep=None, order="descending",
              pad=0.0) -> tuple[np.ndarray, np.ndarray]:
    """(particles, mask) the rule gives, event by event in plain Python: sorted by pT
    (highest first; or lowest; or as stored: order None), padded with `pad` or cut."""
    rows, masks = [], []
    sign = {"descending": -1, "ascending": 1, None: 0}[order]
    for i in range(len(ev["label"])) if keep is None else keep:
        pt, eta = list(ev["part_pt"][i]), list(ev["part_eta"][i])
        order_ = sorted(range(len(pt)), key=lambda j: sign * pt[j])[:length]
        row = [[pt[j], eta[j]] for j in order_] + [[pad, pad]] * (length - len(order_))
        rows.append(row)
        masks.append([1.0] * len(order_) + [0.0] * (length - len(order_)))
    return np.array(rows, np.float32), np.array(masks, np.float32)


# ------------------------------------------------------------------ RNTuple and TTree
@pytest.mark.parametrize("in_memory", [True, False])
def test_an_rntuple_reads_as_the_same_ttree_does(tmp_path, in_memory):
    """uproot.recreate's default writes an RNTuple: it reads as a TTree of the same data
    does, in memory or streamed by cluster."""
    got = {}
    for form in FORMS:
        data = data_spec(tmp_path, form, features=["jet_pt", "jet_eta"], in_memory=in_memory)
        ds = D.load_data(data)
        got[form] = ds.x[np.arange(len(ds.x))], ds.y
    expected = np.concatenate([np.stack([events(120, i)["jet_pt"], events(120, i)["jet_eta"]], 1)
                               for i in range(2)])
    for form in FORMS:
        assert np.array_equal(got[form][0], expected)
        assert np.array_equal(got[form][1], np.concatenate([events(120, i)["label"]
                                                            for i in range(2)]))


def test_the_clusters_of_an_rntuple_are_its_blocks_when_streamed(tmp_path):
    from mpiopt.training.rootfiles import cluster_starts, events_of

    path = write_events(tmp_path / "e.root", "rntuple", events(90), clusters=3)
    with uproot.open(path) as f:
        assert cluster_starts(events_of(f, path, "Events")).tolist() == [0, 30, 60, 90]


@pytest.mark.parametrize("what,says", [
    ("histogram", "e.root: 'Events' is a TH1D, neither a TTree nor an RNTuple"),
    ("missing", "e.root: no tree or RNTuple 'Events' (has Jets)"),
])
def test_a_root_object_that_is_neither_is_named_in_one_line(tmp_path, what, says):
    from mpiopt.spec import load_spec

    with uproot.recreate(tmp_path / "e.root") as f:
        if what == "histogram":
            f["Events"] = np.histogram(np.arange(10.0))
        else:
            f["Jets"] = {"x": np.arange(5.0)}
    with pytest.raises(SpecError) as info:
        load_spec(_spec_file(tmp_path, {"root": str(tmp_path / "e.root"), "features": ["x"]}))
    assert says in str(info.value) and "\n" not in str(info.value)
    assert "AttributeError" not in str(info.value)


def _spec_file(tmp_path: Path, data: dict) -> Path:
    (tmp_path / "m.py").write_text("def build(params):\n    pass\n")
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({
        "study": {"name": "s"}, "objective": {"model": "m.py:build", "data": data},
        "search_space": {"lr": {"type": "real", "low": 1e-3, "high": 0.1}},
        "search": {"algorithm": "random", "trials": 1}}))
    return path


# ----------------------------------------------------------------------- collections
@pytest.mark.parametrize("form", FORMS)
def test_a_collection_is_sorted_padded_and_cut_with_its_mask(tmp_path, form):
    data = data_spec(tmp_path, form, parts=1, features=["jet_pt"],
                     collections={"particles": PARTICLES}, in_memory=True)
    ds = D.load_data(data)
    batch = ds.x[np.arange(len(ds.x))]
    assert sorted(batch) == ["features", "particles", "particles_mask"]
    particles, mask = reference(events(120, 0), 4)
    assert batch["particles"].dtype == np.float32 and batch["particles"].shape == (120, 4, 2)
    assert np.array_equal(batch["particles"], particles)
    assert np.array_equal(batch["particles_mask"], mask)
    counts = events(120, 0)["n_part"]
    assert (counts > 4).any() and (counts < 4).any()       # both cut and padded events


@pytest.mark.parametrize("order", ["ascending", None])
def test_a_collection_in_its_own_order_or_ascending_pads_with_its_value(tmp_path, order):
    settings = {**PARTICLES, "pad_value": -1.0, "length": 5}
    if order:
        settings["order"] = order
    else:
        del settings["sort_by"]
    ds = D.load_data(data_spec(tmp_path, "ttree", parts=1,
                               collections={"particles": settings}, in_memory=False))
    batch = ds.x[np.arange(len(ds.x))]
    particles, mask = reference(events(120, 0), 5, order=order, pad=-1.0)
    assert np.array_equal(batch["particles"], particles)
    assert np.array_equal(batch["particles_mask"], mask)


@pytest.mark.parametrize("form", FORMS)
def test_collections_stream_as_they_read_in_memory(tmp_path, form):
    fields = dict(features=["jet_pt"], collections={"particles": PARTICLES,
                                                    "leading": {"branches": ["part_eta"],
                                                                "length": 1, "mask": False}},
                  selection="n_part >= 2", weights="weight")
    memory = D.load_data(data_spec(tmp_path, form, in_memory=True, **fields))
    streamed = D.load_data(data_spec(tmp_path, form, in_memory=False, **fields))
    assert streamed.x.streams and not memory.x.streams
    idx = np.random.default_rng(3).permutation(len(memory.x))[:50]
    a, b = memory.x[idx], streamed.x[idx]
    assert sorted(a) == sorted(b) == ["features", "leading", "particles", "particles_mask"]
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert np.array_equal(memory.w, streamed.w) and np.array_equal(memory.y, streamed.y)


def test_a_collection_of_events_without_flat_features_is_its_own_input(tmp_path):
    ds = D.load_data(data_spec(tmp_path, "rntuple", parts=1,
                               collections={"particles": {**PARTICLES, "mask": False}}))
    assert sorted(ds.x[:3]) == ["particles"]


def _bad_collection(tmp_path, case):
    path = write_events(tmp_path / "e.root", "rntuple", events(30))
    coll = dict(PARTICLES)
    if case == "missing branch":
        coll["branches"] = ["part_pt", "part_phi"]
        return coll, "e.root: objective.data.collections.particles: RNTuple 'Events' has no " \
                     "field 'part_phi'"
    if case == "not jagged":
        coll["branches"] = ["part_pt", "jet_eta"]
        return coll, "e.root: objective.data.collections.particles: field 'jet_eta' is not jagged"
    assert path
    coll["length"] = 0
    return coll, "objective.data.collections.particles.length: must be at least 1"


BAD_COLLECTIONS = ["missing branch", "not jagged", "length below 1"]


@pytest.mark.parametrize("case", BAD_COLLECTIONS)
def test_a_bad_collection_is_refused_in_one_line_naming_the_file_and_field(tmp_path, case):
    from mpiopt.spec import load_spec

    coll, says = _bad_collection(tmp_path, case)
    with pytest.raises(SpecError) as info:
        load_spec(_spec_file(tmp_path, {"root": str(tmp_path / "e.root"), "labels": "label",
                                        "collections": {"particles": coll}}))
    assert says in str(info.value) and "\n" not in str(info.value)


def test_branches_of_a_collection_that_disagree_are_named_where_they_do(tmp_path):
    ev = events(60)
    ev["part_eta"] = ak.concatenate([ev["part_eta"][:50], ak.Array([[1.0] * 9] * 10)])
    path = write_events(tmp_path / "e.root", "ttree", ev)
    data = DataSpec(root=[str(path)], labels="label", features=None, in_memory=True,
                    collections=(_collection(PARTICLES),))
    first = next(i for i in range(50, 60) if ev["n_part"][i] != 9)
    with pytest.raises(DataError, match=rf"e.root: objective.data.collections.particles: "
                                        rf"branches 'part_pt' and 'part_eta' hold "
                                        rf"{ev['n_part'][first]} and 9 values in entry {first}"):
        D.load_data(data)


def _collection(settings: dict):
    from mpiopt.spec._types import CollectionSpec

    return CollectionSpec(name="particles", **{**settings, "branches": tuple(settings["branches"])})


@pytest.mark.parametrize("setting,says", [
    ({"hdf5": "x.h5", "root": [], "collections": {"p": PARTICLES}},
     "collections are read from ROOT files"),
    ({"collections": {"features": PARTICLES}}, "'features' gives the input 'features'"),
    ({"collections": {"a": PARTICLES, "a_mask": PARTICLES}}, "which another input has"),
    ({"collections": {"2jets": PARTICLES}}, "cannot name a model input"),
    ({"collections": {"p": {**PARTICLES, "branches": []}}}, "non-empty list of branch names"),
    ({"collections": {"p": {**PARTICLES, "order": "up"}}}, "expected one of descending"),
    ({"loader": "m.py:build", "root": [], "weights": "w"}, "a loader returns its own arrays"),
    ({"selection": "pt >"}, "objective.data.selection: does not parse"),
    ({"selection": "eval(pt)"}, "objective.data.selection: 'eval' is not a function"),
])
def test_what_the_spec_alone_shows_wrong_is_refused_when_it_is_read(tmp_path, setting, says):
    from mpiopt.spec import Spec

    data = {"root": ["e.root"], "labels": "label", **setting}
    raw = {"study": {"name": "s"}, "objective": {"model": "m.py:build", "data": data},
           "search_space": {"lr": {"type": "real", "low": 0.1, "high": 1.0}},
           "search": {"algorithm": "random", "trials": 1}}
    with pytest.raises(SpecError) as info:
        Spec.from_dict(raw, base_dir=tmp_path, check_files=False)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_collections_round_trip_through_the_resolved_spec(tmp_path):
    from mpiopt.spec import Spec

    data = data_spec(tmp_path, "rntuple", parts=1, collections={"particles": PARTICLES},
                     weights="weight", balance_classes=True, selection="n_part > 0")
    raw = {"study": {"name": "s"}, "objective": {"model": str(tmp_path / "m.py") + ":build",
                                                 "data": {}},
           "search_space": {"lr": {"type": "real", "low": 0.1, "high": 1.0}},
           "search": {"algorithm": "random", "trials": 1}}
    from mpiopt.spec._resolved import _objective_dict
    from mpiopt.spec._types import ObjectiveSpec

    raw["objective"] = _objective_dict(ObjectiveSpec(model=raw["objective"]["model"], data=data))
    again = Spec.from_dict(raw, base_dir=tmp_path).objective.data
    assert again == data and again.features is None


# ----------------------------------------------------------------------- weights
def test_weights_follow_the_stated_rule():
    from mpiopt.training.weights import scaled

    y = np.array([0, 0, 0, 1, 1, 0])
    w = np.array([1.0, 2.0, -1.0, 3.0, 1.0, 2.0])
    plain = scaled(w, y, False, "f")
    assert plain.dtype == np.float32 and plain.mean() == pytest.approx(1.0)
    assert np.allclose(plain, w * 6 / w.sum()) and (plain < 0).sum() == 1   # kept negative
    balanced = scaled(w, y, True, "f")
    assert balanced[y == 0].sum() == pytest.approx(balanced[y == 1].sum())
    assert balanced.mean() == pytest.approx(1.0)
    counted = scaled(None, y, True, "f")                # without weights: 1 per event
    assert counted[y == 0] == pytest.approx([0.75] * 4) and counted[y == 1] == pytest.approx([1.5] * 2)
    assert scaled(None, y, False, "f") is None


@pytest.mark.parametrize("w,balance,says", [
    ([1.0, -2.0, 0.5, 0.2], False, "objective.data.weights: the weights sum to -0.3"),
    ([1.0, 1.0, -0.5, 0.2], True, "objective.data.balance_classes: the weights of class 1 sum to -0.3"),
])
def test_weights_that_cannot_be_scaled_are_refused_naming_the_files(w, balance, says):
    from mpiopt.training.weights import scaled

    with pytest.raises(DataError, match=f"^a.root \\(and 1 more file\\): {says}"):
        scaled(np.array(w), np.array([0, 0, 1, 1]), balance, "a.root (and 1 more file)")


def test_balance_needs_classes(tmp_path):
    from mpiopt.training.weights import scaled

    with pytest.raises(DataError, match="the labels are not classes"):
        scaled(None, np.linspace(0, 1, 500), True, "f")


def _bad_weights(tmp_path, case):
    ev = events(30)
    if case == "weights NaN":
        ev["weight"][7] = np.nan
        ev["weight"][9] = np.inf
        write_events(tmp_path / "e.root", "ttree", ev)
        return {"root": str(tmp_path / "e.root"), "features": ["jet_pt"], "labels": "label",
                "weights": "weight"}, \
            "e.root: objective.data.weights: 'weight' holds 2 NaN or infinite value(s), " \
            "the first in event 7"
    import h5py

    with h5py.File(tmp_path / "e.h5", "w") as h5:
        h5["features"] = np.zeros((30, 2), np.float32)
        h5["labels"] = np.zeros(30, np.int64)
        h5["weight"] = np.array([b"heavy"] * 30)
    return {"hdf5": str(tmp_path / "e.h5"), "weights": "weight"}, \
        "e.h5: objective.data.weights: dataset 'weight' is not numbers"


BAD_WEIGHTS = ["weights NaN", "weights not numbers"]


@pytest.mark.parametrize("case", BAD_WEIGHTS)
def test_bad_weights_are_refused_in_one_line_naming_the_file_and_field(tmp_path, case):
    from mpiopt.spec import load_spec

    data, says = _bad_weights(tmp_path, case)
    with pytest.raises(SpecError) as info:
        load_spec(_spec_file(tmp_path, data))
    assert says in str(info.value) and "\n" not in str(info.value)


def test_weights_reach_the_loss_and_the_validation_metrics():
    """A batch's loss is sum(w * loss) / batch size; each metric weighs each event."""
    import keras
    from mpi4py import MPI

    from mpiopt.training.frameworks.keras_model import KerasModel, build_model
    from mpiopt.training.trainer import validate
    from mpiopt.training.weights import Weighted

    def build(params):
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, activation="sigmoid")])
        model.compile("sgd", "binary_crossentropy", metrics=["accuracy"])
        return model

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3)).astype(np.float32)
    y = (rng.random(40) < 0.5).astype(np.int64)
    w = rng.uniform(-0.5, 2.0, 40).astype(np.float32)
    model = KerasModel(build_model(build, {}, 1), x[:2], Weighted(y, w)[:2])
    p = model.model.predict(x, verbose=0)[:, 0]
    each = -(y * np.log(p) + (1 - y) * np.log(1 - p))
    out = np.zeros(model.n_grad + 1, np.float32)
    model.gradient(x, (y, w), 1.0, out)
    assert out[-1] == pytest.approx(float(np.mean(w * each)), rel=1e-4)
    metrics = validate(model, MPI.COMM_SELF, x, Weighted(y, w), 16)
    correct = ((p > 0.5) == y).astype(np.float64)
    assert metrics["val_accuracy"] == pytest.approx(float((w * correct).sum() / w.sum()), rel=1e-4)
    assert metrics["val_loss"] == pytest.approx(float(np.mean(w * each)), rel=1e-4)


# ----------------------------------------------------------------------- selection
@pytest.mark.parametrize("in_memory", [True, False])
def test_the_selection_is_applied_before_the_splits(tmp_path, in_memory):
    from mpiopt.spec import TrainingSpec
    from mpiopt.training.folds import make_splits

    data = data_spec(tmp_path, "ttree", features=["jet_pt", "n_part"], in_memory=in_memory,
                     selection="(n_part >= 3) & (abs(jet_eta) < 1.5)", weights="weight")
    ds = D.load_data(data)
    keep = [np.flatnonzero((e["n_part"] >= 3) & (np.abs(e["jet_eta"]) < 1.5))
            for e in (events(120, 0), events(120, 1))]
    assert len(ds.x) == len(ds.y) == len(ds.w) == sum(map(len, keep))
    assert ds.x[np.arange(len(ds.x))][:, 1].min() >= 3
    assert np.array_equal(ds.y, np.concatenate([events(120, i)["label"][k]
                                                for i, k in enumerate(keep)]))
    splits = make_splits(ds, TrainingSpec(kfold=3), 5)
    covered = np.sort(np.concatenate([splits.pairs[f][1] for f in range(3)]))
    assert np.array_equal(covered, np.arange(len(ds.x)))       # K-fold over selected events
    x, y, xv, yv = splits.arrays(ds, 0)
    assert len(y) == len(x) and isinstance(y[np.arange(3)], tuple)   # (labels, weights)


def test_a_selection_reads_hdf5_datasets_and_npz_arrays_too(tmp_path):
    import h5py

    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    with h5py.File(tmp_path / "a.h5", "w") as h5:
        h5["features"], h5["labels"], h5["pt"] = x, np.arange(20) % 2, np.arange(20.0)
    np.savez(tmp_path / "a.npz", features=x, labels=np.arange(20) % 2, pt=np.arange(20.0))
    for kind, name in (("hdf5", "a.h5"), ("npz", "a.npz")):
        ds = D.load_data(DataSpec(**{kind: [str(tmp_path / name)]}, selection="pt >= 15"))
        assert np.array_equal(ds.x, x[15:])


def _bad_selection(tmp_path, case):
    write_events(tmp_path / "e.root", "rntuple", events(30))
    data = {"root": str(tmp_path / "e.root"), "features": ["jet_pt"], "labels": "label"}
    if case == "selection names an unknown branch":
        return {**data, "selection": "jet_ptt > 30"}, \
            "e.root: objective.data.selection: RNTuple 'Events' has no field 'jet_ptt'"
    if case == "selection does not parse":
        return {**data, "selection": "jet_pt >> > 30"}, "objective.data.selection: does not parse"
    if case == "selection keeps no event":
        return {**data, "selection": "jet_pt < 0"}, \
            "e.root: objective.data.selection: keeps no event of the 30 in the files"
    return {**data, "selection": "part_pt > 3"}, \
        "e.root: objective.data.selection: field 'part_pt' is jagged"


BAD_SELECTIONS = ["selection names an unknown branch", "selection does not parse",
                  "selection keeps no event", "selection of a jagged branch"]


@pytest.mark.parametrize("case", BAD_SELECTIONS)
def test_a_bad_selection_is_refused_in_one_line_naming_the_file_and_field(tmp_path, case):
    from mpiopt.spec import load_spec

    data, says = _bad_selection(tmp_path, case)
    with pytest.raises(SpecError) as info:
        load_spec(_spec_file(tmp_path, data))
    assert says in str(info.value) and "\n" not in str(info.value)


def test_the_counts_before_and_after_the_selection_are_shown(tmp_path):
    from conftest import mpiopt

    data, _ = _bad_selection(tmp_path, "selection names an unknown branch")
    data.update(selection="n_part >= 4", weights="weight")
    proc = mpiopt("validate", _spec_file(tmp_path, data), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    kept = int((events(30)["n_part"] >= 4).sum())
    negative = int((events(30)["weight"][events(30)["n_part"] >= 4] < 0).sum())
    line = (f"# data: training: 30 events in 1 file; the selection keeps {kept} "
            f"({100 * kept / 30:.1f}%): n_part >= 4; weights 'weight'")
    assert line in proc.stdout, proc.stdout[-500:]
    if negative:
        assert f"({negative} negative" in proc.stdout
    yaml.safe_load(proc.stdout)          # still the resolved spec: the lines are comments


@pytest.mark.parametrize("in_memory", [True, False])
def test_validation_files_are_weighed_on_their_own_and_a_refit_joins_them(tmp_path, in_memory):
    train = write_events(tmp_path / "t.root", "rntuple", events(60, 0))
    val = write_events(tmp_path / "v.root", "ttree", events(40, 1))
    data = DataSpec(root=[str(train)], val_root=[str(val)], labels="label", features=("jet_pt",),
                    collections=(_collection(PARTICLES),), weights="weight",
                    in_memory=in_memory)
    ds = D.load_data(data)
    assert ds.w.mean() == pytest.approx(1.0) and ds.w_val.mean() == pytest.approx(1.0)
    both = ds.merged()
    assert len(both.x) == len(both.y) == len(both.w) == 100
    assert np.array_equal(both.x[np.arange(60, 100)]["particles"],
                          ds.x_val[np.arange(40)]["particles"])
