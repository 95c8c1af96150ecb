"""Population-based training's lineage: a trial's member, round and parent trial.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23

With `search.algorithm: pbt` every trial is one round (segment) of one population member:
`member` is the member's index, `round` the round it trains (epochs round*interval to
(round+1)*interval) and `parent` the trial number whose checkpoint it started from (the
member's own previous round, or the top member it copied; NULL in round 0). All three are
NULL for other algorithms and for trials recorded before this revision.
"""
from alembic import op
import sqlalchemy as sa

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("member", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("round", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("parent", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        for name in ("parent", "round", "member"):
            batch.drop_column(name)
