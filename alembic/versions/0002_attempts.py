"""Trials remember the rank they ran on and how often a job died while they ran.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23

`lost_attempts` counts the jobs that ended without a word while the trial ran in the
rank's own process (mpiopt.run.study_run): after search.max_attempts the trial is FAILED, so
one parameter set that kills its process cannot poison every resume.
"""
from alembic import op
import sqlalchemy as sa

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("rank", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("lost_attempts", sa.Integer(), nullable=False,
                                   server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("lost_attempts")
        batch.drop_column("rank")
