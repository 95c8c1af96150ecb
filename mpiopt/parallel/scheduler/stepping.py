"""How the scheduler handles an event without ever waiting inside a handler.

A handler changes state and gives instructions. Where what comes next depends on an
instruction's outcome (the records a create made, the queue it read, a suggestion), the
handler gives that instruction last (`Loop.awaits`) and leaves what follows as steps:
plain (method, *arguments) tuples (`Loop.then`), state the log and `validate_state` can
see. The outcome comes back as the next event (events.Completion): its callback makes the state
change, and the steps left run on, until the next instruction to wait for or none. So
the order of the effects is the order of the steps, and one run of the executor carries
out one event's effects, its completions included, before the next event.

A failed instruction (events.WriteFailed) drops the plain steps: what was planned after
it does not happen. The undo given with the awaited instruction puts back what was done
expecting it (a re-run popped from its queue), and steps marked `ALWAYS` (Release after
Hold, a counter put back) or `ON_FAILURE` (results written quietly before the error goes
on up) still run, in order: the executor raises the error once they are carried out.

Every event handled is kept with the instructions it gave in `stimulus_log` (the last
LOG_SIZE), so a failing test prints how the machine got where it is; with
`validate=True` (the tests') `validate_state()` checks the invariants after each event.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from mpiopt.parallel.scheduler import events as ev

LOG_SIZE = 500         # events kept in stimulus_log: enough to replay a test's whole run
PLAIN, ALWAYS, ON_FAILURE = "plain", "always", "on failure"


@dataclass
class Step:
    """What runs next: `fn(*args)`; `when`: PLAIN, ALWAYS or ON_FAILURE (module doc)."""
    fn: Callable
    args: tuple = ()
    when: str = PLAIN


@dataclass
class Awaited:
    """The instruction whose completion comes next, what to do with it, and the undo."""
    instruction: Any
    on_done: Callable | None
    undo: Callable | None


class Loop:
    """How the machine takes events (module doc): the inbox, the steps, the instruction
    awaited, the log. The Scheduler builds one and gives it to every part; a part plans
    with `then`, gives with `emit` and `awaits`, and holds no other part."""

    def __init__(self, handlers: dict, check=None):
        self.handlers = handlers      # event type -> the machine's handler
        self.check = check            # called after each event (validate_state), or None
        self._inbox: deque = deque()
        self._steps: deque[Step] = deque()
        self._awaiting: Awaited | None = None
        self._failed = False          # an instruction failed: only cleanup steps run
        self._out: list = []
        self.stimulus_log: deque = deque(maxlen=LOG_SIZE)

    def handle(self, *events) -> list:
        """Take these events in order; returns the instructions to carry out, in order.
        The last one may be awaited: its completion is then the next event, and events
        given meanwhile wait for it."""
        self._inbox.extend(events)
        out = self._out = []
        while self._inbox:
            if self._awaiting is not None and not isinstance(self._inbox[0], ev.Completion):
                break
            event = self._inbox.popleft()
            start = len(out)
            try:
                self._take(event)
                self._run_steps()
            except BaseException:       # the machine's own failure: the job ends, and
                self._steps.clear()     # what it planned must not run on its wind-down
                self._awaiting = None
                self._inbox.clear()
                raise
            self.stimulus_log.append((event, tuple(out[start:])))
            if self.check is not None:
                self.check()
        return out

    def _take(self, event) -> None:
        if isinstance(event, ev.Completion):
            self._completed(event)
        else:
            self.handlers[type(event)](event)

    def _completed(self, event) -> None:
        awaited, self._awaiting = self._awaiting, None
        if isinstance(event, ev.WriteFailed):     # (it, or one given before it)
            if awaited is not None and awaited.undo is not None:
                awaited.undo()
            self._steps = deque(s for s in self._steps if s.__class__ is Step and s.when != PLAIN)
            self._failed = True
        elif awaited is None or awaited.instruction is not event.instruction:
            raise RuntimeError(f"scheduler: {type(event).__name__} for an instruction it did "
                               f"not wait for ({event.instruction!r})")
        elif awaited.on_done is not None:
            awaited.on_done(event)

    def _run_steps(self) -> None:
        steps = self._steps
        while steps and self._awaiting is None:
            step = steps.popleft()
            if step.__class__ is Step:
                if step.when == ON_FAILURE and not self._failed:
                    continue
                step.fn(*step.args)
            else:
                step[0](*step[1:])
        if not steps and self._awaiting is None:
            self._failed = False

    # ---- what the parts use -------------------------------------------------------------
    def then(self, *steps) -> None:
        """Run these next, in order, before the steps already planned: each a Step, or a
        plain one as the tuple (fn, *args)."""
        self._steps.extendleft(reversed(steps))

    def emit(self, *instructions) -> None:
        self._out.extend(instructions)

    def awaits(self, instruction, on_done=None, undo=None) -> None:
        """Give `instruction` and stop: `on_done(completion)` runs when its outcome comes
        back, `undo()` if it (or one before it) failed. Given alone, a write whose outcome
        changes nothing: the steps after it wait for it."""
        self._out.append(instruction)
        self._awaiting = Awaited(instruction, on_done, undo)

    @property
    def waiting_for(self):
        """The instruction whose completion the machine waits for, or None."""
        return None if self._awaiting is None else self._awaiting.instruction
