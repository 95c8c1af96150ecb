"""mpiopt.leftover_threads, in a process of its own: its hooks stop that process's
thread pools for good."""
from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import threading, time
from concurrent.futures import ThreadPoolExecutor
from mpiopt.leftover_threads import wait_for_threads

idle = ThreadPoolExecutor(2)       # idle workers: told to stop, as at a normal exit
idle.submit(time.sleep, 0.01).result()
threading.Thread(target=time.sleep, args=(0.2,), name="short").start()   # ends in the grace
threading.Thread(target=time.sleep, args=(3,), name="long").start()      # does not
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()    # never counted
print(",".join(t.name for t in wait_for_threads(1.0)))
"""


def test_only_threads_still_running_after_the_grace_are_left():
    # (the child itself then ends the Python way: its "long" thread is joined, 3 s)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "long"
