"""ROOT files whose baskets are stored uncompressed are memory-mapped and read by sample
(mpiopt.training.baskets); the others go through uproot. Either way the numbers are
uproot's own, bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

from mpiopt.errors import DataError
from mpiopt.training.opening import open_source

uproot = pytest.importorskip("uproot")

BRANCHES = {"img": (np.float32, (4, 3)), "e": np.float64, "n": np.int32, "q": np.int16,
            "ok": np.bool_}
FEATURES = ["img", "e", "n", "q", "ok"]
SIZES = (7, 1000, 333, 1, 2659)      # one basket per branch and extend: uneven baskets


def columns(n, seed):
    rng = np.random.default_rng(seed)
    img = rng.normal(size=(n, 4, 3)).astype(np.float32)
    flat = img.reshape(n, -1)          # odd bits survive: NaN, -0, a denormal
    flat[::97, 0], flat[1::89, 1], flat[2::83, 2] = np.nan, -0.0, 1e-42
    return {"img": img, "e": rng.normal(size=n) * 1e300,
            "n": rng.integers(-2**31, 2**31 - 1, n).astype(np.int32),
            "q": rng.integers(-2**15, 2**15 - 1, n).astype(np.int16),
            "ok": rng.random(n) < 0.5, "label": rng.integers(0, 3, n)}


def write(path, compression):
    opts = {} if compression == "default" else {"compression": compression}
    with uproot.recreate(path, **opts) as f:
        f.mktree("Events", {**BRANCHES, "label": np.int64})
        for seed, n in enumerate(SIZES):
            f["Events"].extend(columns(n, seed))


def uproots(path) -> np.ndarray:
    """uproot's arrays of the features, side by side, as mpiopt's columns."""
    arrays = uproot.open(path)["Events"].arrays(FEATURES, library="np")
    n = len(arrays["e"])
    return np.concatenate([np.asarray(arrays[b]).reshape(n, -1) for b in FEATURES], axis=1)


def same_bits(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_uncompressed_baskets_are_mapped_and_give_uproots_numbers_bit_for_bit(tmp_path):
    write(tmp_path / "u.root", None)
    src = open_source("root", str(tmp_path / "u.root"), FEATURES, "label")
    x = src.mapped
    assert x is not None and src.reader is None and len(x.columns[0][1]) == len(SIZES)
    full = uproots(tmp_path / "u.root")
    n = len(full)
    assert n == sum(SIZES) and src.sample_shape == (16,) and src.dtype == full.dtype
    assert same_bits(x[:], full) and same_bits(src.read(0, n), full)
    rng = np.random.default_rng(5)
    for idx in (rng.integers(0, n, 700), np.sort(rng.integers(0, n, 300)), np.arange(0),
                np.array([n - 1, 0, -1, 6, 7, 1006, 1007, 1006]), np.arange(n)[::-1]):
        assert same_bits(x[idx], full[idx])
    for s in (slice(5, 1500), slice(1007, 1340), slice(0, 1), slice(4000, 4000),
              slice(3, n, 7), slice(None, None, -3)):
        assert same_bits(x[s], full[s])
    assert same_bits(x[1340], full[1340]) and same_bits(x[-1], full[-1])
    with pytest.raises(IndexError):
        x[np.array([n])]


@pytest.mark.parametrize("compression", ["default", "lz4"])
def test_compressed_baskets_are_read_through_uproot_as_before(tmp_path, compression):
    write(tmp_path / "z.root", uproot.LZ4(1) if compression == "lz4" else "default")
    src = open_source("root", str(tmp_path / "z.root"), FEATURES, "label")
    assert src.mapped is None and src.reader is not None
    full = uproots(tmp_path / "z.root")
    assert same_bits(src.read(0, len(full)), full)
    assert same_bits(src.read(1000, 1400), full[1000:1400])


def test_a_basket_whose_header_disagrees_with_its_branch_is_left_to_uproot(tmp_path):
    write(tmp_path / "h.root", None)
    seek = int(uproot.open(tmp_path / "h.root")["Events"]["e"].member("fBasketSeek")[1])
    data = bytearray((tmp_path / "h.root").read_bytes())
    objlen = int.from_bytes(data[seek + 6:seek + 10], "big")
    data[seek + 6:seek + 10] = (objlen + 8).to_bytes(4, "big")   # "compressed", it says
    (tmp_path / "h.root").write_bytes(bytes(data))
    src = open_source("root", str(tmp_path / "h.root"), FEATURES, "label")
    assert src.mapped is None and src.reader is not None


def test_a_truncated_uncompressed_file_is_named_in_one_line(tmp_path):
    write(tmp_path / "t.root", None)
    data = (tmp_path / "t.root").read_bytes()
    (tmp_path / "t.root").write_bytes(data[:len(data) // 2])
    with pytest.raises(DataError) as info:
        open_source("root", str(tmp_path / "t.root"), FEATURES, "label")
    assert "t.root" in str(info.value) and "\n" not in str(info.value)
