"""Errors a user can cause. Each carries a one-line message; the CLI prints it and exits 2."""
import reprlib


class MpioptError(Exception):
    """Base of every error that is the user's input, not a bug: printed as one line."""

    exit_code = 2


class SpecError(MpioptError):
    """A spec file is unreadable or invalid. The message names the file and the field path."""


class DataError(MpioptError):
    """A training data file cannot be read. The message names the file (h5py's and
    NumPy's own do not)."""


class StorageError(MpioptError):
    """The results database is missing, unknown, or in a state we refuse to touch."""


class StorageUnavailable(StorageError):
    """A transient database failure (connection lost, server restarting, locked): worth
    retrying, unlike a StorageError about the data itself."""


class LeaseLost(StorageError):
    """This job's lease on its study was taken over by another job (this one was silent
    past the lease's period: stopped with Ctrl-Z, suspended, a frozen node): it must not
    write anything more, or the two jobs' records of the same trials would mix."""


class TrialTaken(StorageError):
    """Another job of a shared study restarted (or finished) the trial first: this job
    leaves it to that one."""


class DatabaseGone(StorageError):
    """The SQLite file this job opened was deleted or replaced by another file while it
    ran (storage/_sqlite_file.py): nothing more is written to it, and no retry can bring
    it back, so it is not a StorageUnavailable. The coordinator's storage wrapper
    (storage/resilient.py) keeps what could not be written in the recovery file, with the
    study as the job last saw it, and ends the job as for an outage given up."""


class TrialTaken(StorageError):
    """restart_trial on a trial that is no longer INTERRUPTED: another job claimed it
    first (it is RUNNING for that job) or it finished. The caller leaves it alone."""


class UnknownStudyError(StorageError):
    """A study name that the storage does not hold; the message lists the known ones."""


class ResumeError(MpioptError):
    """A study cannot be started or resumed as asked (exists, or its spec changed)."""


class StudyBusyError(ResumeError):
    """Another job holds the study's lease and its heartbeat is fresh (`lease` says who)."""

    def __init__(self, message: str, lease=None):
        super().__init__(message)
        self.lease = lease


class DuplicateStudyError(StorageError, ResumeError):
    """create_study on a name that exists: both a storage and a resume refusal."""


class SpaceError(ValueError):
    """An invalid dimension or parameter. ``field`` is the dotted place it concerns
    (``"lr.low"``), so the spec loader can prefix the file and section (and raise a
    SpecError: a ValueError here, because the space is also used as a plain library)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class TopologyError(MpioptError):
    """The MPI process count does not fit the requested group layout."""


class StopRequested(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGUSR1 arriving while user code runs in single-process mode
    (mpiopt.parallel.local): the study stops. Any other KeyboardInterrupt inside a trial is
    the objective's own doing (raised by it or a library), and only fails that trial."""


class TrialStopped(BaseException):
    """Ends a trial from outside its own logic: a deadline, a cancel, a prune.

    A BaseException, so a user's `except Exception:` inside an objective cannot swallow it.
    `status` is what the trial is recorded as; `value` the last reported value, if any.
    """

    status = "INTERRUPTED"

    def __init__(self, reason: str, epoch: int | None = None, value: float | None = None):
        super().__init__(reason)
        self.reason, self.epoch, self.value = reason, epoch, value


class Pruned(TrialStopped):
    """Raised inside an objective (or the trainer) when the pruner says stop."""

    status = "PRUNED"

    def __init__(self, epoch: int | None = None, value: float | None = None,
                 fold: int | None = None):
        where = f"epoch {epoch}" if not fold else f"fold {fold} epoch {epoch}"
        super().__init__(f"pruned at {where}", epoch, value)
        self.fold = fold


class TrialTimeout(TrialStopped):
    """The trial ran past search.trial_timeout: recorded FAILED, never run again."""

    status = "FAILED"


class TrialCancelled(TrialStopped):
    """The job is ending (signal, time limit + grace, another rank failed): INTERRUPTED,
    so the trial runs again on resume."""


def answer_word(answer):
    """A report's answer as plain data for another rank: True (go on), False (prune), or
    a TrialStopped as (its class name, its reason)."""
    if isinstance(answer, TrialStopped):
        return type(answer).__name__, answer.reason
    return bool(answer)


def answer_from_word(word, epoch: int | None = None, value: float | None = None):
    """The answer `answer_word` sent: True, False, or the TrialStopped to raise."""
    if isinstance(word, tuple):
        name, reason = word
        return globals()[name](reason, epoch, value)
    return word


class ArtifactStoreError(MpioptError):
    """The artifact store (storage.artifacts) cannot be written: not writable, no space
    left. Not the trial's fault: at start-up one line and exit 2; mid-study the trial is
    INTERRUPTED and the job stops in order (it runs again on resume from its last
    checkpoint)."""


# What a rank of a training communicator says when another rank's part failed (its own
# error is the cause to record: mpiopt.parallel.together prefers it).
OTHERS_FAILED = "other rank(s) of the training communicator failed"


# --------------------------------------------------------------------------- bounded texts
ERROR_TEXT_LIMIT = 4000
"""The most characters of an error's text that is stored, printed or rendered: a trial's
exception can carry megabytes (a whole array in its message), and one such text per
failure fills the log, the database and the report. `cut` keeps the head (the message)
and the tail (the innermost frames), which are what a reader looks at."""


def cut(text, limit: int = ERROR_TEXT_LIMIT):
    """`text` at most about `limit` characters: its head and its tail around a note that
    says how much was cut. None stays None; a short text is returned unchanged."""
    if text is None or len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} ... [{len(text) - 2 * half} characters cut] ... {text[-half:]}"


def first_line(text) -> str:
    """The first line of an error text, cut like the whole (a one-line message can be
    megabytes long too): what progress lines and summaries print."""
    if not text:
        return ""
    text = text.lstrip("\n")
    end = text.find("\n")
    return cut(text if end < 0 else text[:end])


_SHOWN = reprlib.Repr()
_SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlevel = 80, 80, 3
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = 8


def shown(value) -> str:
    """A user's value as it appears in a message: its repr, cut to about 80 characters and
    8 items per level without building the whole (a value from a spec can be as big as a
    YAML file makes it)."""
    return _SHOWN.repr(value)
