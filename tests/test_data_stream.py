"""Streamed data: file formats read by sample, the windowed shuffle, split_by file, the
prefetch thread, the node-local cache, and bad files named in one line.

The figure that matters: streaming gives the same trial value as reading into memory."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from mpiopt.errors import DataError, SpecError
from mpiopt.spec import DataSpec
from mpiopt.training import data as D
from mpiopt.training import stream as S

sys.path.insert(0, str(Path(__file__).resolve().parent))

h5py = pytest.importorskip("h5py")


def arrays(n, seed=0, shape=(6,)):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, *shape)).astype("float32")
    y = np.digitize(x.reshape(n, -1)[:, 0], [-0.5, 0.5]).astype("int64")
    return x, y


def write_parts(folder: Path, kind: str, parts, compressed=False) -> dict:
    """Files of one kind holding the parts; returns the spec's data section."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, (x, y) in enumerate(parts):
        if kind == "npz":
            (np.savez_compressed if compressed else np.savez)(folder / f"p{i}.npz",
                                                              features=x, labels=y)
        elif kind == "npy":
            (folder / f"p{i}").mkdir(exist_ok=True)
            np.save(folder / f"p{i}" / "features.npy", x)
            np.save(folder / f"p{i}" / "labels.npy", y)
        elif kind == "hdf5":
            with h5py.File(folder / f"p{i}.h5", "w") as h5:
                h5.create_dataset("features", data=x,
                                  **({"compression": "gzip", "chunks": True} if compressed else {}))
                h5["labels"] = y
        else:
            write_root(folder / f"p{i}.root", x, y, compressed)
    pattern = {"npz": "p*.npz", "npy": "p*", "hdf5": "p*.h5", "root": "p*.root"}[kind]
    data = {kind: [str(folder / pattern)]}
    if kind == "root":
        data["features"] = [f"f{j}" for j in range(parts[0][0].shape[1])]
    return data


def write_root(path, x, y, compressed=False):
    """A TTree, as CMS and ATLAS files hold: zlib (uproot's default) or uncompressed."""
    uproot = pytest.importorskip("uproot")
    branches = {**{f"f{j}": x[:, j] for j in range(x.shape[1])}, "labels": y}
    with uproot.recreate(path, **({} if compressed else {"compression": None})) as f:
        f.mktree("Events", {k: v.dtype for k, v in branches.items()})
        f["Events"].extend(branches)


FORMATS = [("npz", False), ("npy", False), ("hdf5", False), ("hdf5", True), ("root", False),
           ("root", True)]


@pytest.mark.parametrize("kind,compressed", FORMATS)
def test_every_format_streams_the_same_samples_as_in_memory(tmp_path, kind, compressed):
    parts = [arrays(n, s) for s, n in enumerate((50, 70, 30))]
    data = write_parts(tmp_path, kind, parts, compressed)
    streamed = D.load_data(DataSpec(**data, in_memory=False))
    assert isinstance(streamed.x, S.FileArray) and len(streamed.x) == 150
    full = np.concatenate([p[0] for p in parts])
    idx = np.random.default_rng(1).permutation(150)[:40]
    assert np.array_equal(streamed.x[idx], full[idx])
    assert np.array_equal(streamed.x[10:130], full[10:130])
    assert np.array_equal(S.take(S.take(streamed.x, idx), slice(5, 9)), full[idx[5:9]])
    assert np.array_equal(streamed.y, np.concatenate([p[1] for p in parts]))
    mapped = [s.mapped is not None for s in streamed.x.sources]
    if not (kind == "root" and compressed):   # zlib keeps a basket it cannot shrink as is
        assert all(mapped) == (kind in ("npz", "npy") or not compressed)
    memory = D.load_data(DataSpec(**data, in_memory=True))
    assert isinstance(memory.x, np.ndarray) and np.array_equal(memory.x, full)


@pytest.mark.parametrize("kind", ["npy", "npz", "hdf5"])
def test_streamed_labels_are_mapped_from_their_files_and_a_fold_does_not_copy_them(tmp_path, kind):
    """Every rank holds the labels once (the concatenation): the files' own are the page
    cache's, and a fold's training and validation labels are read with each batch."""
    from mpiopt.spec import TrainingSpec
    from mpiopt.training.folds import make_splits

    parts = [arrays(n, s) for s, n in enumerate((50, 70, 30))]
    files = write_parts(tmp_path, kind, parts)
    data = D.load_data(DataSpec(**files, in_memory=False))
    assert all(not s.labels.flags.writeable for s in data.x.sources)   # mapped read-only
    memory = D.load_data(DataSpec(**files, in_memory=True))
    training = TrainingSpec(kfold=3)
    for fold in range(3):
        x, y, xv, yv = make_splits(data, training, 5).arrays(data, fold)
        mx, my, mxv, myv = make_splits(memory, training, 5).arrays(memory, fold)
        assert isinstance(y, S.View) and y.base is data.y and yv.base is data.y
        assert np.array_equal(y[np.arange(len(y))], my) and np.array_equal(yv[:], myv)
        assert np.array_equal(x[5:9], mx[5:9]) and np.array_equal(y[5:9], my[5:9])


def test_in_memory_auto_follows_the_stated_rule(monkeypatch):
    monkeypatch.setattr(D, "memory_per_rank", lambda: 1000.0)
    assert D.in_memory("auto", 250) and not D.in_memory("auto", 251)
    assert D.in_memory(True, 10**15) and not D.in_memory(False, 1)


def test_windowed_shuffle_is_a_permutation_made_of_windows():
    order = S.window_order(1000, seed=3, epoch=2, window=100)
    assert sorted(order) == list(range(1000))
    assert np.array_equal(order, S.window_order(1000, 3, 2, 100))
    assert not np.array_equal(order, S.window_order(1000, 3, 3, 100))
    for w in range(10):           # each run of 100 is one whole window, shuffled inside
        block = order[w * 100:(w + 1) * 100]
        assert block.max() - block.min() == 99 and not np.array_equal(block, np.sort(block))


def test_a_windowed_shuffle_puts_each_batch_in_ascending_order_so_a_shard_reads_fewer_chunks():
    """The same windows and the same batches' samples as without it; a batch inside one
    window ascending, so of 2 ranks each reads about half of a window's 16-sample chunks,
    not all."""
    plain = S.window_order(1000, seed=3, epoch=2, window=160)
    order = S.window_order(1000, seed=3, epoch=2, window=160, batch=32)
    assert sorted(order) == list(range(1000))
    for b in range(0, 1000, 32):
        assert np.array_equal(np.sort(order[b:b + 32]), np.sort(plain[b:b + 32]))
        if len(np.unique(order[b:b + 32] // 160)) == 1:
            assert np.array_equal(order[b:b + 32], np.sort(plain[b:b + 32]))
    chunks = {tuple(np.unique(o[b:b + 16] // 16)) for o in (order,) for b in range(0, 992, 32)}
    assert max(len(c) for c in chunks) <= 7        # a shard of a batch: about half of 10
    assert np.array_equal(D.epoch_order(1000, 3, 2, window=160, batch=32), order)


def test_a_batch_spanning_two_windows_gives_each_shard_the_same_part_of_both():
    """After the short last window, batches span two windows: the first half of such a
    batch holds the lower part of each window (as a batch inside one window gives the
    first of 2 ranks), not samples spread over all of one window's chunks."""
    n, window, batch = 1000, 160, 32        # 6 windows of 160 and one of 40
    for epoch in range(6):
        order = S.window_order(n, seed=3, epoch=epoch, window=window, batch=batch)
        for b in range(0, n - n % batch, batch):
            first, second = order[b:b + batch // 2], order[b + batch // 2:b + batch]
            spanned = np.unique(order[b:b + batch] // window)
            if len(spanned) < 2:
                continue
            for w in spanned:
                size = min(window, n - w * window)
                low = first[first // window == w] - w * window
                high = second[second // window == w] - w * window
                if len(low) + len(high) >= 4:      # a share of it in each half
                    assert len(low) and len(high), (epoch, b, w)
                    assert low.max() <= high.min()
def test_split_by_file_never_puts_one_file_on_both_sides():
    from mpiopt.training.kfold import group_holdout_split, group_kfold_splits

    groups = np.repeat(np.arange(5), [10, 20, 5, 7, 8])
    folds = group_kfold_splits(groups, 3, seed=4)
    for train, val in folds:
        assert not set(groups[train]) & set(groups[val])
    assert sorted(np.concatenate([v for _, v in folds])) == list(range(50))
    train, val = group_holdout_split(groups, 0.2, seed=4)
    assert len(set(groups[val])) == 1 and not set(groups[train]) & set(groups[val])
    with pytest.raises(ValueError, match="number of files"):
        group_kfold_splits(groups, 6, seed=0)


def test_prefetch_raises_a_failed_read_where_the_batch_is_wanted_and_stops_its_thread(tmp_path):
    data = write_parts(tmp_path, "npy", [arrays(64)])
    x = D.load_data(DataSpec(**data, in_memory=False)).x
    y = np.arange(64)
    got = [xb for xb, _ in S.prefetched(x, y, [np.arange(i, i + 8) for i in range(0, 64, 8)])]
    assert np.array_equal(np.concatenate(got), x[:64])
    with pytest.raises(IndexError):
        list(S.prefetched(x, y, [np.arange(8), np.array([10**6])]))
    reader = S.prefetched(x, y, [np.arange(8)] * 1000, depth=2)
    next(reader)
    reader.close()                 # the consumer stops early: the thread ends
    deadline = time.monotonic() + 5
    while any(t.name == "mpiopt-prefetch" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the prefetch thread outlived its consumer"
        time.sleep(0.05)


def test_compressed_npz_streams_only_when_asked_in_memory(tmp_path):
    data = write_parts(tmp_path, "npz", [arrays(20)], compressed=True)
    with pytest.raises(DataError, match=r"p0.npz: array is compressed .*in_memory: true"):
        D.load_data(DataSpec(**data, in_memory=False))
    assert len(D.load_data(DataSpec(**data, in_memory=True)).x) == 20


def _spec(tmp_path, data) -> Path:
    (tmp_path / "m.py").write_text("def build(params):\n    pass\n")
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({
        "study": {"name": "s"}, "objective": {"model": "m.py:build", "data": data},
        "search_space": {"lr": {"type": "real", "low": 1e-3, "high": 0.1}}}))
    return path


def _bad(tmp_path, case):
    """A data section whose files are bad in one way; returns (data, what the line names)."""
    x, y = arrays(20)
    if case == "missing file":
        data = write_parts(tmp_path, "hdf5", [(x, y)])
        data["hdf5"].append(str(tmp_path / "gone.h5"))
        return data, "gone.h5"
    if case == "truncated":
        data = write_parts(tmp_path, "hdf5", [(x, y), (x, y)])
        f = tmp_path / "p1.h5"
        f.write_bytes(f.read_bytes()[:300])
        return data, "p1.h5"
    if case == "no dataset":
        data = write_parts(tmp_path, "hdf5", [(x, y)])
        return {**data, "features": "images"}, "p0.h5: no dataset 'images'"
    if case == "no branch":
        data = write_parts(tmp_path, "root", [(x, y)])
        return {**data, "labels": "is_w"}, "p0.root: tree 'Events' has no branch 'is_w'"
    if case == "shapes differ":
        data = write_parts(tmp_path, "npz", [(x, y), arrays(20, shape=(5,))])
        return data, "p1.npz: features have shape (5,)"
    if case == "labels not numbers":
        np.savez(tmp_path / "p0.npz", features=x, labels=np.array(["w"] * 20))
        return {"npz": [str(tmp_path / "p0.npz")]}, "p0.npz: labels 'labels' are not numbers"
    uproot = pytest.importorskip("uproot")
    import awkward as ak
    with uproot.recreate(tmp_path / "j.root") as f:
        f.mktree("Events", {"f0": "float32", "hits": "var * float64", "labels": "int64"})
        f["Events"].extend({"f0": x[:, 0], "labels": y,
                            "hits": ak.Array([[1.0] * (i % 3) for i in range(20)])})
    return ({"root": [str(tmp_path / "j.root")], "features": ["f0", "hits"]},
            "j.root: branch 'hits' is jagged")


BAD = ["missing file", "truncated", "no dataset", "no branch", "shapes differ",
       "labels not numbers", "jagged branch"]


@pytest.mark.parametrize("case", BAD)
def test_bad_data_is_refused_up_front_in_one_line_naming_file_and_field(tmp_path, case):
    from mpiopt.spec import load_spec

    data, named = _bad(tmp_path, case)
    with pytest.raises((SpecError, DataError)) as info:
        load_spec(_spec(tmp_path, data))
    assert named in str(info.value) and "\n" not in str(info.value)


def test_npz_files_whose_shapes_differ_are_named_in_memory_too(tmp_path):
    write_parts(tmp_path, "npz", [arrays(20), arrays(20, shape=(5,))])
    with pytest.raises(DataError, match=r"p1.npz: 'features' has samples of shape \(5,\)"):
        D.read_npz([str(tmp_path / "p*.npz")])


@pytest.mark.parametrize("cache", [False, True])
def test_a_file_changed_during_a_study_is_detected(tmp_path, cache):
    data = DataSpec(**write_parts(tmp_path, "hdf5", [arrays(20)]), in_memory=False,
                    cache=str(tmp_path / "node-local") if cache else None)
    D.load_data(data)
    time.sleep(0.01)
    with h5py.File(tmp_path / "p0.h5", "a") as h5:
        h5["extra"] = [1]
    with pytest.raises(DataError, match="p0.h5: changed since the study started"):
        D.load_data(data)


CACHE_RACE = """
import sys
from mpiopt.training.cache import local_copy
print(local_copy(sys.argv[1], sys.argv[2]))
"""


def test_the_cache_copies_a_file_once_when_ranks_start_at_once(tmp_path):
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(1 << 22))
    cache = tmp_path / "cache"
    procs = [subprocess.Popen([sys.executable, "-c", CACHE_RACE, str(src), str(cache)],
                              stdout=subprocess.PIPE, text=True) for _ in range(6)]
    outs = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs) and len(outs) == 1
    copy = Path(outs.pop())
    assert copy.read_bytes() == src.read_bytes()
    assert sorted(p.name for p in cache.iterdir()) == [copy.name]   # no temp or lock left


def test_a_stale_cache_lock_of_a_dead_copier_is_taken_over(tmp_path, monkeypatch):
    from mpiopt.training import cache as C

    src = tmp_path / "f.bin"
    src.write_bytes(b"abc")
    first = C.local_copy(src, tmp_path / "c")
    first.unlink()
    lock = first.with_name(first.name + ".lock")
    lock.write_text("elsewhere 1\n")
    os.utime(lock, (time.time() - 2 * C.STALE_S,) * 2)
    assert C.local_copy(src, tmp_path / "c").read_bytes() == b"abc"


@pytest.mark.parametrize("variant", ["root", "stream"])
def test_the_jets_example_variants_train(tmp_path, variant):
    """root.yaml and stream.yaml, on data their generator writes (small here)."""
    pytest.importorskip("tensorflow")
    import importlib.util
    import shutil

    from conftest import EXAMPLES, mpiopt

    jets = EXAMPLES / "jets"
    for name in ("model.py", f"{variant}.yaml"):
        shutil.copy(jets / name, tmp_path / name)
    spec = importlib.util.spec_from_file_location("jets_generate", jets / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.DATA, gen.JETS_PER_FILE = tmp_path / "data", 100
    if variant == "root":
        pytest.importorskip("uproot")
        assert len(gen.ensure_root()) == 4
    else:
        assert len(gen.ensure_big(0.002, part_jets=500)) == 4
    params = ["filters=4", "kernel_size=3", "dense_units=8", "learning_rate=0.003",
              "dropout=0.1", "training.epochs=1"]
    proc = mpiopt("train", tmp_path / f"{variant}.yaml", *[a for p in params for a in ("--set", p)],
                  cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "figure of merit: val_auc" in proc.stdout


def test_memory_per_rank_sees_the_rlimit_and_the_ranks_on_the_node():
    import resource

    code = "from mpiopt.training.data import memory_per_rank; print(int(memory_per_rank()))"
    limit = 3 << 30

    def limited():
        resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.getrlimit(resource.RLIMIT_DATA)[1]))

    out = subprocess.run([sys.executable, "-c", code], preexec_fn=limited, capture_output=True,
                         text=True, check=True).stdout
    assert int(out) <= limit
    env = dict(os.environ, MPI_LOCALNRANKS="1000", MPI_LOCALRANKID="0")
    many = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout
    node = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert int(many) <= node / 1000 + 1
