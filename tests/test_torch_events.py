"""A torch model on data in the field's shape (issue 60 with issue 61): named inputs
(collections) reach forward as keyword arguments, event weights weigh the loss and every
validation metric by the rule Keras's sample_weight follows (mpiopt.training.weights),
a training_step of the module's own gets them in its batch; and the rank's device (one
GPU per rank by node-local rank, checked on CPU with torch.cuda faked), a CUDA
out-of-memory as one line.

Hand computations say the rule (Keras's loss with sample weights is sum(w * loss) /
batch size, reduction "sum_over_batch_size"; its weighted metrics sum(w * value) /
sum(w)), and the last test sets the same weights in a Keras model and compares the
numbers, imported last: the other tests run without TensorFlow in the process."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

torch = pytest.importorskip("torch")

from test_torch_training import _spec  # noqa: E402

from mpiopt.training import frameworks  # noqa: E402
from mpiopt.training.inputs import Inputs  # noqa: E402
from mpiopt.training.weights import Weighted  # noqa: E402


def _data(n=64, seed=0):
    """Binary labels, 6 features, weights of which a tenth are negative (a generator's)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    y = (x[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(np.float32)
    w = (np.where(rng.random(n) < 0.1, -0.5, 1.0) * rng.uniform(0.5, 1.5, n)).astype(np.float32)
    return x, y, w * (n / w.sum())


def _binary(params):
    from torch import nn

    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))


def _model(tmp_path, build, x, y, **training):
    spec = _spec(tmp_path, metric="val_auc", training={
        "loss": "BCEWithLogitsLoss", "metrics": ["accuracy", "auc", "mse"], **training})
    return frameworks.build_model(build, {}, 3, spec, None, x[:2], y[:2])


def test_event_weights_weigh_the_loss_and_every_metric_as_keras_does(tmp_path):
    x, y, w = _data()
    model = _model(tmp_path, _binary, x, Weighted(y, w))
    with torch.no_grad():
        logits = model.module(torch.from_numpy(x)).numpy().reshape(-1)
    each = np.logaddexp(0, logits) - y * logits          # BCE with logits, per event
    loss = float(np.sum(w * each) / len(x))              # Keras: sum(w * l) / batch size

    got = model.metric_results(model.metric_state(x, Weighted(y, w), 16))
    assert got["loss"] == pytest.approx(loss, rel=1e-5)
    hit = (1 / (1 + np.exp(-logits)) > 0.5) == (y > 0.5)
    assert got["accuracy"] == pytest.approx(np.sum(w * hit) / np.sum(w), rel=1e-6)
    assert got["mse"] == pytest.approx(np.sum(w * (logits - y) ** 2) / np.sum(w), rel=1e-5)
    assert got["auc"] == pytest.approx(_pairwise_auc(logits, y, w), abs=0.02)   # 200 bins

    out = np.zeros(model.n_grad + 1, np.float32)        # training: the same weighted loss
    model.gradient(x, Weighted(y, w)[:], 0.5, out)
    assert out[-1] == pytest.approx(0.5 * loss, rel=1e-5)
    weights = torch.from_numpy(w)
    mean = (weights * torch.nn.functional.binary_cross_entropy_with_logits(
        model.module(torch.from_numpy(x)).reshape(-1), torch.from_numpy(y),
        reduction="none")).sum() / len(x)
    grads = torch.autograd.grad(0.5 * mean, list(model.module.parameters()))
    assert np.allclose(out[:-1], torch.cat([g.reshape(-1) for g in grads]).numpy(), atol=1e-6)


def _pairwise_auc(scores, y, w) -> float:
    """The ROC area as the weighted share of (signal, background) pairs in the right order
    (ties half): what the trapezoids under a weighted ROC curve add up to, negative
    weights included (which sklearn refuses)."""
    pos, neg = y > 0.5, y <= 0.5
    order = np.sign(scores[pos][:, None] - scores[neg][None, :]) * 0.5 + 0.5
    pairs = w[pos][:, None] * w[neg][None, :]
    return float(np.sum(pairs * order) / np.sum(pairs))


def test_without_weights_the_metrics_are_unchanged(tmp_path):
    x, y, _ = _data()
    model = _model(tmp_path, _binary, x, y)
    weighted = _model(tmp_path / "w", _binary, x, Weighted(y, np.ones_like(y)))
    plain = model.metric_results(model.metric_state(x, y, 16))
    ones = weighted.metric_results(weighted.metric_state(x, Weighted(y, np.ones_like(y)), 16))
    assert plain == pytest.approx(ones, rel=1e-6)


def test_a_criterion_without_per_event_losses_is_one_line_for_weights(tmp_path):
    x, y, w = _data()

    def build(params):
        net = _binary(params)
        net.criterion = lambda out, target: ((out.reshape(-1) - target) ** 2).mean()
        return net

    with pytest.raises(ValueError, match=r"^objective\.data\.weights: the module's criterion "
                                         r"gives only the batch's mean loss"):
        _model(tmp_path, build, x, Weighted(y, w), loss=None)


# ----------------------------------------------------------------------- named inputs
class DeepSets(torch.nn.Module):
    """forward by the inputs' names, as weaver-core's ParticleNet is written."""

    def __init__(self):
        super().__init__()
        self.each = torch.nn.Linear(2, 4)
        self.out = torch.nn.Linear(4 + 1, 1)

    def forward(self, particles, particles_mask, features):
        pooled = (torch.tanh(self.each(particles)) * particles_mask.unsqueeze(-1)).sum(1)
        return self.out(torch.cat([pooled, features], 1))


def _named(n=48):
    rng = np.random.default_rng(1)
    parts = rng.normal(size=(n, 3, 3)).astype(np.float32)
    parts[..., -1] = rng.random((n, 3)) < 0.7                      # the mask channel
    features = rng.normal(size=(n, 1)).astype(np.float32)
    y = (parts[..., 0].sum(1) > 0).astype(np.float32)
    return Inputs({"features": features, "particles": parts}, masked={"particles"}), y


def test_named_inputs_reach_forward_as_keyword_arguments(tmp_path):
    x, y = _named()
    _, _, w = _data(len(y))
    model = _model(tmp_path, lambda p: DeepSets(), x, Weighted(y, w))
    batch = x[np.arange(len(y))]
    with torch.no_grad():
        direct = model.module(**{k: torch.from_numpy(v) for k, v in batch.items()})
    out = np.zeros(model.n_grad + 1, np.float32)
    model.gradient(batch, Weighted(y, w)[:], 1.0, out)
    each = np.logaddexp(0, direct.numpy().reshape(-1)) - y * direct.numpy().reshape(-1)
    assert out[-1] == pytest.approx(np.sum(w * each) / len(y), rel=1e-5)
    assert np.isfinite(model.metric_results(model.metric_state(x, Weighted(y, w), 16))["auc"])
    model.train_step(batch, Weighted(y, w)[:])
    model.predict(x[:4])


def test_a_forward_without_an_input_is_one_line_naming_the_inputs(tmp_path):
    x, y = _named()

    class Flat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(1, 1)

        def forward(self, features):
            return self.lin(features)

    with pytest.raises(ValueError, match=r"^objective\.data\.collections: the module's forward\(\) "
                                         r"takes no argument 'particles'; .*forward\(features, "
                                         r"particles, particles_mask\)$"):
        _model(tmp_path, lambda p: Flat(), x, y)


def test_a_training_step_gets_named_inputs_and_the_weights_in_its_batch(tmp_path):
    x, y = _named()
    _, _, w = _data(len(y))
    seen = []

    class Own(DeepSets):
        def training_step(self, batch, batch_idx):
            inputs, target, weight = batch
            seen.append((sorted(inputs), weight.detach().numpy().copy()))
            each = torch.nn.functional.binary_cross_entropy_with_logits(
                self(**inputs).reshape(-1), target, reduction="none")
            return (weight * each).sum() / len(weight)

        def validation_step(self, batch, batch_idx):
            inputs, target, weight = batch
            self.log("val_weight", weight.sum(), reduce_fx="sum")

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    spec = _spec(tmp_path, metric="val_weight", training={"loss": None, "optimizer": None})
    model = frameworks.build_model(lambda p: Own(), {}, 3, spec, None, x[:2], Weighted(y, w)[:2])
    model.train_step(x[np.arange(8)], Weighted(y, w)[np.arange(8)])
    assert seen[0][0] == ["features", "particles", "particles_mask"]
    assert np.allclose(seen[0][1], w[:8])
    got = model.metric_results(model.metric_state(x, Weighted(y, w), 16))
    assert got["weight"] == pytest.approx(float(w.sum()), rel=1e-5)


# ----------------------------------------------------------------------- the device
LAUNCHERS = {"hydra": ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
             "openmpi": ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
             "slurm": ("SLURM_LOCALID", "SLURM_NTASKS_PER_NODE")}
PINNED = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS",
          "CUDA_VISIBLE_DEVICES", "KERAS_BACKEND", "TF_CPP_MIN_LOG_LEVEL")


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("count, local_rank, index", [(4, 3, 3), (2, 3, 1), (1, 2, 0)])
def test_each_rank_takes_its_node_local_rank_s_gpu(monkeypatch, launcher, count, local_rank,
                                                   index):
    """The node-local rank as the launcher says it (threads.node_layout), the GPUs torch
    sees faked: rank -> its GPU, round-robin, set as torch's current device."""
    from mpiopt.training import threads
    from mpiopt.training.frameworks import torch_device

    for name in (*PINNED, *(v for pair in LAUNCHERS.values() for v in pair)):
        monkeypatch.delenv(name, raising=False)       # put back as they were after the test
    rank_var, size_var = LAUNCHERS[launcher]
    monkeypatch.setenv(rank_var, str(local_rank))
    monkeypatch.setenv(size_var, "4")
    monkeypatch.setattr(threads, "_pinned", None)
    monkeypatch.setattr(threads, "_gpus", lambda: [])
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    assert torch_device.rank_device() == torch.device("cuda", index)
    assert chosen == [index]


def test_without_a_gpu_the_model_and_its_buffers_stay_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    x, y, _ = _data()
    model = _model(tmp_path, _binary, x, y)
    assert model.device == torch.device("cpu")
    assert all(t.device.type == "cpu" for t in model.module.state_dict().values())
    before = model.get_weights().copy()
    model.train_step(x[:16], y[:16])
    assert not np.allclose(before, model.get_weights())


def test_a_trial_on_a_torch_gpu_records_the_gpu_s_name(monkeypatch):
    from mpiopt.objective.device import describe_device

    assert describe_device().startswith("cpu: ")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name",
                        lambda index: {1: "NVIDIA H200"}.get(index, "another"))
    assert describe_device() == "gpu: NVIDIA H200"


def test_a_cuda_out_of_memory_is_one_line_and_frees_the_cache(tmp_path, monkeypatch):
    from mpiopt.training.frameworks import torch_device

    freed = []
    monkeypatch.setattr(torch_device, "_free_cache", lambda: freed.append(1))
    x, y, _ = _data()

    class Greedy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(6, 1)

        def forward(self, x):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB\n"
                                         "(GPU 0; 79.15 GiB total capacity)")

    spec = _spec(tmp_path, metric="val_loss", direction="minimize",
                 training={"loss": "BCEWithLogitsLoss"})
    model = frameworks.build_model(lambda p: Greedy(), {}, 3, spec, None, x[:2], y[:2])
    with pytest.raises(RuntimeError) as info:
        model.train_step(x[:16], y[:16])
    assert str(info.value) == ("cpu: CUDA out of memory. Tried to allocate 20.00 GiB (a smaller "
                               "training.batch_size or model fits)")
    assert freed == [1]


def test_the_weighted_loss_and_metrics_are_the_keras_path_s_numbers(tmp_path):
    """The same network and weights in torch and in Keras (a sigmoid output, binary cross
    entropy), the same weighted events, negative ones among them: the training loss and
    every validation metric agree (AUC within its 200 bins)."""
    pytest.importorskip("tensorflow")
    import keras

    from mpiopt.training.frameworks.keras_model import KerasModel

    x, y, w = _data(500, seed=2)

    def sigmoid(params):
        return torch.nn.Sequential(_binary(params), torch.nn.Sigmoid())

    spec = _spec(tmp_path, metric="val_auc", training={
        "loss": "BCELoss", "optimizer": {"name": "SGD", "lr": 0.1},
        "metrics": ["accuracy", "auc", "mse"]})
    ours = frameworks.build_model(sigmoid, {}, 3, spec, None, x[:2], Weighted(y, w)[:2])
    theirs = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"),
                               keras.layers.Dense(1, activation="sigmoid")])
    theirs.compile(keras.optimizers.SGD(0.1), "binary_crossentropy",
                   metrics=["accuracy", keras.metrics.AUC(name="auc"), "mse"])
    a, b, c, d = (q.detach().numpy() for q in ours.module.parameters())
    theirs.set_weights([a.T, b, c.T, d])
    theirs = KerasModel(theirs, x[:2], Weighted(y, w)[:2])

    got = ours.metric_results(ours.metric_state(x, Weighted(y, w), 64))
    want = theirs.metric_results(theirs.metric_state(x, Weighted(y, w), 64))
    for name in ("loss", "accuracy", "mse"):
        assert got[name] == pytest.approx(want[name], rel=1e-4), name
    assert got["auc"] == pytest.approx(want["auc"], abs=0.005)
    mine, keras_ = (np.zeros(m.n_grad + 1, np.float32) for m in (ours, theirs))
    ours.gradient(x[:64], Weighted(y, w)[:64], 1.0, mine)
    theirs.gradient(x[:64], Weighted(y, w)[:64], 1.0, keras_)
    assert mine[-1] == pytest.approx(keras_[-1], rel=1e-4)
