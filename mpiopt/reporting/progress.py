"""What a running study prints: a line per finished trial and a summary at the end.

Each line carries the whole state (done/budget, running, failed, best so far), so the
output of a batch job read hours later still tells the story. --quiet silences it.
"""
from __future__ import annotations

import sys
import time

from mpiopt.durations import format_duration
from mpiopt.errors import first_line
from mpiopt.trial import FrozenTrial, TrialStatus


def format_params(params: dict) -> str:
    return " ".join(f"{k}={_fmt(v)}" for k, v in params.items())


def _pareto(sched):
    """The scheduler's front tracker when the study has several objectives, else None."""
    front = getattr(sched, "front", None)
    return front if front is not None and len(front.objectives) > 1 else None


def _fmt(v) -> str:
    return f"{v:.5g}" if isinstance(v, float) else str(v)


class Progress:
    def __init__(self, budget: int, out=None, quiet: bool = False):
        self.budget, self.quiet = budget, quiet
        self.out = out or sys.stdout
        self.shown: set[int] = set()      # ids of the trials the scheduler counted
        self.start()

    def start(self) -> None:
        """Start the clocks: the coordinator's CPU is measured from here (imports excluded)."""
        self.started = time.monotonic()
        self.cpu_started = time.process_time()

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.out, flush=True)

    def trial_finished(self, trial: FrozenTrial, sched) -> None:
        self.shown.add(trial.id)
        if self.quiet:
            return
        counts = sched.counts
        done = sched.finished
        width = len(str(self.budget))
        value = "-" if trial.value is None else f"{trial.value:.6g}"
        line = (f"[{done:>{width}}/{self.budget}] trial {trial.number:<4} group {trial.group:<3} "
                f"{format_duration(trial.duration or 0):>7}  {trial.status.value:<8} value={value:<12}")
        front = _pareto(sched)
        if front is not None:
            line += f" front={len(front.front)} hv={front.hypervolume():.6g}"
        elif sched.best is not None:
            line += f" best={sched.best.value:.6g} (#{sched.best.number})"
        line += f"  running={len(sched.running)} failed={counts[TrialStatus.FAILED]}"
        self.say(line)
        if trial.status is TrialStatus.FAILED and trial.error:
            self.say(f"    error: {first_line(trial.error)}")
        if front is not None:
            if any(t.number == trial.number for t, _ in front.front):
                self.say(f"    on the front: {format_params(trial.params)}")
        elif sched.best is not None and sched.best.number == trial.number:
            self.say(f"    new best: {format_params(sched.best.params)}")

    def summary(self, sched, status, kept: dict | None = None) -> None:
        """`kept`: {trial id: status} of the results a storage outage left in the recovery
        file (storage.resilient.Resilient.kept_results); those the scheduler never counted
        (their write failed for good) are finished too, and counted here."""
        if self.quiet:
            return
        c = dict(sched.counts)
        finished = sched.finished
        for trial_id, state in (kept or {}).items():
            if trial_id not in self.shown:
                state = TrialStatus(state)
                c[state] += 1
                finished += state.counts()
        parts = [f"{c[s]} {s.value.lower()}" for s in TrialStatus if c[s] and s.is_finished()]
        wall = time.monotonic() - self.started
        self.say(f"study {status.value.lower()}: {finished} trials ({', '.join(parts) or 'none'}) "
                 f"in {format_duration(wall)}")
        if sched.message:
            self.say(sched.message)
        finite = getattr(sched, "untried", None)
        if finite is not None and finite.replaced:
            self.say(f"{finite.replaced} suggestion(s) repeated a parameter set the study had "
                     "tried and were replaced by untried ones (a finite space: each set once)")
        fillers = getattr(sched.searcher, "fillers", 0)
        if fillers:
            self.say(f"{fillers} trial(s) got a random point because the model was still busy "
                     "(results came faster than it could suggest; README: 'No group waits')")
        cpu = time.process_time() - self.cpu_started
        self.say(f"coordinator: {cpu:.2f}s CPU over {wall:.2f}s wall ({100 * cpu / max(wall, 1e-9):.1f}% of a core)")
        front = _pareto(sched)
        if front is not None:
            names = ", ".join(n for n, _ in front.objectives)
            self.say(f"Pareto front ({names}): {len(front.front)} trial(s), hypervolume "
                     f"{front.hypervolume():.6g}; `mpiopt best` lists them")
        elif sched.best is not None:
            self.say(f"best value {sched.best.value:.6g} (trial {sched.best.number}): "
                     f"{format_params(sched.best.params)}")
