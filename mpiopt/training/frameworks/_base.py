"""The one small interface every framework's model is trained through: flat float32 buffers.

Why flat buffers: one contiguous buffer is one MPI message (one Allreduce per step, one
Send per downpour update) and one vectorised NumPy expression (the EASGD elastic force).
So the algorithms (allreduce, downpour, easgd), the fold driver and the checkpoints never
see a framework: they see these methods, and a new framework is one more subclass.

Layout: ``weights`` = every floating-point tensor of the model, trainable ones first, so
the gradient buffer (trainable only) is a prefix of the weights buffer; the tail is
non-trainable float state (batch-norm statistics), which the algorithms average. Integer
state (step counters, seed generators) stays local. A gradient buffer has one more slot
after the gradient: the scaled loss, so a step's loss rides in the same Allreduce.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class FlatModel(ABC):
    """A built model with its loss and optimizer, seen as flat float32 buffers."""

    framework: str = ""     # the word a study's records and messages use: "keras", "torch"
    suffix: str = ""        # the kept model file's: what the framework's own loader opens
    n_grad: int             # trainable float values: the gradient's length
    n_weights: int          # every float value: the weights' length
    # the model takes its optimizer steps itself (a user's training step, torch_step):
    # the algorithm hands it batches (group_step), not gradients to apply
    own_step: bool = False
    # the trainable tensors' float counts in the buffer's order, where gradient() takes a
    # `ready` callable and tells it each tensor's index as soon as that tensor's part of
    # out is final (torch, during backward: allreduce sums buckets while backward goes
    # on); None: the gradient comes whole from one call
    grad_sizes: list | None = None

    # ------------------------------------------------------------------ training steps
    @abstractmethod
    def gradient(self, x, y, scale: float, out: np.ndarray) -> None:
        """out[:n_grad] = d(scale * mean loss)/dw over the batch, out[n_grad] = scale * loss."""

    @abstractmethod
    def apply(self, flat_grad: np.ndarray) -> None:
        """One update of the model's optimizer from flat_grad[:n_grad]."""

    @abstractmethod
    def train_step(self, x, y) -> float:
        """Gradient and update of one batch: the single-rank and EASGD-worker step."""

    def group_step(self, x, y, scale: float, comm) -> float:
        """A model with its own step (own_step): one step on this rank's part of a global
        batch (scale: its share of the batch), every optimizer step inside it averaging
        the gradients over comm first; returns the part's loss."""
        raise NotImplementedError(f"{type(self).__name__} takes no step of its own")

    def apply_and_gradient(self, flat_grad, x, y, scale: float, out: np.ndarray) -> None:
        """apply(flat_grad), then gradient(x, y, scale, out); a framework may fuse them."""
        self.apply(flat_grad)
        self.gradient(x, y, scale, out)

    def apply_and_get_weights(self, flat_grad, out: np.ndarray) -> None:
        """apply(flat_grad), then get_weights(out) (the downpour master)."""
        self.apply(flat_grad)
        self.get_weights(out)

    def set_weights_and_gradient(self, weights, x, y, scale: float, out: np.ndarray) -> None:
        """set_weights(weights), then gradient(x, y, scale, out) (a downpour worker)."""
        self.set_weights(weights)
        self.gradient(x, y, scale, out)

    def begin_epoch(self, seed: int) -> None:
        """Before an epoch's training, with a seed of the fold, the epoch and the rank: a
        framework whose random stream advances by how much each rank draws (torch's
        dropout) is reseeded here, so that every rank's stream at an epoch is the same
        whether the fold ran straight through or continued from a checkpoint (which holds
        only one rank's state). Keras's seed generators advance alike on every rank and
        are part of its state."""

    def end_epoch(self, value: float) -> None:
        """After an epoch's validation (value: its figure of merit): an epoch-wise
        learning-rate schedule steps here. Keras keeps its schedules in the optimizer."""

    # ------------------------------------------------------------------ weights and state
    @abstractmethod
    def get_weights(self, out: np.ndarray | None = None) -> np.ndarray:
        """The flat float32 weights (into out when given)."""

    @abstractmethod
    def set_weights(self, flat: np.ndarray) -> None:
        """The inverse of get_weights."""

    @abstractmethod
    def state(self) -> list:
        """NumPy arrays of everything a checkpoint needs to continue exactly: the model's
        tensors, its optimizer's and schedule's state, the framework's random state."""

    @abstractmethod
    def restore(self, values: list, keep_own: bool = False) -> None:
        """The inverse of state(); a state of another architecture is a ValueError.
        keep_own (pbt's exploit): the learning rate and the random state stay this
        model's own (its hyperparameters and its seed)."""

    @abstractmethod
    def reset(self) -> None:
        """Back to the freshly built weights and optimizer: the next fold starts from
        scratch without building the model again."""

    @abstractmethod
    def save(self, path: str, weights: np.ndarray | None = None) -> None:
        """The model as a file its framework loads (with `weights` set first when given;
        the current weights are put back afterwards)."""

    # ------------------------------------------------------------------ validation
    @abstractmethod
    def metric_state(self, x, y, batch_size: int) -> np.ndarray:
        """Additive float64 accumulators of the validation metrics over (x, y): summed
        over the ranks' shards they are the accumulators of the whole validation set."""

    def zero_metric_state(self, x1, y1, batch_size: int) -> np.ndarray:
        """Accumulators of an empty shard (built on one sample, then zeroed)."""
        return np.zeros_like(self.metric_state(x1, y1, batch_size))

    @abstractmethod
    def metric_results(self, state: np.ndarray) -> dict:
        """{metric name: value} from (summed) accumulators; names without the val_ prefix."""

    # ------------------------------------------------------------------ the model itself
    @abstractmethod
    def n_params(self) -> int:
        """The model's parameter count (the n_params metric)."""

    @abstractmethod
    def predict(self, x) -> None:
        """One forward pass in inference mode (the latency_ms metric times it)."""
