"""One way to show a duration everywhere: tables, progress lines, status, errors."""
from __future__ import annotations


def format_duration(seconds: float | None) -> str:
    """83 -> '1m23s', 600 -> '10m', 3725 -> '1h2m5s', 3 -> '3s', 0.25 -> '0.25s',
    0.0042 -> '4.2ms', None -> '-'."""
    if seconds is None:
        return "-"
    if 0 < seconds < 0.1:
        return f"{seconds * 1000:.2g}ms"
    if seconds < 10 and seconds != int(seconds):
        return f"{seconds:.2g}s"
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    parts = [f"{h}h" if h else "", f"{m}m" if m else "", f"{s}s" if s or not (h or m) else ""]
    return "".join(parts)
