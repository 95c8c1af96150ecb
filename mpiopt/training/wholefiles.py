"""Whole data files read into arrays for a Python loader (MPI_Learn's style: a list of
files concatenated), and an HDF5 file written atomically. The study's own file lists are
read by mpiopt.training.data, straight into one array or streamed."""
from __future__ import annotations

import errno
import glob
import os
import zipfile
import zlib
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from mpiopt.errors import DataError, SpecError


def check_pair(x, y, what: str) -> None:
    """As many labels as samples of features, and some."""
    if len(x) != len(y):
        raise ValueError(f"{what}: {len(x)} samples of features but {len(y)} labels")
    if len(x) == 0:
        raise ValueError(f"{what}: no samples")


def expand(patterns, base_dir=None, directories: bool = False) -> list[Path]:
    """Paths and globs (relative to base_dir) -> files (or directories), each pattern's
    matches sorted."""
    files = []
    for pattern in patterns:
        path = Path(pattern).expanduser()
        path = path if path.is_absolute() else Path(base_dir or ".") / path
        matches = sorted(m for m in glob.glob(str(path)) if Path(m).is_dir() == directories)
        if not matches:
            what = "directory" if directories else "file"
            raise SpecError(f"objective.data: no {what} matches {pattern!r}")
        files.extend(Path(m) for m in matches)
    return files


@contextmanager
def _named(file):
    """A failure to read one data file, as an error that names it."""
    try:
        yield
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as e:
        if isinstance(e, OSError) and e.errno == errno.EAGAIN and "lock" in str(e):
            raise DataError(f"{file}: another process holds HDF5's lock on it (it has the file "
                            "open for writing; HDF5_USE_FILE_LOCKING=FALSE reads it regardless)"
                            ) from e
        raise DataError(f"{file}: cannot read it ({type(e).__name__}: {e})") from e  # cut, foreign


def read_npz(patterns, features="features", labels="labels", base_dir=None):
    """Concatenate the features and labels arrays of .npz files."""
    xs, ys = [], []
    for file in expand(patterns, base_dir):
        with _named(file), np.load(file) as npz:
            for name in (features, labels):
                if name not in npz.files:
                    raise SpecError(f"{file}: no array '{name}' (has {', '.join(npz.files)})")
            xs.append(npz[features])
            ys.append(npz[labels])
            _same_shape(xs, file, features)
    return _concat(xs, ys)


def _same_shape(xs: list, file, name: str) -> None:
    """Every file's samples have the first file's shape, or one line names the file."""
    if len(xs) > 1 and xs[-1].shape[1:] != xs[0].shape[1:]:
        raise DataError(f"{file}: '{name}' has samples of shape {xs[-1].shape[1:]}, the files "
                        f"before it {xs[0].shape[1:]}")


def read_hdf5(patterns, features="features", labels="labels", base_dir=None):
    """Concatenate the features and labels datasets of a list of HDF5 files (MPI_Learn style)."""
    import h5py

    xs, ys = [], []
    for file in expand(patterns, base_dir):
        with _named(file), h5py.File(file, "r") as h5:
            for name in (features, labels):
                if name not in h5:
                    raise SpecError(f"{file}: no dataset '{name}' (has {', '.join(h5.keys())})")
            xs.append(h5[features][()])
            ys.append(h5[labels][()])
            _same_shape(xs, file, features)
    return _concat(xs, ys)


def _concat(xs, ys):
    x, y = np.concatenate(xs), np.concatenate(ys)
    check_pair(x, y, "data files")
    return x, y


def write_hdf5(file, x, y, features="features", labels="labels") -> None:
    """Write one HDF5 file atomically (several ranks may generate the same file at once)."""

    import h5py

    file = Path(file)
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_name(f".{file.name}.{os.getpid()}.tmp")
    with h5py.File(tmp, "w") as h5:
        h5.create_dataset(features, data=x, compression="gzip")
        h5.create_dataset(labels, data=y)
    os.replace(tmp, file)
