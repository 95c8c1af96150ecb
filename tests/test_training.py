"""The trainer on one rank with a tiny Keras model: results, early stopping, pruning, errors.

Kept tiny (300 samples, one hidden layer of 8, a few epochs): TensorFlow is imported once
for the module and each training takes about a second.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytest.importorskip("tensorflow")

MODEL_SOURCE = '''
import numpy as np


def build(params):
    import keras
    if params.get("width", 8) < 1:
        raise ValueError("width must be positive")
    model = keras.Sequential([
        keras.Input((6,)),
        keras.layers.Dense(params.get("width", 8), activation="tanh"),
        keras.layers.Dense(3, activation="softmax"),
    ])
    model.compile(keras.optimizers.Adam(params.get("lr", 0.02)), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


def build_own_step(params):
    """A model whose class overrides train_step (a GAN's way in Keras)."""
    import keras

    class OwnStep(keras.Sequential):
        def train_step(self, data):
            return super().train_step(data)

    model = OwnStep([keras.Input((6,)), keras.layers.Dense(3, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy")
    return model


def build_paced(params):
    """build's model behind a layer that sleeps 20 ms in each training step where PACED is
    set (no CPU, no change of any value): a test that acts mid-trial sets it in the job it
    acts on, so the trial lasts seconds however loaded the machine that watches it."""
    import os
    import time

    import keras
    import tensorflow as tf

    class Pause(keras.layers.Layer):
        def call(self, x, training=False):
            if training and os.environ.get("PACED"):
                tf.py_function(lambda: time.sleep(0.02), [], [])
            return x

    tiny = build(params)
    model = keras.Sequential([keras.Input((6,)), Pause(), *tiny.layers])
    model.compile(tiny.optimizer, tiny.loss, metrics=["accuracy"])
    return model


def load(n=300):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 6)).astype("float32")
    y = np.digitize(x[:, 0] + 0.5 * x[:, 1], [-0.5, 0.5]).astype("int64")
    return x, y


def load_with_validation():
    x, y = load(360)
    return x[:300], y[:300], x[300:], y[300:]
'''


def write_case(folder: Path, training: dict | None = None, metric="val_accuracy",
               direction="maximize", loader="load") -> Path:
    """A model file and a spec for it; returns the spec path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny.py").write_text(MODEL_SOURCE)
    spec = {
        "study": {"name": "tiny"},
        "objective": {"model": "tiny.py:build", "data": {"loader": f"tiny.py:{loader}"},
                      "metric": metric, "direction": direction},
        "search_space": {"width": {"type": "integer", "low": 2, "high": 16},
                         "lr": {"type": "real", "low": 1e-4, "high": 0.1, "prior": "log-uniform"}},
        "search": {"algorithm": "random", "trials": 2},
        "training": {"epochs": 3, "batch_size": 32, **(training or {})},
    }
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def train(tmp_path, params=None, report=None, **case):
    from mpi4py import MPI

    from mpiopt.spec import load_spec
    from mpiopt.training import run_training

    spec = load_spec(write_case(tmp_path, **case))
    return run_training(spec, params or {"width": 8, "lr": 0.02}, MPI.COMM_SELF, 5, report=report)


def test_kfold_result_has_every_field_and_learns(tmp_path):
    result = train(tmp_path, training={"kfold": 2})
    assert set(result) >= {"value", "value_std", "fold_values", "metrics", "epochs", "intermediate"}
    assert len(result["fold_values"]) == 2
    assert result["value"] == pytest.approx(sum(result["fold_values"]) / 2)
    assert result["metrics"]["val_accuracy"] == pytest.approx(result["value"])
    assert set(result["metrics"]) >= {"loss", "val_loss", "val_accuracy"}
    # folds one after another report each fold's epochs from 1, as (fold, epoch)
    assert list(result["intermediate"]) == [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)]
    assert result["value"] > 0.6  # three separable classes; chance is 1/3


def test_given_validation_set_and_minimized_loss(tmp_path):
    result = train(tmp_path, loader="load_with_validation", metric="val_loss", direction="minimize",
                   training={"epochs": 2})
    assert result["fold_values"] == [result["value"]] and result["value_std"] == 0.0
    assert result["value"] == min(result["intermediate"].values())


def test_early_stopping_stops_a_flat_curve(tmp_path):
    result = train(tmp_path, params={"width": 8, "lr": 0.0},
                   training={"epochs": 10, "early_stopping": {"patience": 2, "min_delta": 0.001}})
    assert result["epochs"] == 3 and len(result["intermediate"]) == 3


def test_prune_decision_stops_training_with_its_best_value_so_far(tmp_path):
    from mpiopt.training import Pruned

    seen = []

    def report(epoch, value, fold):
        seen.append((fold, epoch, value))
        return epoch < 2

    with pytest.raises(Pruned) as info:
        train(tmp_path, report=report, training={"epochs": 5})
    assert [(f, e) for f, e, _ in seen] == [(0, 1), (0, 2)]
    assert info.value.epoch == 2 and info.value.value == max(v for _, _, v in seen)


def test_a_pruned_kfold_trial_is_valued_as_a_finished_one_over_what_it_trained(tmp_path):
    """Pruned at fold 1's second epoch, the trial's value is what a finished trial's
    value is (each fold's best epoch, the mean over folds) over the folds it finished:
    fold 0's best; not fold 1's values (a new model's first epochs), which mean
    something else at every point a trial can be pruned."""
    from mpiopt.training import Pruned

    seen = []

    def report(epoch, value, fold):
        seen.append((fold, epoch, value))
        return (fold, epoch) != (1, 2)

    with pytest.raises(Pruned) as info:
        train(tmp_path, report=report, training={"epochs": 3, "kfold": 3})
    assert [(f, e) for f, e, _ in seen] == [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2)]
    assert info.value.value == pytest.approx(max(v for f, _, v in seen if f == 0))
    assert str(info.value) == "pruned at fold 1 epoch 2"


def test_a_prune_with_the_last_report_leaves_the_trial_complete(tmp_path):
    """A prune answered to a trial's last report saves nothing: it has trained every
    epoch of every fold, and its result is a finished one (never PRUNED at its end)."""
    seen = []

    def report(epoch, value, fold):
        seen.append((fold, epoch))
        return (fold, epoch) != (1, 2)         # the last of 2 folds of 2 epochs

    result = train(tmp_path, report=report, training={"epochs": 2, "kfold": 2})
    assert seen == [(0, 1), (0, 2), (1, 1), (1, 2)] and len(result["fold_values"]) == 2
    alone = train(tmp_path, report=lambda epoch, value, fold: False, training={"epochs": 1})
    assert len(alone["fold_values"]) == 1


def test_unknown_metric_names_the_available_ones(tmp_path):
    with pytest.raises(ValueError, match="val_auc.*val_accuracy, val_loss"):
        train(tmp_path, metric="val_auc", training={"epochs": 1})


def test_a_model_that_fails_to_build_raises_its_error(tmp_path):
    with pytest.raises(ValueError, match="width must be positive"):
        train(tmp_path, params={"width": 0, "lr": 0.01}, training={"epochs": 1})


def test_thread_pinning_divides_the_cores_among_the_ranks_of_the_node(monkeypatch):
    from mpiopt.training import threads

    monkeypatch.setattr(threads, "_pinned", None)
    monkeypatch.setattr(threads, "usable_cores", lambda: 8)
    for var in ("TF_NUM_INTRAOP_THREADS", "OMP_NUM_THREADS", "TF_NUM_INTEROP_THREADS", "MPIOPT_THREADS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MPI_LOCALNRANKS", "3")
    monkeypatch.setenv("MPI_LOCALRANKID", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    chosen = threads.pin_threads()
    assert chosen == {"threads": 2, "local_rank": 2, "local_size": 3, "gpu": "0"}
    import os

    assert os.environ["TF_NUM_INTRAOP_THREADS"] == "2" and os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    assert threads.pin_threads() is chosen  # once per process
    monkeypatch.setattr(threads, "_pinned", None)


def test_without_launcher_variables_the_node_is_found_by_splitting_the_communicator(monkeypatch):
    from mpi4py import MPI

    from mpiopt.training import threads

    for var in threads._LOCAL_SIZE_VARS + threads._LOCAL_RANK_VARS:
        monkeypatch.delenv(var, raising=False)
    assert threads.node_layout(MPI.COMM_SELF) == (0, 1)
    assert threads.node_layout(None) == (0, 1)


def test_read_tracker_names_only_parameters_never_looked_at():
    from mpiopt.training.tracking import ReadTracker

    p = ReadTracker({"lr": 0.1, "units": 8, "momentum": 0.9, "act": "relu"})
    assert p["lr"] == 0.1 and p.get("units") == 8 and ("act" in p)
    assert p.unread() == ["momentum"]
    q = ReadTracker({"a": 1, "b": 2})
    assert dict(**q) == {"a": 1, "b": 2} and q.unread() == []   # unpacking reads them all


def test_a_keras_model_refuses_the_torch_training_fields(tmp_path):
    path = write_case(tmp_path, training={"epochs": 1, "loss": "MSELoss", "metrics": ["mse"]})
    with (tmp_path / "tiny.py").open("a") as f:   # a file that mentions torch: no refusal up front
        f.write("\n\ndef _elsewhere():\n    import torch\n")
    from mpi4py import MPI

    from mpiopt.spec import load_spec
    from mpiopt.training import run_training

    with pytest.raises(ValueError) as info:
        run_training(load_spec(path), {"width": 8, "lr": 0.02}, MPI.COMM_SELF, 5)
    assert str(info.value).startswith("training.loss, training.metrics: only for a torch model; "
                                      "build_model returned a Keras model"), info.value


def test_a_keras_model_with_its_own_train_step_is_refused_with_one_line(tmp_path):
    path = write_case(tmp_path, training={"epochs": 1})
    spec = yaml.safe_load(path.read_text())
    spec["objective"]["model"] = "tiny.py:build_own_step"
    path.write_text(yaml.safe_dump(spec))
    from mpi4py import MPI

    from mpiopt.spec import load_spec
    from mpiopt.training import run_training

    with pytest.raises(ValueError) as info:
        run_training(load_spec(path), {"width": 8, "lr": 0.02}, MPI.COMM_SELF, 5)
    text = str(info.value)
    assert text.startswith("objective.model: build_model returned a Keras model whose class "
                           "overrides train_step;") and "\n" not in text, text
