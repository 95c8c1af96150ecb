"""A torch module with its own training step, in Lightning's contract, behind FlatModel.

For what mpiopt's standard step (forward, one loss, one optimizer) cannot express: a GAN's
generator and discriminator with an optimizer each, a physics loss, sample weights. The
contract is the one HEP users know from PyTorch Lightning (the how-to "Train a PyTorch
model in groups" states it for users):

- training_step(batch, batch_idx) -> the batch's loss: a tensor, or a dict with "loss".
  batch is (x, y) as tensors on the module's device (floats as the module's float type),
  x a dict of tensors by name with named inputs (objective.data.collections), and
  (x, y, w) with event weights (objective.data.weights): the weights of the batch's
  events, one per sample, a PyTorch dataset's (input, target, weight) triple; weighing
  the loss is then the step's (Keras's rule, which mpiopt's own step follows, is
  sum(w * loss) / len(w)). batch_idx is the global batch's number in the epoch, the
  same on every rank (`batch_idx % 5` picks the same steps everywhere).
- validation_step(batch, batch_idx), batch as training_step's, logs its metrics with
  self.log(name, value) or
  self.log_dict({...}) (a returned dict counts too); each is recorded as val_NAME (a name
  that begins with val_ as it is), the mean over the validation set weighted by the
  batches' sizes (reduce_fx="sum": the sum).
- configure_optimizers(): Lightning's forms, one optimizer or several; training.optimizer
  may name the one instead.
- automatic_optimization (True unless the module says False): mpiopt takes the backward
  pass and the step of the one optimizer, and steps its schedule. False, as Lightning asks
  for several optimizers: the step takes them itself through self.optimizers(),
  self.manual_backward(loss), opt.step(), opt.zero_grad() and its schedules' step().

What Lightning's Trainer gives a module, mpiopt sets on the instance (TRAINER_CALLS): a
plain nn.Module with these methods and a LightningModule train alike, with no Trainer.

Why the gradients are averaged inside the optimizers' step: a step the user writes may
take several optimizer steps per batch, in its own order, after backward passes of its
own. Each optimizer gets a step pre-hook (torch's register_step_pre_hook) that sums its
parameters' gradients over the group in one Allreduce of one flat buffer, each rank's
weighted by its share of the global batch; every rank then applies the same update, so a
group follows one rank's trajectory as with the standard step (Horovod's
DistributedOptimizer works the same way). A rank with no sample of a short last batch
takes the step on one sample at weight 0, so every rank takes the same optimizer steps
and the Allreduces meet. Downpour applies one gradient at a time on a master, which a
step of its own does not hand over: refused; easgd trains each rank's own steps.
"""
from __future__ import annotations

import math

import numpy as np

from mpiopt.training._algorithm import wait
from mpiopt.training.frameworks.torch_base import TorchFlat, inputs, step_schedule, tensor
from mpiopt.training.frameworks.torch_device import out_of_memory_fails_the_trial
from mpiopt.training.frameworks.torch_parts import optimizers_of

# what Lightning's Trainer gives a module, set on the instance
TRAINER_CALLS = ("optimizers", "lr_schedulers", "manual_backward", "log", "log_dict",
                 "toggle_optimizer", "untoggle_optimizer")
# how a logged validation metric is gathered over the batches (and the ranks' shards)
REDUCTIONS = ("mean", "sum")
# the spec's fields a step of the module's own does not use, and why
NOT_USED = {"loss": "its training_step computes the loss",
            "metrics": "its validation_step logs its metrics (self.log)"}


def wrap_step(module, spec, learning_rate: float | None, maximize: bool) -> "StepModel":
    """The module behind the flat-buffer interface, trained through its own step; what
    cannot work is one line naming the field."""
    training = spec.training
    for field, why in NOT_USED.items():
        if getattr(training, field):
            raise ValueError(f"training.{field}: not for a module with its own training_step "
                             f"({why})")
    if training.mode == "downpour":
        raise ValueError("training.mode: downpour applies one gradient at a time on a master; "
                         "a module with its own training_step trains with allreduce or easgd")
    if not callable(getattr(module, "validation_step", None)):
        raise ValueError("objective.model: the module has a training_step but no "
                         "validation_step, which gives the figure of merit "
                         "(self.log('val_loss', loss))")
    optimizers, schedules = optimizers_of(module, training, learning_rate, maximize)
    automatic = bool(getattr(module, "automatic_optimization", True))
    if automatic and len(optimizers) > 1:
        raise ValueError(f"objective.model: configure_optimizers() returned {len(optimizers)} "
                         "optimizers; several need manual optimization, as in Lightning: set "
                         "self.automatic_optimization = False and step them in training_step")
    return StepModel(module, optimizers, schedules, automatic)


class StepModel(TorchFlat):
    """A torch module trained through its own training_step, seen as flat buffers."""

    own_step = True

    def __init__(self, module, optimizers, schedules, automatic: bool):
        self.module, self.automatic = module, automatic
        self.optimizers = list(optimizers)
        self.schedules = list(schedules)                 # [(schedule, interval)]
        self.schedulers = [s for s, _ in schedules]
        self.lay_out()
        self.comm, self.scale = None, 1.0                # set during a group step
        self.batch_idx = 0
        self.logged: dict | None = None                  # while validating: name -> (value, weight, how)
        self.weight = 0                                  # the validation batch's size
        self.layout: list | None = None                  # [(name, how)]: fixed at the first validation
        self._toggled: dict | None = None
        self.averaged = [Averaged(o, self) for o in self.optimizers]
        _give_trainer_calls(module, self)
        self._snapshot = self.state()

    # ------------------------------------------------------------------ training steps
    @out_of_memory_fails_the_trial
    def train_step(self, x, y) -> float:
        """One step on this rank alone (one rank, an easgd worker)."""
        return self._step(x, y)

    @out_of_memory_fails_the_trial
    def group_step(self, x, y, scale: float, comm) -> float:
        self.comm, self.scale = comm, scale
        try:
            return self._step(x, y)
        finally:
            self.comm, self.scale = None, 1.0

    def batch(self, x, y) -> tuple:
        """(x, y), or (x, y, w) with event weights (y the pair (labels, weights)), as
        tensors on the module's device."""
        targets = y if isinstance(y, tuple) else (y,)
        return (inputs(x, self.floats, self.device),
                *(tensor(a, self.floats, self.device) for a in targets))

    def _step(self, x, y) -> float:
        self.module.train()
        batch = self.batch(x, y)
        index, self.batch_idx = self.batch_idx, self.batch_idx + 1
        if not self.automatic:
            return float(_loss_of(self.module.training_step(batch, index)).detach())
        optimizer = self.optimizers[0]
        optimizer.zero_grad(set_to_none=True)
        loss = _loss_of(self.module.training_step(batch, index))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        for schedule, interval in self.schedules:
            if interval == "step":
                step_schedule(schedule)
        return float(loss.detach())

    def gradient(self, x, y, scale: float, out: np.ndarray) -> None:
        raise NotImplementedError("a module with its own training_step takes its optimizer "
                                  "steps itself (group_step)")

    def apply(self, flat_grad: np.ndarray) -> None:
        raise NotImplementedError("a module with its own training_step takes its optimizer "
                                  "steps itself (group_step)")

    def begin_epoch(self, seed: int) -> None:
        super().begin_epoch(seed)
        self.batch_idx = 0

    def end_epoch(self, value: float) -> None:
        """Automatic optimization steps the epoch-wise schedules; in manual optimization
        the step steps its schedules itself (as in Lightning)."""
        if self.automatic:
            for schedule, interval in self.schedules:
                if interval == "epoch":
                    step_schedule(schedule, value)

    # ------------------------------------------------------------------ the Trainer's calls
    def log(self, name, value, *args, reduce_fx="mean", batch_size=None, **kwargs) -> None:
        """Lightning's self.log: kept while validating (training_step's logs are not: the
        trial records the training loss the step returns)."""
        if self.logged is None:
            return
        how = reduce_fx if isinstance(reduce_fx, str) else getattr(reduce_fx, "__name__", "")
        if how not in REDUCTIONS:
            raise ValueError(f"objective.model: self.log({name!r}, reduce_fx={reduce_fx!r}): a "
                             "validation metric is a mean or a sum over the batches "
                             "(reduce_fx 'mean' or 'sum'), so the ranks' shards add up")
        weight = self.weight if batch_size is None else int(batch_size)
        self.logged[str(name)] = (float(value), weight, how)

    def log_dict(self, values: dict, *args, **kwargs) -> None:
        for name, value in values.items():
            self.log(name, value, *args, **kwargs)

    def toggle(self, optimizer) -> None:
        """Lightning's toggle_optimizer: only this optimizer's parameters get gradients
        (the others' requires_grad off until untoggle)."""
        mine = {id(q) for g in optimizer.param_groups for q in g["params"]}
        self._toggled = {q: q.requires_grad for q in self.module.parameters()}
        for q in self.module.parameters():
            if id(q) not in mine:
                q.requires_grad_(False)

    def untoggle(self, optimizer=None) -> None:
        for q, flag in (self._toggled or {}).items():
            q.requires_grad_(flag)
        self._toggled = None

    # ------------------------------------------------------------------ validation
    @out_of_memory_fails_the_trial
    def metric_state(self, x, y, batch_size: int) -> np.ndarray:
        """[weighted sum, weight] of each logged metric, in the layout of the first
        validation: the same on every rank, so the shards add up in one Allreduce."""
        import torch

        self.module.eval()
        sums: dict = {}
        kinds: dict = {}
        try:
            with torch.no_grad():
                for index, start in enumerate(range(0, len(x), batch_size)):
                    xb, yb = x[start: start + batch_size], y[start: start + batch_size]
                    batch = self.batch(xb, yb)
                    self.logged, self.weight = {}, len(batch[-1])
                    returned = self.module.validation_step(batch, index)
                    if isinstance(returned, dict):
                        self.log_dict(returned)
                    for name, (value, weight, how) in self.logged.items():
                        total = sums.setdefault(name, [0.0, 0.0])
                        total[0] += value * weight if how == "mean" else value
                        total[1] += weight
                        kinds[name] = how
        finally:
            self.logged = None
        return self._state(sums, kinds)

    def _state(self, sums: dict, kinds: dict) -> np.ndarray:
        if self.layout is None:
            self.layout = sorted(kinds.items())
        known = dict(self.layout)
        new = sorted(set(kinds) - set(known))
        if new:
            raise ValueError(f"objective.model: validation_step logged {new[0]!r}, which it did "
                             "not log at the first validation; log the same metrics every time")
        state = np.zeros(2 * len(self.layout), np.float64)
        for i, (name, _) in enumerate(self.layout):
            state[2 * i: 2 * i + 2] = sums.get(name, (0.0, 0.0))
        return state

    def metric_results(self, state: np.ndarray) -> dict:
        """{name without val_: value}: the trainer records each as val_NAME."""
        out = {}
        for i, (name, how) in enumerate(self.layout or ()):
            total, weight = state[2 * i], state[2 * i + 1]
            value = total if how == "sum" else total / weight if weight else math.nan
            out[name[len("val_"):] if name.startswith("val_") else name] = float(value)
        return out


class Averaged:
    """One optimizer's gradients summed over the group before each of its steps (a step
    pre-hook), each rank's weighted by its share of the global batch (the model's scale):
    one Allreduce of one flat buffer, with one slot per parameter that counts the ranks
    holding its gradient, so a parameter no rank's loss reached keeps no gradient (torch's
    optimizers skip it, as on one rank). The buffer is in host memory (a GPU's gradients
    are copied to it and the sum back: torch_device). The wait sleeps between tests
    (_algorithm.wait): MPICH spins inside a blocking Allreduce, on the core of a rank
    that is still computing."""

    def __init__(self, optimizer, model: StepModel):
        self.model = model
        self.params = [q for g in optimizer.param_groups for q in g["params"]]
        edges = np.concatenate([[0], np.cumsum([q.numel() for q in self.params])]).astype(int)
        self.spans = list(zip(edges[:-1], edges[1:]))
        self.n = int(edges[-1])
        self.buffer = np.zeros(self.n + len(self.params), np.float32)
        optimizer.register_step_pre_hook(self)

    def __call__(self, optimizer, args, kwargs) -> None:
        comm = self.model.comm
        if comm is None or comm.Get_size() == 1:
            return
        import torch
        from mpi4py import MPI

        flat, held = torch.from_numpy(self.buffer), self.buffer[self.n:]
        for i, (q, (a, b)) in enumerate(zip(self.params, self.spans)):
            if q.grad is None:
                flat[a:b] = 0.0
                held[i] = 0.0
            else:
                flat[a:b].copy_(q.grad.reshape(-1)).mul_(self.model.scale)
                held[i] = 1.0
        wait(comm.Iallreduce(MPI.IN_PLACE, self.buffer, op=MPI.SUM))
        for i, (q, (a, b)) in enumerate(zip(self.params, self.spans)):
            q.grad = flat[a:b].view_as(q).to(q.device, q.dtype) if held[i] else None


def _loss_of(returned):
    """The loss a training_step returned (a one-value tensor, or a dict's "loss")."""
    import torch

    loss = returned.get("loss") if isinstance(returned, dict) else returned
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return loss.reshape(())
    what = ("None (a missing return?)" if returned is None
            else "a dict without 'loss'" if isinstance(returned, dict)
            else f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor)
            else f"a {type(returned).__name__}")
    raise ValueError(f"objective.model: training_step returned {what}; expected the batch's "
                     "loss (a tensor, or a dict with 'loss')")


def _give_trainer_calls(module, model: StepModel) -> None:
    """TRAINER_CALLS on the module instance, as Lightning's Trainer would answer them:
    optimizers() and lr_schedulers() give one or a list (None: no schedule)."""
    def one_or_list(items):
        return items[0] if len(items) == 1 else list(items)

    calls = {"optimizers": lambda use_pl_optimizer=True: one_or_list(model.optimizers),
             "lr_schedulers": lambda: one_or_list(model.schedulers) if model.schedulers else None,
             "manual_backward": lambda loss, *args, **kwargs: loss.backward(*args, **kwargs),
             "log": model.log, "log_dict": model.log_dict,
             "toggle_optimizer": model.toggle, "untoggle_optimizer": model.untoggle}
    for name in TRAINER_CALLS:
        object.__setattr__(module, name, calls[name])
