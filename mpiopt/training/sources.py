"""One data file opened for streaming: its labels in memory, its features read on demand.

A Source knows its file's sample count, the shape and dtype of one sample's features, the
labels (whole: stratified K-fold needs all of them; memory-mapped where the features are,
so a rank's copy is only the one the training concatenates) and how to read the features
of some samples. Formats:

- `npy`: a directory holding `<features>.npy` and `<labels>.npy`, memory-mapped
  (np.load mmap_mode="r");
- `npz`: an uncompressed member (np.savez) is memory-mapped at its offset inside the zip;
  a compressed one (np.savez_compressed) cannot be read by sample and is refused for
  streaming (save with np.savez, or use `in_memory: true`);
- `hdf5`: a contiguous dataset without filters is memory-mapped at its offset; a chunked
  or compressed one is read through h5py, by sample ranges;
- `root`: flat branches of a TTree, one column per branch (a branch with a fixed-size
  array per entry gives that many columns). Branches whose baskets are all stored
  uncompressed are memory-mapped and read by sample (mpiopt.training.baskets states the
  rule); the others are read through uproot by entry ranges (whole clusters). Jagged
  branches (a variable number of values per entry) are refused, naming the branch.

Memory-mapped features live in the page cache, which every rank on the node shares: one
copy per node, however many ranks read it. Every failure names the file and the field.
"""
from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass, field

import numpy as np

from mpiopt.errors import DataError
from mpiopt.training.baskets import mapped_branches


@dataclass
class Source:
    file: str
    n: int
    sample_shape: tuple
    dtype: np.dtype
    labels: np.ndarray
    mapped: np.ndarray | None = None  # the features, memory-mapped, when the format allows
    reader: object = None             # read(start, stop) -> ndarray, for the others
    extra: dict = field(default_factory=dict)
    # the others: where their blocks start (the format's own: HDF5 chunks, ROOT clusters,
    # merged up to at least `BLOCK` samples), and n at the end
    bounds: np.ndarray | None = None

    def blocks(self, block: int) -> np.ndarray:
        """Block boundaries for reads by range: the format's own, at least `block` apart."""
        natural = self.bounds if self.bounds is not None else np.arange(0, self.n, block)
        out, last = [0], 0
        for b in natural[1:]:
            if b - last >= block and b < self.n:
                out.append(int(b))
                last = b
        return np.array(out + [self.n])

    @property
    def sample_bytes(self) -> int:
        return int(np.prod(self.sample_shape, dtype=np.int64)) * self.dtype.itemsize

    def read(self, start: int, stop: int) -> np.ndarray:
        """Features of samples [start, stop) of this file."""
        if self.mapped is not None:
            return np.asarray(self.mapped[start:stop])
        with named(self.file, "features"):
            return self.reader(start, stop)


class named:
    """Any failure inside, as a DataError naming the file and the field."""

    def __init__(self, file, what: str):
        self.file, self.what = file, what

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or isinstance(exc, DataError) or not isinstance(exc, Exception):
            return False
        text = str(exc).splitlines()[0][:300] if str(exc) else ""
        raise DataError(f"{self.file}: {self.what}: cannot read it ({type(exc).__name__}: "
                        f"{text})") from exc


def open_source(kind: str, file: str, features, labels: str, tree: str = "Events") -> Source:
    """The Source of one file (for npy: one directory)."""
    if not os.path.exists(file):
        raise DataError(f"{file}: no such file")
    opener = {"npy": _npy, "npz": _npz, "hdf5": _hdf5, "root": _root}[kind]
    with named(file, "opening"):
        src = opener(file, features, labels, tree)
    _check_labels(src, labels)
    return src


def _check_labels(src: Source, labels: str) -> None:
    if src.labels.dtype.kind not in "biuf":
        raise DataError(f"{src.file}: labels '{labels}' are not numbers "
                        f"(dtype {src.labels.dtype})")
    if len(src.labels) != src.n:
        raise DataError(f"{src.file}: {src.n} samples of features but {len(src.labels)} "
                        f"labels in '{labels}'")


def _made(file, mapped, labels, **kw) -> Source:
    if isinstance(mapped, np.memmap):   # the same pages, without np.memmap's Python-level
        mapped = mapped.view(np.ndarray)  # indexing: a batch indexes dozens of files
    return Source(file, len(mapped), tuple(mapped.shape[1:]), mapped.dtype,
                  np.asarray(labels), mapped=mapped, **kw)


def _npy(directory, features, labels, tree) -> Source:
    paths = {}
    for what, name in (("features", features), ("labels", labels)):
        paths[what] = os.path.join(directory, f"{name}.npy")
        if not os.path.exists(paths[what]):
            raise DataError(f"{directory}: no {name}.npy (the {what})")
    with named(paths["features"], "features"):
        x = np.load(paths["features"], mmap_mode="r")
    with named(paths["labels"], "labels"):
        y = np.load(paths["labels"], mmap_mode="r")
    return _made(directory, x, y)


def _npz(file, features, labels, tree) -> Source:
    with zipfile.ZipFile(file) as z:
        names = [n[:-4] for n in z.namelist() if n.endswith(".npy")]
        for name in (features, labels):
            if name not in names:
                raise DataError(f"{file}: no array '{name}' (has {', '.join(names)})")
        info = z.getinfo(f"{features}.npy")
        shape, fortran, dtype, _ = _member_header(z, info)
        if fortran or dtype.hasobject or not shape:
            raise DataError(f"{file}: array '{features}' is Fortran-ordered, a scalar or "
                            f"holds objects")
        y = _mapped_member(file, z, f"{labels}.npy")
        mapped = _mapped_member(file, z, f"{features}.npy")
    if y is None:
        with np.load(file) as npz:
            y = npz[labels]
    if mapped is not None:
        return _made(file, mapped, y)

    def read(lo, hi):        # np.savez_compressed: only whole (the in-memory path)
        with np.load(file) as npz:
            return npz[features][lo:hi]

    return Source(file, shape[0], tuple(shape[1:]), dtype, np.asarray(y), reader=read, extra={"compressed": True})


def _member_header(z: zipfile.ZipFile, info) -> tuple:
    """(shape, fortran order, dtype) of an .npy member, and the header's length."""
    with z.open(info) as member:
        version = np.lib.format.read_magic(member)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = read_header(member)
        return shape, fortran, dtype, member.tell()


def _mapped_member(file, z: zipfile.ZipFile, name: str):
    """The .npy member `name`, memory-mapped where it lies in the zip; None when it is
    compressed (or not a plain C-ordered array)."""
    info = z.getinfo(name)
    shape, fortran, dtype, header = _member_header(z, info)
    if info.compress_type != zipfile.ZIP_STORED or fortran or dtype.hasobject or not shape:
        return None
    with open(file, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)
    start = info.header_offset + 30 + int.from_bytes(local[26:28], "little") \
        + int.from_bytes(local[28:30], "little")
    return np.memmap(file, dtype=dtype, mode="r", offset=start + header, shape=shape)


def _hdf5(file, features, labels, tree) -> Source:
    import h5py

    with h5py.File(file, "r") as h5:
        for name in (features, labels):
            if name not in h5:
                raise DataError(f"{file}: no dataset '{name}' (has {', '.join(h5.keys())})")
        ds = h5[features]
        y = _mapped_dataset(file, h5[labels])
        offset = ds.id.get_offset()
        plain = ds.chunks is None and offset is not None and not ds.compression
        shape, dtype, ds_chunks = ds.shape, ds.dtype, ds.chunks
    if plain:
        return _made(file, np.memmap(file, dtype=dtype, mode="r", offset=offset, shape=shape), y)
    handle: dict = {}

    def read(start, stop):
        if "ds" not in handle:           # one open file per process, reused
            handle["ds"] = h5py.File(file, "r")[features]
        return handle["ds"][start:stop]

    rows = chunks[0] if (chunks := ds_chunks) else 1
    return Source(file, shape[0], tuple(shape[1:]), np.dtype(dtype), np.asarray(y), reader=read, bounds=np.arange(0, shape[0], rows))


def _mapped_dataset(file, ds) -> np.ndarray:
    """An HDF5 dataset memory-mapped when it is contiguous and unfiltered, else read."""
    offset = ds.id.get_offset()
    if ds.chunks is None and offset is not None and not ds.compression and ds.shape:
        return np.memmap(file, dtype=ds.dtype, mode="r", offset=offset, shape=ds.shape)
    return ds[()]


def _root(file, features, labels, tree) -> Source:
    try:
        import uproot
    except ImportError as e:
        raise DataError("data.root needs uproot: pip install 'mpiopt[uproot]'") from e
    branches = [features] if isinstance(features, str) else list(features)
    t = _tree(uproot.open(file, array_cache=None), file, tree)
    names = list(t.keys())
    for name in branches + [labels]:
        if name not in names:
            raise DataError(f"{file}: tree '{tree}' has no branch '{name}' "
                            f"(has {', '.join(names)})")
    head = t.arrays(branches, entry_stop=min(2, t.num_entries), library="np")
    for name in branches:
        if head[name].dtype == object:
            raise DataError(f"{file}: branch '{name}' is jagged (a variable number of values "
                            f"per entry); only flat branches are read: flatten or pad it")
    y = t.arrays([labels], library="np")[labels]
    mapped = mapped_branches(file, t, branches)
    if mapped is not None:
        return _made(file, mapped, y)
    first = _columns(t, branches, 0, min(1, t.num_entries))
    handle: dict = {}

    def read(start, stop):
        if "tree" not in handle:
            handle["tree"] = _tree(uproot.open(file, array_cache=None), file, tree)
        return _columns(handle["tree"], branches, start, stop)

    try:      # a TTree's clusters: the entry ranges its baskets share
        bounds = np.asarray(t.common_entry_offsets(), dtype=np.int64)
    except AttributeError:
        bounds = None
    return Source(file, int(t.num_entries), tuple(first.shape[1:]), first.dtype, y,
                  reader=read, bounds=bounds)


def _tree(root_file, file, name):
    if name not in root_file:
        raise DataError(f"{file}: no tree '{name}' (has {', '.join(root_file.keys())})")
    return root_file[name]


def _columns(t, branches, start, stop) -> np.ndarray:
    """The branches of entries [start, stop) side by side, one row per entry."""
    arrays = t.arrays(branches, entry_start=start, entry_stop=stop, library="np")
    cols = [np.asarray(arrays[b]).reshape(stop - start, -1) for b in branches]
    return np.concatenate(cols, axis=1) if len(cols) > 1 else cols[0]
