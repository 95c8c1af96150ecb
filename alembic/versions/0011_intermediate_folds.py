"""Per-epoch values name their fold and the epoch within it.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-29

A trial's per-epoch values were keyed by one step; with folds trained one after another
fold f's epoch e was step f * epochs + e. That step meant different points in trials
with different `training.epochs` (a searched field), and it hid each fold's start, where a
freshly built model begins again. `trial_intermediate` gets a `fold` column (0 for a
trial of one fold, folds side by side, a function objective's reports), and the unique
key becomes (trial_id, fold, epoch).

The rows already there are read back into (fold, epoch) once, here: for a study whose
stored spec trained a model with folds one after another (training.kfold K > 1 on a group
too small to train them side by side: mpiopt.training.folds.fold_plan), a step s past the
trial's epochs E (its own `training.epochs` parameter where searched) is fold
(s - 1) // E, epoch (s - 1) % E + 1. Everything else was already (fold 0, epoch): one
fold, a function objective's epochs, and the folds side by side, whose per-epoch value
was their mean.
"""
from alembic import op
import sqlalchemy as sa

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trial_intermediate") as batch:
        batch.add_column(sa.Column("fold", sa.Integer(), nullable=False, server_default="0"))
        batch.drop_constraint("uq_trial_intermediate_trial_id_epoch", type_="unique")
        batch.create_unique_constraint("uq_trial_intermediate_trial_id_fold_epoch",
                                       ["trial_id", "fold", "epoch"])
    _steps_to_folds(op.get_bind())


def downgrade() -> None:
    # (the values of folds after the first would collide as epochs: they go)
    op.execute("DELETE FROM trial_intermediate WHERE fold <> 0")
    with op.batch_alter_table("trial_intermediate") as batch:
        batch.drop_constraint("uq_trial_intermediate_trial_id_fold_epoch", type_="unique")
        batch.create_unique_constraint("uq_trial_intermediate_trial_id_epoch",
                                       ["trial_id", "epoch"])
        batch.drop_column("fold")


STUDIES = sa.table("studies", sa.column("id"), sa.column("spec_text"))
TRIALS = sa.table("trials", sa.column("id"), sa.column("study_id"))
PARAMS = sa.table("trial_params", sa.column("trial_id"), sa.column("name"),
                  sa.column("value_float"))
EPOCHS = sa.table("trial_intermediate", sa.column("id"), sa.column("trial_id"),
                  sa.column("fold"), sa.column("epoch"))


def _steps_to_folds(conn) -> None:
    for study_id, spec_text in conn.execute(sa.select(STUDIES.c.id, STUDIES.c.spec_text)).all():
        epochs = _folds_in_turn(spec_text)
        if epochs is None:
            continue
        searched = dict(conn.execute(
            sa.select(PARAMS.c.trial_id, PARAMS.c.value_float)
            .where(PARAMS.c.name == "training.epochs",
                   PARAMS.c.trial_id.in_(sa.select(TRIALS.c.id)
                                         .where(TRIALS.c.study_id == study_id)))).all())
        rows = conn.execute(
            sa.select(EPOCHS.c.id, EPOCHS.c.trial_id, EPOCHS.c.epoch)
            .where(EPOCHS.c.trial_id.in_(sa.select(TRIALS.c.id)
                                         .where(TRIALS.c.study_id == study_id)),
                   EPOCHS.c.epoch > 0)).all()
        for row_id, trial_id, step in rows:
            per_fold = int(searched.get(trial_id) or epochs)
            if per_fold > 0 and step > per_fold:
                conn.execute(sa.update(EPOCHS).where(EPOCHS.c.id == row_id).values(
                    fold=(step - 1) // per_fold, epoch=(step - 1) % per_fold + 1))


def _folds_in_turn(spec_text: str | None) -> int | None:
    """training.epochs of a model study whose folds ran one after another, else None."""
    import yaml

    try:
        spec = yaml.safe_load(spec_text or "") or {}
        training = spec.get("training") or {}
        kfold = int(training.get("kfold") or 1)
        epochs = int(training.get("epochs") or 10)
        size = int((spec.get("resources") or {}).get("group_size") or 1)
        model = (spec.get("objective") or {}).get("model")
    except (yaml.YAMLError, AttributeError, TypeError, ValueError):
        return None
    side_by_side = size >= kfold and size % kfold == 0
    return epochs if model and kfold > 1 and not side_by_side else None
