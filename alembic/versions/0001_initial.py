"""Initial schema: studies, trials, trial_params, trial_folds, trial_intermediate.

Revision ID: 0001
Revises:
Create Date: 2026-11-22

Written with plain column types (VARCHAR for statuses, DateTime for timestamps) so that
this file never changes when the Python enums or type helpers in models.py do.
"""
from alembic import op
import sqlalchemy as sa

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _id() -> sa.Column:
    return sa.Column("id", sa.Integer(), nullable=False)


def _trial_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["trial_id"], ["trials.id"], ondelete="CASCADE",
                                   name=f"fk_{table}_trial_id_trials")


def upgrade() -> None:
    op.create_table(
        "studies", _id(),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("direction", sa.String(16), nullable=False),
        sa.Column("metric", sa.String(255), nullable=False),
        sa.Column("spec_text", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("space_json", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_studies"),
        sa.UniqueConstraint("name", name="uq_studies_name"),
    )
    op.create_table(
        "trials", _id(),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("value_std", sa.Float(), nullable=True),
        sa.Column("seed", sa.BigInteger(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("group_index", sa.Integer(), nullable=True),
        sa.Column("host", sa.String(255), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("duration", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("metrics_json", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"], ondelete="CASCADE",
                                name="fk_trials_study_id_studies"),
        sa.PrimaryKeyConstraint("id", name="pk_trials"),
        sa.UniqueConstraint("study_id", "number", name="uq_trials_study_id_number"),
    )
    op.create_index("ix_trials_study_id", "trials", ["study_id"])
    op.create_index("ix_trials_status", "trials", ["status"])
    op.create_table(
        "trial_params", _id(),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("value_float", sa.Float(), nullable=True),
        sa.Column("value_text", sa.Text(), nullable=False),
        _trial_fk("trial_params"),
        sa.PrimaryKeyConstraint("id", name="pk_trial_params"),
        sa.UniqueConstraint("trial_id", "name", name="uq_trial_params_trial_id_name"),
    )
    op.create_table(
        "trial_folds", _id(),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("fold", sa.Integer(), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("metrics_json", sa.Text(), nullable=True),
        _trial_fk("trial_folds"),
        sa.PrimaryKeyConstraint("id", name="pk_trial_folds"),
        sa.UniqueConstraint("trial_id", "fold", name="uq_trial_folds_trial_id_fold"),
    )
    op.create_table(
        "trial_intermediate", _id(),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        _trial_fk("trial_intermediate"),
        sa.PrimaryKeyConstraint("id", name="pk_trial_intermediate"),
        sa.UniqueConstraint("trial_id", "epoch", name="uq_trial_intermediate_trial_id_epoch"),
    )
    for table in ("trial_params", "trial_folds", "trial_intermediate"):
        op.create_index(f"ix_{table}_trial_id", table, ["trial_id"])


def downgrade() -> None:
    for table in ("trial_intermediate", "trial_folds", "trial_params", "trials", "studies"):
        op.drop_table(table)
