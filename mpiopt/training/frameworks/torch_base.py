"""What every torch model shares behind the flat-buffer interface: the layout, the weights,
the checkpoint state, the kept file. The two ways a module is trained build on it:
torch_model.TorchModel (forward, a loss and one optimizer: mpiopt's step) and
torch_step.StepModel (the module's own training_step, Lightning's contract).

A flat buffer is a NumPy array; torch.from_numpy views the same memory, so on the CPU
weights are read into an MPI buffer by one torch.cat and written back as views (no copy);
on a GPU each crosses to the host and back once (torch_device: no CUDA-aware MPI).

Inputs: one array is forward's one argument. Named inputs (objective.data.collections:
`features`, each collection NAME and its mask NAME_mask, mpiopt.training.inputs) are
forward's keyword arguments by name, `module(**inputs)`: the way weaver-core's
ParticleNet is written (`forward(self, points, features, mask)`), so a model of the field
runs unchanged and the order of the inputs never matters; the same names a Keras model's
`keras.Input(name=...)` takes.

Layout (as the interface says): trainable parameters, then frozen float parameters and
float buffers (batch-norm statistics). Integer buffers (num_batches_tracked) stay local.

torch is imported only when this process trains a torch model.
"""
from __future__ import annotations

import json
import warnings

import numpy as np

from mpiopt import jsontext
from mpiopt.training.frameworks._base import FlatModel
from mpiopt.training.frameworks.torch_device import out_of_memory_fails_the_trial

NAME = "torch"


def tensor(a, floats, device=None):
    """A tensor over the array's memory (a copy where it is read-only: a memory-mapped
    file), floating values as the model's float type, on the device (None: the CPU). A
    tensor is taken as it is (a gradient buffer on the device: torch_collectives)."""
    import torch

    if isinstance(a, torch.Tensor):
        t = a
    else:
        a = np.asarray(a)
        if not a.flags.writeable or not a.flags.c_contiguous:
            a = np.array(a)
        t = torch.from_numpy(a)
    if t.is_floating_point() and t.dtype != floats:
        t = t.to(floats)
    return t if device is None or device.type == "cpu" else t.to(device)


def inputs(x, floats, device=None):
    """A batch's inputs as tensors: one, or a dict of named inputs."""
    if isinstance(x, dict):
        return {name: tensor(a, floats, device) for name, a in x.items()}
    return tensor(x, floats, device)


def call(module, given):
    """The module's forward over inputs(): named inputs as keyword arguments."""
    return module(**given) if isinstance(given, dict) else module(given)


def into_host(parts: list, out) -> None:
    """torch.cat(parts) into the NumPy array out: in place on the CPU, one copy from a GPU;
    into a tensor out (a buffer on the device: torch_collectives) where it is."""
    import torch

    if not parts:
        return
    if isinstance(out, torch.Tensor):
        out.copy_(parts[0] if len(parts) == 1 else torch.cat(parts))
        return
    host = torch.from_numpy(out)
    if parts[0].device.type == "cpu":
        torch.cat(parts, out=host)
    else:
        host.copy_(torch.cat(parts))


class TorchFlat(FlatModel):
    """A torch module seen as flat buffers; a subclass says how it trains and validates.

    Subclasses set self.module, self.optimizers and self.schedulers (lists; a schedule
    may be None), call lay_out(), and take the snapshot reset() returns to once
    everything is built."""

    framework, suffix = NAME, ".pt"

    def lay_out(self) -> None:
        """The flat layout of the module's float tensors (trainable ones first), and the
        device they are on (torch_device.rank_device put the module there)."""
        import torch

        module = self.module
        self.trainable = [q for q in module.parameters() if q.requires_grad]
        mine = {id(q) for q in self.trainable}
        others = [t for t in (*module.parameters(), *module.buffers())
                  if id(t) not in mine and t.is_floating_point()]
        self.variables = self.trainable + others
        sizes = [t.numel() for t in self.variables]
        edges = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        self.spans = list(zip(edges[:-1], edges[1:]))
        self.n_grad = int(edges[len(self.trainable)])
        self.n_weights = int(edges[-1])
        self.floats = self.trainable[0].dtype if self.trainable else torch.float32
        self.device = self.variables[0].device if self.variables else torch.device("cpu")

    def begin_epoch(self, seed: int) -> None:
        import torch

        torch.manual_seed(seed)

    # ------------------------------------------------------------------ weights
    def get_weights(self, out: np.ndarray | None = None) -> np.ndarray:
        import torch

        if out is None:
            out = np.empty(self.n_weights, np.float32)
        with torch.no_grad():
            into_host([t.detach().reshape(-1).float() for t in self.variables], out)
        return out

    def set_weights(self, flat: np.ndarray) -> None:
        import torch

        flat = tensor(np.asarray(flat, np.float32), torch.float32, self.device)
        with torch.no_grad():
            for t, (a, b) in zip(self.variables, self.spans):
                t.copy_(flat[a:b].view_as(t))

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> list:
        """The module's state_dict values, then one JSON text and the tensors it refers
        to: the optimizers' and the schedules' state_dicts, torch's random state."""
        import torch

        tensors: list = []
        extra = {"optimizers": [o.state_dict() for o in self.optimizers],
                 "schedulers": [None if s is None else s.state_dict() for s in self.schedulers],
                 "rng": torch.get_rng_state()}
        text = jsontext.exact(_encode(extra, tensors))
        return [t.detach().cpu().numpy().copy() for t in self.module.state_dict().values()] \
            + [np.array(text)] + tensors

    def restore(self, values: list, keep_own: bool = False) -> None:
        import torch

        own = self.module.state_dict()
        n = len(own)
        if len(values) <= n or np.asarray(values[n]).dtype.kind != "U" or any(
                tuple(t.shape) != tuple(np.shape(v)) for t, v in zip(own.values(), values)):
            raise ValueError("the checkpoint does not fit this model (another architecture)")
        extra = _decode(json.loads(str(values[n])), values[n + 1:])
        if (len(extra.get("optimizers", ())), len(extra.get("schedulers", ()))) \
                != (len(self.optimizers), len(self.schedulers)):
            raise ValueError("the checkpoint does not fit this model (another number of "
                             "optimizers or schedules)")
        with torch.no_grad():
            for t, v in zip(own.values(), values):
                t.copy_(torch.from_numpy(np.array(v)))
        kept = _learning_rates(self.optimizers, self.schedulers)
        for optimizer, saved in zip(self.optimizers, extra["optimizers"]):
            optimizer.load_state_dict(saved)
        for schedule, saved in zip(self.schedulers, extra["schedulers"]):
            if schedule is not None and saved is not None:
                schedule.load_state_dict(saved)
        if keep_own:
            _put_back(kept, self.optimizers, self.schedulers)
        else:
            torch.set_rng_state(extra["rng"])

    def reset(self) -> None:
        self.restore(self._snapshot)

    def save(self, path: str, weights: np.ndarray | None = None) -> None:
        """torch.save(module.state_dict(), path) of CPU tensors: what plain PyTorch loads
        into the module build_model makes (module.load_state_dict(torch.load(path))), on
        a machine with a GPU or without."""
        import torch

        current = None
        if weights is not None:
            current = self.get_weights()
            self.set_weights(weights)
        try:
            torch.save(on_cpu(self.module.state_dict()), path)
        finally:
            if current is not None:
                self.set_weights(current)

    # ------------------------------------------------------------------ the model itself
    @out_of_memory_fails_the_trial
    def zeros(self, n: int):
        """n float32 zeros on the model's device (a group's gradient buffer there)."""
        import torch

        return torch.zeros(n, dtype=torch.float32, device=self.device)

    def n_params(self) -> int:
        return int(sum(q.numel() for q in self.module.parameters()))

    def predict(self, x) -> None:
        import torch

        self.module.eval()
        with torch.inference_mode():
            call(self.module, inputs(x, self.floats, self.device))


def on_cpu(state: dict) -> dict:
    """A state_dict with its tensors on the CPU (its metadata kept: load_state_dict reads
    the modules' versions from it)."""
    out = type(state)((k, v.detach().cpu()) for k, v in state.items())
    if hasattr(state, "_metadata"):
        out._metadata = state._metadata
    return out


def step_schedule(schedule, value: float | None = None) -> None:
    """One step of a learning-rate schedule. ReduceLROnPlateau is told the figure of
    merit; a downpour worker, which never steps its optimizer, steps its schedule silently
    (torch would warn)."""
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)`")
        if isinstance(schedule, torch.optim.lr_scheduler.ReduceLROnPlateau):
            schedule.step(value)
        else:
            schedule.step()


def _learning_rates(optimizers, schedulers) -> tuple:
    """The optimizers' groups' (lr, initial_lr) and the schedules' base rates: what a pbt
    round keeps of its own when it takes its parent's state (its hyperparameters)."""
    return ([[(g.get("lr"), g.get("initial_lr")) for g in o.param_groups] for o in optimizers],
            [list(getattr(s, "base_lrs", []) or []) for s in schedulers])


def _put_back(kept: tuple, optimizers, schedulers) -> None:
    rates, bases = kept
    for groups, optimizer in zip(rates, optimizers):
        for group, (lr, initial) in zip(optimizer.param_groups, groups):
            group["lr"] = lr
            if initial is not None:
                group["initial_lr"] = initial
    for base, schedule in zip(bases, schedulers):
        if base:
            schedule.base_lrs = base


def _encode(value, tensors: list):
    """A state_dict as JSON: tensors by their index in `tensors`, dicts as key/value pairs
    (their keys are ints: parameter numbers), tuples marked (Adam's betas)."""
    import torch

    if isinstance(value, torch.Tensor):
        tensors.append(value.detach().cpu().numpy().copy())
        return {"tensor": len(tensors) - 1}
    if isinstance(value, dict):
        return {"dict": [[_encode(k, tensors), _encode(v, tensors)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {"tuple": [_encode(v, tensors) for v in value]}
    if isinstance(value, list):
        return [_encode(v, tensors) for v in value]
    return value


def _decode(value, tensors: list):
    import torch

    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if "tensor" in value:
        return torch.from_numpy(np.array(tensors[value["tensor"]]))
    if "tuple" in value:
        return tuple(_decode(v, tensors) for v in value["tuple"])
    return {_decode(k, tensors): _decode(v, tensors) for k, v in value["dict"]}
