"""Validation metrics for a model whose framework brings none (torch), as additive sums.

Why sums: each rank validates a shard, and the trainer adds the shards' accumulators with
one Allreduce (trainer.validate), so every metric must be a function of sums over
samples. Loss, accuracy, MSE and MAE are a total and a count; AUC is two histograms of
the scores (positives, negatives) over THRESHOLDS bins of [0, 1], the way Keras's AUC
keeps confusion counts at fixed thresholds, so it is within a bin's width of the exact
value. Pure NumPy: the model's outputs come in as arrays.

What an output means follows the loss (heads): logits through a softmax (cross entropy)
or a sigmoid (binary cross entropy with logits), log-probabilities through exp (NLL), else
the output as it is. Classes come from the argmax of several outputs per sample when the
loss is a multi-class one (or there are several outputs and the loss says nothing), from
a score above 0.5 otherwise; one-hot targets count as their argmax.

Event weights (objective.data.weights) weigh every metric as Keras's `sample_weight` does
(mpiopt.training.weights states the rule): each sample's term and its count are
multiplied by its weight, so accuracy, MSE and MAE are sum(w * value) / sum(w) (a
sample's value the mean over its outputs), AUC's histograms add weights instead of ones,
and the loss is sum(w * loss) over the samples divided by their number, as the training
loss is. Negative weights subtract; a class whose weights sum to zero or less has no AUC
(0, as with no sample of it).
"""
from __future__ import annotations

import numpy as np

THRESHOLDS = 200
# the loss -> (what its input is, whether it is a multi-class loss)
HEADS = {"CrossEntropyLoss": ("softmax", True), "NLLLoss": ("exp", True),
         "MultiMarginLoss": ("identity", True), "BCEWithLogitsLoss": ("sigmoid", False),
         "MultiLabelSoftMarginLoss": ("sigmoid", False), "BCELoss": ("identity", False)}
_SIZES = {"loss": 2, "accuracy": 2, "mse": 2, "mae": 2, "auc": 2 * THRESHOLDS}


class Accumulators:
    """The layout of one model's metric sums: `loss` first, then the named metrics."""

    def __init__(self, names, loss_name: str | None):
        self.names = ["loss", *(n for n in dict.fromkeys(names) if n != "loss")]
        self.head, self.multiclass = HEADS.get(loss_name or "", ("identity", None))
        self.offsets, start = {}, 0
        for name in self.names:
            self.offsets[name] = slice(start, start + _SIZES[name])
            start += _SIZES[name]
        self.size = start

    def zeros(self) -> np.ndarray:
        return np.zeros(self.size, np.float64)

    def add(self, state: np.ndarray, loss_sum: float, output, target, weights=None) -> None:
        """Add one batch: its summed (weighted) loss, the model's output, the targets and
        the events' weights (None: each weighs 1)."""
        n = len(output)
        state[self.offsets["loss"]] += (loss_sum, n)
        out = np.asarray(output, np.float64).reshape(n, -1)
        y = np.asarray(target).reshape(n, -1)
        w = np.ones(n) if weights is None else np.asarray(weights, np.float64).reshape(n)
        for name in self.names[1:]:
            state[self.offsets[name]] += getattr(self, f"_{name}")(out, y, w)

    def results(self, state: np.ndarray) -> dict:
        out = {}
        for name in self.names:
            part = state[self.offsets[name]]
            out[name] = _auc(part) if name == "auc" else float(part[0] / max(part[1], 1.0))
        return out

    # ------------------------------------------------------------------ per batch
    def _accuracy(self, out, y, w) -> tuple:
        if self._classes(out):
            true = y.argmax(1) if y.shape[1] == out.shape[1] > 1 else y[:, 0]
            return float(np.sum(w * (out.argmax(1) == true))), float(w.sum())
        hit = (self._scores(out) > 0.5) == (_matched(y, out) > 0.5)
        return _weighed(hit, w)

    def _mse(self, out, y, w) -> tuple:
        d = out - _matched(y, out)
        return _weighed(d * d, w)

    def _mae(self, out, y, w) -> tuple:
        d = out - _matched(y, out)
        return _weighed(np.abs(d), w)

    def _auc(self, out, y, w) -> np.ndarray:
        scores = self._scores(out)
        if self._classes(out):
            labels = (y.argmax(1)[:, None] if y.shape[1] == out.shape[1] > 1 else y[:, :1]) \
                == np.arange(out.shape[1])[None, :]
        else:
            labels = _matched(y, out) > 0.5
        bins = np.clip((scores * THRESHOLDS).astype(np.int64), 0, THRESHOLDS - 1)
        w = np.broadcast_to(w.reshape(-1, 1), bins.shape)
        positives = np.bincount(bins[labels], w[labels], minlength=THRESHOLDS)
        negatives = np.bincount(bins[~labels], w[~labels], minlength=THRESHOLDS)
        return np.concatenate([positives, negatives]).astype(np.float64)

    def _classes(self, out) -> bool:
        """Whether the outputs are per-class scores (argmax) or independent ones."""
        return out.shape[1] > 1 if self.multiclass is None else self.multiclass

    def _scores(self, out) -> np.ndarray:
        if self.head == "softmax":
            e = np.exp(out - out.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)
        if self.head == "sigmoid":
            return 1.0 / (1.0 + np.exp(-out))
        if self.head == "exp":
            return np.exp(out)
        return out


def _weighed(values: np.ndarray, w: np.ndarray) -> tuple:
    """(sum of each sample's values times its weight, sum of the weights times the values
    per sample): a weighted mean over samples of each sample's mean."""
    values = values.reshape(len(w), -1)
    return float(np.sum(w * values.sum(1))), float(w.sum() * values.shape[1])


def _matched(y, out) -> np.ndarray:
    """Targets shaped like the outputs where they hold as many values."""
    y = np.asarray(y, np.float64)
    return y.reshape(out.shape) if y.size == out.size else y


def _auc(part: np.ndarray) -> float:
    """The area under the ROC curve from the score histograms: true- and false-positive
    rates at each bin edge, counted from the top, joined by straight lines."""
    positives, negatives = part[:THRESHOLDS], part[THRESHOLDS:]
    p, n = positives.sum(), negatives.sum()
    if p <= 0 or n <= 0:
        return 0.0
    tpr = np.concatenate([[0.0], np.cumsum(positives[::-1]) / p])
    fpr = np.concatenate([[0.0], np.cumsum(negatives[::-1]) / n])
    return float(np.sum((fpr[1:] - fpr[:-1]) * (tpr[1:] + tpr[:-1]) / 2))
