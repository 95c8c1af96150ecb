"""Where the last job of a study would keep results during a database outage.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27

`recovery` is a JSON list of the recovery files (mpiopt.storage.resilient) the study's
last job would write to, in order: beside its spec file, then in its working directory.
A job killed during an outage leaves its held results there; `mpiopt resume NAME` run
from another folder found neither place and ran those trials again. NULL for studies
whose last job predates this revision (the resume looks where it did before).
"""
from alembic import op
import sqlalchemy as sa

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("recovery", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("recovery")
