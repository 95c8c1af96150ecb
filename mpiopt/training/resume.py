"""A fold's checkpoints inside training: read on resume, written every few epochs, and the
trial's final model written for the coordinator to rank.

Why every write is followed by one small collective over the whole trial communicator:
only a fold's rank 0 writes, and if that write fails (no space left) every rank of the
trial must stop at the same point, or the others would wait for ever in the next
collective. They all raise ArtifactStoreError: not the trial's fault, so the trial is
INTERRUPTED (mpiopt.objective.evaluate), the study stops in order with the resume command, and
the trial runs again from its last checkpoint.
"""
from __future__ import annotations

import os
from pathlib import Path

from mpiopt.artifacts import atomic_path, checkpoint, with_model_suffix, write_json
from mpiopt.errors import ArtifactStoreError


def load(fold_comm, artifacts, fold: int) -> dict | None:
    """The fold's last checkpoint, read by the fold's rank 0 and sent to its other ranks."""
    ckpt = None
    if fold_comm.Get_rank() == 0 and artifacts is not None and artifacts.checkpoints:
        ckpt = checkpoint.load(artifacts.fold_file(fold))
        if ckpt is not None and ckpt["meta"].get("fold") != fold:
            ckpt = None
    return fold_comm.bcast(ckpt, root=0)


def restore(model, ckpt: dict | None) -> dict | None:
    """Put the checkpoint's variables into the model on this rank; None (start afresh)
    when it does not fit the model (its build_model changed since)."""
    if ckpt is None:
        return None
    try:
        model.restore(ckpt["state"])
    except ValueError:
        model.reset()
        return None
    checkpoint.restore_random(ckpt)
    return ckpt


def save_if_due(comm, trainer, ran: bool) -> None:
    """Checkpoint the fold after an epoch (every `every` epochs, and when it is done)."""
    a = trainer.artifacts
    if a is None or not a.checkpoints or not a.every:
        return
    error = None
    if ran and trainer.comm.Get_rank() == 0 and (trainer.done or trainer.epoch % a.every == 0):
        try:
            meta, state, validated, best = trainer.checkpoint_parts()
            checkpoint.save(a.fold_file(trainer.fold), meta, state, validated, best)
        except OSError as exc:
            error = _describe(exc, a.fold_file(trainer.fold))
    _agree(comm, error)


def save_model(comm, trainer, k: int, meta: dict) -> None:
    """The model of the last fold at its best epoch, as a file its framework loads (a
    .keras file, a torch state_dict .pt), with a JSON note of what it is (the fold, its
    value, the framework): written by that fold's rank 0."""
    a = trainer.artifacts
    if a is None or not a.model:
        return
    error = None
    if trainer.fold == k - 1 and trainer.comm.Get_rank() == 0:
        final = with_model_suffix(a.model, trainer.model.suffix)
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            note = dict(meta, fold=trainer.fold, kfold=k, fold_value=trainer.best_value,
                        best_epoch=trainer.best_epoch, epochs=trainer.epoch,
                        framework=trainer.model.framework)
            if a.final:       # training.refit: the last epoch, on all the data
                note.update(fold_value=trainer.history[-1][0] if trainer.history else None,
                            best_epoch=None, samples=len(trainer.x),
                            value_on="the training data itself (all the data; none is left)")
            write_json(final.with_suffix(".json"), note)
            tmp = atomic_path(final)
            try:
                trainer.model.save(str(tmp), trainer.best_weights)
                os.replace(tmp, final)
            finally:
                tmp.unlink(missing_ok=True)
        except OSError as exc:
            error = _describe(exc, final)
    _agree(comm, error)



def _describe(exc: OSError, path) -> str:
    return f"storage.artifacts: cannot write {path}: {exc.strerror or exc}"


def _agree(comm, error: str | None) -> None:
    errors = [e for e in comm.allgather(error) if e]
    if errors:
        raise ArtifactStoreError(errors[0])
