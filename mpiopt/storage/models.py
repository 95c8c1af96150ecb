"""The results schema as SQLAlchemy 2 typed declarative models.

The migrations in alembic/versions must build exactly this schema; tests/test_migrations.py
runs alembic's autogenerate comparison to prove it. Change a model, add a migration.

Parameters, folds and per-epoch values live in their own tables so plain SQL can filter
and join on them (``SELECT ... FROM trial_params WHERE name = 'lr' AND value_float < 1e-3``).
"""
from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (BigInteger, Boolean, DateTime, Enum, Float, ForeignKey, Integer, MetaData,
                        String, Text, TypeDecorator, UniqueConstraint, Index)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from mpiopt.trial import StudyStatus, TrialStatus

NAME_LEN = 255
STATUS_LEN = 16


class UTCDateTime(TypeDecorator):
    """Stores naive UTC (SQLite keeps no zone) and hands back aware UTC datetimes."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        return value

    def process_result_value(self, value, dialect):
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value


def _status(enum_cls, name: str) -> Enum:
    """A portable enum column: VARCHAR on every backend, no CHECK constraint to migrate."""
    return Enum(enum_cls, name=name, native_enum=False, create_constraint=False,
                length=STATUS_LEN, values_callable=lambda e: [m.value for m in e])


# Named constraints let later batch migrations on SQLite drop or alter them by name.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class StudyModel(Base):
    __tablename__ = "studies"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN), unique=True)
    direction: Mapped[str] = mapped_column(String(STATUS_LEN))
    metric: Mapped[str] = mapped_column(String(NAME_LEN))
    spec_text: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(String(64))
    space_json: Mapped[str] = mapped_column(Text)
    status: Mapped[StudyStatus] = mapped_column(_status(StudyStatus, "studystatus"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # migration 0005: the folder of its checkpoints and kept models (mpiopt.artifacts)
    artifacts: Mapped[str | None] = mapped_column(Text)
    # migration 0008: the recovery files its last job would write to (JSON list; study_run)
    recovery: Mapped[str | None] = mapped_column(Text)

    trials: Mapped[list["TrialModel"]] = relationship(
        back_populates="study", cascade="all, delete-orphan", passive_deletes=True)


class JobModel(Base):
    """One job (one MPI launch) running a study (migration 0009; storage/_jobs.py): its
    lease, renewed by heartbeats, and how it ended. Several may be live at once when they
    joined the study with --join (shared); the rows of ended jobs stay for `mpiopt status`."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(
        ForeignKey("studies.id", ondelete="CASCADE"), index=True)
    token: Mapped[str] = mapped_column(String(32))
    shared: Mapped[bool] = mapped_column(Boolean)
    host: Mapped[str] = mapped_column(String(NAME_LEN))
    pid: Mapped[int] = mapped_column(Integer)
    launcher: Mapped[str | None] = mapped_column(String(NAME_LEN))    # "slurm 4242_3"
    # what goes before `mpiopt resume` to start the same layout: "mpiexec -n 9 " ("": one
    # process; NULL: a job of an older mpiopt, which did not say); migration 0010
    launch: Mapped[str | None] = mapped_column(String(NAME_LEN))
    groups: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    beat_at: Mapped[datetime] = mapped_column(UTCDateTime())
    period: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # NULL while live; "ended", "interrupted", "failed", "lost"
    end: Mapped[str | None] = mapped_column(String(STATUS_LEN))
    taken_by: Mapped[int | None] = mapped_column(Integer)     # the job that found it stale


class TrialModel(Base):
    __tablename__ = "trials"
    __table_args__ = (UniqueConstraint("study_id", "number"),
                      # the queue read on every dispatch (migration 0007)
                      Index("ix_trials_queue", "study_id", "status", "number"),
                      # create_trials(distinct=True) looks a parameter set up (migration 0009)
                      Index("ix_trials_params_key", "study_id", "params_key"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(
        ForeignKey("studies.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    status: Mapped[TrialStatus] = mapped_column(_status(TrialStatus, "trialstatus"), index=True)
    value: Mapped[float | None] = mapped_column(Float)
    value_std: Mapped[float | None] = mapped_column(Float)
    seed: Mapped[int | None] = mapped_column(BigInteger)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    group: Mapped[int | None] = mapped_column("group_index", Integer)
    host: Mapped[str | None] = mapped_column(String(NAME_LEN))
    rank: Mapped[int | None] = mapped_column(Integer)
    lost_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    duration: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Text)
    metrics_json: Mapped[str | None] = mapped_column(Text)
    # migration 0004: what it trained on, the suggestion's cost, fold/epoch spans (JSON)
    device: Mapped[str | None] = mapped_column(String(NAME_LEN))
    suggest_seconds: Mapped[float | None] = mapped_column(Float)
    spans_json: Mapped[str | None] = mapped_column(Text)
    # migration 0006: population-based training's lineage (NULL for other algorithms)
    member: Mapped[int | None] = mapped_column(Integer)
    round: Mapped[int | None] = mapped_column(Integer)
    parent: Mapped[int | None] = mapped_column(Integer)
    # migration 0009: the job that runs or ran it last (no foreign key: a job row may go
    # while its trials stay), and its parameter set's key for create_trials(distinct=True)
    job_id: Mapped[int | None] = mapped_column(Integer, index=True)
    params_key: Mapped[str | None] = mapped_column(String(64))

    study: Mapped[StudyModel] = relationship(back_populates="trials")
    params: Mapped[list["TrialParamModel"]] = relationship(
        cascade="all, delete-orphan", passive_deletes=True, order_by="TrialParamModel.id")
    folds: Mapped[list["TrialFoldModel"]] = relationship(
        cascade="all, delete-orphan", passive_deletes=True, order_by="TrialFoldModel.fold")
    intermediate: Mapped[list["TrialIntermediateModel"]] = relationship(
        cascade="all, delete-orphan", passive_deletes=True,
        order_by=lambda: [TrialIntermediateModel.fold, TrialIntermediateModel.epoch])


class TrialParamModel(Base):
    """One parameter value: exact text for reading back, a float for SQL filters."""

    __tablename__ = "trial_params"
    __table_args__ = (UniqueConstraint("trial_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    kind: Mapped[str] = mapped_column(String(STATUS_LEN))
    value_float: Mapped[float | None] = mapped_column(Float)
    value_text: Mapped[str] = mapped_column(Text)


class TrialFoldModel(Base):
    __tablename__ = "trial_folds"
    __table_args__ = (UniqueConstraint("trial_id", "fold"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), index=True)
    fold: Mapped[int] = mapped_column(Integer)
    value: Mapped[float | None] = mapped_column(Float)
    metrics_json: Mapped[str | None] = mapped_column(Text)


class TrialIntermediateModel(Base):
    """A fold's value after one of its epochs (migration 0011: the fold and the epoch
    within it, never one encoded step)."""

    __tablename__ = "trial_intermediate"
    __table_args__ = (
        UniqueConstraint("trial_id", "fold", "epoch"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), index=True)
    fold: Mapped[int] = mapped_column(Integer, server_default="0")
    epoch: Mapped[int] = mapped_column(Integer)     # at most mpiopt.storable.EPOCH_MAX
    value: Mapped[float | None] = mapped_column(Float)
