"""`training`: epochs, batches, the data-parallel mode, folds, stopping and pruning."""
from __future__ import annotations



from mpiopt.spec._reader import _Section
from mpiopt.spec._types import EarlyStoppingSpec, PruningSpec, TrainingSpec

TRAINING_KEYS = ("epochs", "batch_size", "mode", "sync_every", "easgd_alpha", "easgd_period",
                 "kfold", "holdout", "early_stopping", "pruning", "shuffle", "checkpoint_every",
                 "refit")


def _training(top: _Section) -> TrainingSpec:
    sec = top.section("training", TRAINING_KEYS, default={})
    return TrainingSpec(
        epochs=sec.integer("epochs", 10, minimum=1),
        batch_size=sec.integer("batch_size", 64, minimum=1),
        mode=sec.text("mode", "allreduce", choices=("allreduce", "downpour", "easgd")),
        sync_every=sec.integer("sync_every", 1, minimum=1),
        easgd_alpha=sec.number("easgd_alpha", 0.5, low=0.0, high=1.0, open_low=True),
        easgd_period=sec.integer("easgd_period", 4, minimum=1),
        kfold=sec.integer("kfold", 1, minimum=1),
        holdout=sec.number("holdout", 0.2, low=0.0, high=1.0, open_low=True, open_high=True),
        early_stopping=_optional(sec, "early_stopping", _early_stopping),
        pruning=_optional(sec, "pruning", _pruning),
        shuffle=sec.flag("shuffle", True),
        checkpoint_every=sec.integer("checkpoint_every", 1, minimum=0),
        refit=sec.flag("refit", False),
    )


def _optional(sec: _Section, key: str, build):
    """null/false = off, true = defaults, a mapping = these settings."""
    value = sec.raw(key, None)
    if value is None or value is False:
        return None
    return build(_Section({} if value is True else value, sec.source, sec.where(key),
                          build.KEYS, what="a mapping, true or null"))


def _early_stopping(sec: _Section) -> EarlyStoppingSpec:
    return EarlyStoppingSpec(patience=sec.integer("patience", 3, minimum=1),
                             min_delta=sec.number("min_delta", 0.0, low=0.0))


def _pruning(sec: _Section) -> PruningSpec:
    return PruningSpec(
        pruner=sec.text("pruner", "median", choices=("median", "asha")),
        warmup_epochs=sec.integer("warmup_epochs", 1, minimum=0),
        min_trials=sec.integer("min_trials", 5, minimum=1),
        reduction_factor=sec.integer("reduction_factor", 3, minimum=2),
        min_epoch=sec.integer("min_epoch", 1, minimum=1),
    )


_early_stopping.KEYS = ("patience", "min_delta")
_pruning.KEYS = ("pruner", "warmup_epochs", "min_trials", "reduction_factor", "min_epoch")


