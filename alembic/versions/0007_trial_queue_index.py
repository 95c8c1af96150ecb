"""An index for the queue that the coordinator reads on every dispatch.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23

`SELECT id FROM trials WHERE study_id = ? AND status = 'PENDING' ORDER BY number LIMIT n`
runs before each trial starts. SQLite, which keeps no statistics, planned it on the
(study_id, number) unique index and walked every trial of the study, so the coordinator's
cost per trial grew with the study (0.85 ms at 100 trials, 1.7 ms at 10,000 in
benchmarks/simulate.py). (study_id, status, number) answers it with one range scan, in
order, on SQLite and PostgreSQL alike.
"""
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_trials_queue", "trials", ["study_id", "status", "number"])


def downgrade() -> None:
    op.drop_index("ix_trials_queue", table_name="trials")
