"""A torch module's loss, optimizer and learning-rate schedule: from the spec or the module.

The contract, as a PyTorch user would guess it (the how-to "Train a PyTorch model in
groups" states it for users):

- the loss: `training.loss` (a torch.nn loss class and its arguments), else the module's
  own `criterion` attribute (the name PyTorch's tutorials give it): a callable
  (output, target) -> the batch's mean loss;
- the optimizer and schedule: `training.optimizer` and `training.lr_scheduler`, else the
  module's `configure_optimizers()` in Lightning's forms: an optimizer; a dict with
  "optimizer" and optionally "lr_scheduler" (a schedule, or a dict with "scheduler" and
  "interval": "epoch" or "step"); a list of those; or ([optimizers], [schedules]).

Both places at once is refused: which one was meant cannot be guessed. mpiopt's own step
takes one optimizer; a module with its own training_step (torch_step: a GAN's generator
and discriminator) may have several.
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
    """The loss, optimizer and schedule a torch module is trained with by mpiopt's step."""
    loss, loss_name = _loss(module, training.loss)
    optimizers, schedules = optimizers_of(module, training, learning_rate, maximize)
    if len(optimizers) != 1 or len(schedules) > 1:
        raise ValueError(f"objective.model: configure_optimizers() returned {len(optimizers)} "
                         f"optimizers and {len(schedules)} schedules; the standard training "
                         "step takes one optimizer (and at most one schedule): several (a "
                         "GAN's) need a training_step of the module's own")
    schedule, interval = schedules[0] if schedules else (None, "epoch")
    return Parts(loss, loss_name, optimizers[0], schedule, interval)


def optimizers_of(module, training, learning_rate: float | None, maximize: bool):
    """(optimizers, [(schedule, interval), ...]) from the spec or configure_optimizers();
    a searched training.learning_rate sets every optimizer's."""
    optimizers, schedules = _optimizers(module, training.optimizer)
    if learning_rate is not None:
        for optimizer in optimizers:
            _set_learning_rate(optimizer, [s for s, _ in schedules if s.optimizer is optimizer],
                               float(learning_rate))
    if training.lr_scheduler:
        if schedules:
            raise ValueError("training.lr_scheduler: the module's configure_optimizers() gives "
                             "a schedule too; keep one of them")
        if len(optimizers) != 1:
            raise ValueError(f"training.lr_scheduler: the module has {len(optimizers)} "
                             "optimizers; give their schedules in configure_optimizers()")
        schedules = [_scheduler(optimizers[0], training.lr_scheduler, maximize)]
    return optimizers, schedules


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


def _optimizers(module, given: dict | None):
    """([optimizers], [(schedule, interval)]) from the spec or configure_optimizers()."""
    import torch

    configure = getattr(module, "configure_optimizers", None)
    if given and configure is not None:
        raise ValueError("training.optimizer: the module's configure_optimizers() gives one "
                         "too; keep one of them")
    if given:
        args = {k: v for k, v in given.items() if k != "name"}
        optimizer = _made("training.optimizer", getattr(torch.optim, given["name"]),
                          args, module.parameters())
        return [optimizer], []
    if configure is None:
        raise ValueError("training.optimizer: a torch model needs an optimizer: name one (e.g. "
                         "Adam, AdamW, SGD) or give the module configure_optimizers()")
    return configured(configure())


WHERE = "objective.model: configure_optimizers()"
FORMS = ("an optimizer, a dict with 'optimizer' (and 'lr_scheduler'), a list of those, or "
         "([optimizers], [schedules])")


def configured(returned):
    """Lightning's return forms of configure_optimizers(): an optimizer; a dict with
    "optimizer" and optionally "lr_scheduler"; a list or tuple of optimizers or of such
    dicts; or ([optimizers], [schedules]). Returns ([optimizers], [(schedule, interval)])."""
    if isinstance(returned, (list, tuple)) and len(returned) == 2 \
            and all(isinstance(part, (list, tuple)) for part in returned):
        optimizers, schedules = returned
        return [_optimizer(o) for o in optimizers], [_schedule(s) for s in schedules]
    entries = list(returned) if isinstance(returned, (list, tuple)) else [returned]
    optimizers, schedules = [], []
    for entry in entries:
        if isinstance(entry, dict):
            optimizers.append(_optimizer(entry.get("optimizer")))
            if entry.get("lr_scheduler") is not None:
                schedules.append(_schedule(entry["lr_scheduler"]))
        else:
            optimizers.append(_optimizer(entry))
    if not optimizers:
        raise ValueError(f"{WHERE} returned no optimizer; expected {FORMS}")
    return optimizers, schedules


def _optimizer(value):
    import torch

    if not isinstance(value, torch.optim.Optimizer):
        raise ValueError(f"{WHERE} returned a {type(value).__name__} where an optimizer goes; "
                         f"expected {FORMS}")
    return value


def _schedule(value) -> tuple:
    """(schedule, interval) from a schedule or Lightning's {"scheduler", "interval"}."""
    interval = "epoch"
    if isinstance(value, dict):
        interval = value.get("interval", "epoch")
        value = value.get("scheduler")
        if interval not in torch_names.INTERVALS:
            raise ValueError(f"{WHERE}: lr_scheduler interval {interval!r}; expected epoch or step")
    if not hasattr(value, "step") or not hasattr(value, "optimizer"):
        raise ValueError(f"{WHERE} returned a {type(value).__name__} where a learning-rate "
                         "schedule goes")
    return value, interval


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


def _set_learning_rate(optimizer, schedules, lr: float) -> None:
    """training.learning_rate: every parameter group's, and the base its schedules scale."""
    for group in optimizer.param_groups:
        group["lr"] = lr
        if "initial_lr" in group:
            group["initial_lr"] = lr
    for schedule in schedules:
        if hasattr(schedule, "base_lrs"):
            schedule.base_lrs = [lr] * len(schedule.base_lrs)
