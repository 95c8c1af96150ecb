"""kill -9 of rank 0 (or of every process of the job) at random moments of a study under
mpiexec: how many evaluations ran a second time. Not a speed benchmark: the count behind
mpiopt.kept ("nothing finished is run twice"; tests/test_chaos.py has the
deterministic case).

Each study (one per seed) runs 0.15 s trials on two groups (`mpiexec -n 3`); six times
rank 0 is killed -9 a random 0.05-0.6 s after the job's next trial returned, the next job
resumes, and a last resume finishes the study. The objective appends each evaluation
that returns to a file, so a parameter set written there twice is a finished trial that
ran again; each is shown with how long before the kill it returned (negative: after it,
in the milliseconds before the launcher ended its group).

    python benchmarks/kill_sweep.py --seeds 13
    python benchmarks/kill_sweep.py --seeds 8 --in-process      # isolate: false
    python benchmarks/kill_sweep.py --seeds 8 --target job      # every process at once
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BIN, env, write_spec  # noqa: E402

OBJECTIVE = '''import math, os, time
def f(params):
    time.sleep(float(os.environ["SWEEP_SLEEP"]))
    x, y = params["x"], params["y"]
    fd = os.open(os.environ["SWEEP_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, f"{x!r} {y!r} {time.time()!r}\\n".encode())
    os.close(fd)
    return (y - 5.1 / (4 * math.pi ** 2) * x ** 2 + 5 / math.pi * x - 6) ** 2 + 10 * math.cos(x)
'''


def ranks_of(job) -> list[int]:
    """The job's ranks (children of hydra's proxy), rank 0 first."""
    def parent(pid):
        try:
            return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return -1

    def cmdline(pid):
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return b""

    from mpiopt.objective.processes import descendants

    return sorted(p for p in descendants(job.pid) if b"hydra_pmi_proxy" in cmdline(parent(p)))


def kill_all(job) -> None:
    """kill -9 of mpiexec and every process under it (the proxy and the ranks have process
    groups of their own)."""
    from mpiopt.objective.processes import descendants

    for pid in [job.pid, *descendants(job.pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def one_study(folder: Path, seed: int, isolate: bool, sleep: float, trials: int,
              target: str = "rank0") -> dict:
    log = folder / "evaluations"
    (folder / "f.py").write_text(OBJECTIVE)
    spec = write_spec(folder / "k.yaml", study={"name": "k"},
                      objective={"function": f"{folder / 'f.py'}:f", "direction": "minimize",
                                 "isolate": isolate},
                      search_space={"x": {"type": "real", "low": -5.0, "high": 10.0},
                                    "y": {"type": "real", "low": 0.0, "high": 15.0}},
                      search={"algorithm": "random", "trials": trials, "seed": seed})
    url = f"sqlite:///{folder / 'k.db'}"
    environ = env(SWEEP_LOG=str(log), SWEEP_SLEEP=str(sleep))
    rng, kills, hangs = random.Random(seed), [], 0
    command = [str(BIN / "mpiexec"), "-n", "3", str(BIN / "mpiopt"), "search", str(spec),
               "--storage", url]
    for round_ in range(6):
        job = subprocess.Popen(command + (["--resume"] if round_ else []), cwd=folder, env=environ,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
        before = len(log.read_text().splitlines()) if log.exists() else 0
        end = time.monotonic() + 60
        while job.poll() is None and time.monotonic() < end and \
                (not log.exists() or len(log.read_text().splitlines()) == before):
            time.sleep(0.02)
        if job.poll() is not None:
            break                                   # (the study finished first)
        time.sleep(rng.uniform(0.05, 0.6))
        kills.append(time.time())
        if target == "job":                 # (a node's loss: launcher, ranks, workers)
            kill_all(job)
        else:
            os.kill(ranks_of(job)[0], signal.SIGKILL)
        try:
            job.wait(60)
        except subprocess.TimeoutExpired:   # (a job that outlives its rank 0: counted, all
            kill_all(job)                   # of it killed, and the study goes on)
            job.wait(30)
            hangs += 1
    last = subprocess.run(command + ["--resume"], cwd=folder, env=environ, capture_output=True,
                          text=True, timeout=600)
    rows = [line.rsplit(" ", 1) for line in log.read_text().splitlines()]
    counts = collections.Counter(key for key, _ in rows)
    first = {}
    for key, at in rows:
        first.setdefault(key, float(at))
    again = [min((k - first[key] for k in kills if k >= first[key] - 1), default=None)
             for key, n in counts.items() if n > 1]
    return {"kills": len(kills), "evaluations": len(rows), "trials": len(counts),
            "again": again, "extra": len(rows) - len(counts), "status": last.returncode,
            "hangs": hangs,
            "tail": "" if last.returncode == 0 else last.stderr[-500:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=13)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--in-process", action="store_true", help="isolate: false")
    ap.add_argument("--sleep", type=float, default=0.15, help="seconds per trial")
    ap.add_argument("--trials", type=int, default=80)
    ap.add_argument("--target", choices=["rank0", "job"], default="rank0",
                    help="kill rank 0 (the launcher ends the rest), or every process at once")
    args = ap.parse_args(argv)
    kills = again = before_kill = 0
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        with tempfile.TemporaryDirectory(prefix="mpiopt-kill-sweep-") as tmp:
            got = one_study(Path(tmp), seed, not args.in_process, args.sleep, args.trials,
                            args.target)
        shown = ", ".join(f"{1000 * s:+.1f} ms" if s is not None else "?" for s in got["again"])
        print(f"seed {seed}: {got['kills']} kills, {got['evaluations']} evaluations of "
              f"{got['trials']} trials, {got['extra']} of them again"
              + (f" (returned before the kill by {shown})" if shown else "")
              + (f"; {got['hangs']} job(s) went on after rank 0's kill" if got["hangs"] else "")
              + (f"; last resume exit {got['status']}: {got['tail']}" if got["status"] else ""),
              flush=True)
        kills += got["kills"]
        again += got["extra"]
        before_kill += sum(1 for s in got["again"] if s is not None and s > 0)
    victim = "rank 0" if args.target == "rank0" else "the whole job"
    print(f"\n{kills} kills of {victim}: {again} evaluation(s) of trials that had already "
          f"returned ({before_kill} of those trials returned before the kill)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
