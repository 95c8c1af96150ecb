"""`training`: epochs, batches, the data-parallel mode, folds, stopping and pruning."""
from __future__ import annotations

from mpiopt.field import Field, Fields
from mpiopt.spec._reader import _Section
from mpiopt.spec._torch import CALLS, read_call, read_metrics
from mpiopt.spec._types import EarlyStoppingSpec, PruningSpec, TrainingSpec

TRAINING = Fields(
    Field("epochs", 10, "integer", "Epochs per trial (per fold).", low=1),
    Field("batch_size", 64, "integer", "Global batch size, split across the ranks of a group.",
          low=1),
    Field("mode", "allreduce", "text", "Data-parallel algorithm inside a group: `allreduce` "
          "(synchronous), `downpour` (master/worker), `easgd` (elastic averaging).",
          choices=("allreduce", "downpour", "easgd")),
    Field("sync_every", 1, "integer", "Batches between synchronizations.", low=1),
    Field("easgd_alpha", 0.5, "number", "Elastic averaging strength.", low=0.0, high=1.0,
          open_low=True),
    Field("easgd_period", 4, "integer", "Batches between elastic averaging steps.", low=1),
    Field("kfold", 1, "integer", "`1`: one train/validation split; K > 1: K-fold "
          "cross-validation, the value is the mean over folds.", low=1),
    Field("holdout", 0.2, "number", "Validation fraction when `kfold` is 1 and there are no "
          "validation files.", low=0.0, high=1.0, open_low=True, open_high=True),
    Field("early_stopping", None, "switch", "Stop a trial's training when its metric stalls "
          "(`training.early_stopping` below); `true` = the defaults, `null` or `false` = off."),
    Field("pruning", None, "switch", "Stop unpromising trials early from their per-epoch "
          "values (`training.pruning` below); `true` = the defaults, `null` or `false` = off."),
    Field("shuffle", True, "flag", "Shuffle the training data every epoch."),
    Field("checkpoint_every", 1, "integer", "Epochs between checkpoints of a running trial in "
          "the artifact store (`0`: none); a trial that runs again continues from its last one.",
          low=0),
    Field("refit", False, "flag", "After the search, train the best parameters once more on all "
          "the data (one group) and keep that model (`refit.keras`, `refit.pt`)."),
    Field("loss", None, "call", "A torch model's loss: a `torch.nn` loss class (`CrossEntropyLoss`, "
          "`BCEWithLogitsLoss`, `MSELoss`, ...), or `{name: CrossEntropyLoss, label_smoothing: "
          "0.1}`; else the module's own `criterion`. A Keras model compiles its own.", shown="–"),
    Field("optimizer", None, "call", "A torch model's optimizer: a `torch.optim` class (`Adam`, "
          "`AdamW`, `SGD`, ...), or `{name: AdamW, lr: 1.0e-3, weight_decay: 0.01}`; else the "
          "module's own `configure_optimizers()`.", shown="–"),
    Field("lr_scheduler", None, "call", "A torch model's learning-rate schedule: "
          "`{name: StepLR, step_size: 5}` (a `torch.optim.lr_scheduler` class), stepped after "
          "every epoch, or every batch with `interval: step`; `ReduceLROnPlateau` is given the "
          "epoch's figure of merit.", shown="–"),
    Field("metrics", [], "list", "A torch model's validation metrics beside `val_loss`: "
          "`accuracy`, `auc`, `mse`, `mae`, recorded as `val_NAME`; those the objective or a "
          "constraint names are computed anyway."),
)
EARLY_STOPPING = Fields(
    Field("patience", 3, "integer", "Epochs without an improvement before the trial's "
          "training stops.", low=1),
    Field("min_delta", 0.0, "number", "An improvement beats the best value so far by more than "
          "this, in the metric's units.", low=0.0),
)
PRUNING = Fields(
    Field("pruner", "median", "text", "`median`: stop a trial whose figure so far (the mean "
          "of its folds' best epochs so far) is worse than the median of the other trials' at "
          "the same fold and epoch (uses `warmup_epochs`, `min_trials`); `asha`: asynchronous "
          "successive halving (uses `reduction_factor`, `min_epoch`).",
          choices=("median", "asha")),
    Field("warmup_epochs", 1, "integer", "`median`: each fold's first this many epochs (a new "
          "model) never prune a trial by themselves; in a later fold it is judged on its "
          "finished folds then.", low=0),
    Field("min_trials", 5, "integer", "`median`: other trials that must have reported a fold's "
          "epoch before a trial is compared there.", low=1),
    Field("reduction_factor", 3, "integer", "`asha`: rungs at `min_epoch * reduction_factor**k` "
          "epochs trained (over the folds one after another); at a rung a trial goes on only if "
          "among the best 1/`reduction_factor` of the trials there. With folds one after "
          "another a rung is decided at the end of the fold it falls in, on the finished "
          "folds.", low=2),
    Field("min_epoch", 1, "integer", "`asha`: the epochs trained at the first rung (with one "
          "fold or folds side by side, a fold's earlier epochs are its warm-up).", low=1),
)


def _training(top: _Section) -> TrainingSpec:
    sec = top.section("training", TRAINING.names, default={})
    return TrainingSpec(**TRAINING.read(sec),
                        early_stopping=_optional(sec, "early_stopping", EARLY_STOPPING,
                                                 EarlyStoppingSpec),
                        pruning=_optional(sec, "pruning", PRUNING, PruningSpec),
                        **{f: read_call(sec, f) for f in CALLS}, metrics=read_metrics(sec))


def _optional(sec: _Section, key: str, fields: Fields, spec: type):
    """null/false = off, true = defaults, a mapping = these settings."""
    value = sec.raw(key, None)
    if value is None or value is False:
        return None
    inner = _Section({} if value is True else value, sec.source, sec.where(key), fields.names,
                     what="a mapping, true or null")
    return spec(**fields.read(inner))
