"""A torch module with its own training step (Lightning's contract) trained by mpiopt.

One rank: a classifier in automatic optimization (the step returns the loss; mpiopt takes
the backward pass, the optimizer's step and the schedule), a tiny GAN in manual
optimization (two optimizers stepped by the module, Lightning's calls set on it), its
checkpoint state, and every bad module as one line naming the field. Three ranks (one
mpiexec run, the worker below): the group's gradients are averaged inside the
optimizers' steps, so allreduce on three ranks follows one rank's trajectory for both,
also where a short last batch leaves ranks without a sample; easgd trains through it.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conftest  # noqa: E402
from conftest import BIN  # noqa: E402

torch = pytest.importorskip("torch")

MODEL_SOURCE = '''
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class Classifier(nn.Module):
    """Automatic optimization: the step returns the loss, validation logs its metrics."""

    def __init__(self, width=8, extra=""):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, width), nn.Tanh(), nn.Linear(width, 3))
        self.extra = extra

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)                # (kept by Lightning's logger, not here)
        if self.extra == "no loss":
            return None
        if self.extra == "dict":
            return {"logits": loss}
        return {"loss": loss}

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("acc", (logits.argmax(1) == y).float().mean(),
                 reduce_fx="max" if self.extra == "max" else "mean")
        return {"hits": (logits.argmax(1) == y).float().sum()} if self.extra != "dict" else None

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=0.05)
        if self.extra == "two":
            return [opt, torch.optim.SGD(self.parameters(), lr=0.1)]
        return {"optimizer": opt, "lr_scheduler": {
            "scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5),
            "interval": "epoch"}}


class TinyGAN(nn.Module):
    """Manual optimization with two optimizers: the discriminator tells the data from the
    generator's samples, the generator learns to fool it. noise "fixed": drawn from the
    sample itself (no random stream), so one rank and a group take the same steps."""

    def __init__(self, noise="random"):
        super().__init__()
        self.automatic_optimization = False
        self.noise = noise
        self.generator = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 6))
        self.discriminator = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))

    def _latent(self, real):
        return torch.sin(7 * real[:, :4]) if self.noise == "fixed" else torch.randn(len(real), 4)

    def training_step(self, batch, batch_idx):
        real, _ = batch
        opt_g, opt_d = self.optimizers()
        ones, zeros = torch.ones(len(real), 1), torch.zeros(len(real), 1)
        fake = self.generator(self._latent(real))
        self.toggle_optimizer(opt_d)
        d_loss = (F.binary_cross_entropy_with_logits(self.discriminator(real), ones)
                  + F.binary_cross_entropy_with_logits(self.discriminator(fake.detach()), zeros))
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        self.untoggle_optimizer(opt_d)
        if batch_idx % 2 == 0:                  # the generator every other batch
            self.toggle_optimizer(opt_g)
            g_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake), ones)
            opt_g.zero_grad()
            self.manual_backward(g_loss)
            opt_g.step()
            self.untoggle_optimizer(opt_g)
        self.log_dict({"d_loss": d_loss})
        return d_loss

    def validation_step(self, batch, batch_idx):
        real, _ = batch
        fake = self.generator(self._latent(real))
        fom = (fake.mean(0) - real.mean(0)).abs().mean() + (fake.std(0) - real.std(0)).abs().mean()
        self.log("fom", fom)

    def configure_optimizers(self):
        return ([torch.optim.Adam(self.generator.parameters(), lr=0.01, betas=(0.5, 0.999)),
                 torch.optim.Adam(self.discriminator.parameters(), lr=0.01, betas=(0.5, 0.999))],
                [])


def build_classifier(params):
    return Classifier(params.get("width", 8), params.get("extra", ""))


def build_gan(params):
    return TinyGAN(params.get("noise", "random"))


def build_no_validation(params):
    module = Classifier()
    module.validation_step = None
    return module


def load(n=300):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 6)).astype("float32")
    y = np.digitize(x[:, 0] + 0.5 * x[:, 1], [-0.5, 0.5]).astype("int64")
    return x, y
'''


def write_step_case(folder: Path, model="build_classifier", metric="val_acc",
                    direction="maximize", training: dict | None = None) -> Path:
    """A module file and a spec for it; returns the spec path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "step_model.py").write_text(MODEL_SOURCE)
    spec = {"study": {"name": "tiny-step"},
            "objective": {"model": f"step_model.py:{model}",
                          "data": {"loader": "step_model.py:load"},
                          "metric": metric, "direction": direction},
            "search_space": {"width": {"type": "integer", "low": 2, "high": 16}},
            "search": {"algorithm": "random", "trials": 2},
            "training": {"epochs": 3, "batch_size": 32, **(training or {})}}
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def train(path: Path, params=None, report=None):
    from mpi4py import MPI

    from mpiopt.spec import load_spec
    from mpiopt.training import run_training

    return run_training(load_spec(path), params or {"width": 8}, MPI.COMM_SELF, 5, report=report)


def built(path: Path, params=None):
    """The FlatModel the trainer would train, with its data."""
    from mpiopt.refs import load_callable
    from mpiopt.spec import load_spec
    from mpiopt.training import frameworks, searched
    from mpiopt.training.data import load_data

    spec, own, lr = searched.split(load_spec(path), params or {"width": 8})
    data = load_data(spec.objective.data, spec.base_dir)
    build = load_callable(spec.objective.model, spec.base_dir)
    return frameworks.build_model(build, own, 5, spec, lr, data.x, data.y), data


# --------------------------------------------------------------------------- one rank
def test_automatic_optimization_trains_through_the_modules_own_step(tmp_path):
    path = write_step_case(tmp_path, training={"kfold": 2})
    result = train(path)
    assert len(result["fold_values"]) == 2 and result["value"] > 0.6   # chance is 1/3
    metrics = result["metrics"]
    assert {"loss", "val_loss", "val_acc", "val_hits", "n_params"} <= set(metrics)
    assert "val_train_loss" not in metrics       # what training_step logs is not recorded
    assert metrics["val_hits"] > 1               # a returned dict: mean hits per batch
    model, _ = built(path)
    assert model.own_step and model.automatic and len(model.optimizers) == 1
    model.end_epoch(0.5)                          # the module's epoch-wise StepLR
    assert model.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.025)


def test_a_gan_with_two_optimizers_trains_in_manual_optimization(tmp_path):
    path = write_step_case(tmp_path, model="build_gan", metric="val_fom", direction="minimize",
                           training={"epochs": 4, "batch_size": 16})
    result = train(path, {"width": 8})
    curve = [result["intermediate"][e] for e in sorted(result["intermediate"])]
    assert result["value"] == min(curve) and np.isfinite(curve).all()
    assert result["value"] < 0.75 * curve[0]     # the generator learned the data's moments
    assert set(result["metrics"]) >= {"loss", "val_fom"}
    model, data = built(path)
    assert not model.automatic and len(model.optimizers) == 2
    assert model.module.optimizers() == model.optimizers    # Lightning's calls are set


def test_the_checkpoint_state_holds_both_optimizers_and_continues_exactly(tmp_path):
    path = write_step_case(tmp_path, model="build_gan", metric="val_fom", direction="minimize")
    model, data = built(path)
    x, y = data.x[:64], data.y[:64]
    fresh = model.get_weights().copy()
    model.begin_epoch(1)                        # as the trainer: a checkpoint after an epoch
    model.train_step(x, y)
    saved = model.state()
    model.begin_epoch(2)
    first = [model.train_step(x, y) for _ in range(3)]   # the generator at batches 0 and 2
    after = model.get_weights().copy()
    model.restore(saved)
    model.begin_epoch(2)
    assert [model.train_step(x, y) for _ in range(3)] == first
    np.testing.assert_array_equal(model.get_weights(), after)
    model.reset()
    np.testing.assert_array_equal(model.get_weights(), fresh)
    assert all(o.state_dict()["state"] == {} for o in model.optimizers)
    other, _ = built(write_step_case(tmp_path / "classifier"))
    with pytest.raises(ValueError, match="another"):
        other.restore(saved)


def test_a_pbt_exploit_takes_the_parents_state_and_keeps_its_own_learning_rate(tmp_path):
    path = write_step_case(tmp_path)
    parent, data = built(path, {"width": 8, "training.learning_rate": 0.02})
    child, _ = built(path, {"width": 8, "training.learning_rate": 0.005})
    parent.train_step(data.x[:32], data.y[:32])
    child.restore(parent.state(), keep_own=True)
    np.testing.assert_array_equal(child.get_weights(), parent.get_weights())
    assert child.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.005)
    assert child.optimizers[0].state_dict()["state"] != {}        # Adam's moments came too


BAD = [
    ({"extra": "no loss"}, {}, "objective.model: training_step returned None (a missing "
                               "return?); expected the batch's loss (a tensor, or a dict with "
                               "'loss')"),
    ({"extra": "dict"}, {}, "objective.model: training_step returned a dict without 'loss'"),
    ({"extra": "two"}, {}, "objective.model: configure_optimizers() returned 2 optimizers; "
                           "several need manual optimization, as in Lightning: set "
                           "self.automatic_optimization = False"),
    ({"extra": "max"}, {}, "objective.model: self.log('acc', reduce_fx='max'): a validation "
                           "metric is a mean or a sum"),
    ({}, {"mode": "downpour"}, "training.mode: downpour applies one gradient at a time on a "
                               "master; a module with its own training_step trains with "
                               "allreduce or easgd"),
    ({}, {"metrics": ["auc"]}, "training.metrics: not for a module with its own training_step"),
    ({}, {"optimizer": "SGD"}, "training.optimizer: the module's configure_optimizers() gives "
                               "one too; keep one of them"),
]


@pytest.mark.parametrize("params, training, expected", BAD, ids=[e[:50] for *_, e in BAD])
def test_a_bad_step_module_is_one_line_naming_the_field(tmp_path, params, training, expected):
    path = write_step_case(tmp_path, training=training)
    with pytest.raises(ValueError) as info:
        train(path, {"width": 8, **params})
    assert str(info.value).startswith(expected) and "\n" not in str(info.value), info.value


def test_a_step_module_without_validation_step_is_one_line(tmp_path):
    path = write_step_case(tmp_path, model="build_no_validation")
    with pytest.raises(ValueError) as info:
        train(path)
    assert str(info.value) == ("objective.model: the module has a training_step but no "
                               "validation_step, which gives the figure of merit "
                               "(self.log('val_loss', loss))")


# --------------------------------------------------------------------------- three ranks
def own_step_weights(comm, folder: Path, model: str, params: dict) -> list:
    """Weights after two epochs of allreduce over fixed global batches of 25 samples of
    101 (uneven parts; the last batch has one sample, so two of three ranks have none)."""
    from types import SimpleNamespace

    from mpiopt.training.allreduce import AllreduceSGD

    case = folder / model
    path = case / "spec.yaml"
    model, data = built(path, params)
    algorithm = AllreduceSGD(model, comm, SimpleNamespace(batch_size=25))
    algorithm.start()
    x, y = data.x[:101], data.y[:101]
    for epoch in range(2):
        model.begin_epoch(epoch)
        algorithm.train_epoch(x, y, np.random.default_rng(epoch).permutation(101))
    return model.get_weights().tolist()


CASES = {"build_classifier": {"width": 8}, "build_gan": {"width": 8, "noise": "fixed"}}


def write_cases(folder: Path) -> None:
    for model in CASES:
        write_step_case(folder / model, model=model)


def worker(out: Path, folder: Path) -> None:
    from mpi4py import MPI

    from mpiopt.spec import load_spec
    from mpiopt.training import run_training

    comm = MPI.COMM_WORLD
    if comm.Get_rank() == 0:
        write_cases(folder)
        write_step_case(folder / "easgd", training={"mode": "easgd", "epochs": 4})
    comm.Barrier()
    results = {m: own_step_weights(comm, folder, m, p) for m, p in CASES.items()}
    easgd = run_training(load_spec(folder / "easgd" / "spec.yaml"), {"width": 8}, comm, 5)
    results["easgd"] = easgd["value"]
    if comm.Get_rank() == 0:
        out.write_text(json.dumps(results))


@pytest.fixture(scope="module")
def three_ranks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("step3")
    out = folder / "out.json"
    cmd = [str(BIN / "mpiexec"), "-n", "3", sys.executable, __file__, str(out), str(folder)]
    proc = subprocess.run(cmd, env=conftest.subprocess_env(), capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return json.loads(out.read_text()), folder


@pytest.mark.parametrize("model", sorted(CASES))
def test_allreduce_on_three_ranks_follows_one_rank_through_the_modules_own_step(three_ranks,
                                                                                model):
    from mpi4py import MPI

    results, folder = three_ranks
    single = own_step_weights(MPI.COMM_SELF, folder, model, CASES[model])
    np.testing.assert_allclose(results[model], single, rtol=1e-4, atol=1e-5)


def test_easgd_trains_through_the_modules_own_step(three_ranks):
    assert three_ranks[0]["easgd"] > 0.6          # val_acc; chance is 1/3


if __name__ == "__main__":
    try:
        worker(Path(sys.argv[1]), Path(sys.argv[2]))
    except BaseException:        # one rank failing must end all three, not leave two waiting
        import traceback

        from mpi4py import MPI

        traceback.print_exc()
        MPI.COMM_WORLD.Abort(1)
