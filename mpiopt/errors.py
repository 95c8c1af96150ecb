"""Errors a user can cause. Each carries a one-line message; the CLI prints it and exits 2."""


class MpioptError(Exception):
    """Base of every error that is the user's input, not a bug: printed as one line."""

    exit_code = 2


class SpecError(MpioptError):
    """A spec file is unreadable or invalid. The message names the file and the field path."""


class StorageError(MpioptError):
    """The results database is missing, unknown, or in a state we refuse to touch."""


class UnknownStudyError(StorageError):
    """A study name that the storage does not hold; the message lists the known ones."""


class ResumeError(MpioptError):
    """A study cannot be started or resumed as asked (exists, or its spec changed)."""


class TopologyError(MpioptError):
    """The MPI process count does not fit the requested group layout."""
