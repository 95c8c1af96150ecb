"""Training fields searched like any hyperparameter: a search_space entry named
`training.<field>` (training.batch_size, training.epochs, training.learning_rate, ...).

Why only these: they change how a model is trained, not what a trial means or how the
group is laid out (kfold, holdout and mode would change the folds, the ranks' roles or the
value's meaning, so they stay fixed for a study). learning_rate is not a spec field: it
sets the optimizer's learning rate after build_model. A torch model's loss, optimizer and
schedule take their arguments the same way: `training.optimizer.weight_decay` is an
argument of training.optimizer, `training.optimizer.name` its class.
"""
from __future__ import annotations

from dataclasses import replace

PREFIX = "training."
# field -> the kind of value it takes
SEARCHABLE = {"batch_size": int, "epochs": int, "sync_every": int, "easgd_period": int,
              "easgd_alpha": float, "learning_rate": float}


def split(spec, params: dict):
    """(spec with the searched training fields set, the model's own params, learning rate
    or None). The model never sees the training.* entries."""
    searched = {k[len(PREFIX):]: v for k, v in params.items() if k.startswith(PREFIX)}
    if not searched:
        return spec, params, None
    own = {k: v for k, v in params.items() if not k.startswith(PREFIX)}
    lr = searched.pop("learning_rate", None)
    fields = {k: SEARCHABLE[k](v) for k, v in searched.items() if "." not in k}
    fields.update(_calls(spec.training, {k: v for k, v in searched.items() if "." in k}))
    return replace(spec, training=replace(spec.training, **fields)), own, \
        (None if lr is None else float(lr))


def _calls(training, searched: dict) -> dict:
    """{"optimizer": {"name": ..., argument: value}, ...} with the searched arguments
    (`optimizer.lr`) set over the spec's own."""
    from mpiopt.training.frameworks.torch_names import canonical

    out: dict = {}
    for key, value in searched.items():
        field, arg = key.split(".", 1)
        call = out.setdefault(field, dict(getattr(training, field) or {}))
        call[arg] = canonical(field, value) if arg == "name" else value
    return out
