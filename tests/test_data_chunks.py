"""Splits of whole chunks (data.split_by: auto over chunked or compressed files): each chunk
on one side of every split, dealt at random with the seed and balanced across the folds,
the same in memory and streamed, said in one line; a study stored before `auto` keeps
its folds by sample."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from mpiopt.spec import DataSpec, Spec, StoredSpec, TrainingSpec
from mpiopt.training import data as D
from mpiopt.training.folds import make_splits
from mpiopt.training.kfold import chunk_holdout_split, chunk_kfold_splits, kfold_splits

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_data_stream import arrays  # noqa: E402

h5py = pytest.importorskip("h5py")


def chunk_of(starts, idx):
    return np.searchsorted(starts, idx, side="right") - 1


def test_chunk_folds_hold_whole_chunks_dealt_at_random_and_balanced():
    """Files of one class each (signal, then background), as physics files often are:
    every fold still gets each class's share of the chunks, to within one."""
    sizes = [100] * 12 + [40] + [100] * 20 + [70]          # two files' chunks, the last short
    starts = np.r_[0, np.cumsum(sizes)]
    y = np.r_[np.ones(sum(sizes[:13]), int), np.zeros(sum(sizes[13:]), int)]
    folds = chunk_kfold_splits(y, starts, 3, seed=4)
    vals = [val for _, val in folds]
    assert sorted(np.concatenate(vals)) == list(range(len(y)))
    for train, val in folds:
        assert not set(chunk_of(starts, train)) & set(chunk_of(starts, val))
    counts = [len(np.unique(chunk_of(starts, v))) for v in vals]
    assert max(counts) - min(counts) <= 1
    for c, chunks in ((1, 13), (0, 21)):
        shares = [len(np.unique(chunk_of(starts, v[y[v] == c]))) for v in vals]
        assert max(shares) - min(shares) <= 1 and sum(shares) == chunks
    again = chunk_kfold_splits(y, starts, 3, seed=4)
    other = chunk_kfold_splits(y, starts, 3, seed=5)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(folds, again))
    assert not all(np.array_equal(a[1], b[1]) for a, b in zip(folds, other))


def test_a_chunk_holdout_holds_out_whole_chunks_of_each_class():
    starts = np.r_[0:4000:100, 4000]
    y = np.repeat([0, 1], 2000)
    train, val = chunk_holdout_split(y, starts, 0.1, seed=2)
    assert sorted(np.r_[train, val]) == list(range(4000))
    assert not set(chunk_of(starts, train)) & set(chunk_of(starts, val))
    assert [int(np.sum(y[val] == c)) for c in (0, 1)] == [200, 200]   # 2 chunks of each


def write_chunked(folder: Path, files=4, n=10_240, chunk=1024) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        x, y = arrays(n, seed=i)
        with h5py.File(folder / f"p{i}.h5", "w") as h5:
            h5.create_dataset("features", data=x, chunks=(chunk, x.shape[1]), compression="gzip")
            h5["labels"] = y
    return {"hdf5": [str(folder / "p*.h5")]}


@pytest.mark.parametrize("in_memory", [True, False])
def test_split_by_auto_splits_chunked_files_by_whole_chunks_and_says_so(tmp_path, in_memory):
    files = write_chunked(tmp_path)
    data = D.load_data(DataSpec(**files, in_memory=in_memory))
    assert np.array_equal(data.chunks, np.r_[0:40_960:1024, 40_960])
    for training in (TrainingSpec(kfold=3), TrainingSpec(holdout=0.25)):
        splits = make_splits(data, training, 7)
        for train, val in splits.pairs:
            assert not set(chunk_of(data.chunks, train)) & set(chunk_of(data.chunks, val))
    by_sample = D.load_data(DataSpec(**files, in_memory=in_memory, split_by="sample"))
    assert by_sample.chunks is None
    pairs = make_splits(by_sample, TrainingSpec(kfold=3), 7).pairs
    expected = kfold_splits(by_sample.y, 3, 7)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(pairs, expected))
    lines = D.describe(DataSpec(**files, in_memory=in_memory))
    assert any(line.startswith("data: split_by: whole chunks (40 of 1024 samples; auto: ")
               for line in lines), lines


def test_too_few_chunks_or_files_read_in_place_split_by_sample(tmp_path):
    """Fewer than 10 chunks a fold: by sample; plain (memory-mapped) files: by sample."""
    files = write_chunked(tmp_path / "gz")
    data = D.load_data(DataSpec(**files))
    pairs = make_splits(data, TrainingSpec(kfold=5), 3).pairs          # 8 chunks a fold
    expected = kfold_splits(data.y, 5, 3)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(pairs, expected))
    (tmp_path / "plain").mkdir()
    x, y = arrays(20_000)
    with h5py.File(tmp_path / "plain" / "p.h5", "w") as h5:
        h5["features"], h5["labels"] = x, y
    plain = D.load_data(DataSpec(hdf5=[str(tmp_path / "plain" / "p.h5")]))
    assert plain.chunks is None
    assert not any("split_by" in line
                   for line in D.describe(DataSpec(hdf5=[str(tmp_path / "plain" / "p.h5")])))


def test_a_study_stored_before_split_by_auto_keeps_its_folds_by_sample(tmp_path):
    """A spec stored without data.split_by ran with folds by sample: read back, it still
    splits by sample (its folds on resume are the ones it trained on); a spec stored since
    keeps `auto`."""
    files = write_chunked(tmp_path)
    raw = {"study": {"name": "s"},
           "objective": {"model": "m.py:build", "data": {"hdf5": files["hdf5"]}},
           "search_space": {"u": {"type": "real", "low": 0.0, "high": 1.0}},
           "search": {"algorithm": "random", "trials": 1}, "training": {"kfold": 3}}
    (tmp_path / "m.py").write_text("def build(params):\n    return None\n")
    old = Spec.from_dict(StoredSpec(yaml.safe_dump(raw)).data, base_dir=tmp_path)
    assert old.objective.data.split_by == "sample"
    data = D.load_data(old.objective.data)
    assert data.chunks is None
    new = Spec.from_dict(raw, base_dir=tmp_path)
    assert new.objective.data.split_by == "auto"
    assert yaml.safe_load(new.to_yaml())["objective"]["data"]["split_by"] == "auto"


def test_regression_targets_deal_chunks_unstratified():
    starts = np.r_[0:3000:100, 3000]
    y = np.random.default_rng(1).normal(size=3000)
    folds = chunk_kfold_splits(y, starts, 3, seed=1)
    assert sorted(np.concatenate([v for _, v in folds])) == list(range(3000))
    assert sorted(len(v) for _, v in folds) == [1000, 1000, 1000]


def test_the_chunk_splits_are_the_ones_studies_already_ran():
    """Digests of chunk splits studies have trained on, and the block they are made of: a
    study resumed across versions trains its folds on the same samples (a new rule, or
    another stream.BLOCK, would need its own default and STORED_DEFAULTS' entry)."""
    from test_kfold import _digest

    from mpiopt.training import chunks, stream

    assert stream.BLOCK == chunks.BLOCK == 1024 and chunks.MIN_CHUNKS == 10
    starts = np.r_[0:10_007:97, 10_007]
    y = np.random.default_rng(0).choice(3, 10_007, p=[0.6, 0.3, 0.1])
    assert _digest([a for pair in chunk_kfold_splits(y, starts, 5, 11)
                    for a in pair]) == DIGESTS[0]
    assert _digest(chunk_holdout_split(y, starts, 0.1, 3)) == DIGESTS[1]


DIGESTS = ("1f3d146a7360ac40", "1317f6882b4b2466")
