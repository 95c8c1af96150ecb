"""Many jobs, one study: a job is a row, and the study's lease becomes the job's.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28

`jobs` holds every job that ran a study: its lease (token, host, pid, heartbeat, period),
its launcher's id and groups, whether it joined with --join (shared), and how it ended
(NULL while live; "lost" with `taken_by` when another job found it stale). Trials name
the job that runs or ran them last (`job_id`), so a live job takes over exactly the
trials of a lost one, and keep their parameter set's key (`params_key`) for
create_trials(distinct=True).

The studies' six lease_* columns go: a live lease (a token) becomes a live exclusive job,
a released one (no token, a host) an ended job, so `mpiopt status` still names the host
that ran the study last.
"""
import uuid

from alembic import op
import sqlalchemy as sa

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

LEASE = ("lease_token", "lease_host", "lease_pid", "lease_started_at", "lease_beat_at",
         "lease_period")


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("token", sa.String(32), nullable=False),
        sa.Column("shared", sa.Boolean(), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("launcher", sa.String(255), nullable=True),
        sa.Column("groups", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("beat_at", sa.DateTime(), nullable=False),
        sa.Column("period", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.Column("end", sa.String(16), nullable=True),
        sa.Column("taken_by", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"], ondelete="CASCADE",
                                name="fk_jobs_study_id_studies"),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
    )
    op.create_index("ix_jobs_study_id", "jobs", ["study_id"])
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("job_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("params_key", sa.String(64), nullable=True))
        batch.create_index("ix_trials_job_id", ["job_id"])
        batch.create_index("ix_trials_params_key", ["study_id", "params_key"])
    _leases_to_jobs()
    with op.batch_alter_table("studies") as batch:
        for name in reversed(LEASE):
            batch.drop_column(name)


def _leases_to_jobs() -> None:
    conn = op.get_bind()
    studies = sa.table("studies", *(sa.column(c) for c in ("id", *LEASE)))
    jobs = sa.table("jobs", *(sa.column(c) for c in (
        "study_id", "token", "shared", "host", "pid", "started_at", "beat_at", "period",
        "ended_at", "end")))
    rows = conn.execute(sa.select(studies).where(studies.c.lease_host.is_not(None))).all()
    for r in rows:
        if r.lease_started_at is None or r.lease_beat_at is None:
            continue
        live = r.lease_token is not None
        conn.execute(sa.insert(jobs).values(
            study_id=r.id, token=r.lease_token or uuid.uuid4().hex, shared=False,
            host=r.lease_host, pid=r.lease_pid or 0, started_at=r.lease_started_at,
            beat_at=r.lease_beat_at, period=float(r.lease_period or 30.0),
            ended_at=None if live else r.lease_beat_at, end=None if live else "ended"))


def downgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("lease_token", sa.String(32), nullable=True))
        batch.add_column(sa.Column("lease_host", sa.String(255), nullable=True))
        batch.add_column(sa.Column("lease_pid", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("lease_started_at", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("lease_beat_at", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("lease_period", sa.Float(), nullable=True))
    conn = op.get_bind()
    jobs = sa.table("jobs", *(sa.column(c) for c in (
        "id", "study_id", "token", "host", "pid", "started_at", "beat_at", "period", "end")))
    studies = sa.table("studies", *(sa.column(c) for c in ("id", *LEASE)))
    newest = conn.execute(sa.select(jobs).order_by(jobs.c.end.is_(None), jobs.c.beat_at)).all()
    for j in newest:       # the last one written per study wins: a live job, else the newest
        conn.execute(sa.update(studies).where(studies.c.id == j.study_id).values(
            lease_token=j.token if j.end is None else None, lease_host=j.host,
            lease_pid=j.pid, lease_started_at=j.started_at, lease_beat_at=j.beat_at,
            lease_period=j.period))
    with op.batch_alter_table("trials") as batch:
        batch.drop_index("ix_trials_params_key")
        batch.drop_index("ix_trials_job_id")
        batch.drop_column("params_key")
        batch.drop_column("job_id")
    op.drop_index("ix_jobs_study_id", table_name="jobs")
    op.drop_table("jobs")
