"""What a running study prints: a line per finished trial, a status line while trials
run, and a summary at the end.

Each finished trial's line carries the whole state (done/budget, running, failed, best so
far, elapsed time, trials per minute, ETA), so the output of a batch job read hours later
still tells the story. Between those lines a trial that runs long shows it is alive (its
epoch and last value, from the per-epoch reports; "setting up" before its group's first
report, when the group imports its framework and reads its data): on a terminal, one
status line redrawn in place (also through mpiexec: mpiopt.reporting.terminal); in a
log, a plain line after QUIET_S of silence, then at doubling intervals (a long trial adds
a handful of lines to a log, not one per epoch). --quiet silences it all.

The shells (parallel.coordinator, parallel.local) tell it what happens besides finished
trials: trial_started(number, group) when a trial goes to a group, epoch(number, epoch,
value, fold) for each report, tick() while they wait (on a terminal a thread of its own ticks
too, for the single-process loop that waits inside the trial). Each is a no-op until
called, so a shell that calls none of them gets the finished-trial lines alone.
"""
from __future__ import annotations

import atexit
import functools
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass

from mpiopt.durations import format_duration
from mpiopt.errors import first_line
from mpiopt.reporting.terminal import terminal_path, width
from mpiopt.trial import FrozenTrial, Step, TrialStatus, resume_note, step_text

# On a terminal, the status line is redrawn at most this often
REDRAW_S = 0.5
# In a log, a plain status line after this long with no output, then after twice as long
# each time, up to QUIET_MAX_S; a finished trial's line starts it over
QUIET_S = 15.0
QUIET_MAX_S = 600.0
# A plain status line names at most this many running trials (the longest running first)
PLAIN_RUNS = 8
# On a terminal, a thread calls tick() this often while trials run: in single-process mode
# the loop is inside the trial and cannot (a Keras study's first trial imports TensorFlow
# for seconds before its first epoch), and the clocks on the line would stand still
KEEP_TIME_S = 1.0


def _locked(method):
    """One caller at a time: the shell's thread, the ticking thread and the single-process
    watch thread (it prints the summary of a trial it gives up) may all write lines."""
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return locked


def format_params(params: dict) -> str:
    return " ".join(f"{k}={_fmt(v)}" for k, v in params.items())


def _pareto(sched):
    """The scheduler's front tracker when the study has several objectives, else None."""
    front = getattr(sched, "front", None)
    return front if front is not None and len(front.objectives) > 1 else None


def _where(run: _Run) -> str:
    return f"trial {run.number}" + ("" if run.group is None else f" (group {run.group})")


def _rate(per_minute: float) -> str:
    """3 significant digits, never an exponent: '0.5', '12.3', '1554'."""
    return f"{per_minute:.0f}" if per_minute >= 100 else f"{per_minute:.3g}"


def _seconds(s: float) -> str:
    """A running clock in whole seconds: '0s', '42s', '1h2m5s'."""
    return format_duration(max(0, round(s)))


def _fmt(v) -> str:
    return f"{v:.5g}" if isinstance(v, float) else str(v)


@dataclass
class _Run:
    """A trial sent to a group. `since` is None while it waits behind the group's running
    trial (sent ahead); `first`: the group's first trial in this job, which sets it up."""

    number: int
    group: int | None
    since: float | None
    first: bool
    epoch: Step | None = None
    value: float | None = None


class Progress:
    def __init__(self, budget: int, out=None, quiet: bool = False, terminal: bool | None = None,
                 columns: int | None = None, clock=time.monotonic, keep_time: bool | None = None,
                 folds: int = 1):
        """`terminal`: redraw a status line in place (None: find out from `out`);
        `columns`: its width (None: the terminal's); `keep_time`: a thread ticks on a
        terminal while trials run (None: on a terminal); `folds`: a trial's folds (a
        running trial is then at 'fold F epoch E': its epochs count from 1 in each)."""
        self.budget, self.quiet, self.clock = budget, quiet, clock
        self.folds = folds
        self._lock = threading.RLock()
        self._ticker: threading.Thread | None = None
        self._stop_ticking = threading.Event()
        self.out = out or sys.stdout
        tty = terminal_path(self.out) if terminal is None else None
        self.terminal = bool(tty) if terminal is None else terminal
        self.columns = columns or width(tty)
        self.runs: dict[int, _Run] = {}
        self.groups: set = set()        # groups that got a trial in this job
        self.finished_here = 0          # trials finished in this job (the rate's count)
        self.shown = ""                 # the status line now on the terminal
        self.keep_time = self.terminal if keep_time is None else keep_time
        self.counted: set[int] = set()  # ids of the trials the scheduler counted
        self.start()

    def start(self) -> None:
        """Start the clocks: the coordinator's CPU is measured from here (imports excluded)."""
        self.started = self.clock()
        self.cpu_started = time.process_time()
        self.last_output = self.last_draw = self.started
        self.quiet_s = QUIET_S

    @_locked
    def say(self, text: str) -> None:
        if not self.quiet:
            self._clear()
            print(text, file=self.out, flush=True)
            self.last_output = self.clock()
            self.last_draw = float("-inf")     # drawn again at the next tick, after the
            #                                    other lines that may follow this one

    # ---- what the shells tell besides finished trials (each optional) ----
    @_locked
    def trial_started(self, number: int, group: int | None) -> None:
        """Trial `number` went to `group` (it waits there when the group is still busy)."""
        mine = [r for r in self.runs.values() if r.group == group]
        for waiting in (r for r in mine if r.since is None):
            del self.runs[waiting.number]     # (withdrawn: a group holds one trial ahead)
        busy = any(r.since is not None for r in mine)
        self.runs[number] = _Run(number, group, None if busy else self.clock(),
                                 group not in self.groups)
        self.groups.add(group)
        self._keep_time()
        self.tick()

    @_locked
    def epoch(self, number: int, epoch: int, value: float, fold: int = 0) -> None:
        """Trial `number` reported `value` after `epoch` of `fold`: it is alive, and where
        it is."""
        run = self.runs.get(number)
        if run is None:
            return
        if run.since is None:
            run.since = self.clock()
        run.epoch, run.value = Step(fold, epoch), value
        self.tick()

    @_locked
    def tick(self) -> None:
        """Redraw the status line when it is due (a terminal), or print it after a silence
        (a log). Cheap: the shells call it on every idle wake-up."""
        if self.quiet or not self.runs:
            return
        now = self.clock()
        if self.terminal:
            if now - self.last_draw >= REDRAW_S or not self.shown:
                self._draw()
        elif now - self.last_output >= self.quiet_s:
            self._clear()
            print(f"  ... {self._status(now, PLAIN_RUNS)}", file=self.out, flush=True)
            self.last_output = now
            self.quiet_s = min(QUIET_MAX_S, 2 * self.quiet_s)

    def _keep_time(self) -> None:
        """Start the ticking thread (once; on a terminal only, so a batch job has none)."""
        if self._ticker is not None or not self.keep_time or self.quiet:
            return
        self._ticker = threading.Thread(target=self._keep_ticking, name="mpiopt-progress",
                                        daemon=True)
        self._ticker.start()
        atexit.register(self.stop_ticking)    # (before the interpreter's end: a daemon
        #                                       thread writing then can abort the process)

    def _keep_ticking(self) -> None:
        while not self._stop_ticking.wait(KEEP_TIME_S):
            try:
                self.tick()
            except (OSError, ValueError):     # (stdout closed: nothing more to show)
                return

    def stop_ticking(self) -> None:
        """End the ticking thread (the summary does; safe to call again)."""
        self._stop_ticking.set()
        ticker = self._ticker
        if ticker is not None and ticker is not threading.current_thread():
            ticker.join(timeout=5)

    def _status(self, now: float, most: int | None = None) -> str:
        """'12s elapsed, 2 running: ...', the longest running first; the trials that set
        up their groups (no report yet from a group's first trial: the framework's import,
        the data, the model, which took 27 s of the demo's first 35 on a busy machine)
        named together."""
        running = sorted((r for r in self.runs.values() if r.since is not None),
                         key=lambda r: r.since)
        setting = [r for r in running if r.first and r.epoch is None]
        others = [r for r in running if not (r.first and r.epoch is None)]
        parts = []
        if setting:
            names = ", ".join(_where(r) for r in setting[:most])
            more = f" and {len(setting) - most} more" if most and len(setting) > most else ""
            parts.append(f"{names}{more} setting up (a group's first trial: imports, data, "
                         f"model), {_seconds(now - setting[0].since)}")
        parts += [self._run_text(r, now) for r in others[:most]]
        if most is not None and len(others) > most:
            parts.append(f"{len(others) - most} more")
        return (f"{_seconds(now - self.started)} elapsed, {len(running)} running: "
                + "; ".join(parts))

    def _run_text(self, run: _Run, now: float) -> str:
        doing = ("starting" if run.epoch is None
                 else f"{step_text(run.epoch, self.folds)} value={_fmt(run.value)}")
        return f"{_where(run)} {doing}, {_seconds(now - run.since)}"

    def _draw(self) -> None:
        """The status line, in place, cut to the terminal's width (a wrapped line could
        not be redrawn)."""
        if self.quiet or not self.terminal:
            return
        now = self.clock()
        self.last_draw = now
        text = self._status(now) if any(r.since is not None for r in self.runs.values()) else ""
        if len(text) > self.columns - 1:
            text = text[:max(0, self.columns - 4)] + "..."
        if text != self.shown:
            self.out.write("\r" + text + "\x1b[K")
            self.out.flush()
            self.shown = text

    def _clear(self) -> None:
        if self.shown:
            self.out.write("\r\x1b[K")
            self.shown = ""

    def _finished(self, trial: FrozenTrial) -> None:
        """Forget a finished trial; a trial sent ahead to its group starts now."""
        gone = self.runs.pop(trial.number, None)
        self.finished_here += 1
        self.quiet_s = QUIET_S
        group = trial.group if gone is None else gone.group
        waiting = [r for r in self.runs.values() if r.group == group and r.since is None]
        busy = any(r.group == group and r.since is not None for r in self.runs.values())
        if waiting and not busy:
            min(waiting, key=lambda r: r.number).since = self.clock()

    def pace(self, done: int) -> str:
        """Elapsed time, trials per minute in this job, and the time left at that rate."""
        elapsed = self.clock() - self.started
        text = f"elapsed {_seconds(elapsed)}"
        if self.finished_here and elapsed > 0:
            rate = self.finished_here / elapsed
            text += f", {_rate(60 * rate)}/min"
            left = (self.budget or 0) - done
            if left > 0:
                text += f", ETA {_seconds(left / rate)}"
        return text

    @_locked
    def trial_finished(self, trial: FrozenTrial, sched, other: bool = False) -> None:
        """`other`: another job's trial (a shared study): counted, not one of this job's
        groups."""
        if not other:
            self._finished(trial)
        self.counted.add(trial.id)
        if self.quiet:
            return
        counts = sched.counts
        done = sched.finished
        width_ = len(str(self.budget))
        value = "-" if trial.value is None else f"{trial.value:.6g}"
        where = f"job {trial.job!s:<3}" if other else f"group {trial.group!s:<3}"
        line = (f"[{done:>{width_}}/{self.budget}] trial {trial.number:<4} {where} "
                f"{format_duration(trial.duration or 0):>7}  {trial.status.value:<8} value={value:<12}")
        front = _pareto(sched)
        if front is not None:
            line += f" front={len(front.front)} hv={front.hypervolume():.6g}"
        elif sched.best is not None:
            line += f" best={sched.best.value:.6g} (#{sched.best.number})"
        line += f"  running={len(sched.running)} failed={counts[TrialStatus.FAILED]}"
        line += f"  {self.pace(done)}"
        self.say(line)
        if trial.status is TrialStatus.FAILED and trial.error:
            self.say(f"    error: {first_line(trial.error)}")
        elif trial.status is TrialStatus.PRUNED and trial.error:
            self.say(f"    {first_line(trial.error)}")      # where, and against what
        resumed = resume_note(trial.spans)
        if resumed:                  # (it ran again after its job ended: not from scratch)
            self.say(f"    {resumed}")
        if front is not None:
            if any(t.number == trial.number for t, _ in front.front):
                self.say(f"    on the front: {format_params(trial.params)}")
        elif sched.best is not None and sched.best.number == trial.number:
            self.say(f"    new best: {format_params(sched.best.params)}")

    @_locked
    def summary(self, sched, status, kept: dict | None = None) -> None:
        """`kept`: {trial id: status} of the results a storage outage left in the recovery
        file (storage.resilient.Resilient.kept_results); those the scheduler never counted
        (their write failed for good) are finished too, and counted here."""
        self.stop_ticking()
        if self.quiet:
            return
        self.runs.clear()
        self._clear()
        c, finished = _with_kept(sched, kept or {}, self.counted)
        parts = [f"{c[s]} {s.value.lower()}" for s in TrialStatus if c[s] and s.is_finished()]
        wall = self.clock() - self.started
        rate = (f", {_rate(60 * self.finished_here / wall)} trials/min"
                if self.finished_here and wall > 0 else "")
        self.say(f"study {status.value.lower()}: {finished} trials ({', '.join(parts) or 'none'}) "
                 f"in {format_duration(wall)}{rate}")
        if sched.message:
            self.say(sched.message)
        finite = getattr(sched, "untried", None)
        if finite is not None and finite.replaced:
            self.say(f"{finite.replaced} suggestion(s) repeated a parameter set the study had "
                     "tried and were replaced by untried ones (a finite space: each set once)")
        fillers = getattr(sched.searcher, "fillers", 0)
        if fillers:
            self.say(f"{fillers} trial(s) got a random point because the model was still busy "
                     "(results came faster than it could suggest; docs: 'Coordinator and groups')")
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


def _with_kept(sched, kept: dict, counted: set) -> tuple[dict, int]:
    """(counts by status, finished trials) of the scheduler, with the kept results it
    never counted added."""
    counts, finished = Counter(sched.counts), sched.finished
    for trial_id, state in kept.items():
        if trial_id not in counted:
            state = TrialStatus(state)
            counts[state] += 1
            finished += state.counts()
    return counts, finished
