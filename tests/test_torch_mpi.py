"""A torch model on three ranks under the venv's mpiexec, checked against one rank.

One mpiexec run (torch is imported once per rank) makes every check and writes its
results as JSON; the single-rank references run in the pytest process. Checked: allreduce
follows the single-rank trajectory (the same weights up to float rounding); every
training mode (allreduce, downpour, easgd) trains through the flat buffers; and in every
mode a trial stopped at epoch 2 continues at epoch 3 from its checkpoint, allreduce with
the value of an uninterrupted run. Run directly, this file is the MPI worker.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conftest  # noqa: E402
from conftest import BIN  # noqa: E402
from test_torch_training import write_torch_case  # noqa: E402

MODES = ("allreduce", "downpour", "easgd")
PARAMS = {"width": 8}


def allreduce_weights(comm, folder: Path) -> np.ndarray:
    """Weights after two epochs of allreduce steps over fixed global batches of 25 samples
    (110 samples: every batch splits unevenly over the ranks, the last one is short)."""
    from mpiopt.spec import load_spec
    from mpiopt.refs import load_callable
    from mpiopt.training import frameworks
    from mpiopt.training.allreduce import AllreduceSGD

    spec = load_spec(folder / "spec.yaml")
    x, y = load_callable(f"{folder / 'tiny_torch.py'}:load")()
    build = load_callable(f"{folder / 'tiny_torch.py'}:build_plain")
    model = frameworks.build_model(build, PARAMS, 1, spec, None, x, y)
    algorithm = AllreduceSGD(model, comm, SimpleNamespace(batch_size=25))
    algorithm.start()
    for epoch in range(2):
        algorithm.train_epoch(x[:110], y[:110], np.random.default_rng(epoch).permutation(110))
    return model.get_weights()


def _run(comm, spec, folder, report=None):
    from mpiopt.artifacts import TrialArtifacts
    from mpiopt.training import run_training

    art = TrialArtifacts(checkpoints=str(folder / "ck"), every=1)
    return run_training(spec, PARAMS, comm, 7, report=report, artifacts=art)


def stopped_and_resumed(comm, path: Path, folder: Path, mode: str) -> dict:
    from mpiopt.errors import TrialCancelled
    from mpiopt.spec import load_spec

    spec = load_spec(path, {"training.mode": mode, "training.easgd_period": 2})
    plain = _run(comm, spec, folder / f"{mode}-plain") if mode == "allreduce" else None
    seen = []

    def report(epoch, value, fold):
        seen.append(epoch)
        return TrialCancelled("stop") if epoch == 2 and len(seen) == 2 else True

    try:
        _run(comm, spec, folder / mode, report)
        stopped = False
    except TrialCancelled:
        stopped = True
    resumed = _run(comm, spec, folder / mode, report)
    return {"stopped": stopped, "seen": seen, "plain": plain and plain["value"],
            "resumed": resumed["value"]}


def worker(out: Path, folder: Path) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_rank() == 0:     # one writer: a rank reading a half-written model file fails
        write_torch_case(folder / "case", training={"epochs": 4, "batch_size": 32})
    comm.Barrier()
    path = folder / "case" / "spec.yaml"
    results = {"weights": allreduce_weights(comm, path.parent).tolist()}
    for mode in MODES:
        results[mode] = stopped_and_resumed(comm, path, folder, mode)
    if comm.Get_rank() == 0:
        out.write_text(json.dumps(results))


@pytest.fixture(scope="module")
def three_ranks(tmp_path_factory):
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("torch3")
    out = folder / "out.json"
    cmd = [str(BIN / "mpiexec"), "-n", "3", sys.executable, __file__, str(out), str(folder)]
    proc = subprocess.run(cmd, env=conftest.subprocess_env(), capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return json.loads(out.read_text()), folder


def test_allreduce_on_three_ranks_follows_the_single_rank_trajectory(three_ranks):
    from mpi4py import MPI

    results, folder = three_ranks
    single = allreduce_weights(MPI.COMM_SELF, folder / "case")
    np.testing.assert_allclose(results["weights"], single, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_trains_and_continues_from_its_checkpoint(three_ranks, mode):
    r = three_ranks[0][mode]
    assert r["stopped"]
    assert r["seen"] == [1, 2, 2, 3, 4]     # 1-2, then from the checkpoint of 2: 3-4
    assert r["resumed"] > 0.6               # trained (three classes: chance is 1/3)
    if mode == "allreduce":
        assert r["resumed"] == pytest.approx(r["plain"], abs=1e-6)


if __name__ == "__main__":
    try:
        worker(Path(sys.argv[1]), Path(sys.argv[2]))
    except BaseException:        # one rank failing must end all three, not leave two waiting
        import traceback

        from mpi4py import MPI

        traceback.print_exc()
        MPI.COMM_WORLD.Abort(1)
