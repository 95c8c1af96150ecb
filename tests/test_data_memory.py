"""Data in memory without waste, and the shuffle `auto` picks: the files read straight
into one array, a fold a view of it, and a window shuffle for chunked or compressed files
(the same in memory as streamed), said in one line."""
from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from mpiopt.spec import DataSpec, TrainingSpec
from mpiopt.training import data as D
from mpiopt.training import stream as S
from mpiopt.training.folds import make_splits

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_data_stream import arrays, write_parts  # noqa: E402

pytest.importorskip("h5py")


@pytest.mark.parametrize("kind,compressed", [("hdf5", True), ("npy", False)])
def test_files_are_read_into_one_array_without_a_concatenated_copy(tmp_path, kind, compressed):
    parts = [arrays(400, s, shape=(32, 32)) for s in range(4)]      # 4 x 1.6 MB of features
    files = write_parts(tmp_path, kind, parts, compressed)
    D.load_data(DataSpec(**files, in_memory=True))     # the readers' imports, not traced
    tracemalloc.start()
    try:
        data = D.load_data(DataSpec(**files, in_memory=True))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(data.x, np.concatenate([p[0] for p in parts]))
    # the one array, one block being read and the labels; a concatenation would be twice
    assert peak < 1.3 * data.x.nbytes, (peak, data.x.nbytes)


def test_a_fold_in_memory_is_a_view_of_the_one_copy(tmp_path):
    parts = [arrays(n, s) for s, n in enumerate((50, 70, 30))]
    data = D.load_data(DataSpec(**write_parts(tmp_path, "hdf5", parts), in_memory=True))
    splits = make_splits(data, TrainingSpec(kfold=3), 5)
    for fold in range(3):
        train, val = splits.pairs[fold]
        x, y, xv, yv = splits.arrays(data, fold)
        for view, idx in ((x, train), (xv, val)):
            assert isinstance(view, S.View) and view.base is data.x
            assert not S.streamed(view)          # gathered by the training thread itself
            assert np.array_equal(view[3:9], data.x[idx[3:9]])
        assert y.base is data.y and np.array_equal(yv[:], data.y[val])


@pytest.mark.parametrize("in_memory", [True, False])
def test_shuffle_auto_windows_chunked_files_in_memory_and_streamed_and_says_so(tmp_path,
                                                                               in_memory):
    parts = [arrays(n, s) for s, n in enumerate((50, 70))]
    chunked = write_parts(tmp_path / "gz", "hdf5", parts, compressed=True)
    plain = write_parts(tmp_path / "plain", "hdf5", parts)
    auto = DataSpec(**chunked, in_memory=in_memory, shuffle_window=32)
    assert D.load_data(auto).window == 32
    assert D.load_data(DataSpec(**chunked, in_memory=in_memory, shuffle="exact")).window is None
    assert D.load_data(DataSpec(**plain, in_memory=in_memory)).window is None
    assert D.load_data(DataSpec(**plain, in_memory=in_memory, shuffle="window")).window == 65536
    line, = D.describe(auto)
    assert line.startswith("data: shuffle: window of 32 samples (auto: ") and "exact" in line
    assert D.describe(DataSpec(**plain, in_memory=in_memory)) == []


@pytest.mark.parametrize("kind", ["hdf5", "npy"])
def test_the_refit_joins_training_and_validation_without_copying_them(tmp_path, kind):
    """training.refit trains on the training and the validation files together: the
    features are gathered from both arrays, not concatenated into a copy of them."""
    train = [arrays(400, s, shape=(32, 32)) for s in range(3)]
    val = [arrays(300, 9, shape=(32, 32))]
    files = write_parts(tmp_path / "train", kind, train, compressed=kind == "hdf5")
    vals = {f"val_{k}": v for k, v in write_parts(tmp_path / "val", kind, val,
                                                    compressed=kind == "hdf5").items()}
    data = D.load_data(DataSpec(**files, **vals, in_memory=True))
    tracemalloc.start()
    try:
        merged = data.merged()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 0.1 * (data.x.nbytes + data.x_val.nbytes), peak
    whole = np.concatenate([p[0] for p in train + val])
    idx = np.random.default_rng(0).permutation(len(whole))[:500]
    assert len(merged.x) == len(whole) == len(merged.y)
    assert np.array_equal(merged.x[idx], whole[idx])
    assert np.array_equal(merged.x[1190:1210], whole[1190:1210])
    assert np.array_equal(S.take(merged.x, idx)[10:20], whole[idx[10:20]])
    assert np.array_equal(merged.y, np.concatenate([p[1] for p in train + val]))
