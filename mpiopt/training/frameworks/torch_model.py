"""PyTorch behind the flat-buffer interface (frameworks._base.FlatModel).

A flat buffer is a NumPy array; torch.from_numpy views the same memory, so a gradient is
written into the MPI buffer by one torch.cat and an update reads its gradients from that
buffer as views (no copy): the optimizer's step sees them as each parameter's .grad.
Gradients come from torch.autograd.grad, never accumulated into .grad, so the buffer is
referenced only during a step.

Layout (as the interface says): trainable parameters, then frozen float parameters and
float buffers (batch-norm statistics). Integer buffers (num_batches_tracked) stay local.

The loss, optimizer and schedule come from torch_parts (the spec or the module); the
validation metrics from metrics.Accumulators. torch is imported only when this process
trains a torch model: owns() looks at sys.modules, never imports.
"""
from __future__ import annotations

import json
import sys
import warnings

import numpy as np

from mpiopt.trial import Direction
from mpiopt.training import threads
from mpiopt.training.frameworks._base import FlatModel
from mpiopt.training.frameworks.metrics import Accumulators
from mpiopt.training.frameworks.torch_names import METRICS
from mpiopt.training.frameworks.torch_parts import parts

NAME = "torch"
# the targets' form by loss: class indices (int64, one per sample) where y holds one
# value per sample; else float32 shaped like the output
INDEX_TARGETS = ("CrossEntropyLoss", "NLLLoss", "MultiMarginLoss")


def imported() -> bool:
    """Whether this process has imported torch (then it is seeded before a build)."""
    return "torch" in sys.modules


def owns(built) -> bool:
    """Whether build_model returned a torch module (never imports torch to find out)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(built, torch.nn.Module)


_threads_set = False


def prepare(seed: int) -> None:
    """Before a build: torch's thread pools as threads.pin_threads chose (intra-op threads
    = cores per rank, one inter-op thread: a data-parallel rank runs one step at a time),
    and its generator seeded."""
    global _threads_set
    import torch

    n = threads.pinned_threads()
    if n and not _threads_set:
        _threads_set = True
        torch.set_num_threads(n)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:        # set once per process, before any parallel work
            pass
    torch.manual_seed(int(seed))


def wrap(module, spec, learning_rate: float | None, sample_x, sample_y) -> "TorchModel":
    """The module with its loss, optimizer and schedule behind the flat-buffer interface.
    Its validation metrics: training.metrics and those the objective or a constraint
    names (val_accuracy asks for accuracy), so a figure of merit is never missing."""
    if callable(getattr(module, "training_step", None)):
        raise ValueError("objective.model: build_model returned a module with its own "
                         "training_step (Lightning's contract); mpiopt trains a torch module "
                         "with forward, a loss and one optimizer (training.loss, "
                         "training.optimizer)")
    if isinstance(sample_x, dict) or isinstance(sample_y, tuple):
        field = "collections" if isinstance(sample_x, dict) else "weights"
        raise ValueError(f"objective.data.{field}: a torch model does not take named inputs "
                         "or event weights yet (a Keras model does)")
    _materialize(module, sample_x)
    maximize = Direction.parse(spec.objective.direction) is Direction.MAXIMIZE
    wanted = [m[len("val_"):] for m in _named_metrics(spec.objective) if m.startswith("val_")]
    return TorchModel(module, parts(module, spec.training, learning_rate, maximize),
                      [*spec.training.metrics, *(m for m in wanted if m in METRICS)])


def _named_metrics(objective) -> list:
    return [objective.metric, *(n for n, _ in objective.objectives),
            *(c.metric for c in objective.constraints)]


def _materialize(module, sample_x) -> None:
    """Lazy modules (LazyLinear...) get their shapes from one forward pass over a sample,
    before the optimizer is given their parameters."""
    import torch
    from torch.nn.parameter import is_lazy

    if any(is_lazy(p) for p in module.parameters()):
        with torch.no_grad():
            module(_tensor(np.asarray(sample_x[:2]), torch.float32))


def _tensor(a: np.ndarray, floats):
    """A tensor over the array's memory (a copy where it is read-only: a memory-mapped
    file), floating values as the model's float type."""
    import torch

    a = np.asarray(a)
    if not a.flags.writeable or not a.flags.c_contiguous:
        a = np.array(a)
    t = torch.from_numpy(a)
    return t.to(floats) if t.is_floating_point() and t.dtype != floats else t


class TorchModel(FlatModel):
    """A torch module with its loss and optimizer, seen as flat buffers."""

    framework, suffix = NAME, ".pt"

    def __init__(self, module, p, metrics):
        import torch

        self.module = module
        self.criterion, self.optimizer = p.loss, p.optimizer
        self.scheduler, self.interval = p.scheduler, p.interval
        self.index_targets = p.loss_name in INDEX_TARGETS
        self.shaped_targets = p.loss_name is not None and not self.index_targets
        self.accumulators = Accumulators(metrics, p.loss_name)
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
        self._snapshot = self.state()

    # ------------------------------------------------------------------ batches
    def _loss(self, x, y):
        """(output, mean loss) of a batch; the targets in the form the loss takes
        (INDEX_TARGETS, else shaped like the output; a module's own criterion gets them
        as they are)."""
        import torch

        output = self.module(_tensor(x, self.floats))
        target = _tensor(y, self.floats)
        if self.index_targets and (target.dim() == 1 or target.shape[1:] == (1,)):
            target = target.reshape(-1).to(torch.int64)
        elif self.shaped_targets:
            target = target.to(self.floats)
            if target.numel() == output.numel():
                target = target.reshape(output.shape)
        return output, self.criterion(output, target)

    def _gradients(self, x, y, scale: float):
        """(loss, gradients of scale * loss): returned, never accumulated into .grad."""
        import torch

        self.module.train()
        _, loss = self._loss(x, y)
        grads = torch.autograd.grad(loss * scale, self.trainable, allow_unused=True)
        return loss, grads

    # ------------------------------------------------------------------ training steps
    def gradient(self, x, y, scale: float, out: np.ndarray) -> None:
        import torch

        loss, grads = self._gradients(x, y, scale)
        flat = [torch.zeros(q.numel()) if g is None else g.reshape(-1).float()
                for g, q in zip(grads, self.trainable)]
        torch.cat(flat, out=torch.from_numpy(out)[: self.n_grad])
        out[self.n_grad] = float(loss.detach()) * scale

    def apply(self, flat_grad: np.ndarray) -> None:
        import torch

        flat = _tensor(flat_grad, torch.float32)
        for q, (a, b) in zip(self.trainable, self.spans):
            q.grad = flat[a:b].view_as(q).to(q.dtype)
        self.optimizer.step()
        for q in self.trainable:
            q.grad = None
        self._after_step()

    def train_step(self, x, y) -> float:
        self.module.train()
        self.optimizer.zero_grad(set_to_none=True)
        _, loss = self._loss(x, y)
        loss.backward()
        self.optimizer.step()
        self._after_step()
        return float(loss.detach())

    def _after_step(self) -> None:
        if self.scheduler is not None and self.interval == "step":
            self._step_schedule()

    def begin_epoch(self, seed: int) -> None:
        import torch

        torch.manual_seed(seed)

    def end_epoch(self, value: float) -> None:
        if self.scheduler is not None and self.interval == "epoch":
            self._step_schedule(value)

    def _step_schedule(self, value: float | None = None) -> None:
        """ReduceLROnPlateau is told the figure of merit; a downpour worker, which never
        steps its optimizer, steps its schedule silently (torch would warn)."""
        import torch

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)`")
            if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                self.scheduler.step(value)
            else:
                self.scheduler.step()

    # ------------------------------------------------------------------ weights
    def get_weights(self, out: np.ndarray | None = None) -> np.ndarray:
        import torch

        if out is None:
            out = np.empty(self.n_weights, np.float32)
        with torch.no_grad():
            torch.cat([t.detach().reshape(-1).float() for t in self.variables],
                      out=torch.from_numpy(out))
        return out

    def set_weights(self, flat: np.ndarray) -> None:
        import torch

        flat = _tensor(np.asarray(flat, np.float32), torch.float32)
        with torch.no_grad():
            for t, (a, b) in zip(self.variables, self.spans):
                t.copy_(flat[a:b].view_as(t))

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> list:
        """The module's state_dict values, then one JSON text and the tensors it refers
        to: the optimizer's and the schedule's state_dict, torch's random state."""
        import torch

        tensors: list = []
        extra = {"optimizer": self.optimizer.state_dict(),
                 "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
                 "rng": torch.get_rng_state()}
        text = json.dumps(_encode(extra, tensors))
        return [t.detach().cpu().numpy().copy() for t in self.module.state_dict().values()] \
            + [np.array(text)] + tensors

    def restore(self, values: list, keep_own: bool = False) -> None:
        import torch

        own = self.module.state_dict()
        n = len(own)
        if len(values) <= n or np.asarray(values[n]).dtype.kind != "U" or any(
                tuple(t.shape) != tuple(np.shape(v)) for t, v in zip(own.values(), values)):
            raise ValueError("the checkpoint does not fit this model (another architecture)")
        with torch.no_grad():
            for t, v in zip(own.values(), values):
                t.copy_(torch.from_numpy(np.array(v)))
        extra = _decode(json.loads(str(values[n])), values[n + 1:])
        lrs = [(g.get("lr"), g.get("initial_lr")) for g in self.optimizer.param_groups]
        bases = list(getattr(self.scheduler, "base_lrs", []) or [])
        self.optimizer.load_state_dict(extra["optimizer"])
        if self.scheduler is not None and extra["scheduler"] is not None:
            self.scheduler.load_state_dict(extra["scheduler"])
        if not keep_own:
            torch.set_rng_state(extra["rng"])
            return
        for group, (lr, initial) in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
            if initial is not None:
                group["initial_lr"] = initial
        if bases:
            self.scheduler.base_lrs = bases

    def reset(self) -> None:
        self.restore(self._snapshot)

    def save(self, path: str, weights: np.ndarray | None = None) -> None:
        """torch.save(module.state_dict(), path): what plain PyTorch loads into the module
        build_model makes (module.load_state_dict(torch.load(path)))."""
        import torch

        current = None
        if weights is not None:
            current = self.get_weights()
            self.set_weights(weights)
        try:
            torch.save(self.module.state_dict(), path)
        finally:
            if current is not None:
                self.set_weights(current)

    # ------------------------------------------------------------------ validation
    def metric_state(self, x, y, batch_size: int) -> np.ndarray:
        import torch

        self.module.eval()
        state = self.accumulators.zeros()
        with torch.no_grad():
            for start in range(0, len(x), batch_size):
                xb, yb = x[start: start + batch_size], y[start: start + batch_size]
                output, loss = self._loss(xb, yb)
                self.accumulators.add(state, float(loss) * len(xb), output.float().numpy(), yb)
        return state

    def metric_results(self, state: np.ndarray) -> dict:
        return self.accumulators.results(state)

    # ------------------------------------------------------------------ the model itself
    def n_params(self) -> int:
        return int(sum(q.numel() for q in self.module.parameters()))

    def predict(self, x) -> None:
        import torch

        self.module.eval()
        with torch.inference_mode():
            self.module(_tensor(np.asarray(x), self.floats))


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
