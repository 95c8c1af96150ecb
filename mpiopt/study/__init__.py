"""A study's records and their management: opening, creating and resuming a study
(opening), a person's commands on whole studies (manage), another study's results told
first (warm_start), and reading a study from Python (api). What a study may be called is
mpiopt.names; the results kept on file until the database has them, mpiopt.kept.

The run of a study (start-up, signals, the end) is mpiopt.run; the database is
mpiopt.storage. This package names StudyDirection, as optuna.study does (from mpiopt.trial).
"""
from mpiopt.trial import StudyDirection

__all__ = ["StudyDirection"]
