"""What the database can hold of what a trial sends, checked where the trial runs.

A trial sends per-epoch reports (an epoch and a value), its result's metrics (names and
numbers) and, when it fails, an error text; the coordinator writes them. A value the
database cannot take (an epoch past its INTEGER column, a metric name that is no text,
an error text with a character UTF-8 cannot encode) failed the coordinator's write: the
job ended, its healthy trials with it, and every resume ran the trial into the same
failure. Checked in the trial's own process, such a value fails its trial alone with one
line that names it, and the study goes on; an error text is made storable instead (it
must reach the record, since it says why the trial failed).

The limits are the narrowest of the databases mpiopt writes (SQLite and PostgreSQL), so
a study can move between them (`mpiopt study copy`) whatever it holds. No SQL
here: a trial's process imports this, never the database's modules.
"""
from __future__ import annotations

import unicodedata

from mpiopt.names import NAME_LEN

# The per-epoch values' epoch column is an INTEGER: 32 bits on PostgreSQL (64 on SQLite)
EPOCH_MAX = 2**31 - 1


def epoch_problem(epoch: int) -> str | None:
    """Why `epoch` (an int) cannot be a per-epoch value's epoch, or None."""
    if epoch < 0:
        return f"must be >= 0, got {epoch}"
    if epoch > EPOCH_MAX:
        return f"must be at most {EPOCH_MAX} (the database's INTEGER column), got {_short(epoch)}"
    return None


def metric_name_problem(name) -> str | None:
    """Why `name` cannot name a stored metric, or None. A name is text (a JSON key: a
    number would come back as a string, a tuple cannot be written), not empty, at most
    NAME_LEN bytes in UTF-8 like every other name the database keeps, and without
    control characters or lone surrogates (which UTF-8 and the tables cannot show)."""
    if not isinstance(name, str):
        return f"must be text, got {type(name).__name__}"
    if not name:
        return "must not be empty"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "holds a lone surrogate, which UTF-8 cannot encode"
    if size > NAME_LEN:
        return f"is {size} bytes long in UTF-8; at most {NAME_LEN}"
    if any(unicodedata.category(c) == "Cc" for c in name):
        return "holds a control character (a newline, a tab, NUL)"
    return None


def storable_text(text: str | None) -> str | None:
    """`text` as every database and the UTF-8 files take it: a NUL (PostgreSQL's text
    refuses it) and a lone surrogate (UTF-8 cannot encode one: a file name's undecodable
    bytes in an exception's message) written as escapes; any other text unchanged."""
    if text is None:
        return None
    text = str(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")


def _short(x) -> str:
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."
