"""A model-based searcher at 64-1,000 groups, on a simulated clock (simulate.py --scale).

As under MPI (mpiopt/run/coordinating.py), a slow searcher (`auto`'s Gaussian process and
CMA-ES) is wrapped in the BackgroundSearcher, and the real Scheduler, searcher and storage
(SQLite) are driven by simulated groups whose trials last 10-60 s (uniform, drawn per
trial from a seeded generator). Three servers share the simulated clock:

- the groups: a trial ends at its start + its duration;
- the coordinator: each batch of results, and each poll while a group is idle (every
  TICK_S, as the MPI loop's longest sleep), costs the CPU time it really took (its
  SQLite writes included, their waits for the disk not: the other tables of simulate.py
  measure those in wall time); events wait while it is busy;
- the searcher's thread (the BackgroundSearcher built with threaded=False, its steps
  taken here through its public methods): each time it applies what was queued and asks,
  it is busy for the CPU time that really took (`cpu`, time.thread_time by default), and
  its suggestion joins the stock only then. Groups that finish meanwhile get a stocked suggestion, or
  wait, or get a random filler, by BackgroundSearcher's own rule, on the simulated clock.
  Its warm-up (the searcher's one-time costs) runs before second 0, where a real run's
  overlaps the groups' start-up (SimulatedThread._warm_up).

CPU time, not wall time, because the development machine is shared: its wall time
counts other people's work. The real thread and the loop share one interpreter (the GIL); here they run side by side,
which is exact while the coordinator's share is small (about 1 ms per trial).

Busy: training group-seconds / available group-seconds up to the last trial's start
(after it the budget has nothing more to give, so an idle group there is nobody's fault).
"""
from __future__ import annotations

import heapq
import statistics
import time

import numpy as np

from mpiopt.search.background import BackgroundSearcher

TICK_S = 5e-3          # the MPI loop polls at least this often (parallel/coordinator.py)


class SimulatedThread:
    """The BackgroundSearcher's thread on a simulated clock: the searcher runs without its
    thread (threaded=False) and `step`/`finish` do the thread's work through its public
    steps; an ask begun at `at` ends at `at` + its CPU seconds (applying the queue
    included)."""

    def __init__(self, searcher: BackgroundSearcher, cpu=time.thread_time):
        self.searcher = searcher
        self.cpu = cpu
        self.warm_up_cpu_s = self._warm_up()
        self.cpu_s = 0.0
        self._in_flight: tuple[list, float] | None = None   # (suggestions, CPU seconds)

    def _warm_up(self) -> float:
        """The searcher's warm-up, whole, before simulated second 0 (its CPU seconds,
        counted in no ask's): a real run's overlaps the groups' start-up (interpreters,
        imports, data: seconds; mpiopt.run.startup), and the simulated groups start
        ready."""
        begin = self.cpu()
        self.searcher.inner.warm_up()
        return self.cpu() - begin

    def step(self, at: float) -> float | None:
        """What the thread does when free at `at`: apply the queue, ask if the stock is
        short. Returns when the ask ends (None: it waits for the coordinator)."""
        s = self.searcher
        if not s.queued and not s.ask_due():
            return None
        begin = self.cpu()
        s.apply_queued()
        applied = self.cpu() - begin
        if not s.ask_due():
            self.cpu_s += applied
            return at + applied if applied > 0 else None
        begin = self.cpu()
        batch = s.begin_ask(at + applied)
        took = self.cpu() - begin
        self.cpu_s += applied + took
        self._in_flight = (batch, took)
        return at + applied + took

    def finish(self) -> None:
        """The ask in flight (if any) ends: its suggestions join the stock."""
        if self._in_flight is not None:
            batch, took = self._in_flight
            self._in_flight = None
            self.searcher.end_ask(batch, took)


def run(url: str, space, objective, algorithm: str, groups: int, trials: int,
        low: float = 10.0, high: float = 60.0, seed: int = 0, cpu=time.thread_time,
        horizon: float | None = None) -> dict:
    """Run `trials` trials of `objective` on `groups` simulated groups; the measures.
    horizon: stop at this simulated second instead (the measures cover [0, horizon]):
    where the searcher is the bottleneck, each simulated second costs a second of CPU."""
    from mpiopt.parallel.scheduler import Executor, Scheduler
    from mpiopt.run.coordinating import freeze_start_up_heap, thaw_heap
    from mpiopt.search import make_searcher
    from mpiopt.storage import open_storage

    now = {"t": 0.0}
    clock = lambda: now["t"]      # noqa: E731
    inner = make_searcher(algorithm, space, {}, seed, budget=trials, parallel=groups)
    searcher = (BackgroundSearcher(inner, groups, clock=clock, threaded=False) if inner.slow
                else inner)
    thread = SimulatedThread(searcher, cpu) if inner.slow else None
    wall, used = time.perf_counter(), time.process_time()
    with open_storage(url, create=True) as st:
        sid = st.create_study(f"{algorithm}-{groups}-{trials}", "minimize", "value", "sim",
                              "0" * 64, "{}")
        sched = Scheduler(study_id=sid, searcher=searcher, direction="minimize", budget=trials,
                          n_groups=groups, seed=seed, clock=clock, send_first=True,
                          ask_ahead=not inner.slow)
        sim = _Groups(sched, Executor(st, send=None, machine=sched, searcher=searcher),
                      objective, low, high, seed)
        freeze_start_up_heap()          # (as the real run does round its loop)
        try:
            sim.loop(thread, now, horizon)
        finally:
            thaw_heap()
    background = thread is not None
    fillers = searcher.fillers if background else 0
    return {"trials": len(sim.spans), "fillers": fillers, "finished": sim.finished,
            "filler share": fillers / max(1, len(sim.spans)),
            "model asks": searcher.asks if background else len(sim.spans),
            "searcher CPU s": thread.cpu_s if background else None,
            "busy": sim.busy(), "simulated s": sim.makespan,
            "mean wait s": statistics.fmean(sim.waits) if sim.waits else 0.0,
            "coordinator s": sim.coordinator_s, "wall s": time.perf_counter() - wall,
            "CPU s": time.process_time() - used}


class _Groups:
    """The groups and the coordinator on the simulated clock (see the module doc)."""

    def __init__(self, sched, executor, objective, low, high, seed):
        self.sched, self.executor, self.objective = sched, executor, objective
        self.rng = np.random.default_rng(seed)
        self.low, self.high = low, high
        self.ends: list[tuple] = []              # (end, group, trial id, params)
        self.held: dict[int, list] = {}          # group -> trials sent ahead, not begun
        self.running: set[int] = set()
        self.spans: list[tuple[float, float]] = []
        self.last_end: dict[int, float] = {}
        self.waits: list[float] = []
        self.coordinator_s = 0.0
        self.free = 0.0                          # the coordinator is busy until then
        self.horizon: float | None = None        # where the run was cut short
        self.finished = 0

    def act(self, at: float, event) -> None:
        """The coordinator handles `event` at `at`; the groups start what it dispatched
        when it is done."""
        from mpiopt.parallel.scheduler import Dispatch

        start = time.thread_time()
        actions = self.executor.collect(event)
        spent = time.thread_time() - start
        self.coordinator_s += spent
        self.free = at + spent
        for a in actions:
            if isinstance(a, Dispatch):
                self.held.setdefault(a.group, []).append(a)
                if a.group not in self.running:
                    self.launch(a.group, self.free)

    def launch(self, group: int, at: float) -> None:
        a = self.held[group].pop(0)
        d = float(self.rng.uniform(self.low, self.high))
        if group in self.last_end:
            self.waits.append(at - self.last_end[group])
        self.running.add(group)
        self.spans.append((at, at + d))
        heapq.heappush(self.ends, (at + d, group, a.trial.trial_id, a.trial.params))

    def loop(self, searcher: SimulatedThread | None, now: dict, horizon=None) -> None:
        from mpiopt.parallel.protocol import Result
        from mpiopt.parallel.scheduler import events as ev
        from mpiopt.trial import TrialStatus

        self.act(0.0, ev.Start())
        ask_end = searcher.step(self.free) if searcher else None
        while not self.sched.done:
            tick = self.free + TICK_S if len(self.sched.idle) > len(self.sched.stopped) else None
            due = min([t for t in (self.ends[0][0] if self.ends else None, tick) if t is not None],
                      default=None)
            if due is None and ask_end is None:
                raise RuntimeError("the simulation has nothing left to wait for")
            at = None if due is None else max(self.free, due)
            if horizon is not None and min(t for t in (at, ask_end) if t is not None) > horizon:
                self.horizon = horizon
                return
            if ask_end is not None and (at is None or ask_end <= at):
                now["t"] = ask_end
                searcher.finish()
                ask_end = searcher.step(ask_end)
                continue
            now["t"] = at
            batch = []
            while self.ends and self.ends[0][0] <= at:
                end, group, tid, params = heapq.heappop(self.ends)
                self.last_end[group] = end
                self.running.discard(group)
                if self.held.get(group):
                    self.launch(group, end)
                self.finished += 1
                batch.append((group, Result(tid, TrialStatus.COMPLETE,
                                            value=float(self.objective(params)))))
            self.act(at, ev.Results(tuple(batch)) if batch else ev.Tick())
            if searcher is not None and ask_end is None:
                ask_end = searcher.step(self.free)
        self.executor.collect(ev.Finish())

    @property
    def makespan(self) -> float:
        return self.horizon or max((e for _, e in self.spans), default=0.0)

    def busy(self) -> float:
        """Training group-seconds / available group-seconds up to the last start (or
        the horizon)."""
        window = self.horizon or max((s for s, _ in self.spans), default=0.0)
        if window <= 0:
            return 1.0
        trained = sum(min(e, window) - s for s, e in self.spans if s < window)
        return trained / (self.sched.n_groups * window)
