"""A pbt round on one rank with the tiny Keras model: it starts from its parent's
checkpoint (weights and optimizer state), keeps its own learning rate, trains up to its
round's last epoch and is valued there; a shape-changing explore is one clear error."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

pytest.importorskip("tensorflow")

from test_training import write_case  # noqa: E402


def _spec(tmp_path):
    from mpiopt.spec import load_spec

    path = write_case(tmp_path, training={"batch_size": 16})
    data = yaml.safe_load(path.read_text())
    data["search"] = {"algorithm": "pbt", "trials": 4, "seed": 1,
                      "pbt": {"population": 2, "interval": 2}}
    data["storage"] = {"artifacts": str(tmp_path / "store")}
    path.write_text(yaml.safe_dump(data))
    return load_spec(path)


def _round(spec, number, params, round_, parent=None):
    from mpi4py import MPI

    from mpiopt.artifacts import checkpoint, trial_artifacts
    from mpiopt.parallel.protocol import Trial
    from mpiopt.training import run_training
    from mpiopt.training.segment import segment_of

    trial = Trial(number, number, params, seed=11 + number, round=round_, parent=parent)
    result = run_training(spec, params, MPI.COMM_SELF, trial.seed,
                          artifacts=trial_artifacts(spec, number), segment=segment_of(spec, trial))
    return result, checkpoint.load(trial_artifacts(spec, number).fold_file(0))


def test_a_round_continues_its_parent_with_its_own_learning_rate(tmp_path):
    spec = _spec(tmp_path)
    first, parent = _round(spec, 0, {"width": 8, "lr": 0.05}, 0)
    assert parent["meta"]["epoch"] == 2 and first["epochs"] == 2
    assert first["value"] == parent["meta"]["history"][-1][0]      # the last epoch's value
    # learning rate 0: the weights cannot move, so the round ends where its parent did
    frozen, child = _round(spec, 1, {"width": 8, "lr": 0.0}, 1, parent=0)
    assert child["meta"]["epoch"] == 4 and list(frozen["intermediate"]) == [(0, e) for e in (1, 2, 3, 4)]
    n_weights = 8 * 6 + 8 + 8 * 3 + 3
    flat = lambda state: np.concatenate([np.ravel(a) for a in state])[:n_weights]
    np.testing.assert_allclose(flat(child["state"]), flat(parent["state"]), atol=1e-6)
    assert frozen["value"] == pytest.approx(first["value"], abs=1e-6)
    # the optimizer's state came along: its step count goes on from the parent's
    steps = [a for a in parent["state"] if np.shape(a) == ()]
    assert any(int(a) > 0 for a in steps)
    # another learning rate from the same parent trains on
    moved, other = _round(spec, 2, {"width": 8, "lr": 0.05}, 1, parent=0)
    assert not np.allclose(flat(other["state"]), flat(parent["state"]))


def test_a_round_whose_model_does_not_fit_its_parent_names_the_option(tmp_path):
    spec = _spec(tmp_path)
    _round(spec, 0, {"width": 8, "lr": 0.05}, 0)
    with pytest.raises(ValueError, match="search.pbt.explore"):
        _round(spec, 1, {"width": 4, "lr": 0.05}, 1, parent=0)


def test_a_missing_parent_checkpoint_is_an_error(tmp_path):
    spec = _spec(tmp_path)
    with pytest.raises(RuntimeError, match="checkpoint of parent trial 7"):
        _round(spec, 1, {"width": 8, "lr": 0.05}, 1, parent=7)
