"""A study held by a running job has a lease: who holds it, since when, its last beat.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23

One coordinator per study (mpiopt.run.study_run): a second search of a study whose lease is
fresh is refused, naming the holder; a lease without a beat for three periods is stale
(the job died without a word) and a resume takes it over. `studies` and `status` tell a
live study from a dead one by it.
"""
from alembic import op
import sqlalchemy as sa

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

COLUMNS = ("lease_token", "lease_host", "lease_pid", "lease_started_at", "lease_beat_at",
           "lease_period")


def upgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("lease_token", sa.String(32), nullable=True))
        batch.add_column(sa.Column("lease_host", sa.String(255), nullable=True))
        batch.add_column(sa.Column("lease_pid", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("lease_started_at", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("lease_beat_at", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("lease_period", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
