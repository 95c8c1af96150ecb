"""Issue 61 done under mpiexec: a small multi-input Keras model trained with K-fold on
generated ROOT files (RNTuple and TTree) holding per-particle collections, event weights
and a selection, the same trial values streamed and in memory for the same seed; every
bad input refused with exit 2 before any trial, or, where only reading shows it, that
trial FAILED with the line naming the file and the field and the study going on."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import mpiopt  # noqa: E402
from test_data_events import (BAD_COLLECTIONS, BAD_SELECTIONS, BAD_WEIGHTS, PARTICLES,  # noqa: E402
                              _bad_collection, _bad_selection, _bad_weights, events,
                              write_events)
from test_data_mpi import trials_of  # noqa: E402

pytest.importorskip("tensorflow")
pytest.importorskip("uproot")

MODEL = '''
def build(params):
    import keras
    inputs = {"features": keras.Input((2,), name="features"),
              "particles": keras.Input((4, 2), name="particles"),
              "particles_mask": keras.Input((4,), name="particles_mask")}
    each = keras.layers.Dense(params["width"], activation="tanh")(inputs["particles"])
    each = each * keras.ops.expand_dims(inputs["particles_mask"], -1)
    pooled = keras.ops.sum(each, axis=1)
    flat = keras.layers.Rescaling(0.01)(inputs["features"])
    out = keras.layers.Dense(1, activation="sigmoid")(keras.layers.Concatenate()([pooled, flat]))
    model = keras.Model(inputs, out)
    model.compile(keras.optimizers.Adam(params["lr"]), "binary_crossentropy",
                  metrics=["accuracy"])
    return model
'''


def write_study(tmp_path: Path, form: str, name: str, data: dict | None = None) -> Path:
    """3 files of 80 events as `form`; 3 ranks: the coordinator and one group of 2, so
    every batch is cut in two shards."""
    for i in range(3):
        f = tmp_path / form / f"ev{i}.root"
        if not f.exists():
            write_events(f, form, events(80, seed=10 + i))
    (tmp_path / "net.py").write_text(MODEL)
    spec = {
        "study": {"name": name},
        "objective": {"model": "net.py:build", "metric": "val_accuracy",
                      "direction": "maximize",
                      "data": data or {"root": f"{form}/ev*.root", "labels": "label",
                                       "features": ["jet_pt", "jet_eta"],
                                       "collections": {"particles": PARTICLES},
                                       "weights": "weight", "balance_classes": True,
                                       "selection": "(n_part >= 1) & (abs(jet_eta) < 2.5)"}},
        "search_space": {"width": {"type": "integer", "low": 2, "high": 8},
                         "lr": {"type": "real", "low": 1e-3, "high": 0.05, "prior": "log-uniform"}},
        "search": {"algorithm": "random", "trials": 2, "seed": 1},
        "training": {"epochs": 1, "batch_size": 16, "kfold": 2},
        "resources": {"group_size": 2},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def search(tmp_path, spec, name, np=3):
    url = f"sqlite:///{tmp_path / (name + '.db')}"
    return mpiopt("search", spec, "--storage", url, np=np, cwd=tmp_path, timeout=400), url


def _with(spec: Path, **data) -> Path:
    raw = yaml.safe_load(spec.read_text())
    raw["objective"]["data"].update(data)
    spec.write_text(yaml.safe_dump(raw))
    return spec


@pytest.mark.parametrize("form", ["rntuple", "ttree"])
def test_kfold_on_root_collections_weights_and_selection_same_streamed_and_in_memory(
        tmp_path, form):
    from mpiopt.trial import TrialStatus

    values = {}
    for mode in (True, False):
        name = f"{form}{int(mode)}"
        proc, url = search(tmp_path, _with(write_study(tmp_path, form, name), in_memory=mode), name)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        assert "the selection keeps" in proc.stdout + proc.stderr
        _, trials = trials_of(url, name)
        assert [t.status for t in trials] == [TrialStatus.COMPLETE] * 2
        values[mode] = [(t.params, t.fold_values) for t in sorted(trials, key=lambda t: t.number)]
    for (p_mem, f_mem), (p_str, f_str) in zip(values[True], values[False]):
        assert p_mem == p_str and len(f_mem) == 2
        assert np.allclose(f_mem, f_str, atol=1e-6), (f_mem, f_str)


BAD = BAD_COLLECTIONS + BAD_SELECTIONS + BAD_WEIGHTS


def _bad(tmp_path, case) -> tuple[dict, str]:
    if case in BAD_COLLECTIONS:
        coll, says = _bad_collection(tmp_path, case)
        return {"root": str(tmp_path / "e.root"), "labels": "label",
                "collections": {"particles": coll}}, says
    if case in BAD_SELECTIONS:
        return _bad_selection(tmp_path, case)
    return _bad_weights(tmp_path, case)


@pytest.mark.parametrize("case", BAD)
def test_bad_events_stop_the_job_with_exit_2_before_any_trial(tmp_path, case):
    data, says = _bad(tmp_path, case)
    spec = write_study(tmp_path, "rntuple", "bad", data=data)
    proc, url = search(tmp_path, spec, "bad")
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if says in line]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "bad.db").exists()


@pytest.mark.parametrize("in_memory", [True, False])
def test_collection_branches_that_disagree_past_the_first_entry_fail_the_trials(tmp_path,
                                                                                 in_memory):
    """Seen only when entry 70 is read: each trial FAILED with the line, the study goes on
    to the next trial and ends."""
    import awkward as ak

    from mpiopt.trial import TrialStatus

    ev = events(80, seed=3)
    ev["part_eta"] = ak.concatenate([ev["part_eta"][:70], ak.Array([[0.5] * 12] * 10)])
    write_events(tmp_path / "rntuple" / "ev0.root", "rntuple", ev)
    spec = _with(write_study(tmp_path, "rntuple", "odd"), in_memory=in_memory, selection=None,
                 balance_classes=False)
    proc, url = search(tmp_path, spec, "odd")
    _, trials = trials_of(url, "odd")
    assert len(trials) == 2 and all(t.status is TrialStatus.FAILED for t in trials), \
        proc.stdout + proc.stderr[-3000:]
    assert "ev0.root: objective.data.collections.particles: branches 'part_pt' and " \
           "'part_eta' hold" in trials[0].error


def test_the_jets_particles_example_searches_the_same_on_its_rntuple_and_its_ttree(tmp_path):
    """examples/jets/particles.yaml on data its generator writes (small here): the same
    jets as an RNTuple and as a TTree give the same trial values. The forms are the point,
    not the group: one group of one rank under `mpiexec -n 2` imports TensorFlow once a
    study, where the example's group of two would import it twice."""
    import importlib.util
    import shutil

    from conftest import EXAMPLES
    from mpiopt.trial import TrialStatus

    jets = EXAMPLES / "jets"
    shutil.copy(jets / "model.py", tmp_path / "model.py")
    spec = importlib.util.spec_from_file_location("jets_generate", jets / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.DATA, gen.JETS_PER_FILE = tmp_path / "data", 60
    files = gen.ensure_particles()
    assert [len(f) for f in files.values()] == [4, 4]
    values = {}
    for form in files:
        raw = yaml.safe_load((jets / "particles.yaml").read_text())
        raw["study"]["name"] = form
        raw["objective"]["data"]["root"] = f"data/particles/{form}/jets_*.root"
        raw["search"]["trials"], raw["training"]["epochs"] = 1, 1
        raw["resources"]["group_size"] = 1
        (tmp_path / f"{form}.yaml").write_text(yaml.safe_dump(raw))
        proc, url = search(tmp_path, tmp_path / f"{form}.yaml", form, np=2)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        _, trials = trials_of(url, form)
        assert [t.status for t in trials] == [TrialStatus.COMPLETE], proc.stderr[-3000:]
        values[form] = trials[0].fold_values
    assert np.allclose(values["rntuple"], values["ttree"], atol=1e-6), values
