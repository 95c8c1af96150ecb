"""What a study may be called. Its name is part of file names (the artifact store's
`<db stem>-artifacts/<study>/`, the recovery file `<study>.mpiopt-recovery.jsonl`) and of
the commands mpiopt prints for copying (`resume with: mpiopt resume <study> --storage
...`), so it holds letters (any script), digits, `_`, `-` and `.` and starts with a letter,
a digit or `_`: `my study` made a resume command that fails (`mpiopt resume my study`),
`x;rm ...` one that runs another command, `a/b` a recovery file in a new subfolder,
`../x` an artifact store outside its folder, `-x` an option."""
from __future__ import annotations

import re

NAME_LEN = 255          # (storage.models: the column's size)
_ALLOWED = re.compile(r"\w[\w.-]*")


def name_problem(name) -> str | None:
    """Why `name` cannot be a study's name, or None."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty name"
    if len(name) > NAME_LEN:
        return f"is {len(name)} characters long; at most {NAME_LEN}"
    if not _ALLOWED.fullmatch(name):
        return ("may hold only letters, digits, '_', '-' and '.', and start with a letter, a "
                "digit or '_' (it names files and appears in the commands mpiopt prints)")
    return None
