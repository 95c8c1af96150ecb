"""Where and when a trial's time went: its device, the suggestion's cost, fold/epoch spans.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23

`device` is what the group leader trained on ("gpu: NVIDIA H100 80GB HBM3", "cpu: AMD EPYC
7763 64-Core Processor"); `suggest_seconds` how long the searcher took to suggest the
trial's parameters; `spans_json` the folds' and epochs' start and end, in seconds since the
group began the trial. The report's timeline and `mpiopt export --format chrome-trace`
read them; all are NULL for trials recorded before this revision.
"""
from alembic import op
import sqlalchemy as sa

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("device", sa.String(255), nullable=True))
        batch.add_column(sa.Column("suggest_seconds", sa.Float(), nullable=True))
        batch.add_column(sa.Column("spans_json", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        for name in ("spans_json", "suggest_seconds", "device"):
            batch.drop_column(name)
