"""The jets data: generated into data/*.h5 on first use, read back as an HDF5 file list.

Once the files exist, the spec can name them directly instead of this loader, as MPI_Learn
users do with their own files:

    data: {hdf5: data/jets_*.h5, features: images, labels: labels}
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def load():
    """(images, labels) of every file; files are generated first when missing."""
    from generate import ensure

    from mpiopt.training.data import read_hdf5

    return read_hdf5([str(f) for f in ensure()], features="images", labels="labels")
