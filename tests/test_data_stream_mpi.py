"""Streamed data under mpiexec: the same trial values as in memory, windowed shuffles
with split_by: file through the node-local cache, and bad data (refused before any trial
when it can be seen up front, else the trial FAILED with the file named)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import mpiopt  # noqa: E402
from test_data_mpi import trials_of  # noqa: E402
from test_data_stream import BAD, _bad  # noqa: E402
from test_training import MODEL_SOURCE  # noqa: E402

pytest.importorskip("tensorflow")


def write_study(tmp_path: Path, name: str, data: dict, kfold: int = 3,
                chunked: bool = False, per_file: int = 60, chunk: int = 8,
                batch: int = 16) -> Path:
    """240 samples in 4 .npy directories (chunked: 4 gzip HDF5 files, chunks of `chunk`
    samples); 3 ranks: the coordinator and one group of 2, so every batch is cut in two
    shards."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4 * per_file, 6)).astype("float32")
    y = np.digitize(x[:, 0] + 0.5 * x[:, 1], [-0.5, 0.5]).astype("int64")
    for i in range(4):
        part = tmp_path / "parts" / f"p{i}"
        part.mkdir(parents=True, exist_ok=True)
        mine = slice(i * per_file, (i + 1) * per_file)
        if chunked:
            import h5py

            with h5py.File(part.with_suffix(".h5"), "w") as h5:
                h5.create_dataset("features", data=x[mine], chunks=(chunk, 6),
                                  compression="gzip")
                h5["labels"] = y[mine]
        np.save(part / "features.npy", x[mine])
        np.save(part / "labels.npy", y[mine])
    (tmp_path / "tiny.py").write_text(MODEL_SOURCE)
    files = {"hdf5": "parts/p*.h5"} if chunked else {"npy": "parts/p*"}
    spec = {
        "study": {"name": name},
        "objective": {"model": "tiny.py:build", "data": {**files, **data},
                      "metric": "val_accuracy", "direction": "maximize"},
        "search_space": {"width": {"type": "integer", "low": 2, "high": 16},
                         "lr": {"type": "real", "low": 1e-3, "high": 0.1, "prior": "log-uniform"}},
        "search": {"algorithm": "random", "trials": 2, "seed": 1},
        "training": {"epochs": 2, "batch_size": batch, "kfold": kfold},
        "resources": {"group_size": 2},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def assert_same_trials(values: dict) -> None:
    """The in-memory study's two trials (values[True]) and the streamed one's: the same
    parameters, the same fold values."""
    assert len(values[True]) == 2
    for (p_mem, f_mem), (p_str, f_str) in zip(values[True], values[False]):
        assert p_mem == p_str
        assert np.allclose(f_mem, f_str, atol=1e-6), (f_mem, f_str)


def search(tmp_path, spec, name):
    url = f"sqlite:///{tmp_path / (name + '.db')}"
    proc = mpiopt("search", spec, "--storage", url, np=3, cwd=tmp_path, timeout=400)
    return proc, url


def test_streamed_kfold_gives_the_in_memory_trial_values(tmp_path):
    values = {}
    for mode in (True, False):
        name = f"mem{int(mode)}"
        proc, url = search(tmp_path, write_study(tmp_path, name, {"in_memory": mode}), name)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        _, trials = trials_of(url, name)
        values[mode] = [(t.params, t.fold_values) for t in sorted(trials, key=lambda t: t.number)]
    assert_same_trials(values)


def test_chunked_files_at_the_defaults_shuffle_by_window_and_split_by_chunk_alike(tmp_path):
    """At the defaults, gzip HDF5 with enough chunks (40 of 1024 samples, 3 folds):
    shuffle: auto takes the window and split_by: auto deals whole chunks to the folds, in
    either path; both are said at the start, and streamed and in memory give the same
    trial values."""
    values = {}
    for mode in (True, False):
        name = f"gz{int(mode)}"
        spec = write_study(tmp_path, name, {"in_memory": mode, "shuffle_window": 4096},
                           chunked=True, per_file=10_240, chunk=1024, batch=512)
        proc, url = search(tmp_path, spec, name)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        said = proc.stdout + proc.stderr
        assert "data: shuffle: window of 4096 samples (auto: " in said
        assert "data: split_by: whole chunks (40 of 1024 samples; auto: " in said
        _, trials = trials_of(url, name)
        values[mode] = [(t.params, t.fold_values) for t in sorted(trials, key=lambda t: t.number)]
    assert_same_trials(values)


def test_windowed_shuffle_split_by_file_through_the_cache(tmp_path):
    from mpiopt.trial import TrialStatus

    data = {"in_memory": False, "shuffle": "window", "shuffle_window": 20, "split_by": "file",
            "cache": str(tmp_path / "node-local")}
    proc, url = search(tmp_path, write_study(tmp_path, "win", data, kfold=2), "win")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    _, trials = trials_of(url, "win")
    assert [t.status for t in trials] == [TrialStatus.COMPLETE] * 2
    assert all(len(t.fold_values) == 2 for t in trials)
    copies = sorted(p.name for p in (tmp_path / "node-local").iterdir())
    assert sorted(c.split("-", 1)[1] for c in copies) == ["p0", "p1", "p2", "p3"], copies
    # one copy per file, made once by the two ranks starting together; no temp or lock left


@pytest.mark.parametrize("case", BAD)
def test_bad_data_seen_up_front_stops_the_job_with_exit_2_before_any_trial(tmp_path, case):
    if case in ("no branch", "jagged branch"):
        pytest.importorskip("uproot")
    data, named = _bad(tmp_path, case)
    spec = write_study(tmp_path, "bad", {})
    raw = yaml.safe_load(spec.read_text())
    raw["objective"]["data"] = data
    spec.write_text(yaml.safe_dump(raw))
    proc, url = search(tmp_path, spec, "bad")
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if named in line]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "bad.db").exists()


def test_bad_data_seen_while_training_fails_the_trial_naming_the_file(tmp_path):
    from mpiopt.trial import TrialStatus

    spec = write_study(tmp_path, "nan", {"in_memory": False})
    x = np.load(tmp_path / "parts" / "p2" / "features.npy")
    x[7, 3] = np.nan                       # seen only when a batch reads sample 7 of p2
    np.save(tmp_path / "parts" / "p2" / "features.npy", x)
    proc, url = search(tmp_path, spec, "nan")
    _, trials = trials_of(url, "nan")
    assert trials and all(t.status is TrialStatus.FAILED for t in trials), proc.stderr[-3000:]
    assert "p2: features of sample 7 hold NaN" in trials[0].error


def test_a_study_stored_before_shuffle_auto_resumes_with_the_exact_shuffle(tmp_path):
    """A study created while `exact` was the default stored its spec without data.shuffle:
    it resumes with the exact shuffle and its fingerprint, its old spec file is refused with
    the one field named; a study created since stores `auto`. (Rank 0's rules: one process
    runs each job.)"""
    from mpiopt.trial import TrialStatus

    said = "data: shuffle: window of 40 samples (auto: "
    old = write_study(tmp_path, "old", {"in_memory": True, "shuffle_window": 40,
                                        "shuffle": "exact"}, chunked=True)
    one_rank(old)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    proc = mpiopt("search", old, "--storage", url, "--trials", "1", cwd=tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    as_stored_before(url, "old")

    proc = mpiopt("resume", "old", "--storage", url, "--trials", "2", cwd=tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert said not in proc.stdout + proc.stderr
    _, trials = trials_of(url, "old")
    assert [t.status for t in trials] == [TrialStatus.COMPLETE] * 2

    unchanged = yaml.safe_load(old.read_text())            # the spec file as it was then
    del unchanged["objective"]["data"]["shuffle"]
    old.write_text(yaml.safe_dump(unchanged))
    proc = mpiopt("search", old, "--storage", url, "--resume", "--trials", "3", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    assert "changed objective.data.shuffle: 'exact' -> 'auto'" in proc.stderr
    assert "changed objective.data.split_by: 'sample' -> 'auto'" in proc.stderr

    new = one_rank(write_study(tmp_path, "new", {"in_memory": True, "shuffle_window": 40},
                               chunked=True))
    proc = mpiopt("search", new, "--storage", url, "--trials", "1", cwd=tmp_path, timeout=400)
    assert proc.returncode == 0 and said in proc.stdout + proc.stderr, proc.stderr[-3000:]
    record, _ = trials_of(url, "new")       # (so its resume reads `auto` back)
    assert yaml.safe_load(record.spec_text)["objective"]["data"]["shuffle"] == "auto"


def one_rank(spec: Path) -> Path:
    raw = yaml.safe_load(spec.read_text())
    raw["resources"] = {"group_size": 1}
    spec.write_text(yaml.safe_dump(raw))
    return spec


def as_stored_before(url: str, name: str) -> None:
    """The study's stored spec as mpiopt stored it while `exact` was the default: without
    data.shuffle and data.split_by (defaults were left out of the stored spec)."""
    from mpiopt.storage import open_storage

    storage = open_storage(url)
    try:
        record = storage.get_study(name)
        stored = yaml.safe_load(record.spec_text)
        stored["objective"]["data"].pop("shuffle", None)
        stored["objective"]["data"].pop("split_by", None)      # (`sample` then, as well)
        storage.update_study_spec(record.id, yaml.safe_dump(stored, sort_keys=False))
    finally:
        storage.close()
