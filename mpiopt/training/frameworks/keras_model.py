"""Keras 3 (on TensorFlow) behind the flat-buffer interface (frameworks._base.FlatModel).

The split of a flat buffer into per-tensor views happens inside compiled tf.functions, so
no hot path has a Python loop over tensors and every update uses the model's own compiled
optimizer. build_model compiles the model itself (optimizer, loss, metrics): the spec's
torch-only training fields (loss, optimizer, lr_scheduler, metrics) are refused for it.

TensorFlow is imported here only, lazily, after threads.pin_threads has had its chance.
"""
from __future__ import annotations

import sys

import numpy as np

from mpiopt.training import threads
from mpiopt.training.frameworks._base import FlatModel

NAME = "keras"
_tf = None
# variables a pbt round keeps from its own build when it takes its parent's state
OWN_VARIABLES = ("learning_rate", "seed_generator_state")
# the training fields only a torch model uses (a Keras model is compiled by build_model)
TORCH_FIELDS = ("loss", "optimizer", "lr_scheduler", "metrics")


def import_tf():
    """TensorFlow, imported once with the thread counts chosen by threads.pin_threads."""
    global _tf
    if _tf is None:
        threads.defaults()
        import os

        from mpiopt.training.frameworks import native_stderr_to_log

        native_stderr_to_log()
        import tensorflow as tf

        if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0") >= "2":
            tf.get_logger().setLevel("ERROR")  # each trial's new model re-traces on purpose
        n = threads.pinned_threads()
        if n:
            try:
                tf.config.threading.set_intra_op_parallelism_threads(n)
                tf.config.threading.set_inter_op_parallelism_threads(1)
            except RuntimeError:  # the runtime already started: the env vars rule
                pass
        _tf = tf
    return _tf


def imported() -> bool:
    """Whether this process has imported Keras (then it is seeded before a build)."""
    return "keras" in sys.modules


def owns(built) -> bool:
    """Whether build_model returned a Keras model (never imports Keras to find out)."""
    keras = sys.modules.get("keras")
    return keras is not None and isinstance(built, keras.Model)


def prepare(seed: int) -> None:
    """Before a build: TensorFlow with its threads, a fresh Keras session, every random
    generator seeded."""
    import_tf()
    import keras

    try:                # no gc.collect() in clear_session: much of a small trial's fixed
        keras.backend.clear_session(free_memory=False)   # cost; Python's GC still runs
    except TypeError:   # a Keras without the argument
        keras.backend.clear_session()
    keras.utils.set_random_seed(int(seed) % 2**31)


def wrap(model, spec, learning_rate: float | None, sample_x, sample_y) -> "KerasModel":
    """The built model behind the flat-buffer interface; it must come compiled."""
    given = [f"training.{f}" for f in TORCH_FIELDS if getattr(spec.training, f, None)]
    if given:
        raise ValueError(f"{', '.join(given)}: only for a torch model; build_model returned a "
                         "Keras model, which build_model compiles with its own loss, optimizer "
                         "and metrics (model.compile)")
    if getattr(model, "optimizer", None) is None or not getattr(model, "compiled", True):
        raise ValueError("build_model must return a compiled model (model.compile(optimizer, loss, metrics))")
    if _own_train_step(model):
        raise ValueError("objective.model: build_model returned a Keras model whose class "
                         "overrides train_step; mpiopt trains a Keras model through its compiled "
                         "loss and optimizer (one flat gradient per step, averaged over the "
                         "group), which would bypass that step: write the step in PyTorch "
                         "(training_step, Lightning's contract) or in a function objective "
                         "that takes comm")
    return KerasModel(with_learning_rate(model, learning_rate), sample_x, sample_y)


def _own_train_step(model) -> bool:
    """Whether the model's class overrides Keras's train_step. Why refused rather than
    trained through it: its train_step applies its optimizers' updates inside one traced
    call, so the group's gradients could be averaged only by an MPI call inside
    TensorFlow's graph for every optimizer it uses, which Keras does not list; the torch
    path has a step of the user's own (torch_step)."""
    for cls in type(model).__mro__:
        if "train_step" in vars(cls):
            return not cls.__module__.split(".")[0] == "keras"
    return False


def build_model(build, params: dict, seed: int):
    """Call the user's build_model(params) with every random generator seeded (the
    throughput benchmarks' way to a bare Keras model)."""
    prepare(seed)
    return build(dict(params))


def with_learning_rate(model, learning_rate: float | None):
    """The compiled optimizer's learning rate set (a searched training.learning_rate)."""
    if learning_rate is not None:
        model.optimizer.learning_rate = float(learning_rate)
    return model


def _batch_specs(tf, x, y):
    """(x, y) TensorSpecs with a free batch dimension, from plain arrays or nests of them
    (a dict of named inputs; labels with their weights); None otherwise (tf.function
    then traces per shape)."""
    leaves = tf.nest.flatten((x, y))
    if y is None or not all(isinstance(a, np.ndarray) and a.ndim >= 1 for a in leaves):
        return None
    return tf.nest.map_structure(
        lambda a: tf.TensorSpec([None, *a.shape[1:]], tf.as_dtype(a.dtype)), (x, y))


def _weighed(y):
    """(labels, event weights or None) of a batch's targets: the pair (y, w) when the data
    has weights (mpiopt.training.weights)."""
    return y if isinstance(y, tuple) else (y, None)


def weigh_metrics(model) -> None:
    """With event weights every compiled metric weighs each event (the spec's weights are
    the events' own: mpiopt.training.weights). Keras weighs only `weighted_metrics`, so
    the model is compiled again with its own arguments and its `metrics` (the same
    objects, so the same names) added to those; a model whose metrics are not a plain
    list (one per output) keeps them as compiled."""
    config = getattr(model, "_compile_config", None)
    args = dict(getattr(config, "config", None) or {})
    metrics, weighted = args.get("metrics"), args.get("weighted_metrics") or []
    if not metrics or not isinstance(metrics, (list, tuple)) \
            or not isinstance(weighted, (list, tuple)):
        return
    model.compile(**{**args, "metrics": None, "weighted_metrics": [*metrics, *weighted]})


def _is_float(v) -> bool:
    return "float" in str(v.dtype)


class KerasModel(FlatModel):
    """A compiled Keras model seen as flat buffers: gradients, weights, updates."""

    framework, suffix = NAME, ".keras"

    def __init__(self, model, sample_x, sample_y=None):
        tf = import_tf()
        if isinstance(sample_y, tuple):      # the data has event weights
            weigh_metrics(model)
        self.model = model
        if not model.built:
            model(tf.nest.map_structure(lambda a: a[:1], sample_x))
        self.optimizer = model.optimizer
        self.trainable = list(model.trainable_variables)
        ids = {id(v) for v in self.trainable}
        others = [v for v in model.variables if id(v) not in ids and _is_float(v)]
        self.variables = self.trainable + others
        self.sizes = [int(np.prod(v.shape)) for v in self.variables]
        self.n_grad = sum(self.sizes[: len(self.trainable)])
        self.n_weights = sum(self.sizes)
        self.optimizer.build(self.trainable)
        self._snapshot = self._state()
        self._compile(tf, _batch_specs(tf, sample_x, sample_y))

    # ------------------------------------------------------------------ compiled steps
    def _compile(self, tf, specs):
        """specs: (x, y) TensorSpecs whose batch dimension is None, so each step is traced
        once per trial, not again for the last, smaller batch (tracing is most of a small
        model's fixed cost per trial); None: trace per shape (reduce_retracing)."""
        model, trainable, variables = self.model, self.trainable, self.variables
        grad_sizes, sizes = self.sizes[: len(trainable)], self.sizes

        def loss_and_grads(x, y, scale):
            y, w = _weighed(y)
            with tf.GradientTape() as tape:
                y_pred = model(x, training=True)
                loss = model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=w,
                                          training=True) * scale
            grads = tape.gradient(loss, trainable)
            grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                     for g, v in zip(grads, trainable)]
            return loss, grads

        def grad_flat(x, y, scale):
            loss, grads = loss_and_grads(x, y, scale)
            flat = [tf.reshape(tf.cast(g, tf.float32), [-1]) for g in grads]
            return tf.concat(flat + [tf.reshape(tf.cast(loss, tf.float32), [1])], 0)

        def apply_flat(flat):
            parts = tf.split(flat[: self.n_grad], grad_sizes)
            grads = [tf.cast(tf.reshape(p, v.shape), v.dtype) for p, v in zip(parts, trainable)]
            self.optimizer.apply(grads, trainable)

        def local_step(x, y):
            loss, grads = loss_and_grads(x, y, 1.0)
            self.optimizer.apply(grads, trainable)
            return loss

        def test_batch(x, y):
            model.test_step((x, *_weighed(y)))

        def get_flat():
            return tf.concat([tf.reshape(tf.cast(v, tf.float32), [-1]) for v in variables], 0)

        def set_flat(flat):
            for p, v in zip(tf.split(flat, sizes), variables):
                v.assign(tf.cast(tf.reshape(p, v.shape), v.dtype))

        # The training steps use XLA when model.fit would (compile's jit_compile, which
        # Keras resolves to False on CPU-only machines).
        jit = bool(getattr(model, "jit_compile", False))
        flat, scalar = tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.float32)

        def compiled(f, *signature, jit_compile=jit):
            """Traced once for every batch size when the data's specs are known."""
            if specs is None or any(s is None for s in signature):
                return tf.function(f, reduce_retracing=True, jit_compile=jit_compile)
            return tf.function(f, input_signature=list(signature), jit_compile=jit_compile)

        xs, ys = specs if specs is not None else (None, None)
        self._grad = compiled(grad_flat, xs, ys, scalar)
        self._apply = compiled(apply_flat, flat)
        self._get = compiled(get_flat, jit_compile=False)
        self._set = compiled(set_flat, flat, jit_compile=False)
        self._step = compiled(local_step, xs, ys)
        self._test = compiled(test_batch, xs, ys, jit_compile=False)

        self._fuse(compiled, (grad_flat, apply_flat, get_flat, set_flat) if jit
                   else (self._grad, self._apply, self._get, self._set), flat, xs, ys, scalar)

    def _fuse(self, compiled, pieces, flat, xs, ys, scalar) -> None:
        """Fused pairs: one dispatch instead of two per step (a small model's step is mostly
        dispatch overhead). A pair calls the pieces' own tf.functions, so a piece's graph
        is built once per trial however many calls hold it: the pair's own trace is one
        call op per piece, a fraction of tracing the pieces again
        (benchmarks/results/trial_overhead.md), and TensorFlow inlines the calls when it
        runs the pair, so a step costs what a fused one does. Under XLA (jit) a pair is
        compiled whole from the plain pieces (`pieces` are then those). Inside a
        tf.function stateful calls run in program order."""
        grad_, apply_, get_, set_ = pieces

        def apply_then_grad(flat, x, y, scale):
            apply_(flat)
            return grad_(x, y, scale)

        def apply_then_get(flat):
            apply_(flat)
            return get_()

        def set_then_grad(weights, x, y, scale):
            set_(weights)
            return grad_(x, y, scale)

        self._apply_grad = compiled(apply_then_grad, flat, xs, ys, scalar)
        self._apply_get = compiled(apply_then_get, flat)
        self._set_grad = compiled(set_then_grad, flat, xs, ys, scalar)

    def gradient(self, x, y, scale: float, out: np.ndarray) -> None:
        """out[:n_grad] = d(scale * loss)/dw for the batch, out[n_grad] = scale * loss."""
        np.copyto(out, self._grad(x, y, np.float32(scale)).numpy())

    def apply(self, flat_grad: np.ndarray) -> None:
        """One update of the model's compiled optimizer from a flat gradient."""
        self._apply(flat_grad)

    def apply_and_gradient(self, flat_grad, x, y, scale: float, out: np.ndarray) -> None:
        """apply(flat_grad), then gradient(x, y, scale, out), in one compiled call."""
        np.copyto(out, self._apply_grad(flat_grad, x, y, np.float32(scale)).numpy())

    def apply_and_get_weights(self, flat_grad, out: np.ndarray) -> None:
        """apply(flat_grad), then get_weights(out), in one compiled call (downpour master)."""
        np.copyto(out, self._apply_get(flat_grad).numpy())

    def set_weights_and_gradient(self, weights, x, y, scale: float, out: np.ndarray) -> None:
        """set_weights(weights), then gradient(x, y, scale, out), in one compiled call."""
        np.copyto(out, self._set_grad(weights, x, y, np.float32(scale)).numpy())

    def train_step(self, x, y) -> float:
        """Gradient and update fused in one call: the single-rank and EASGD-worker step."""
        return self._step(x, y)

    def get_weights(self, out: np.ndarray | None = None) -> np.ndarray:
        flat = self._get().numpy()
        if out is None:
            return flat
        np.copyto(out, flat)
        return out

    def set_weights(self, flat: np.ndarray) -> None:
        self._set(flat)

    # ------------------------------------------------------------------ fold resets, checkpoints
    def _state(self) -> list:
        return [v.numpy() for v in self.model.variables + list(self.optimizer.variables)]

    def state(self) -> list:
        """Every variable of the model, then of its optimizer (integer seed states and the
        optimizer's step count included): what a checkpoint needs to continue exactly."""
        return self._state()

    def restore(self, values: list, keep_own: bool = False) -> None:
        """The inverse of state(); a checkpoint of another architecture is a ValueError.
        keep_own (pbt's exploit): the optimizer's learning rate and the seed generators'
        states stay as this model was built (its own hyperparameters and seed)."""
        variables = self.model.variables + list(self.optimizer.variables)
        if len(values) != len(variables) or any(tuple(v.shape) != tuple(np.shape(x))
                                                for v, x in zip(variables, values)):
            raise ValueError("the checkpoint does not fit this model (another architecture)")
        for v, value in zip(variables, values):
            if keep_own and v.name in OWN_VARIABLES:
                continue
            v.assign(value)

    def save(self, path: str, weights: np.ndarray | None = None) -> None:
        """model.save(path) (a .keras file plain Keras loads), with `weights` (flat) set
        first when given; the current weights are put back afterwards."""
        current = None
        if weights is not None:
            current = self.get_weights()
            self.set_weights(weights)
        try:
            self.model.save(path)
        finally:
            if current is not None:
                self.set_weights(current)

    def reset(self) -> None:
        """Back to the freshly built weights and optimizer: the next fold starts from scratch
        without rebuilding (and re-tracing) the model."""
        for v, value in zip(self.model.variables + list(self.optimizer.variables), self._snapshot):
            v.assign(value)

    # ------------------------------------------------------------------ validation
    def metric_state(self, x, y, batch_size: int) -> np.ndarray:
        """Evaluate on this rank's shard and return the metric accumulators (float64).

        Keras metrics keep additive accumulators (totals and counts, confusion counts), so the
        sum over shards of the accumulators is the accumulator of the whole validation set.
        The model's own test_step runs compiled, batch by batch (model.evaluate would rebuild
        its data adapter and callbacks on every call)."""
        self.model.reset_metrics()
        for start in range(0, len(x), batch_size):
            self._test(x[start: start + batch_size], y[start: start + batch_size])
        return np.concatenate([np.ravel(np.asarray(v.numpy(), np.float64))
                               for m in self.model.metrics for v in m.variables] or [np.zeros(0)])

    def metric_results(self, state: np.ndarray) -> dict:
        """Metric values computed from (summed) accumulators."""
        offset = 0
        for m in self.model.metrics:
            for v in m.variables:
                size = int(np.prod(v.shape))
                v.assign(state[offset: offset + size].reshape(v.shape).astype(str(v.dtype)))
                offset += size
        return {k: float(v) for k, v in _flatten(self.model.get_metrics_result()).items()}

    # ------------------------------------------------------------------ the model itself
    def n_params(self) -> int:
        return int(self.model.count_params())

    def predict(self, x) -> None:
        self.model(x, training=False)


def _flatten(results: dict) -> dict:
    out = {}
    for key, value in results.items():
        if isinstance(value, dict):
            out.update(_flatten(value))
        else:
            out[key] = np.asarray(value).item() if np.size(value) == 1 else float(np.mean(value))
    return out
