"""Objectives for tests/test_slurm.py's batch jobs: every evaluation that runs to its end
leaves one line in a log, so a test can count how often each parameter set ran."""
import json
import os
import time


def logged(params):
    """Sleeps MPIOPT_TEST_SLEEP seconds (MPIOPT_TEST_SLEEP_REQUEUED in a job that Slurm has
    requeued, SLURM_RESTART_COUNT > 0), then appends the set, the job and the array task to
    the file MPIOPT_TEST_LOG (one short line: O_APPEND keeps the jobs' lines whole)."""
    restart = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    sleep = os.environ["MPIOPT_TEST_SLEEP_REQUEUED" if restart else "MPIOPT_TEST_SLEEP"]
    time.sleep(float(sleep))
    line = {"x": params["x"], "y": params["y"], "job": os.environ.get("SLURM_JOB_ID"),
            "task": os.environ.get("SLURM_ARRAY_TASK_ID"), "restart": restart}
    with open(os.environ["MPIOPT_TEST_LOG"], "a") as log:
        log.write(json.dumps(line) + "\n")
    return (params["x"] - 1.0) ** 2 + (params["y"] - 2.0) ** 2
