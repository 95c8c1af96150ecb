"""The trainer on one rank with a tiny PyTorch model: results, metrics, schedules, early
stopping, pruning, checkpoints' state, and every bad builder as one line.

Kept tiny (300 samples, one hidden layer of 8, a few epochs): each training takes a
fraction of a second once torch is imported. write_torch_case is the case the MPI tests
(test_torch_mpi.py, test_torch_study.py) run too.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")

MODEL_SOURCE = '''
import numpy as np


def build(params):
    import torch                          # imported only on ranks that train
    from torch import nn

    width = params.get("width", 8)
    if width < 1:
        raise ValueError("width must be positive")
    return nn.Sequential(nn.Linear(6, width), nn.Tanh(), nn.Dropout(0.1), nn.Linear(width, 3))


def build_plain(params):
    """No dropout: ranks that share a batch follow one rank's trajectory exactly."""
    import torch
    from torch import nn

    width = params.get("width", 8)
    return nn.Sequential(nn.Linear(6, width), nn.Tanh(), nn.Linear(width, 3))


def build_own(params):
    """The loss, optimizer and schedule given by the module (Lightning's forms)."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
            self.criterion = nn.CrossEntropyLoss()

        def forward(self, x):
            return self.body(x)

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.5, momentum=0.5)
            return {"optimizer": opt, "lr_scheduler": {
                "scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5),
                "interval": "step"}}

    return Net()


def build_binary(params):
    from torch import nn

    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.LazyLinear(1))


def build_regression(params):
    from torch import nn

    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))


def build_normed(params):
    from torch import nn

    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 3))


def load(n=300):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 6)).astype("float32")
    y = np.digitize(x[:, 0] + 0.5 * x[:, 1], [-0.5, 0.5]).astype("int64")
    return x, y


def load_binary():
    x, y = load()
    return x, (y == 2).astype("float32")


def load_regression():
    x, _ = load()
    return x.astype("float64"), (x[:, 0] - 2 * x[:, 1]).astype("float64")


def load_with_validation():
    x, y = load(360)
    return x[:300], y[:300], x[300:], y[300:]
'''
TORCH_TRAINING = {"loss": "CrossEntropyLoss", "optimizer": {"name": "Adam", "lr": 0.05}}


def write_torch_case(folder: Path, training: dict | None = None, metric="val_accuracy",
                     direction="maximize", loader="load", model="build") -> Path:
    """A torch model file and a spec for it; returns the spec path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny_torch.py").write_text(MODEL_SOURCE)
    spec = {
        "study": {"name": "tiny-torch"},
        "objective": {"model": f"tiny_torch.py:{model}",
                      "data": {"loader": f"tiny_torch.py:{loader}"},
                      "metric": metric, "direction": direction},
        "search_space": {"width": {"type": "integer", "low": 2, "high": 16}},
        "search": {"algorithm": "random", "trials": 2},
        "training": {"epochs": 3, "batch_size": 32, **TORCH_TRAINING, **(training or {})},
    }
    spec["training"] = {k: v for k, v in spec["training"].items() if v is not None}
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _spec(tmp_path, **case):
    from mpiopt.spec import load_spec

    return load_spec(write_torch_case(tmp_path, **case))


def train(tmp_path, params=None, report=None, **case):
    return train_spec(write_torch_case(tmp_path, **case), params, report)


def train_spec(path: Path, params=None, report=None):
    from mpi4py import MPI

    from mpiopt.spec import load_spec
    from mpiopt.training import run_training

    return run_training(load_spec(path), params or {"width": 8}, MPI.COMM_SELF, 5,
                        report=report)


def built(tmp_path, params=None, **case):
    """The FlatModel the trainer would train, with its data."""
    from mpiopt.refs import load_callable
    from mpiopt.training import frameworks, searched
    from mpiopt.training.data import load_data

    spec, own, lr = searched.split(_spec(tmp_path, **case), params or {"width": 8})
    data = load_data(spec.objective.data, spec.base_dir)
    build = load_callable(spec.objective.model, spec.base_dir)
    return frameworks.build_model(build, own, 5, spec, lr, data.x, data.y), data


def test_kfold_result_has_every_field_and_learns(tmp_path):
    result = train(tmp_path, training={"kfold": 2, "metrics": ["auc"]})
    assert len(result["fold_values"]) == 2
    assert result["value"] == pytest.approx(sum(result["fold_values"]) / 2)
    assert set(result["metrics"]) >= {"loss", "val_loss", "val_accuracy", "val_auc", "n_params"}
    assert result["metrics"]["n_params"] == 6 * 8 + 8 + 8 * 3 + 3
    assert sorted(result["intermediate"]) == [(f, e) for f in (0, 1) for e in (1, 2, 3)]  # (fold, epoch)
    assert result["value"] > 0.6                      # three separable classes; chance 1/3
    assert result["metrics"]["val_auc"] > 0.75


def test_the_same_seed_gives_the_same_value(tmp_path):
    first = train(tmp_path / "a", training={"epochs": 2})
    again = train(tmp_path / "b", training={"epochs": 2})
    assert first["value"] == again["value"] and first["intermediate"] == again["intermediate"]


def test_given_validation_set_and_minimized_loss(tmp_path):
    result = train(tmp_path, loader="load_with_validation", metric="val_loss",
                   direction="minimize", training={"epochs": 2})
    assert result["fold_values"] == [result["value"]]
    assert result["value"] == min(result["intermediate"].values())


def test_binary_logits_with_a_lazy_layer_report_accuracy_and_auc(tmp_path):
    result = train(tmp_path, model="build_binary", loader="load_binary", metric="val_auc",
                   training={"loss": "BCEWithLogitsLoss", "epochs": 4, "metrics": ["accuracy"]})
    assert result["metrics"]["val_auc"] == result["value"] > 0.9
    assert result["metrics"]["val_accuracy"] > 0.8


def test_regression_reports_mse_and_mae(tmp_path):
    result = train(tmp_path, model="build_regression", loader="load_regression",
                   metric="val_mse", direction="minimize",
                   training={"loss": "MSELoss", "epochs": 5, "metrics": ["mae"]})
    assert result["value"] == result["metrics"]["val_mse"] < 1.0   # targets' variance is 5
    assert result["metrics"]["val_mae"] < 1.0
    assert result["metrics"]["val_loss"] == pytest.approx(result["value"], rel=1e-4)


def test_the_module_may_give_its_loss_optimizer_and_a_schedule_by_step(tmp_path):
    model, data = built(tmp_path, model="build_own", training={"loss": None, "optimizer": None})
    assert type(model.optimizer).__name__ == "SGD" and model.interval == "step"
    for start in range(0, 320, 32):           # ten steps: the schedule halves the rate once
        model.train_step(data.x[start:start + 32], data.y[start:start + 32])
    assert model.optimizer.param_groups[0]["lr"] == pytest.approx(0.25)
    result = train(tmp_path, model="build_own", training={"loss": None, "optimizer": None})
    assert result["value"] > 0.6


def test_a_named_schedule_steps_every_epoch_and_a_searched_rate_sets_its_base(tmp_path):
    model, _ = built(tmp_path, params={"width": 8, "training.learning_rate": 0.01},
                     training={"lr_scheduler": {"name": "StepLR", "step_size": 1, "gamma": 0.1}})
    assert model.optimizer.param_groups[0]["lr"] == pytest.approx(0.01)
    model.end_epoch(0.5)
    assert model.optimizer.param_groups[0]["lr"] == pytest.approx(0.001)
    plateau, _ = built(tmp_path, training={"lr_scheduler": {"name": "ReduceLROnPlateau",
                                                            "patience": 0}})
    assert plateau.scheduler.mode == "max"          # objective.direction: maximize
    plateau.end_epoch(0.5)
    plateau.end_epoch(0.4)                          # worse: the rate drops
    assert plateau.optimizer.param_groups[0]["lr"] == pytest.approx(0.005)


def test_searched_optimizer_arguments_reach_the_optimizer(tmp_path):
    model, _ = built(tmp_path, params={"width": 8, "training.optimizer.lr": 0.003,
                                       "training.optimizer.name": "sgd",
                                       "training.optimizer.momentum": 0.8})
    group = model.optimizer.param_groups[0]
    assert type(model.optimizer).__name__ == "SGD"
    assert (group["lr"], group["momentum"]) == (pytest.approx(0.003), pytest.approx(0.8))


def test_early_stopping_stops_a_flat_curve(tmp_path):
    result = train(tmp_path, params={"width": 8, "training.learning_rate": 0.0},
                   training={"epochs": 10, "early_stopping": {"patience": 2, "min_delta": 0.001}})
    assert result["epochs"] == 3 and len(result["intermediate"]) == 3


def test_prune_decision_stops_training_with_the_last_value(tmp_path):
    from mpiopt.training import Pruned

    seen = []

    def report(epoch, value, fold):
        seen.append((fold, epoch, value))
        return epoch < 2

    with pytest.raises(Pruned) as info:
        train(tmp_path, report=report, training={"epochs": 5})
    assert [(f, e) for f, e, _ in seen] == [(0, 1), (0, 2)]
    assert info.value.epoch == 2 and info.value.value == seen[-1][2]


def test_state_restores_weights_optimizer_schedule_and_random_state(tmp_path):
    model, data = built(tmp_path, training={"lr_scheduler": {"name": "StepLR", "step_size": 1}})
    x, y = data.x[:64], data.y[:64]
    fresh = model.get_weights().copy()
    model.train_step(x, y)
    model.end_epoch(0.0)
    saved = model.state()
    first = [model.train_step(x, y) for _ in range(3)]
    after = model.get_weights().copy()
    model.restore(saved)
    assert [model.train_step(x, y) for _ in range(3)] == first       # dropout masks too
    np.testing.assert_array_equal(model.get_weights(), after)
    model.reset()
    np.testing.assert_array_equal(model.get_weights(), fresh)
    assert model.optimizer.state_dict()["state"] == {}
    other, _ = built(tmp_path / "wide", params={"width": 12})
    with pytest.raises(ValueError, match="another architecture"):
        other.restore(saved)


def test_flat_buffers_hold_gradients_then_weights_and_batch_norm_statistics(tmp_path):
    model, data = built(tmp_path, model="build_normed")
    assert model.n_weights - model.n_grad == 2 * 8       # running mean and variance
    buffer = np.zeros(model.n_grad + 1, np.float32)
    model.gradient(data.x[:32], data.y[:32], 0.5, buffer)
    before = model.get_weights().copy()
    model.apply(buffer)
    moved = model.get_weights()
    assert np.any(moved[:model.n_grad] != before[:model.n_grad])
    assert all(q.grad is None for q in model.trainable)    # the buffer is not held
    model.set_weights(before)
    np.testing.assert_array_equal(model.get_weights(), before)


def test_the_kept_model_is_a_state_dict_plain_pytorch_loads(tmp_path):
    model, data = built(tmp_path)
    path = tmp_path / "model.pt"
    best = model.get_weights().copy()
    model.train_step(data.x[:64], data.y[:64])
    model.save(str(path), best)
    from torch import nn

    plain = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Dropout(0.1), nn.Linear(8, 3))
    plain.load_state_dict(torch.load(path))                      # weights_only: no pickle
    flat = torch.cat([p.detach().reshape(-1) for p in plain.parameters()]).numpy()
    np.testing.assert_array_equal(flat, best[:model.n_grad])


BAD_BUILDS = [
    ("def build(params):\n    return {'not': 'a model'}\n",
     "objective.model: build_model returned a dict; expected a compiled keras.Model or a "
     "torch.nn.Module"),
    ("def build(params):\n    pass\n",
     "objective.model: build_model returned None (a missing return?)"),
    ("import torch\n\nclass Net(torch.nn.Linear):\n    def training_step(self, batch, i):\n"
     "        pass\n\ndef build(params):\n    return Net(6, 3)\n",
     "training.loss: not for a module with its own training_step (its training_step "
     "computes the loss)"),
    ("import torch\n\nclass Net(torch.nn.Linear):\n    criterion = torch.nn.MSELoss()\n\n"
     "def build(params):\n    return Net(6, 3)\n",
     "training.loss: the module has its own criterion too; keep one of them"),
]


@pytest.mark.parametrize("source, expected", BAD_BUILDS, ids=[e[:40] for _, e in BAD_BUILDS])
def test_a_bad_builder_is_one_line_naming_the_field(tmp_path, source, expected):
    spec_path = write_torch_case(tmp_path)
    (tmp_path / "tiny_torch.py").write_text(MODEL_SOURCE + "\n\n" + source)
    with pytest.raises((TypeError, ValueError)) as info:
        train_spec(spec_path)
    assert str(info.value).startswith(expected) and "\n" not in str(info.value), info.value


@pytest.mark.parametrize("training, expected", [
    ({"loss": None}, "training.loss: a torch model needs a loss: name one (e.g. "
                     "CrossEntropyLoss, BCEWithLogitsLoss, MSELoss) or give the module a "
                     "`criterion`"),
    ({"optimizer": None}, "training.optimizer: a torch model needs an optimizer"),
    ({"optimizer": {"name": "Adam", "momentum": 0.9}},
     "training.optimizer: Adam(momentum=0.9): "),
    ({"lr_scheduler": {"name": "StepLR"}}, "training.lr_scheduler: StepLR(): "),
])
def test_a_missing_loss_or_a_bad_argument_is_one_line_naming_the_field(tmp_path, training,
                                                                       expected):
    with pytest.raises(ValueError) as info:
        train(tmp_path, training=training)
    assert str(info.value).startswith(expected) and "\n" not in str(info.value), info.value


@pytest.mark.parametrize("kind", ["npz", "npy", "hdf5", "root"])
def test_every_file_format_streamed_gives_the_value_read_into_memory_gives(tmp_path, kind):
    """The data sources are the Keras path's, unchanged: file lists read whole or streamed
    by batch (memory-mapped, read-only arrays included)."""
    pytest.importorskip("h5py")
    if kind == "root":
        pytest.importorskip("uproot")
    from test_data_stream import arrays, write_parts

    data = write_parts(tmp_path / "data", kind, [arrays(120, seed=s) for s in range(3)])
    results = []
    for in_memory in (True, False):
        path = write_torch_case(tmp_path / f"in-memory-{in_memory}",
                                training={"kfold": 2, "epochs": 2, "metrics": ["auc"]})
        spec = yaml.safe_load(path.read_text())
        spec["objective"]["data"] = {**data, "in_memory": in_memory}
        path.write_text(yaml.safe_dump(spec))
        results.append(train_spec(path))
    whole, streamed = results
    assert streamed["value"] == whole["value"] and streamed["intermediate"] == whole["intermediate"]
    assert streamed["metrics"]["val_auc"] == whole["metrics"]["val_auc"]
    assert whole["value"] > 0.5
