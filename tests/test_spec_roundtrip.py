"""The resolved spec loads back as the same spec: on every MPI rank (rank 0 sends it) and
from the database on resume. A spec that did not (a null loader) hung npz/HDF5 studies
under mpirun and broke every resume of them."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import EXAMPLES, ROOT
from mpiopt.spec import Spec, load_spec
from mpiopt.study import spec_text

SEARCHSPACES = sorted((ROOT / "searchspaces").glob("*.yaml"))


def roundtrip(spec: Spec) -> Spec:
    again = Spec.from_dict(spec.to_dict(), source="<from rank 0>")
    assert again.to_dict() == spec.to_dict() and again.fingerprint() == spec.fingerprint()
    stored = Spec.from_dict(yaml.safe_load(spec_text(spec)), source="<stored>", check_files=False)
    assert stored.fingerprint() == spec.fingerprint()
    return again


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
    for name in ("a.npz", "b.npz", "va.npz", "x1.h5", "x2.h5", "vx.h5"):
        (tmp_path / name).write_bytes(b"")
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
