"""A torch Deep Sets model under mpiexec on a generated ROOT file with per-particle
collections, event weights and a selection (issue 60 with issue 61), as
tests/test_data_events_mpi.py trains a Keras one: forward takes the inputs by name, the
weights weigh the loss and the metrics, K-fold on a group of 2 (every batch cut in two
shards), the same trial values streamed and in memory; and the jets example's Deep Sets
network in PyTorch (examples/jets/particles_torch.yaml)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import mpiopt  # noqa: E402
from test_data_events import PARTICLES, events, write_events  # noqa: E402
from test_data_mpi import trials_of  # noqa: E402

pytest.importorskip("torch")
pytest.importorskip("uproot")

MODEL = '''
import sys

import torch
from torch import nn


class DeepSets(nn.Module):
    """Each particle through one small network, summed over the real ones (the mask), then
    joined with the jet's features: forward takes the inputs by their names."""

    def __init__(self, width):
        super().__init__()
        self.each = nn.Sequential(nn.Linear(2, width), nn.Tanh())
        self.out = nn.Linear(width + 2, 1)

    def forward(self, particles, particles_mask, features):
        pooled = (self.each(particles * 0.05) * particles_mask.unsqueeze(-1)).sum(1)
        return self.out(torch.cat([pooled, features * 0.01], 1))


def build(params):
    assert "tensorflow" not in sys.modules
    return DeepSets(params["width"])
'''


def write_study(tmp_path: Path, name: str, in_memory: bool) -> Path:
    """2 files of 80 events as an RNTuple; 3 ranks: the coordinator and one group of 2."""
    for i in range(2):
        f = tmp_path / "rntuple" / f"ev{i}.root"
        if not f.exists():
            write_events(f, "rntuple", events(80, seed=20 + i))
    (tmp_path / "net.py").write_text(MODEL)
    spec = {
        "study": {"name": name},
        "objective": {"model": "net.py:build", "metric": "val_auc", "direction": "maximize",
                      "data": {"root": "rntuple/ev*.root", "labels": "label",
                               "features": ["jet_pt", "jet_eta"],
                               "collections": {"particles": PARTICLES},
                               "weights": "weight", "balance_classes": True,
                               "selection": "n_part >= 1", "in_memory": in_memory}},
        "search_space": {"width": {"type": "integer", "low": 2, "high": 8},
                         "training.optimizer.lr": {"type": "real", "low": 1e-3, "high": 0.05,
                                                   "prior": "log-uniform"}},
        "search": {"algorithm": "random", "trials": 2, "seed": 1},
        "training": {"epochs": 1, "batch_size": 16, "kfold": 2, "loss": "BCEWithLogitsLoss",
                     "optimizer": {"name": "Adam"}, "metrics": ["accuracy"]},
        "resources": {"group_size": 2},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_torch_deep_sets_model_trains_on_collections_and_weights_in_groups(tmp_path):
    from mpiopt.trial import TrialStatus

    values = {}
    for in_memory in (True, False):
        name = f"torch{int(in_memory)}"
        url = f"sqlite:///{tmp_path / (name + '.db')}"
        proc = mpiopt("search", write_study(tmp_path, name, in_memory), "--storage", url, np=3,
                      cwd=tmp_path, timeout=400)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        _, trials = trials_of(url, name)
        assert [t.status for t in trials] == [TrialStatus.COMPLETE] * 2, \
            [t.error for t in trials]
        for t in trials:
            assert len(t.fold_values) == 2 and 0.0 <= t.value <= 1.0
            assert {"val_auc", "val_accuracy", "val_loss"} <= set(t.metrics)
        values[in_memory] = [(t.params, t.fold_values)
                             for t in sorted(trials, key=lambda t: t.number)]
    for (p_mem, f_mem), (p_str, f_str) in zip(values[True], values[False]):
        assert p_mem == p_str
        assert np.allclose(f_mem, f_str, atol=1e-6), (f_mem, f_str)


def test_the_jets_particles_example_in_pytorch_searches_on_its_rntuple(tmp_path):
    """examples/jets/particles_torch.yaml on data its generator writes (small here): the
    torch Deep Sets network takes the particle lists by name, weighted, and keeps a model
    plain PyTorch loads. The model is the point, not the group (the test above trains on a
    group of two): one group of one rank under `mpiexec -n 2` imports torch once."""
    import importlib.util
    import shutil

    import torch

    from conftest import EXAMPLES
    from mpiopt.trial import TrialStatus

    jets = EXAMPLES / "jets"
    shutil.copy(jets / "torch_model.py", tmp_path / "torch_model.py")
    spec = importlib.util.spec_from_file_location("jets_generate", jets / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.DATA, gen.JETS_PER_FILE = tmp_path / "data", 60
    gen.ensure_particles()
    raw = yaml.safe_load((jets / "particles_torch.yaml").read_text())
    raw["search"]["trials"], raw["training"]["epochs"] = 1, 2
    raw["resources"]["group_size"] = 1
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(raw))
    url = f"sqlite:///{tmp_path / 'p.db'}"
    proc = mpiopt("search", tmp_path / "spec.yaml", "--storage", url, np=2, cwd=tmp_path,
                  timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    _, trials = trials_of(url, raw["study"]["name"])
    assert [t.status for t in trials] == [TrialStatus.COMPLETE], [t.error for t in trials]
    assert 0.0 <= trials[0].value <= 1.0 and len(trials[0].fold_values) == 2
    out = tmp_path / "best.pt"
    proc = mpiopt("model", "export", raw["study"]["name"], "--storage", url, "-o", out,
                  cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    sys.path.insert(0, str(tmp_path))
    try:
        from torch_model import build_particle_model
    finally:
        sys.path.remove(str(tmp_path))
    net = build_particle_model(trials[0].params)
    net.load_state_dict(torch.load(out))
