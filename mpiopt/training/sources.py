"""One data file opened for streaming: its labels in memory, its features read on demand.

A Source knows its file's sample count, the shape and dtype of one sample's features, the
labels (whole: stratified K-fold needs all of them; memory-mapped where the features are,
so a rank's copy is only the one the training concatenates), the event weights when the
spec names them, and how to read the features of some samples. Formats:

- `npy`: a directory holding `<features>.npy` and `<labels>.npy`, memory-mapped
  (np.load mmap_mode="r");
- `npz`: an uncompressed member (np.savez) is memory-mapped at its offset inside the zip;
  a compressed one (np.savez_compressed) cannot be read by sample and is refused for
  streaming (save with np.savez, or use `in_memory: true`);
- `hdf5`: a contiguous dataset without filters is memory-mapped at its offset; a chunked
  or compressed one is read by sample ranges, its gzip chunks inflated by libdeflate
  (mpiopt.training.hdf5chunks), other filters through h5py;
- `root`: a TTree or an RNTuple, whichever the file holds under `tree`
  (mpiopt.training.rootfiles): flat branches give one column each, collections of jagged
  branches are padded per cluster.

mpiopt.training.opening opens a file in its format and applies the weights and the
selection.

Memory-mapped features live in the page cache, which every rank on the node shares: one
copy per node, however many ranks read it. Every failure names the file and the field.
"""
from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from mpiopt.errors import DataError
from mpiopt.training.hdf5chunks import chunk_reader


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
    weights: np.ndarray | None = None   # objective.data.weights, one per sample
    inputs: dict = field(default_factory=dict)   # collections: name -> Source, same samples
    columns: "Columns | None" = None  # the file's per-event values by name
    events: int | None = None         # the file's entries before the selection

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

    @property
    def nbytes(self) -> int:
        """What the samples take in memory: features, collections, labels and weights."""
        own = self.n * self.sample_bytes + self.labels.nbytes
        own += 0 if self.weights is None else self.weights.nbytes
        return own + sum(s.n * s.sample_bytes for s in self.inputs.values())

    def read(self, start: int, stop: int) -> np.ndarray:
        """Features of samples [start, stop) of this file."""
        if self.mapped is not None:
            return np.asarray(self.mapped[start:stop])
        with named(self.file, "features"):
            return self.reader(start, stop)


@dataclass(frozen=True)
class Reading:
    """What is read of each file: the data section's fields that concern one file
    (hashable: with the file, the key of a file opened once per process)."""

    features: str | tuple | None = "features"
    labels: str = "labels"
    tree: str = "Events"
    weights: str | None = None
    selection: str | None = None
    collections: tuple = ()     # the spec's collections (name, branches, length, ...)

    @classmethod
    def of(cls, data) -> "Reading":
        features = data.features
        if isinstance(features, str) and data.root:
            features = (features,)
        return cls(tuple(features) if isinstance(features, list) else features,
                   data.labels, data.tree, data.weights, data.selection, tuple(data.collections))


@dataclass
class Columns:
    """A file's per-event values by name (`objective.data.selection` and `weights` read
    them): `holder` has `names`, each a `word` (branch, dataset, array)."""

    holder: str
    word: str
    names: list
    read: Callable[[str], np.ndarray]

    def get(self, file, where: str, name: str, events: int) -> np.ndarray:
        """One number per event of column `name`, or one line naming file and field."""
        if name not in self.names:
            raise DataError(f"{file}: {where}: {self.holder} has no {self.word} '{name}' "
                            f"(has {', '.join(self.names)})")
        with named(file, where):
            values = np.asarray(self.read(name))
        if values.ndim == 2 and values.shape[1] == 1:
            values = values[:, 0]
        if values.dtype == object:
            raise DataError(f"{file}: {where}: {self.word} '{name}' is jagged (a variable "
                            f"number of values per event); it needs one number per event")
        if values.dtype.kind not in "biuf":
            raise DataError(f"{file}: {where}: {self.word} '{name}' is not numbers "
                            f"(dtype {values.dtype})")
        if values.shape != (events,):
            raise DataError(f"{file}: {where}: {self.word} '{name}' has shape "
                            f"{values.shape}, not one number for each of the {events} events")
        return values


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


def check_labels(src: Source, labels: str) -> None:
    if src.labels.dtype.kind not in "biuf":
        raise DataError(f"{src.file}: labels '{labels}' are not numbers "
                        f"(dtype {src.labels.dtype})")
    if len(src.labels) != src.n:
        raise DataError(f"{src.file}: {src.n} samples of features but {len(src.labels)} "
                        f"labels in '{labels}'")


def made(file, mapped, labels, **kw) -> Source:
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
    return made(directory, x, y)


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
        return made(file, mapped, y)

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
        return made(file, np.memmap(file, dtype=dtype, mode="r", offset=offset, shape=shape), y)
    handle: dict = {}

    def read(start, stop):
        if "read" not in handle:         # one open file per process, reused
            handle["read"] = chunk_reader(h5py.File(file, "r")[features])
        return handle["read"](start, stop)

    rows = chunks[0] if (chunks := ds_chunks) else 1
    return Source(file, shape[0], tuple(shape[1:]), np.dtype(dtype), np.asarray(y), reader=read, bounds=np.arange(0, shape[0], rows))


def _mapped_dataset(file, ds) -> np.ndarray:
    """An HDF5 dataset memory-mapped when it is contiguous and unfiltered, else read."""
    offset = ds.id.get_offset()
    if ds.chunks is None and offset is not None and not ds.compression and ds.shape:
        return np.memmap(file, dtype=ds.dtype, mode="r", offset=offset, shape=ds.shape)
    return ds[()]


# ----------------------------------------------------------------- per-event columns
def _npy_columns(directory) -> Columns:
    names = sorted(f[:-4] for f in os.listdir(directory) if f.endswith(".npy"))
    return Columns("the directory", "array", names,
                   lambda name: np.load(os.path.join(directory, f"{name}.npy"), mmap_mode="r"))


def _npz_columns(file) -> Columns:
    with zipfile.ZipFile(file) as z:
        names = [n[:-4] for n in z.namelist() if n.endswith(".npy")]

    def read(name):
        with np.load(file) as npz:
            return npz[name]

    return Columns("the file", "array", names, read)


def _hdf5_columns(file) -> Columns:
    import h5py

    with h5py.File(file, "r") as h5:
        names = list(h5.keys())

    def read(name):
        with h5py.File(file, "r") as h5:
            return h5[name][()]

    return Columns("the file", "dataset", names, read)


OPENERS = {"npy": _npy, "npz": _npz, "hdf5": _hdf5}
COLUMNS = {"npy": _npy_columns, "npz": _npz_columns, "hdf5": _hdf5_columns}
