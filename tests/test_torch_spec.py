"""A torch model's training fields in the spec: loss, optimizer, lr_scheduler and metrics
named with their arguments (some searched), every bad one a single line before any trial,
and torch missing refused up front naming the extra to install. No torch is imported here
except to check that the names the spec knows exist in the installed torch."""
from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import subprocess_env
from mpiopt.errors import SpecError
from mpiopt.spec import Spec, load_spec

MPIOPT = Path(sys.executable).parent / "mpiopt"
MODEL = "import torch\n\ndef build(params):\n    pass\n\ndef load():\n    pass\n"
GOOD = {
    "study": {"name": "torchy"},
    "objective": {"model": "model.py:build", "data": {"loader": "model.py:load"},
                  "metric": "val_accuracy", "direction": "maximize"},
    "search_space": {"width": {"type": "integer", "low": 2, "high": 8}},
    "search": {"algorithm": "random", "trials": 2},
    "training": {"loss": "crossentropyloss",
                 "optimizer": {"name": "adamw", "lr": 0.01, "weight_decay": 0.01},
                 "lr_scheduler": {"name": "StepLR", "step_size": 2, "gamma": 0.5},
                 "metrics": ["accuracy", "auc"]},
}


def write(folder: Path, data: dict) -> Path:
    (folder / "model.py").write_text(MODEL)
    (folder / "keras_model.py").write_text("def build(params):\n    import keras\n")
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def edited(change) -> dict:
    data = copy.deepcopy(GOOD)
    change(data)
    return data


def error_of(path: Path) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    return message[len(f"{path}: "):]


def test_names_are_stored_in_their_canonical_spelling_and_round_trip(tmp_path):
    spec = load_spec(write(tmp_path, GOOD))
    t = spec.training
    assert t.loss == {"name": "CrossEntropyLoss"}
    assert t.optimizer == {"name": "AdamW", "lr": 0.01, "weight_decay": 0.01}
    assert t.lr_scheduler == {"name": "StepLR", "step_size": 2, "gamma": 0.5}
    assert t.metrics == ("accuracy", "auc")
    again = Spec.from_dict(spec.to_dict(), base_dir=tmp_path)
    assert again.training == t
    plain = load_spec(write(tmp_path, edited(lambda d: d.pop("training"))))
    assert "loss" not in plain.to_dict()["training"]          # absent when unused
    assert plain.fingerprint() == spec.fingerprint()         # training is not the identity


def test_searched_arguments_and_classes_reach_the_training_fields(tmp_path):
    from mpiopt.training import searched

    def space(d):
        d["search_space"]["training.optimizer.lr"] = {"type": "real", "low": 1e-4, "high": 0.1}
        d["search_space"]["training.optimizer.name"] = ["adam", "SGD"]
        d["search_space"]["training.loss.label_smoothing"] = {"type": "real", "low": 0.0,
                                                              "high": 0.2}

    spec = load_spec(write(tmp_path, edited(space)))
    params = {"width": 4, "training.optimizer.lr": 0.02, "training.optimizer.name": "adam",
              "training.loss.label_smoothing": 0.1}
    trained, own, lr = searched.split(spec, params)
    assert own == {"width": 4} and lr is None
    assert trained.training.optimizer == {"name": "Adam", "lr": 0.02, "weight_decay": 0.01}
    assert trained.training.loss == {"name": "CrossEntropyLoss", "label_smoothing": 0.1}


def _training(**fields):
    return lambda d: d["training"].update(fields)


def _searched(name, entry, training=None):
    def change(d):
        d["search_space"][name] = entry
        if training is not None:
            d["training"] = training
    return change


BAD = [
    (_training(loss="CrossEntropy"), "training.loss.name: unknown name 'CrossEntropy'; known: "
     "BCELoss, BCEWithLogitsLoss, CrossEntropyLoss,"),
    (_training(optimizer="Adamm"), "training.optimizer.name: unknown name 'Adamm'; known: ASGD,"),
    (_training(lr_scheduler={"name": "Cosine"}), "training.lr_scheduler.name: unknown name "
     "'Cosine'; known: ConstantLR, CosineAnnealingLR,"),
    (_training(optimizer={"lr": 0.1}), "training.optimizer.name: required field is missing"),
    (_training(optimizer=["Adam"]), "training.optimizer: expected a name or a mapping"),
    (_training(optimizer={"name": "Adam", "betas": {"a": 1}}), "training.optimizer.betas: "
     "expected a number, string, boolean or list"),
    (_training(lr_scheduler={"name": "StepLR", "interval": "batch"}),
     "training.lr_scheduler.interval: expected epoch or step, got 'batch'"),
    (_training(loss={"name": "MSELoss", "interval": "step"}),
     "training.loss.interval: only training.lr_scheduler has an interval"),
    (_training(metrics=["acc"]), "training.metrics[0]: unknown metric 'acc'; known: accuracy, "
     "auc, mse, mae"),
    (_searched("training.optimizer.name", ["Adam", "Adamm"]),
     "search_space.training.optimizer.name: unknown name 'Adamm'"),
    (_searched("training.optimizer.name", {"type": "real", "low": 0, "high": 1}),
     "search_space.training.optimizer.name: a searched name is categorical"),
    (_searched("training.optimizer.lr", {"type": "real", "low": 1e-4, "high": 0.1}, {}),
     "search_space.training.optimizer.lr: searches an argument of training.optimizer, which "
     "names no class"),
    (_searched("training.kfold", [1, 2]), "search_space.training.kfold: training.kfold cannot "
     "be searched; these can: training.batch_size,"),
    (lambda d: d.update(objective={"function": "model.py:build"}),
     "training.loss: is for a torch model (objective.model)"),
    (lambda d: d["objective"].update(model="keras_model.py:build"),
     "training.loss: is for a torch model; keras_model.py builds a Keras model, which "
     "build_model compiles itself"),
]


@pytest.mark.parametrize("change, expected", BAD, ids=[e.split(":")[0] for _, e in BAD])
def test_a_bad_torch_field_is_one_line_naming_it(tmp_path, change, expected):
    assert error_of(write(tmp_path, edited(change))).startswith(expected)


BLOCK_TORCH = 'import sys\nsys.modules["torch"] = None      # as if torch were not installed\n'


@pytest.mark.parametrize("training, expected", [
    (GOOD["training"], "training.loss: needs PyTorch, which is not installed: "
                       "pip install 'mpiopt[torch]'"),
    ({}, "objective.model: model.py imports torch, which is not installed: "
         "pip install 'mpiopt[torch]'"),
])
def test_without_torch_a_torch_study_is_refused_before_anything_is_written(tmp_path, training,
                                                                          expected):
    block = tmp_path / "block"
    block.mkdir()
    (block / "sitecustomize.py").write_text(BLOCK_TORCH)
    path = write(tmp_path, edited(lambda d: d.update(training=training)))
    env = subprocess_env()
    env["PYTHONPATH"] = f"{block}:{env.get('PYTHONPATH', '')}"
    proc = subprocess.run([str(MPIOPT), "search", str(path), "--storage",
                           f"sqlite:///{tmp_path / 'r.db'}"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == f"mpiopt: error: {path}: {expected}\n"
    assert not list(tmp_path.glob("r.db*")) and not (tmp_path / "r-artifacts").exists()


def test_the_names_the_spec_knows_are_the_installed_torch_classes():
    torch = pytest.importorskip("torch")
    from mpiopt.training.frameworks import torch_names

    assert [n for n in torch_names.LOSSES if not hasattr(torch.nn, n)] == []
    assert [n for n in torch_names.OPTIMIZERS if not hasattr(torch.optim, n)] == []
    assert [n for n in torch_names.SCHEDULERS if not hasattr(torch.optim.lr_scheduler, n)] == []


def test_a_model_files_imports_are_read_without_running_it(tmp_path):
    from mpiopt.refs import imports_of

    (tmp_path / "m.py").write_text(
        "import numpy as np\nfrom torch import nn\n\ndef build(p):\n    import keras.layers\n"
        "    try:\n        import tensorflow\n    except ImportError:\n        pass\n")
    assert imports_of(tmp_path / "m.py") == {"numpy", "torch", "keras"}   # a try: tolerated
    (tmp_path / "broken.py").write_text("def (:\n")
    assert imports_of(tmp_path / "broken.py") == set()
