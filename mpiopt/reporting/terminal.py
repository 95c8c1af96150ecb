"""Whether a study's output reaches a person's terminal, and how wide it is.

Under `mpiexec` rank 0's stdout is a pipe to the launcher even when the launcher writes to
a terminal: `isatty()` alone would never let the status line redraw in the demo. So the
answer follows stdout through the launcher's own processes (MPICH's hydra_pmi_proxy and
mpiexec, Open MPI's prted/orted and mpirun) to the first one whose stdout is not a pipe
from such a launcher: a terminal there is a terminal here (the launcher forwards bytes
as they come, a carriage return included). A pipe into anything else (`| tee log`), a
file or a socket is not a terminal: the output is a log, and it gets plain lines.
"""
from __future__ import annotations

import os

# Processes that only forward a rank's output (their /proc comm, at most 15 characters)
LAUNCHERS = frozenset({"hydra_pmi_proxy", "mpiexec", "mpiexec.hydra", "mpirun", "orterun",
                       "orted", "prted", "prterun", "mpiexec.openmpi", "mpirun.openmpi"})
# How many launcher processes may sit between a rank and the terminal (rank -> proxy ->
# mpiexec is two)
MOST_HOPS = 4


def terminal_path(out) -> str | None:
    """The terminal device `out` ends up on (directly, or through a launcher), or None."""
    try:
        if out.isatty():
            return os.ttyname(out.fileno())
    except (AttributeError, ValueError, OSError):
        return None
    try:
        if out.fileno() != 1:
            return None
    except (AttributeError, ValueError, OSError):
        return None
    return _through_launchers(os.getpid())


def _through_launchers(pid: int) -> str | None:
    """Follow stdout from `pid` up through launcher parents (Linux's /proc; elsewhere None)."""
    for _ in range(MOST_HOPS + 1):
        target = _stdout_of(pid)
        if target is None:
            return None
        if target.startswith(("/dev/pts/", "/dev/tty")):
            return target
        if not target.startswith("pipe:"):
            return None                   # a file, a socket, /dev/null: a log
        pid = _parent(pid)
        if pid is None or _name(pid) not in LAUNCHERS:
            return None                   # a pipe into `tee`, a pager, a test: a log
    return None


def width(path: str | None, default: int = 100) -> int:
    """Columns of the terminal at `path` (a status line wider than that wraps, and a
    wrapped line cannot be redrawn in place)."""
    if path is None:
        return default
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return default
    try:
        return os.get_terminal_size(fd).columns or default
    except OSError:
        return default
    finally:
        os.close(fd)


def _stdout_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return None


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return ""


# ---- tables that fit the terminal --------------------------------------------------------
GAP = 2            # spaces between two columns
NARROWEST = 16     # a wrapped column narrower than this reads worse than its own lines
INDENT = 4         # a column given lines of its own is indented this much


def table_width(out) -> int | None:
    """How wide a table printed to `out` may be: on a terminal, $COLUMNS when set (as
    Python's shutil.get_terminal_size reads it: a person may ask for another width),
    else the terminal's own width. Anything else (a pipe, a file) gets None: no limit,
    each row on one line, as `ls` and `git` print to a pipe, because a program reads it
    (grep, a script, a test), and $COLUMNS, which shells and CI runners export to every
    child, describes a terminal that output does not reach."""
    try:
        if not out.isatty():
            return None
        columns = os.environ.get("COLUMNS", "").strip()
        if columns.isdigit() and int(columns) > 0:
            return int(columns)
        return os.get_terminal_size(out.fileno()).columns or None
    except (AttributeError, ValueError, OSError):
        return None


def fit_table(columns: list[str], cells: list[list[str]], width: int | None) -> list[str]:
    """The lines of an aligned table no wider than `width` (None: one line per row).

    Only columns with spaces in them (parameters, metrics, errors: words) are wrapped,
    and only between words; numbers, names and states are never cut. Where the wrapped
    columns fit beside the others at NARROWEST columns or more each, they wrap in place;
    where they do not (80 columns and a study's parameters), they go under the row, each
    on lines of its own, indented and named."""
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    if width is None or _total(widths) <= width:
        return [_line(row, widths) for row in [columns] + cells]
    loose = [i for i in range(len(columns)) if any(" " in row[i] for row in cells)]
    fixed = [i for i in range(len(columns)) if i not in loose]
    room = width - _total([widths[i] for i in fixed]) - GAP * len(loose)
    if loose and room >= NARROWEST * len(loose):
        shares = _shares(widths, loose, room)
        if all(shares[i] >= _longest_word(cells, i) for i in loose):
            return _wrapped_in_place(columns, cells, {**dict(enumerate(widths)), **shares})
    return _wrapped_below(columns, cells, widths, fixed, loose, width)


def _shares(widths: list[int], loose: list[int], room: int) -> dict[int, int]:
    """The loose columns' widths: `room` shared in proportion to their natural widths."""
    natural = sum(widths[i] for i in loose)
    return {i: max(NARROWEST, room * widths[i] // natural) for i in loose}


def _longest_word(cells: list[list[str]], i: int) -> int:
    return max((len(word) for row in cells for word in row[i].split()), default=0)


def _total(widths: list[int]) -> int:
    return sum(widths) + GAP * max(0, len(widths) - 1)


def _line(row: list[str], widths: list[int]) -> str:
    return (" " * GAP).join(v.ljust(w) for v, w in zip(row, widths)).rstrip()


def _wrap(text: str, width: int) -> list[str]:
    """Lines of at most `width` characters, broken between words; only a word longer
    than the whole line is cut (nothing else could show it)."""
    import textwrap

    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]


def _wrapped_in_place(columns, cells, widths: dict[int, int]) -> list[str]:
    """Every column at its width (each loose one no narrower than its longest word);
    each row takes as many lines as its longest wrapped cell."""
    widths = [widths[i] for i in range(len(columns))]
    lines = [_line(columns, widths)]
    for row in cells:
        parts = [_wrap(v, widths[i]) if " " in v else [v] for i, v in enumerate(row)]
        for k in range(max(len(p) for p in parts)):
            lines.append(_line([p[k] if k < len(p) else "" for p in parts], widths))
    return lines


def _wrapped_below(columns, cells, widths, fixed, loose, width) -> list[str]:
    """The fixed columns as a table; under each row, each loose column that has a value,
    named, on lines of its own wrapped to the width."""
    head = [columns[i] for i in fixed]
    fixed_widths = [widths[i] for i in fixed]
    lines = [_line(head, fixed_widths)]
    for row in cells:
        lines.append(_line([row[i] for i in fixed], fixed_widths))
        for i in loose:
            if row[i] in ("", "-"):
                continue
            name = f"{' ' * INDENT}{columns[i]}: "
            body = _wrap(row[i], max(NARROWEST, width - len(name)))
            lines += [name + body[0]] + [" " * len(name) + more for more in body[1:]]
    return lines
