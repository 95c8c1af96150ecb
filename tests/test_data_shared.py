"""Data in memory held once per node by the ranks of a training communicator, under a
real mpiexec: the ranks see one array (a write by one is read by the other), and a read
that fails on the rank filling it fails every rank, none left waiting."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import BIN, subprocess_env  # noqa: E402
from test_data_stream import arrays, write_parts  # noqa: E402

pytest.importorskip("h5py")

SCRIPT = """
import json, sys
import numpy as np
from mpi4py import MPI
from mpiopt.spec import DataSpec
from mpiopt.training.data import load_data

comm = MPI.COMM_WORLD
files, out = json.loads(sys.argv[1]), sys.argv[2]


def load(spec):
    try:
        return load_data(spec, comm=comm)
    except TypeError:           # a load_data without comm: each rank its own copy
        return load_data(spec)


try:
    data = load(DataSpec(**files, in_memory=True))
except Exception as exc:
    result = {"error": str(exc)}
else:
    first, total = float(data.x[0, 0]), float(np.asarray(data.x, np.float64).sum())
    comm.Barrier()
    if comm.Get_rank() == 0:
        data.x[0, 0] = 12345.0      # written here, read there: one array, or two copies
    comm.Barrier()
    result = {"first": first, "seen": float(data.x[0, 0]), "shape": list(data.x.shape),
              "sum": total}
with open(f"{out}.{comm.Get_rank()}", "w") as f:
    json.dump(result, f)
"""


def run_ranks(tmp_path: Path, files: dict, ranks: int = 2) -> list[dict]:
    script = tmp_path / "load.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    proc = subprocess.run([str(BIN / "mpiexec"), "-n", str(ranks), sys.executable, str(script),
                           json.dumps(files), str(out)], env=subprocess_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return [json.loads(Path(f"{out}.{r}").read_text()) for r in range(ranks)]


def test_the_ranks_of_a_node_hold_one_in_memory_copy(tmp_path):
    parts = [arrays(n, s) for s, n in enumerate((50, 70, 30))]
    files = write_parts(tmp_path / "gz", "hdf5", parts, compressed=True)
    ranks = run_ranks(tmp_path, files)
    x = np.concatenate([p[0] for p in parts])
    for r in ranks:
        assert r["shape"] == list(x.shape) and r["first"] == float(x[0, 0])
        assert np.isclose(r["sum"], x.astype(np.float64).sum())
        assert r["seen"] == 12345.0          # rank 0's write, seen by rank 1: one array


def test_a_read_that_fails_on_the_filling_rank_fails_every_rank(tmp_path):
    parts = [arrays(n, s) for s, n in enumerate((50, 70))]
    files = write_parts(tmp_path / "gz", "hdf5", parts, compressed=True)
    broken = tmp_path / "gz" / "p1.h5"
    raw = bytearray(broken.read_bytes())
    with __import__("h5py").File(broken, "r") as h5:   # the first chunk's deflate stream
        offset = h5["features"].id.get_chunk_info(0).byte_offset
    raw[offset:offset + 64] = b"\xff" * 64
    broken.write_bytes(bytes(raw))
    first, second = run_ranks(tmp_path, files)
    assert first["error"].startswith(f"{broken}: features: cannot read it"), first
    assert second["error"].startswith("data: another rank on this node failed"), second
