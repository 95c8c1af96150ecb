"""A study's records and their management: opening, creating and resuming a study
(opening), what a study may be called (names), a person's commands on whole studies
(manage), another study's results told first (warm_start), finished results kept on file
until the database surely has them (kept), and reading a study from Python (api).

The run of a study (start-up, signals, the end) is mpiopt.run; the database is
mpiopt.storage. This package imports nothing, so a group rank can use `kept` without
loading SQLAlchemy; it names StudyDirection, as optuna.study does (from mpiopt.trial).
"""
from mpiopt.trial import StudyDirection

__all__ = ["StudyDirection"]
