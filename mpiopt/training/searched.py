"""Training fields searched like any hyperparameter: a search_space entry named
`training.<field>` (training.batch_size, training.epochs, training.learning_rate, ...).

Why only these: they change how a model is trained, not what a trial means or how the
group is laid out (kfold, holdout and mode would change the folds, the ranks' roles or the
value's meaning, so they stay fixed for a study). learning_rate is not a spec field: it
sets the compiled optimizer's learning rate after build_model.
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
    fields = {k: SEARCHABLE[k](v) for k, v in searched.items()}
    return replace(spec, training=replace(spec.training, **fields)), own, \
        (None if lr is None else float(lr))
