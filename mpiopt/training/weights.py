"""Event weights (`objective.data.weights`, `balance_classes`) in the loss and the metrics.

The rule, applied once to all the selected events of the training files (and, on their
own, of the validation files) before any split, so that every rank and every fold,
streamed or in memory, sees the same weights:

1. `weights: NAME` gives each event its number (a branch, dataset or array beside the
   labels, read and checked with them: finite numbers, mpiopt.training.opening); without
   it every event weighs 1.
2. `balance_classes: true` scales each class's weights so that every class has the same
   total weight.
3. The weights are scaled so that their mean over the events is 1: the loss keeps the
   scale of an unweighted one, so a learning rate means the same with or without them.

Negative weights, as NLO generators write them, are used as they are: an event of weight
-w pulls the loss and every metric the opposite way to one of weight w, so over many
events they cancel what they correct. Totals are signed sums; a class (with
`balance_classes`) or a data set whose weights sum to zero or less cannot be scaled, and
is refused naming the files and the field.

In training a batch's loss is sum(w_i * loss_i) / batch size (Keras's default reduction
with sample weights; summed over the ranks of a group it is the global batch's, as
without weights). In validation every Keras metric weighs each event by w_i (Keras's
`sample_weight`): val_loss, val_accuracy, val_auc and the figure of merit are weighted.
A torch model follows the same rule (frameworks.torch_model, frameworks.metrics).
"""
from __future__ import annotations

import numpy as np

from mpiopt.errors import DataError
from mpiopt.training.kfold import class_labels
from mpiopt.training.stream import take


def scaled(weights, labels, balance: bool, files: str) -> np.ndarray | None:
    """The weights of one data set by the rule above (None: no weights asked for);
    files: the data set, as a message names it."""
    if weights is None and not balance:
        return None
    w = (np.ones(len(labels), np.float32) if weights is None
         else np.array(weights, dtype=np.float32))
    field = "objective.data.weights"
    if balance:
        field = "objective.data.balance_classes"
        classes = class_labels(labels)
        if classes is None:
            raise DataError(f"{files}: {field}: the labels are not classes (integers, "
                            f"booleans or one-hot rows), so there is nothing to balance")
        for c in np.unique(classes):
            members = classes == c
            total = float(w[members].sum(dtype=np.float64))
            if total <= 0:
                raise DataError(f"{files}: {field}: the weights of class {c} sum to "
                                f"{total:g}; a class is balanced by its total weight, "
                                f"which must be positive")
            w[members] /= total
    total = float(w.sum(dtype=np.float64))
    if total <= 0:
        raise DataError(f"{files}: {field}: the weights sum to {total:g} over "
                        f"{len(w)} events; they are scaled to a mean of 1, which needs a "
                        f"positive total")
    w *= len(w) / total
    return w


class Weighted:
    """Labels and their event weights taken together: `[key]` gives the pair (labels,
    weights) of those samples, as Keras takes (y, sample_weight); `take` a subset."""

    def __init__(self, y, w):
        self.y, self.w = y, w

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, key) -> tuple:
        return self.y[key], self.w[key]

    def subset(self, idx) -> "Weighted":
        return Weighted(take(self.y, idx), take(self.w, idx))


def weighted(y, w):
    """y with its weights (a Weighted), or y itself when there are none."""
    return y if w is None else Weighted(y, w)
