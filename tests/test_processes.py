"""mpiopt.processes: what a rank ends at its exit (programs its trials left running)."""
from __future__ import annotations

import subprocess
import sys

from mpiopt.processes import descendants, end_started_since


def test_only_processes_started_after_the_snapshot_are_ended():
    kept = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    before = descendants()
    left = subprocess.Popen(["sh", "-c", "sleep 60 & wait"])    # a child with a child
    try:
        grandchild_seen = False
        for _ in range(100):
            now = descendants()
            grandchild_seen = len(now - before) >= 2
            if grandchild_seen:
                break
            subprocess.run(["sleep", "0.02"])
        assert kept.pid in before and left.pid in now and grandchild_seen
        assert end_started_since(before) >= 2
        assert left.wait(5) == -9 and kept.poll() is None
        assert not {p for p in descendants() - before if _alive(p)}
    finally:
        kept.kill()
        kept.wait()
        left.kill()
        left.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
