"""The commands mpiopt prints for a person to copy: how to resume a study, how to run its
failed trials again, and a storage URL as every printed line shows it (password masked).
Every closing line, `mpiopt status` and the report say them the same way."""
from __future__ import annotations

import shlex

from mpiopt.search import ALGORITHMS, traits


def resume_command(name: str, url: str, recovery=None, launch: str = "",
                   shared: bool = False) -> str:
    """The exact command that continues a study, as every closing line prints it; with the
    recovery file an outage left (`recovery`), named so that it is imported even where the
    database's record of it is lost with the job's last writes (study_run.open_run);
    `launch` goes first (`mpiexec -n 9 `: the same layout again, mpiopt.run.launcher);
    `shared`: the job was one of several (`--join`), and so is the next."""
    shown = shown_url(url)
    hint = "" if shown == url else " (with the password: set MPIOPT_STORAGE to the full URL)"
    kept = f" --recovery {shlex.quote(str(recovery))}" if recovery else ""
    # (quoted for the shell: a folder with a space in it made a command that fails pasted)
    join = " --join" if shared else ""
    return f"{launch}mpiopt resume {name} --storage {shlex.quote(shown)}{join}{kept}{hint}"


def after_failures(name: str, url: str, algorithm: str | None, launch: str = "") -> str:
    """What to do once the cause of a study's failed trials is mended: the closing line of
    the job they stopped and `mpiopt status` both say it."""
    if algorithm in ALGORITHMS and traits(algorithm).rounds:   # (--retry-failed is refused there)
        return ("a pbt study's failed rounds do not run again: once that is mended, start it "
                f"under a new study.name, or delete this one (mpiopt study delete {name} "
                f"--storage {shlex.quote(shown_url(url))})")
    return ("once that is mended, run them again with: "
            f"{resume_command(name, url, launch=launch)} --retry-failed")


def shown_url(url: str) -> str:
    """The URL with its password masked, for every line printed."""
    from mpiopt.storage import StorageURL

    return StorageURL.parse(url).shown
