"""One fold's checkpoint: a plain .npz file (no pickle), readable without mpiopt.

Arrays:
    meta        JSON text: format, trial, fold, epoch, done, best value/epoch/metrics, the
                per-epoch (value, metrics) history, timing, spans, random states
    state_NNNN  the model's variables then its optimizer's, in KerasModel.state() order
                (rank 0's: in allreduce every rank holds the same; in downpour rank 0 is
                the master; in easgd it is rank 0's own worker)
    validated   easgd only: the center variable (the flat float weights validation saw)
    best        the flat float weights of the fold's best epoch (when models are kept)
    rng_numpy   NumPy's global MT19937 key (its other fields are in meta)

PBT's exploit can reuse it as is: load another trial's fold file, restore its state_*
into this trial's model (same architecture), and continue with this trial's own meta.
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np

from mpiopt import jsontext
from mpiopt.artifacts import atomic_path

FORMAT = 1


def save(path: Path, meta: dict, state: list, validated=None, best=None) -> None:
    """Write atomically: a temporary file in the same folder, flushed, then renamed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"state_{i:04d}": np.asarray(v) for i, v in enumerate(state)}
    if validated is not None:
        arrays["validated"] = np.asarray(validated)
    if best is not None:
        arrays["best"] = np.asarray(best)
    numpy_state = np.random.get_state()
    arrays["rng_numpy"] = numpy_state[1]
    meta = dict(meta, format=FORMAT, n_state=len(state),
                rng={"python": _jsonable(random.getstate()),
                     "numpy": [numpy_state[0], *map(_scalar, numpy_state[2:])]})
    arrays["meta"] = np.array(jsontext.exact(meta, default=_plain))
    tmp = atomic_path(path)
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load(path: Path) -> dict | None:
    """{meta, state, validated, best} or None when there is no (readable) checkpoint."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("format") != FORMAT:
                return None
            state = [z[f"state_{i:04d}"] for i in range(meta["n_state"])]
            out = {"meta": meta, "state": state,
                   "validated": z["validated"] if "validated" in z else None,
                   "best": z["best"] if "best" in z else None,
                   "rng_numpy": z["rng_numpy"] if "rng_numpy" in z else None}
    except (OSError, ValueError, KeyError):
        return None
    return out


def restore_random(ckpt: dict) -> None:
    """Python's and NumPy's global random states as they were when it was written."""
    rng = ckpt["meta"].get("rng") or {}
    if "python" in rng:
        version, internal, gauss = rng["python"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy" in rng and ckpt.get("rng_numpy") is not None:
        name, pos, has_gauss, cached = rng["numpy"]
        np.random.set_state((name, ckpt["rng_numpy"], pos, has_gauss, cached))


def _jsonable(value):
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def _scalar(value):
    return value.item() if isinstance(value, np.generic) else value


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")
