"""What a study may be called. Its name is part of file names (the artifact store's
`<db stem>-artifacts/<study>/`, the recovery file `<study>.mpiopt-recovery.jsonl`) and of
the commands mpiopt prints for copying (`resume with: mpiopt resume <study> --storage
...`), so it holds letters (any script), digits, `_`, `-` and `.` and starts with a letter,
a digit or `_`: `my study` made a resume command that fails (`mpiopt resume my study`),
`x;rm ...` one that runs another command, `a/b` a recovery file in a new subfolder,
`../x` an artifact store outside its folder, `-x` an option.

A name is at most 255 bytes in UTF-8 (the column's size, and a file name's on every file
system we know), but a file name holds the name and a suffix (`.mpiopt-recovery.jsonl`,
`.log`, `.html`): `file_stem` is the name where the name fits, else its head and a hash of
the whole, so every name the validator accepts works everywhere a name becomes a path."""
from __future__ import annotations

import hashlib
import re

NAME_LEN = 255          # bytes in UTF-8 (storage.models: the column's size)
STEM_BYTES = 200        # a file name's 255 bytes less the longest suffix we add, with room
_ALLOWED = re.compile(r"\w[\w.-]*")


def name_problem(name) -> str | None:
    """Why `name` cannot be a study's name, or None."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty name"
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > NAME_LEN:
        return f"is {size} bytes long in UTF-8; at most {NAME_LEN}"
    if not _ALLOWED.fullmatch(name):
        return ("may hold only letters, digits, '_', '-' and '.', and start with a letter, a "
                "digit or '_' (it names files and appears in the commands mpiopt prints)")
    return None


def file_stem(name: str) -> str:
    """The part of a file or folder name that stands for study `name`: the name itself up
    to STEM_BYTES bytes in UTF-8; a longer one is cut on a character boundary and ends in
    12 hex digits of its SHA-256, so two long names with one head stay two files, and the
    same name gives the same file in every job (resume finds what the run left)."""
    data = name.encode("utf-8", "surrogatepass")
    if len(data) <= STEM_BYTES:
        return name
    digest = hashlib.sha256(data).hexdigest()[:12]
    head = data[:STEM_BYTES - len(digest) - 1].decode("utf-8", "ignore")
    return f"{head}-{digest}"
