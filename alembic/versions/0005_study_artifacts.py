"""Where a study keeps what training learns: its artifact store's folder.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23

`artifacts` is the folder of the study's checkpoints and kept models (storage.artifacts,
or its default beside the SQLite file); `mpiopt model list|export` and
`load_study(...).best_model()` find the models through it. NULL for studies recorded
before this revision (they kept nothing).
"""
from alembic import op
import sqlalchemy as sa

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("artifacts", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("artifacts")
