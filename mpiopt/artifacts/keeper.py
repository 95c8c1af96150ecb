"""The coordinator's side of the artifact store: keep the best k models, drop the rest.

A group writes the model of each trial it completes under models/incoming/; only the
coordinator knows the ranking, so it alone moves a model into models/ (a rename: no copy,
no extra space) or deletes it, and deletes a finished trial's checkpoints. Disk use stays
bounded: k kept models, one incoming model per running trial, one checkpoint per fold of
each running trial. With several objectives "best" is the primary objective's value.

A file operation that fails here is a warning, never the study's end: the results in the
database matter more than the files beside it.
"""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

from mpiopt.artifacts import MODEL_SUFFIXES, checkpoint_dir, model_file, models_dir, write_json
from mpiopt.trial import Direction, TrialStatus


class Keeper:
    def __init__(self, root, keep: int, direction: str, say=None, checkpoints: bool = True,
                 refit: bool = False):
        self.root, self.keep = Path(root), int(keep)
        self.refit = refit                # training.refit
        self.checkpoints = checkpoints    # reruns continue: their per-epoch rows are kept
        self.sign = Direction.parse(direction).sign
        self.say = say or (lambda line: None)
        self.kept = kept_models(self.root)          # {number: value}
        self.held: set[int] = set()       # finished trials whose checkpoints stay (pbt)

    def finished(self, trials, keep: set | None = None) -> None:
        """After the trials' results are written: their checkpoints go, their models are
        kept or deleted. Also called on resume for every finished trial (what a job that
        died between the write and this step left behind).

        keep (search.algorithm pbt): finished trials whose checkpoints a later round may
        still start from. Theirs stay until a later call no longer names them, so the
        store holds about one checkpoint per member (plus the parents of running rounds)."""
        for t in trials:
            if keep is not None and t.number in keep:
                self.held.add(t.number)
            else:
                self._drop_checkpoints(t.number)
            try:
                self._place(t)
            except OSError as exc:
                self.say(f"warning: could not keep the model of trial {t.number}: {exc}")
        if keep is not None:
            for number in sorted(self.held - keep):
                self._drop_checkpoints(number)
            self.held &= keep

    def _drop_checkpoints(self, number: int) -> None:
        try:
            shutil.rmtree(checkpoint_dir(self.root, number), ignore_errors=False)
        except FileNotFoundError:
            pass
        except OSError as exc:
            self.say(f"warning: could not remove the checkpoints of trial {number}: {exc}")

    def refit_path(self) -> Path | None:
        """The refit model's file, once it is made."""
        return model_file(self.root / "refit")

    def refit_wanted(self) -> bool:
        """training.refit asked and not yet made (a resumed study made it already)."""
        return self.refit and self.refit_path() is None

    def refit_done(self) -> None:
        shutil.rmtree(self.root / "checkpoints" / "refit", ignore_errors=True)

    def _place(self, t) -> None:
        stem = models_dir(self.root) / "incoming" / f"trial-{t.number}"
        note, incoming = stem.with_suffix(".json"), model_file(stem)
        if incoming is None:
            note.unlink(missing_ok=True)
            return
        value = t.value
        usable = (t.status is TrialStatus.COMPLETE and isinstance(value, (int, float))
                  and math.isfinite(value) and self.keep > 0)
        if usable and (len(self.kept) < self.keep or self._rank(t.number, value) < self._rank(*self._worst())):
            final = models_dir(self.root) / f"trial-{t.number}{incoming.suffix}"
            data = json.loads(note.read_text()) if note.exists() else {}
            data.update(trial=t.number, value=value)
            write_json(final.with_suffix(".json"), data)
            os.replace(incoming, final)
            note.unlink(missing_ok=True)
            self.kept[t.number] = value
            while len(self.kept) > self.keep:
                self._drop(self._worst()[0])
        else:
            incoming.unlink(missing_ok=True)
            note.unlink(missing_ok=True)

    def _rank(self, number: int, value: float) -> tuple:
        return (self.sign * value, number)

    def _worst(self) -> tuple[int, float]:
        number = max(self.kept, key=lambda n: self._rank(n, self.kept[n]))
        return number, self.kept[number]

    def _drop(self, number: int) -> None:
        stem = models_dir(self.root) / f"trial-{number}"
        for suffix in (*MODEL_SUFFIXES, ".json"):
            stem.with_suffix(suffix).unlink(missing_ok=True)
        del self.kept[number]


def kept_models(root) -> dict[int, float]:
    """{trial number: value} of the models kept in the store."""
    out = {}
    folder = models_dir(root)
    for note in folder.glob("trial-*.json") if folder.is_dir() else ():
        try:
            data = json.loads(note.read_text())
            if model_file(note.with_suffix("")) is not None:
                out[int(data["trial"])] = float(data["value"])
        except (OSError, ValueError, KeyError):
            continue
    return out

