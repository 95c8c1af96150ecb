"""Checkpoints of every training mode on three ranks under the venv's mpiexec: a trial
stopped at epoch 2 continues at epoch 3 from its checkpoint. allreduce ends with the
uninterrupted value; downpour (asynchronous: arrival order varies) and easgd (only the
center and rank 0's worker are kept) end trained. Run directly, this file is the worker.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conftest  # noqa: E402
from conftest import BIN  # noqa: E402
from test_training import write_case  # noqa: E402

MODES = ("allreduce", "downpour", "easgd")


def _run(comm, spec, folder, report=None):
    from mpiopt.artifacts import TrialArtifacts
    from mpiopt.training import run_training

    art = TrialArtifacts(checkpoints=str(folder / "ck"), every=1)
    return run_training(spec, {"width": 8, "lr": 0.02}, comm, 7, report=report, artifacts=art)


def worker(out: Path, folder: Path) -> None:
    from mpi4py import MPI

    from mpiopt.errors import TrialCancelled
    from mpiopt.spec import load_spec

    comm = MPI.COMM_WORLD
    if comm.Get_rank() == 0:     # one writer: a rank reading a half-written model file fails
        write_case(folder / "case", training={"epochs": 4, "batch_size": 32})
    comm.Barrier()
    path = folder / "case" / "spec.yaml"
    results = {}
    for mode in MODES:
        spec = load_spec(path, {"training.mode": mode, "training.easgd_period": 2})
        plain = _run(comm, spec, folder / f"{mode}-plain") if mode == "allreduce" else None
        seen = []

        def report(epoch, value, fold=0):
            seen.append(epoch)
            return TrialCancelled("stop") if epoch == 2 and len(seen) == 2 else True

        try:
            _run(comm, spec, folder / mode, report)
            stopped = False
        except TrialCancelled:
            stopped = True
        resumed = _run(comm, spec, folder / mode, report)
        results[mode] = {"stopped": stopped, "seen": seen, "plain": plain and plain["value"],
                         "resumed": resumed["value"], "loss": resumed["metrics"]["loss"]}
    if comm.Get_rank() == 0:
        out.write_text(json.dumps(results))


@pytest.fixture(scope="module")
def three_ranks(tmp_path_factory):
    pytest.importorskip("tensorflow")
    folder = tmp_path_factory.mktemp("ckpt3")
    out = folder / "out.json"
    cmd = [str(BIN / "mpiexec"), "-n", "3", sys.executable, __file__, str(out), str(folder)]
    proc = subprocess.run(cmd, env=conftest.subprocess_env(), capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_continues_from_its_checkpoint(three_ranks, mode):
    r = three_ranks[mode]
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
