"""A population-based training round: continue another trial's checkpoint for a few epochs.

Why a round starts from its parent's checkpoint and not from a fresh model: PBT's exploit
copies the weights and the optimizer's state (Adam's moments, its step count) of a better
member. The round's own hyperparameters still rule: the model is built from them, and the
optimizer's learning rate (a variable Keras saves with the optimizer) and the dropout
layers' seed states are kept from that build, not taken from the parent. A parameter that
changes a weight's shape cannot be explored (its checkpoint would not fit): that is one
clear error naming search.pbt.explore.

The data splits of every round use the study's seed, not the trial's, so a parent and its
children validate on the same samples (a child never validates on its parent's training
data). The round's value is its last epoch's metric (FoldTrainer(last=True)).
"""
from __future__ import annotations

from dataclasses import dataclass

from mpiopt.training import resume


@dataclass(frozen=True)
class Segment:
    round: int
    interval: int
    parent: object | None      # mpiopt.artifacts.TrialArtifacts of the parent trial, or None
    parent_number: int | None
    split_seed: int

    @property
    def end(self) -> int:
        """The epoch this round trains up to (training.epochs for the round)."""
        return (self.round + 1) * self.interval


def segment_of(spec, trial) -> Segment | None:
    """The round a protocol Trial runs (None: not a pbt trial)."""
    if getattr(trial, "round", None) is None:
        return None
    from mpiopt.artifacts import trial_artifacts

    parent = None if trial.parent is None else trial_artifacts(spec, trial.parent)
    return Segment(int(trial.round), int(spec.search.options["interval"]), parent, trial.parent,
                   int(spec.search.seed or 0))


def start_from_parent(segment: Segment, model, trainer, fold_comm, fold: int) -> None:
    """Put the parent's fold checkpoint into the model (keeping this round's learning rate)
    and continue its learning curve. Every rank raises together when it cannot."""
    ckpt = resume.load(fold_comm, segment.parent, fold)
    if ckpt is None:
        raise RuntimeError(f"pbt: the checkpoint of parent trial {segment.parent_number} "
                           f"(fold {fold}) is missing from the artifact store")
    try:
        model.restore(ckpt["state"], keep_own=True)
    except ValueError:
        raise ValueError(f"pbt: parent trial {segment.parent_number}'s checkpoint does not fit "
                         "this round's model: an explored parameter changes the network's shape; "
                         "list only parameters that keep it in search.pbt.explore") from None
    trainer.inherit(ckpt)
