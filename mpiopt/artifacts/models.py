"""Finding a study's kept models: for `mpiopt model list|export` and Study.best_model()."""
from __future__ import annotations

import json
from pathlib import Path

from mpiopt.artifacts import model_file, models_dir
from mpiopt.artifacts.keeper import kept_models
from mpiopt.errors import MpioptError
from mpiopt.trial import Direction


def store_of(record) -> Path:
    """The study's artifact store, as recorded with it."""
    if not getattr(record, "artifacts", None):
        raise MpioptError(f"study '{record.name}' keeps no models (it trains no model, or "
                          "it was run by an mpiopt without an artifact store)")
    return Path(record.artifacts)


def listing(record) -> list[dict]:
    """One row per kept model, best first; the refit model (training.refit) first of all."""
    root = store_of(record)
    sign = Direction.parse(record.direction).sign
    rows = []
    refit = model_file(root / "refit")
    if refit is not None:
        rows.append(_row("refit", refit, _note(refit)))
    kept = kept_models(root)
    for number in sorted(kept, key=lambda n: (sign * kept[n], n)):
        path = model_file(models_dir(root) / f"trial-{number}")
        if path is not None:        # (removed since it was listed: a study running)
            rows.append(_row(number, path, _note(path)))
    return rows


def model_path(record, storage, number: int | None = None) -> tuple[Path, dict]:
    """(file, note) of trial `number`'s kept model; by default the best trial's (the refit
    model when training.refit made one)."""
    root = store_of(record)
    if number is None:
        refit = model_file(root / "refit")
        if refit is not None:
            return refit, _note(refit)
        best = storage.best_trials(record.id, 1)
        if not best:
            raise MpioptError(f"study '{record.name}' has no complete trial yet")
        number = best[0].number
    path = model_file(models_dir(root) / f"trial-{number}")
    if path is None:
        kept = sorted(kept_models(root))
        shown = ", ".join(map(str, kept)) if kept else "none"
        raise MpioptError(f"study '{record.name}': no kept model of trial {number} in "
                          f"{models_dir(root)} (kept: {shown}; search.keep_models keeps the best k)")
    return path, _note(path)


def _note(path: Path) -> dict:
    try:
        return json.loads(path.with_suffix(".json").read_text())
    except (OSError, ValueError):
        return {}


def _row(trial, path: Path, note: dict) -> dict:
    fold = (f"{note['fold'] + 1} of {note['kfold']}" if "fold" in note and "kfold" in note
            else "all data" if trial == "refit" else None)
    return {"trial": trial, "value": note.get("value"), "fold": fold,
            "best_epoch": note.get("best_epoch"), "file": str(path)}
