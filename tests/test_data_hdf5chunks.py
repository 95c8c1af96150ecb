"""gzip HDF5 chunks inflated by libdeflate (mpiopt.training.hdf5chunks) give exactly the
arrays h5py's own read gives; a filter it cannot undo, a chunk never written, or no
`deflate` package, and h5py reads; a streamed or loaded gzip file takes the fast path."""
from __future__ import annotations

import numpy as np
import pytest

from mpiopt.errors import DataError
from mpiopt.spec import DataSpec
from mpiopt.training import data as D
from mpiopt.training import hdf5chunks as H

h5py = pytest.importorskip("h5py")
pytest.importorskip("deflate")

RANGES = [(0, 1000), (0, 64), (10, 50), (60, 130), (900, 1000), (960, 1000), (999, 1000)]


def write(path, **datasets) -> None:
    x = np.random.default_rng(0).normal(size=(1000, 5, 3)).astype("float32")
    with h5py.File(path, "w") as h5:
        for name, options in datasets.items():
            dtype = options.pop("dtype", "float32")
            h5.create_dataset(name, data=x.astype(dtype), **options)


CASES = {
    "gzip": {"compression": "gzip", "chunks": (64, 5, 3)},
    "gzip and shuffle": {"compression": "gzip", "shuffle": True, "chunks": (64, 5, 3)},
    # a partial edge chunk in every dimension, a big-endian dtype
    "edges": {"compression": "gzip", "shuffle": True, "chunks": (100, 2, 2), "dtype": ">f8"},
    "integers, level 9": {"compression": "gzip", "compression_opts": 9, "chunks": (128, 5, 3),
                          "dtype": "int16"},
    "shuffle only": {"shuffle": True, "chunks": (64, 5, 3)},
}


@pytest.mark.parametrize("case", CASES)
def test_inflated_chunks_equal_h5pys_read(tmp_path, case):
    write(tmp_path / "f.h5", d=dict(CASES[case]))
    with h5py.File(tmp_path / "f.h5", "r") as h5:
        ds = h5["d"]
        layout = H.Layout.of(ds)
        assert layout is not None              # the fast path itself, not its fallback
        for start, stop in RANGES:
            got, want = layout.rows(ds.id, start, stop), ds[start:stop]
            assert got.dtype == want.dtype and np.array_equal(got, want), (start, stop)


@pytest.mark.parametrize("options", [{"compression": "lzf"},
                                     {"compression": "gzip", "fletcher32": True}],
                         ids=["lzf", "fletcher32"])
def test_a_filter_it_cannot_undo_is_read_by_h5py(tmp_path, options):
    write(tmp_path / "f.h5", d={**options, "chunks": (64, 5, 3)})
    with h5py.File(tmp_path / "f.h5", "r") as h5:
        assert H.Layout.of(h5["d"]) is None
        read = H.chunk_reader(h5["d"])
        assert all(np.array_equal(read(a, b), h5["d"][a:b]) for a, b in RANGES)


def test_without_deflate_every_read_is_h5pys_and_gives_the_same_arrays(tmp_path, monkeypatch):
    write(tmp_path / "f.h5", d=dict(CASES["gzip and shuffle"]))
    with h5py.File(tmp_path / "f.h5", "r") as h5:
        fast = [H.chunk_reader(h5["d"])(a, b) for a, b in RANGES]
        monkeypatch.setattr(H, "zlib_decompress", None)
        assert H.Layout.of(h5["d"]) is None
        slow = [H.chunk_reader(h5["d"])(a, b) for a, b in RANGES]
    assert all(np.array_equal(f, s) for f, s in zip(fast, slow))


def test_a_chunk_stored_unfiltered_and_a_chunk_never_written(tmp_path):
    """A chunk whose filter mask says deflate was skipped is taken as stored; a chunk
    never written reads as the fill value (h5py's read)."""
    with h5py.File(tmp_path / "f.h5", "w") as h5:
        ds = h5.create_dataset("d", shape=(200, 4), dtype="float32", compression="gzip",
                               chunks=(64, 4), fillvalue=-1.0)
        ds[0:64] = np.arange(256, dtype="float32").reshape(64, 4)
        raw = np.full((64, 4), 7.0, "float32")
        ds.id.write_direct_chunk((64, 0), raw.tobytes(), filter_mask=1)
    with h5py.File(tmp_path / "f.h5", "r") as h5:
        ds = h5["d"]
        read = H.chunk_reader(ds)
        assert np.array_equal(H.Layout.of(ds).rows(ds.id, 60, 128), ds[60:128])
        assert np.all(ds[64:128] == 7.0)
        got = read(100, 200)                     # reaches the chunks never written
        assert np.array_equal(got, ds[100:200]) and np.all(got[-72:] == -1.0)


def test_streamed_and_loaded_gzip_files_are_inflated_by_libdeflate(tmp_path, monkeypatch):
    """The Source reader takes the fast path: the training's reads and the in-memory
    load both call libdeflate, and give the arrays h5py gives."""
    x = np.random.default_rng(1).normal(size=(300, 6)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    with h5py.File(tmp_path / "p.h5", "w") as h5:
        h5.create_dataset("features", data=x, compression="gzip", shuffle=True, chunks=(50, 6))
        h5["labels"] = y
    calls = []
    inflate = H.zlib_decompress
    monkeypatch.setattr(H, "zlib_decompress", lambda *a: calls.append(1) or inflate(*a))
    files = {"hdf5": [str(tmp_path / "p.h5")]}
    streamed = D.load_data(DataSpec(**files, in_memory=False))
    idx = np.random.default_rng(2).permutation(300)[:50]
    assert np.array_equal(streamed.x[idx], x[idx]) and calls
    calls.clear()
    D._opened.clear()
    assert np.array_equal(D.load_data(DataSpec(**files, in_memory=True)).x, x) and calls


def test_a_corrupt_chunk_is_named_by_h5pys_read(tmp_path):
    """libdeflate refuses the chunk; h5py's read then fails too, and the line names the file."""
    x = np.random.default_rng(3).normal(size=(256, 4)).astype("float32")
    with h5py.File(tmp_path / "p.h5", "w") as h5:
        h5.create_dataset("features", data=x, compression="gzip", chunks=(64, 4))
        h5["labels"] = np.zeros(256, "int64")
        offset = h5["features"].id.get_chunk_info(1).byte_offset
    with open(tmp_path / "p.h5", "r+b") as f:
        f.seek(offset + 20)
        f.write(b"\xff" * 64)
    data = D.load_data(DataSpec(hdf5=[str(tmp_path / "p.h5")], in_memory=False))
    with pytest.raises(DataError, match=r"p.h5: features: cannot read it") as info:
        data.x[64:128]
    assert "\n" not in str(info.value)
