"""The artifact store: what training learns, kept beside the results database.

One folder per study (``storage.artifacts``; default ``<db stem>-artifacts/<study>/``
beside a SQLite file, ``./mpiopt-artifacts/<study>/`` for a server URL), on a file system
every rank can reach (on a cluster: a shared one). Its path is recorded with the study
(``studies.artifacts``), so the query commands find it without the spec. Layout::

    <root>/checkpoints/trial-<number>/fold-<f>.npz   the trial's last checkpoint, per fold
    <root>/models/trial-<number>.keras (+ .json)     the best search.keep_models trials
    <root>/models/incoming/trial-<number>.keras      written by a group, placed by rank 0
    <root>/refit.keras (+ .json)                     training.refit's model

A model file's suffix is its framework's (MODEL_SUFFIXES): `.keras` (a file plain Keras
loads) or `.pt` (a torch module's state_dict, which plain PyTorch loads into the module
the study's build_model makes); the training writes it, everything else finds it by stem.

Files are keyed by trial number, which a trial keeps across attempts, so a rerun on
resume finds its checkpoints. Every file appears whole or not at all (written under a
temporary name, then renamed). Only mpiopt.training writes checkpoints and models; the
coordinator (which alone knows the ranking) places and deletes them (keeper.Keeper).
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from mpiopt import jsontext
from mpiopt.errors import ArtifactStoreError

MIN_FREE_BYTES = 50 * 2**20     # refused at start below this: a checkpoint could not fit
MODEL_SUFFIXES = (".keras", ".pt")    # a kept model's file, by framework (Keras, torch)

__all__ = ["ArtifactStoreError", "TrialArtifacts", "default_root", "resolve", "check_root",
           "trial_artifacts", "refit_artifacts", "checkpoint_dir", "models_dir", "atomic_path",
           "MODEL_SUFFIXES", "model_file", "with_model_suffix"]


def default_root(url: str, study: str) -> Path:
    """Beside a SQLite file: <stem>-artifacts/<study>; for a server: ./mpiopt-artifacts."""
    from mpiopt.storage import StorageURL
    from mpiopt.names import file_stem

    path = StorageURL.parse(url).sqlite_path
    if path is not None:
        return Path(path).resolve().parent / f"{Path(path).stem}-artifacts" / file_stem(study)
    return Path.cwd().resolve() / "mpiopt-artifacts" / file_stem(study)


def resolve(spec, url: str):
    """The spec with storage.artifacts filled in (rank 0, before anything is written);
    a folder that cannot be written is one line naming the field."""
    given = spec.artifacts
    root = Path(given) if given else default_root(url, spec.study.name)
    check_root(root, "storage.artifacts" if given else "storage.artifacts (default)")
    return replace(spec, artifacts=str(root))


def check_root(root: Path, field: str = "storage.artifacts") -> None:
    """Writable and with room, checked on the nearest existing folder: nothing is made."""
    existing = root
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise ArtifactStoreError(f"{field}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ArtifactStoreError(f"{field}: {root} cannot be written ({existing} is not writable)")
    free = shutil.disk_usage(existing).free
    if free < MIN_FREE_BYTES:
        raise ArtifactStoreError(f"{field}: {root}: no space left ({free // 2**20} MiB free "
                                 f"on {existing}, at least {MIN_FREE_BYTES // 2**20} MiB needed)")


def checkpoint_dir(root, number: int) -> Path:
    return Path(root) / "checkpoints" / f"trial-{number}"


def models_dir(root) -> Path:
    return Path(root) / "models"


def model_file(stem) -> Path | None:
    """The model file kept under this stem (root/"refit" -> refit.keras or refit.pt), or
    None when there is none."""
    for suffix in MODEL_SUFFIXES:
        path = Path(stem).with_suffix(suffix)
        if path.is_file():
            return path
    return None


def with_model_suffix(path, suffix: str) -> Path:
    """`path` ending in the framework's suffix: added where it has no model suffix, put in
    place of another framework's."""
    path = Path(path)
    if path.suffix in MODEL_SUFFIXES or not path.suffix:
        return path.with_suffix(suffix)
    return path.with_name(path.name + suffix)


def atomic_path(final: Path) -> Path:
    """The temporary name a file is written under before its rename (same folder, so
    the rename is atomic; a name a reader never mistakes for a finished file)."""
    return final.with_name(f".{final.stem}.{os.getpid()}.tmp{final.suffix}")


def write_json(path: Path, data: dict) -> None:
    """A small JSON note (a kept model's), whole or not at all."""
    tmp = atomic_path(path)
    try:
        tmp.write_text(jsontext.dumps(data, indent=1, default=float))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@dataclass(frozen=True)
class TrialArtifacts:
    """What one trial keeps, the same on every rank of its group (sent inside nothing:
    each rank builds it from the spec and the trial number).

    checkpoints: the trial's checkpoint folder, or None (off); every: epochs between
    checkpoints; model: where the leader writes the final model, or None (its suffix
    becomes the framework's: with_model_suffix)."""

    checkpoints: str | None = None
    every: int = 1
    model: str | None = None
    final: bool = False     # keep the last epoch's weights (refit), not the best epoch's

    def fold_file(self, fold: int) -> Path:
        return Path(self.checkpoints) / f"fold-{fold}.npz"


def refit_artifacts(spec) -> TrialArtifacts:
    """training.refit's model and checkpoints (a killed refit continues on resume)."""
    root = Path(spec.artifacts)
    every = spec.training.checkpoint_every
    return TrialArtifacts(checkpoints=str(root / "checkpoints" / "refit") if every else None,
                          every=every, model=str(root / "refit"), final=True)


def trial_artifacts(spec, number: int) -> TrialArtifacts | None:
    """A study trial's artifacts from the resolved spec (None when nothing is kept)."""
    root = getattr(spec, "artifacts", None)
    if not root:
        return None
    every = spec.training.checkpoint_every
    keep = spec.search.keep_models > 0
    if not every and not keep:
        return None
    return TrialArtifacts(
        checkpoints=str(checkpoint_dir(root, number)) if every else None, every=every,
        model=str(models_dir(root) / "incoming" / f"trial-{number}") if keep else None)
