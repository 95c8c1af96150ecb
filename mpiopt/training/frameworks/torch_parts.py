"""A torch module's loss, optimizer and learning-rate schedule: from the spec or the module.

The contract, as a PyTorch user would guess it (the how-to "Train a PyTorch model in
groups" states it for users):

- the loss: `training.loss` (a torch.nn loss class and its arguments), else the module's
  own `criterion` attribute (the name PyTorch's tutorials give it): a callable
  (output, target) -> the batch's mean loss;
- the optimizer and schedule: `training.optimizer` and `training.lr_scheduler`, else the
  module's `configure_optimizers()` in Lightning's forms: an optimizer; a dict with
  "optimizer" and optionally "lr_scheduler" (a schedule, or a dict with "scheduler" and
  "interval": "epoch" or "step"); or ([optimizer], [schedules]).

Both places at once is refused: which one was meant cannot be guessed. One optimizer: a
model with several (a GAN's) needs a training step of its own.
"""
from __future__ import annotations

from dataclasses import dataclass

from mpiopt.training.frameworks import torch_names


@dataclass
class Parts:
    loss: object                    # callable (output, target) -> mean loss
    loss_name: str | None           # the torch.nn class of the loss, when it is one
    optimizer: object
    scheduler: object | None = None
    interval: str = "epoch"         # when the schedule steps: "epoch" or "step"


def parts(module, training, learning_rate: float | None, maximize: bool) -> Parts:
    """The loss, optimizer and schedule a torch module is trained with."""
    loss, loss_name = _loss(module, training.loss)
    optimizer, scheduler, interval = _optimizer(module, training.optimizer)
    if learning_rate is not None:
        _set_learning_rate(optimizer, scheduler, float(learning_rate))
    if training.lr_scheduler:
        if scheduler is not None:
            raise ValueError("training.lr_scheduler: the module's configure_optimizers() gives "
                             "a schedule too; keep one of them")
        scheduler, interval = _scheduler(optimizer, training.lr_scheduler, maximize)
    return Parts(loss, loss_name, optimizer, scheduler, interval)


def _loss(module, given: dict | None):
    import torch

    own = getattr(module, "criterion", None)
    if given and own is not None:
        raise ValueError("training.loss: the module has its own criterion too; keep one of them")
    if given:
        args = {k: v for k, v in given.items() if k != "name"}
        return _made("training.loss", getattr(torch.nn, given["name"]), args), given["name"]
    if own is None:
        raise ValueError("training.loss: a torch model needs a loss: name one (e.g. "
                         "CrossEntropyLoss, BCEWithLogitsLoss, MSELoss) or give the module a "
                         "`criterion`")
    if not callable(own):
        raise ValueError(f"objective.model: the module's criterion is a "
                         f"{type(own).__name__}, not a callable (output, target) -> loss")
    name = type(own).__name__
    return own, name if name in torch_names.LOSSES else None


def _optimizer(module, given: dict | None):
    """(optimizer, schedule or None, interval) from the spec or configure_optimizers()."""
    import torch

    configure = getattr(module, "configure_optimizers", None)
    if given and configure is not None:
        raise ValueError("training.optimizer: the module's configure_optimizers() gives one "
                         "too; keep one of them")
    if given:
        args = {k: v for k, v in given.items() if k != "name"}
        optimizer = _made("training.optimizer", getattr(torch.optim, given["name"]),
                          args, module.parameters())
        return optimizer, None, "epoch"
    if configure is None:
        raise ValueError("training.optimizer: a torch model needs an optimizer: name one (e.g. "
                         "Adam, AdamW, SGD) or give the module configure_optimizers()")
    return _configured(configure())


def _configured(returned):
    """Lightning's return forms of configure_optimizers(), one optimizer."""
    import torch

    where = "objective.model: configure_optimizers()"
    if isinstance(returned, (list, tuple)) and len(returned) == 2 \
            and all(isinstance(part, (list, tuple)) for part in returned):
        optimizers, schedules = returned
        returned = {"optimizer": _one(optimizers, where),
                    "lr_scheduler": _one(schedules, where) if schedules else None}
    elif isinstance(returned, (list, tuple)):
        returned = {"optimizer": _one(returned, where)}
    elif isinstance(returned, torch.optim.Optimizer):
        returned = {"optimizer": returned}
    if not isinstance(returned, dict) or not isinstance(returned.get("optimizer"),
                                                        torch.optim.Optimizer):
        raise ValueError(f"{where} returned {type(returned).__name__}; expected an optimizer, "
                         "a dict with 'optimizer' (and 'lr_scheduler'), or ([optimizer], "
                         "[schedules])")
    schedule = returned.get("lr_scheduler")
    interval = "epoch"
    if isinstance(schedule, dict):
        interval = schedule.get("interval", "epoch")
        schedule = schedule.get("scheduler")
        if interval not in torch_names.INTERVALS:
            raise ValueError(f"{where}: lr_scheduler interval {interval!r}; expected epoch or step")
    return returned["optimizer"], schedule, interval


def _one(items, where: str):
    if len(items) != 1:
        raise ValueError(f"{where} returned {len(items)} optimizers or schedules; the standard "
                         "training step takes one optimizer (and at most one schedule)")
    return items[0]


def _scheduler(optimizer, given: dict, maximize: bool):
    """(schedule, interval) named by training.lr_scheduler. ReduceLROnPlateau is told the
    figure of merit each epoch, so its mode follows objective.direction unless given."""
    import torch

    args = {k: v for k, v in given.items() if k not in ("name", "interval")}
    if given["name"] == "ReduceLROnPlateau":
        args.setdefault("mode", "max" if maximize else "min")
    cls = getattr(torch.optim.lr_scheduler, given["name"])
    return _made("training.lr_scheduler", cls, args, optimizer), given.get("interval", "epoch")


def _made(field: str, cls, args: dict, *first):
    """cls(*first, **args); a bad argument is one line naming the field."""
    try:
        return cls(*first, **args)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{field}: {cls.__name__}({', '.join(f'{k}={v!r}' for k, v in args.items())})"
                         f": {exc}") from None


def _set_learning_rate(optimizer, scheduler, lr: float) -> None:
    """training.learning_rate: every parameter group's, and the base a schedule scales."""
    for group in optimizer.param_groups:
        group["lr"] = lr
        if "initial_lr" in group:
            group["initial_lr"] = lr
    if scheduler is not None and hasattr(scheduler, "base_lrs"):
        scheduler.base_lrs = [lr] * len(scheduler.base_lrs)
