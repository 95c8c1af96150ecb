"""A torch module trained by mpiopt's own step: forward, a loss and one optimizer.

Gradients come from torch.autograd.grad, never accumulated into .grad: a hook on each
trainable tensor writes its gradient into the MPI buffer as soon as backward has it and
tells the group's exchange, which sums a bucket over the group while backward goes on
(allreduce.py). An update reads them from that buffer as views (no copy): the optimizer's
step sees them as each parameter's .grad, so the buffer is referenced only during a step.
The layout, the weights and the checkpoint state are torch_base.TorchFlat's.

The loss, optimizer and schedule come from torch_parts (the spec or the module); the
validation metrics from metrics.Accumulators. The module sits on the rank's device
(torch_device.rank_device), each batch is moved there, and named inputs reach forward as
keyword arguments (torch_base.inputs).

Event weights (objective.data.weights: a batch's targets are then the pair (y, w)) follow
Keras's rule, so a torch and a Keras study of the same weighted data mean the same
(mpiopt.training.weights): the loss is taken per sample (the torch.nn loss with
reduction="none", its values averaged over each sample's outputs), then
sum(w_i * loss_i) / the batch's size. Why not sum(w * loss) / sum(w): with negative
weights a batch's sum(w) may be near zero or below, and the step would blow up or turn
round; the weights are scaled to a mean of 1 over the data, so over the data the two
agree. Summed over a group's ranks it is the global batch's loss, as without weights.

A module with its own training_step is trained through it instead (torch_step.StepModel).
torch is imported only when this process trains a torch model: owns() looks at
sys.modules, never imports.
"""
from __future__ import annotations

import sys

import numpy as np

from mpiopt.trial import Direction
from mpiopt.training import threads
from mpiopt.training.frameworks.metrics import Accumulators
from mpiopt.training.frameworks.torch_base import (NAME, TorchFlat, call, inputs, into_host,
                                                   step_schedule, tensor)
from mpiopt.training.frameworks.torch_device import out_of_memory_fails_the_trial, rank_device
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
    """The module, on the rank's device, with its loss, optimizer and schedule behind the
    flat-buffer interface (a module with its own training_step: torch_step.StepModel).
    Its validation metrics: training.metrics and those the objective or a constraint names
    (val_accuracy asks for accuracy), so a figure of merit is never missing."""
    _materialize(module, sample_x)
    module.to(rank_device())
    maximize = Direction.parse(spec.objective.direction) is Direction.MAXIMIZE
    if callable(getattr(module, "training_step", None)):
        from mpiopt.training.frameworks.torch_step import wrap_step

        return wrap_step(module, spec, learning_rate, maximize)
    if isinstance(sample_x, dict):
        _check_forward(module, sample_x)
    wanted = [m[len("val_"):] for m in _named_metrics(spec.objective) if m.startswith("val_")]
    p = parts(module, spec.training, learning_rate, maximize)
    if isinstance(sample_y, tuple):
        p.loss = per_sample(p.loss)
    return TorchModel(module, p, [*spec.training.metrics, *(m for m in wanted if m in METRICS)],
                      weighted=isinstance(sample_y, tuple))


def per_sample(criterion):
    """The loss with reduction "none" (a copy: the module's own criterion is left as it
    is), for event weights; a loss that cannot give each sample's value is one line."""
    import copy

    if not isinstance(getattr(criterion, "reduction", None), str):
        raise ValueError("objective.data.weights: the module's criterion gives only the batch's "
                         "mean loss; event weights need each sample's: use a torch.nn loss "
                         "(training.loss, or a criterion with `reduction`), or a training_step "
                         "of the module's own, which gets the weights in its batch")
    mine = copy.copy(criterion)
    mine.reduction = "none"
    return mine


def _check_forward(module, sample_x: dict) -> None:
    """Named inputs are forward's keyword arguments: one it does not take is one line
    naming the inputs (a forward(**inputs) or one parameter per name takes them)."""
    import inspect

    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):      # a builtin forward: let the call say
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    missing = [name for name in sample_x if name not in params]
    if missing:
        raise ValueError(f"objective.data.collections: the module's forward() takes no "
                         f"argument {missing[0]!r}; with collections it is called with the "
                         f"inputs by name: forward({', '.join(sample_x)})")


def _named_metrics(objective) -> list:
    return [objective.metric, *(n for n, _ in objective.objectives),
            *(c.metric for c in objective.constraints)]


def _materialize(module, sample_x) -> None:
    """Lazy modules (LazyLinear...) get their shapes from one forward pass over a sample,
    before the optimizer is given their parameters."""
    import torch
    from torch.nn.parameter import is_lazy

    if any(is_lazy(p) for p in module.parameters()):
        first = ({k: v[:2] for k, v in sample_x.items()} if isinstance(sample_x, dict)
                 else sample_x[:2])
        with torch.no_grad():
            call(module, inputs(first, torch.float32))


def _put_loss(out, i: int, loss) -> None:
    """The step's loss into out[i]: read to the host for a NumPy buffer, copied on the
    device for a tensor (no wait for the device before backward)."""
    out[i] = float(loss) if isinstance(out, np.ndarray) else loss


class TorchModel(TorchFlat):
    """A torch module with its loss and optimizer, seen as flat buffers."""

    def __init__(self, module, p, metrics, weighted: bool = False):
        self.module, self.weighted = module, weighted
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
        """(output, loss) of a batch: the mean loss, or with event weights (y the pair
        (labels, weights)) sum(w * per-sample loss) / the batch's size. The targets in
        the form the loss takes (INDEX_TARGETS, else shaped like the output; a module's
        own criterion gets them as they are)."""
        import torch

        y, w = y if self.weighted else (y, None)
        output = call(self.module, inputs(x, self.floats, self.device))
        target = tensor(y, self.floats, self.device)
        if self.index_targets and (target.dim() == 1 or target.shape[1:] == (1,)):
            target = target.reshape(-1).to(torch.int64)
        elif self.shaped_targets:
            target = target.to(self.floats)
            if target.numel() == output.numel():
                target = target.reshape(output.shape)
        loss = self.criterion(output, target)
        if w is None:
            return output, loss
        each = loss.reshape(len(output), -1).mean(1)
        return output, (each * tensor(w, self.floats, self.device)).sum() / max(1, len(output))

    def _gradients(self, x, y, scale: float, out: np.ndarray, ready):
        """The loss into out's last slot, then the gradients of scale * loss into out by
        hooks on the trainable tensors while backward runs (never accumulated into .grad;
        the hooks live for this call only: the module is the user's); returns the indices
        of the tensors handed over."""
        import torch

        self.module.train()
        _, loss = self._loss(x, y)
        _put_loss(out, self.n_grad, loss.detach() * scale)   # the first bucket holds it
        handed: set = set()
        hooks = [q.register_hook(self._hand_over(k, out, ready, handed))
                 for k, q in enumerate(self.trainable)]
        try:
            torch.autograd.grad(loss * scale, self.trainable, allow_unused=True)
        finally:
            for hook in hooks:
                hook.remove()
        return handed

    def _whole_gradient(self, x, y, scale: float, out) -> None:
        """The loss and the gradients into out in one copy after backward: where nobody
        starts a sum before the whole gradient is there (one bucket, downpour), a hook
        per tensor would cost a Python call each and gain nothing."""
        import torch

        self.module.train()
        _, loss = self._loss(x, y)
        _put_loss(out, self.n_grad, loss.detach() * scale)
        grads = torch.autograd.grad(loss * scale, self.trainable, allow_unused=True)
        into_host([q.new_zeros(q.numel(), dtype=torch.float32) if g is None
                   else g.reshape(-1).float() for g, q in zip(grads, self.trainable)],
                  out[: self.n_grad])

    def _hand_over(self, k: int, out: np.ndarray, ready, handed: set):
        a, b = self.spans[k]

        def hook(grad):
            into_host([grad.reshape(-1).float()], out[a:b])
            handed.add(k)
            ready(k)
        return hook

    # ------------------------------------------------------------------ training steps
    @property
    def grad_sizes(self) -> list:
        """The trainable tensors' sizes: gradient() hands each over as backward finishes it."""
        return [b - a for a, b in self.spans[: len(self.trainable)]]

    @out_of_memory_fails_the_trial
    def gradient(self, x, y, scale: float, out, ready=None) -> None:
        """Into the buffer out (host memory for MPI's Iallreduce, a tensor on the device
        for torch.distributed's: torch_collectives), each trainable tensor's part written
        by a hook as soon as backward has its gradient, then ready(k) told (the group's
        exchange starts a bucket's sum while backward goes on); a tensor the loss does not
        reach gets zeros. Without ready, the whole gradient in one copy after backward."""
        if ready is None:
            self._whole_gradient(x, y, scale, out)
            return
        handed = self._gradients(x, y, scale, out, ready)
        for k in range(len(self.trainable)):
            if k not in handed:
                a, b = self.spans[k]
                out[a:b] = 0.0
                ready(k)

    @out_of_memory_fails_the_trial
    def apply(self, flat_grad: np.ndarray) -> None:
        import torch

        flat = tensor(flat_grad, torch.float32, self.device)
        for q, (a, b) in zip(self.trainable, self.spans):
            q.grad = flat[a:b].view_as(q).to(q.dtype)
        self.optimizer.step()
        for q in self.trainable:
            q.grad = None
        self._after_step()

    @out_of_memory_fails_the_trial
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
    @out_of_memory_fails_the_trial
    def metric_state(self, x, y, batch_size: int) -> np.ndarray:
        import torch

        self.module.eval()
        state = self.accumulators.zeros()
        with torch.no_grad():
            for start in range(0, len(x), batch_size):
                xb, yb = x[start: start + batch_size], y[start: start + batch_size]
                output, loss = self._loss(xb, yb)
                labels, w = yb if self.weighted else (yb, None)
                self.accumulators.add(state, float(loss) * len(output),
                                      output.float().cpu().numpy(), labels, w)
        return state

    def metric_results(self, state: np.ndarray) -> dict:
        return self.accumulators.results(state)

