"""A torch module trained by mpiopt's own step: forward, a loss and one optimizer.

Gradients come from torch.autograd.grad, never accumulated into .grad, and are written
into the MPI buffer by one torch.cat; an update reads them from that buffer as views (no
copy): the optimizer's step sees them as each parameter's .grad, so the buffer is
referenced only during a step. The layout, the weights and the checkpoint state are
torch_base.TorchFlat's.

The loss, optimizer and schedule come from torch_parts (the spec or the module); the
validation metrics from metrics.Accumulators. A module with its own training_step is
trained through it instead (torch_step.StepModel). torch is imported only when this
process trains a torch model: owns() looks at sys.modules, never imports.
"""
from __future__ import annotations

import sys

import numpy as np

from mpiopt.trial import Direction
from mpiopt.training import threads
from mpiopt.training.frameworks.metrics import Accumulators
from mpiopt.training.frameworks.torch_base import NAME, TorchFlat, step_schedule, tensor
from mpiopt.training.frameworks.torch_names import METRICS
from mpiopt.training.frameworks.torch_parts import parts

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


def wrap(module, spec, learning_rate: float | None, sample_x, sample_y) -> TorchFlat:
    """The module with its loss, optimizer and schedule behind the flat-buffer interface
    (a module with its own training_step: torch_step.StepModel). Its validation metrics:
    training.metrics and those the objective or a constraint names (val_accuracy asks
    for accuracy), so a figure of merit is never missing."""
    if isinstance(sample_x, dict) or isinstance(sample_y, tuple):
        field = "collections" if isinstance(sample_x, dict) else "weights"
        raise ValueError(f"objective.data.{field}: a torch model does not take named inputs "
                         "or event weights yet (a Keras model does)")
    _materialize(module, sample_x)
    maximize = Direction.parse(spec.objective.direction) is Direction.MAXIMIZE
    if callable(getattr(module, "training_step", None)):
        from mpiopt.training.frameworks.torch_step import wrap_step

        return wrap_step(module, spec, learning_rate, maximize)
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
            module(tensor(np.asarray(sample_x[:2]), torch.float32))


class TorchModel(TorchFlat):
    """A torch module with its loss and optimizer, seen as flat buffers."""

    def __init__(self, module, p, metrics):
        self.module = module
        self.criterion, self.optimizer = p.loss, p.optimizer
        self.scheduler, self.interval = p.scheduler, p.interval
        self.optimizers, self.schedulers = [p.optimizer], [p.scheduler]
        self.index_targets = p.loss_name in INDEX_TARGETS
        self.shaped_targets = p.loss_name is not None and not self.index_targets
        self.accumulators = Accumulators(metrics, p.loss_name)
        self.lay_out()
        self._snapshot = self.state()

    # ------------------------------------------------------------------ batches
    def _loss(self, x, y):
        """(output, mean loss) of a batch; the targets in the form the loss takes
        (INDEX_TARGETS, else shaped like the output; a module's own criterion gets them
        as they are)."""
        import torch

        output = self.module(tensor(x, self.floats))
        target = tensor(y, self.floats)
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

        flat = tensor(flat_grad, torch.float32)
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
            step_schedule(self.scheduler)

    def end_epoch(self, value: float) -> None:
        if self.scheduler is not None and self.interval == "epoch":
            step_schedule(self.scheduler, value)

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

