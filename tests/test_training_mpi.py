"""Training on several ranks under the venv's mpiexec, checked against one rank.

Each mpiexec run imports TensorFlow on every rank (seconds on a small machine), so one run
per rank count does several checks and writes their results as JSON; the single-rank
references run in the pytest process. Run directly, this file is that MPI worker.
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
from conftest import BIN, mpiopt  # noqa: E402
from test_training import write_case  # noqa: E402

PARAMS = {"width": 8, "lr": 0.02}


# ----------------------------------------------------------------------------- the checks
def allreduce_weights(comm, folder: Path) -> np.ndarray:
    """Weights after two epochs of allreduce steps over fixed global batches of 25 samples
    (110 samples: every batch splits unevenly over 2 ranks, the last one is short)."""
    from mpiopt.refs import load_callable
    from mpiopt.training.frameworks import keras_model as backend
    from mpiopt.training.allreduce import AllreduceSGD

    build = load_callable(f"{folder / 'tiny.py'}:build")
    x, y = load_callable(f"{folder / 'tiny.py'}:load")()
    model = backend.KerasModel(backend.build_model(build, PARAMS, 1), x)
    algorithm = AllreduceSGD(model, comm, SimpleNamespace(batch_size=25))
    algorithm.start()
    for epoch in range(2):
        algorithm.train_epoch(x[:110], y[:110], np.random.default_rng(epoch).permutation(110))
    return model.get_weights()


def figure(comm, spec_path: Path, **overrides) -> dict:
    from mpiopt.spec import load_spec
    from mpiopt.training import run_training

    spec = load_spec(spec_path, {f"training.{k}": v for k, v in overrides.items()})
    from mpiopt.trial import by_fold

    result = run_training(spec, PARAMS, comm, 11)
    result.pop("timing")
    result["intermediate"] = by_fold(result["intermediate"])     # (JSON: {fold: {epoch: v}})
    return result


def cases(folder: Path) -> Path:
    return write_case(folder / "case", training={"epochs": 2, "batch_size": 32})


def worker(out: Path, folder: Path) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_rank() == 0:     # one writer: a rank reading a half-written model file fails
        cases(folder)
    comm.Barrier()
    spec = folder / "case" / "spec.yaml"
    results = {}
    if comm.Get_size() == 2:
        results["weights"] = allreduce_weights(comm, spec.parent).tolist()
        results["kfold2"] = figure(comm, spec, kfold=2)  # concurrent: one rank per fold
        results["kfold3"] = figure(comm, spec, kfold=3)  # sequential on both ranks
        results["easgd"] = figure(comm, spec, mode="easgd", epochs=3, easgd_period=2)
    else:
        results["downpour"] = figure(comm, spec, mode="downpour", epochs=3)
        results["downpour_sync"] = figure(comm, spec, mode="downpour", epochs=3, sync_every=3)
    rank_results = comm.gather(results, root=0)
    if comm.Get_rank() == 0:
        same = all(json.dumps(r, sort_keys=True) == json.dumps(results, sort_keys=True) for r in rank_results)
        results["same_on_all_ranks"] = same
        out.write_text(json.dumps(results))


# ----------------------------------------------------------------------------- the tests
def run_worker(tmp_path: Path, np_: int) -> dict:
    out = tmp_path / f"out{np_}.json"
    cmd = [str(BIN / "mpiexec"), "-n", str(np_), sys.executable, __file__, str(out), str(tmp_path)]
    proc = subprocess.run(cmd, env=conftest.subprocess_env(), capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    pytest.importorskip("tensorflow")
    folder = tmp_path_factory.mktemp("two")
    return folder, run_worker(folder, 2)


@pytest.fixture(scope="module")
def three_ranks(tmp_path_factory):
    pytest.importorskip("tensorflow")
    folder = tmp_path_factory.mktemp("three")
    return folder, run_worker(folder, 3)


def test_allreduce_on_two_ranks_equals_one_rank(two_ranks):
    from mpi4py import MPI

    folder, results = two_ranks
    one = allreduce_weights(MPI.COMM_SELF, cases(folder).parent)
    two = np.array(results["weights"], dtype=np.float32)
    assert results["same_on_all_ranks"]
    assert np.abs(one).max() > 0.1
    np.testing.assert_allclose(two, one, rtol=1e-4, atol=2e-5)


def test_concurrent_folds_give_the_sequential_figure(two_ranks):
    from mpi4py import MPI

    folder, results = two_ranks
    alone = figure(MPI.COMM_SELF, cases(folder), kfold=2)
    assert results["kfold2"]["fold_values"] == pytest.approx(alone["fold_values"], abs=1e-6)
    assert results["kfold2"]["value"] == pytest.approx(alone["value"], abs=1e-6)
    # concurrent folds report each fold after each epoch
    assert {f: sorted(c) for f, c in results["kfold2"]["intermediate"].items()} == \
        {"0": ["1", "2"], "1": ["1", "2"]}


def test_sequential_folds_on_two_ranks_match_one_rank(two_ranks):
    from mpi4py import MPI

    folder, results = two_ranks
    alone = figure(MPI.COMM_SELF, cases(folder), kfold=3)
    assert len(results["kfold3"]["fold_values"]) == 3
    assert results["kfold3"]["value"] == pytest.approx(alone["value"], abs=0.02)
    assert results["kfold3"]["metrics"]["val_loss"] == pytest.approx(alone["metrics"]["val_loss"], rel=1e-3)


def learned(result) -> bool:
    """The training loss fell below chance level (ln 3 = 1.10), validation well above 1/3."""
    return result["metrics"]["loss"] < 1.0 and result["value"] > 0.5


def test_easgd_reduces_the_loss(two_ranks):
    assert learned(two_ranks[1]["easgd"])


def test_downpour_reduces_the_loss(three_ranks):
    folder, results = three_ranks
    assert results["same_on_all_ranks"]
    assert learned(results["downpour"]) and learned(results["downpour_sync"])


def test_mpiopt_train_on_one_and_two_ranks(tmp_path):
    pytest.importorskip("tensorflow")
    spec = write_case(tmp_path, training={"epochs": 2, "batch_size": 32})
    args = ("train", spec, "--set", "width=8", "--set", "lr=0.02", "--set", "training.epochs=2",
            "--seed", "3", "--format", "json")
    one = mpiopt(*args, check=True, cwd=tmp_path)          # its log goes there (tiny.train.log)
    two = mpiopt(*args, np=2, check=True, cwd=tmp_path)
    a, b = json.loads(one.stdout), json.loads(two.stdout)
    assert a["params"] == {"width": 8, "lr": 0.02}
    assert b["value"] == pytest.approx(a["value"], abs=0.02)
    assert b["metrics"]["val_loss"] == pytest.approx(a["metrics"]["val_loss"], rel=1e-3)
    table = mpiopt("train", spec, "--set", "width=4", np=2, check=True, cwd=tmp_path)
    assert "epoch" in table.stdout and "val_accuracy" in table.stdout
    assert (tmp_path / "tiny.train.log").is_file()
    assert table.stdout.count("figure of merit") == 1


if __name__ == "__main__":
    try:
        worker(Path(sys.argv[1]), Path(sys.argv[2]))
    except BaseException:        # one rank failing must end them all, not leave others waiting
        import traceback

        from mpi4py import MPI

        traceback.print_exc()
        MPI.COMM_WORLD.Abort(1)
