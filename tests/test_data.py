"""Data loading (loader, .npz, HDF5 file lists) and the index arithmetic of sharding."""
from __future__ import annotations

import select
import subprocess
import sys

import numpy as np
import pytest

from mpiopt.errors import DataError, SpecError
from mpiopt.training import data as D

h5py = pytest.importorskip("h5py")


def data_spec(**kw):
    from mpiopt.spec import DataSpec

    return DataSpec(**kw)


def arrays(n, seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 4, 3)).astype("float32"), rng.integers(0, 2, n)


def test_hdf5_file_list_is_read_in_order_and_concatenated(tmp_path):
    parts = [arrays(n, s) for s, n in enumerate((5, 7, 3))]
    for i, (x, y) in enumerate(parts):
        D.write_hdf5(tmp_path / "data" / f"jets_{i}.h5", x, y)
    ds = D.load_data(data_spec(hdf5=["data/jets_*.h5"]), base_dir=tmp_path)
    assert ds.x.shape == (15, 4, 3) and ds.y.shape == (15,)
    assert np.array_equal(ds.x, np.concatenate([p[0] for p in parts]))
    assert not ds.has_validation


def test_hdf5_custom_dataset_names_and_validation_files(tmp_path):
    x, y = arrays(6, 0)
    D.write_hdf5(tmp_path / "train.h5", x, y, features="X", labels="Y")
    D.write_hdf5(tmp_path / "val.h5", x[:2], y[:2], features="X", labels="Y")
    spec = data_spec(hdf5=[str(tmp_path / "train.h5")], val_hdf5=["val.h5"], features="X", labels="Y")
    ds = D.load_data(spec, base_dir=tmp_path)
    assert ds.has_validation and len(ds.x_val) == 2


def test_hdf5_missing_dataset_or_file_says_which(tmp_path):
    x, y = arrays(4, 0)
    D.write_hdf5(tmp_path / "a.h5", x, y)
    with pytest.raises(SpecError, match="no dataset 'images'"):
        D.read_hdf5(["a.h5"], features="images", base_dir=tmp_path)
    with pytest.raises(SpecError, match="no file matches"):
        D.read_hdf5(["missing_*.h5"], base_dir=tmp_path)


def test_a_data_file_that_cannot_be_read_is_named(tmp_path):
    """h5py's and NumPy's own messages ('Unable to synchronously open file (unable to lock
    file, errno = 11 ...)', 'File is not a zip file') do not say which of a list of files."""
    x, y = arrays(8, 0)
    D.write_hdf5(tmp_path / "a.h5", x, y)
    (tmp_path / "cut.h5").write_bytes((tmp_path / "a.h5").read_bytes()[:300])
    np.savez(tmp_path / "a.npz", features=x, labels=y)
    (tmp_path / "cut.npz").write_bytes((tmp_path / "a.npz").read_bytes()[:100])
    with pytest.raises(DataError, match=r"cut\.h5: cannot read it \(OSError: .*truncated"):
        D.read_hdf5(["a.h5", "cut.h5"], base_dir=tmp_path)
    with pytest.raises(DataError, match=r"cut\.npz: cannot read it \(BadZipFile"):
        D.read_npz(["a.npz", "cut.npz"], base_dir=tmp_path)
    writer = subprocess.Popen([sys.executable, "-c", "import h5py, sys, time\n"
                               f"f = h5py.File({str(tmp_path / 'a.h5')!r}, 'a')\n"
                               "print('open', flush=True)\ntime.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert select.select([writer.stdout], [], [], 60)[0], "the writer did not open the file"
        assert writer.stdout.readline().strip() == "open"
        with pytest.raises(DataError, match=r"a\.h5: another process holds HDF5's lock on it"):
            D.read_hdf5(["a.h5"], base_dir=tmp_path)
    finally:
        writer.kill()
        writer.wait()
    assert len(D.read_hdf5(["a.h5"], base_dir=tmp_path)[0]) == 8     # closed: read


def test_npz_files(tmp_path):
    x, y = arrays(8, 1)
    np.savez(tmp_path / "a.npz", features=x[:5], labels=y[:5])
    np.savez(tmp_path / "b.npz", features=x[5:], labels=y[5:])
    ds = D.load_data(data_spec(npz=["a.npz", "b.npz"]), base_dir=tmp_path)
    assert np.array_equal(ds.y, y)
    with pytest.raises(SpecError, match="no array 'labels'"):
        np.savez(tmp_path / "c.npz", features=x)
        D.read_npz(["c.npz"], base_dir=tmp_path)


def test_loader_returns_two_or_four_arrays(tmp_path):
    (tmp_path / "load.py").write_text(
        "import numpy as np\n"
        "def two():\n    return np.zeros((4, 2)), np.arange(4)\n"
        "def four():\n    return np.zeros((4, 2)), np.arange(4), np.ones((2, 2)), np.arange(2)\n"
        "def bad():\n    return np.zeros((4, 2)), np.arange(3)\n")
    assert not D.load_data(data_spec(loader="load.py:two"), tmp_path).has_validation
    assert len(D.load_data(data_spec(loader="load.py:four"), tmp_path).x_val) == 2
    with pytest.raises(ValueError, match="4 samples of features but 3 labels"):
        D.load_data(data_spec(loader="load.py:bad"), tmp_path)


@pytest.mark.parametrize("n,size", [(10, 3), (2, 4), (0, 2), (7, 7)])
def test_shards_are_contiguous_balanced_and_cover(n, size):
    parts = [D.shard(n, size, r) for r in range(size)]
    assert [i for p in parts for i in range(n)[p]] == list(range(n))
    lengths = [p.stop - p.start for p in parts]
    assert max(lengths) - min(lengths) <= 1


def test_batches_and_epoch_orders():
    assert [(b.start, b.stop) for b in D.batches(10, 4)] == [(0, 4), (4, 8), (8, 10)]
    a, b = D.epoch_order(20, 5, 0), D.epoch_order(20, 5, 1)
    assert sorted(a) == list(range(20)) and not np.array_equal(a, b)
    assert np.array_equal(a, D.epoch_order(20, 5, 0))
    assert np.array_equal(D.epoch_order(5, 5, 3, shuffle=False), np.arange(5))


def test_jets_example_generates_the_same_files_and_reads_them_back(tmp_path, monkeypatch):
    import importlib.util

    from conftest import EXAMPLES

    spec = importlib.util.spec_from_file_location("jets_generate", EXAMPLES / "jets" / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    monkeypatch.setattr(gen, "DATA", tmp_path / "data")
    monkeypatch.setattr(gen, "JETS_PER_FILE", 50)
    files = gen.ensure()
    x, y = D.read_hdf5([str(tmp_path / "data" / "jets_*.h5")], features="images", labels="labels")
    assert x.shape == (200, 16, 16, 1) and set(np.unique(y)) == {0, 1}
    assert np.allclose(x.sum(axis=(1, 2, 3)), 1.0, atol=1e-4)  # pT fractions of each jet
    again, _ = gen.make_file(0)
    assert np.array_equal(again, x[:50])
    assert len(files) == 4


def test_nan_or_inf_in_the_data_is_refused_where_it_is_read(monkeypatch):
    """One NaN pixel made two of three folds' weights NaN and the trial COMPLETE at chance
    accuracy, silently; now the data is refused, naming the array, the count and the
    first sample (looked at in bounded chunks, so the first is found across them)."""
    from mpiopt.training import data as data_mod
    from mpiopt.training.data import Dataset, check_finite

    monkeypatch.setattr(data_mod, "_CHUNK", 16)       # 2 samples of 8 values per chunk
    x = np.zeros((10, 2, 4), dtype=np.float32)
    y = np.arange(10)
    assert check_finite(Dataset(x, y)).x is x
    x[7, 1, 2] = np.nan
    x[9, 0, 0] = np.inf
    with pytest.raises(ValueError, match=r"the features hold 2 NaN or infinite value\(s\), the "
                                         r"first in sample 7"):
        check_finite(Dataset(x, y))
    y_val = np.array([0.0, np.nan])
    with pytest.raises(ValueError, match="the validation labels hold 1 .* sample 1"):
        check_finite(Dataset(np.zeros((3, 2)), y, np.zeros((2, 2)), y_val))
