"""The launch of each job, for the resume line `mpiopt status` prints after it.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29

`jobs.launch` is what goes before `mpiopt resume` in the job's own closing line: the
launcher as the user ran it and the number of processes ("mpiexec -n 9 "), "" for a job
of one process. `mpiopt status` gives the same line once the job is gone: a bare
`mpiopt resume NAME`, copied on a cluster's login node, trains there in one process.
NULL for jobs that predate this revision (their line starts with `mpiopt resume`).
"""
from alembic import op
import sqlalchemy as sa

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("launch", sa.String(255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("launch")
