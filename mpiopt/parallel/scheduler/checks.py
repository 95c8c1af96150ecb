"""The scheduler's invariants, checked after every event where it was built with
`validate=True` (the tests do): a violation raises at the event that caused it, with the
last events handled (stepping.py's `stimulus_log`) in the message, instead of surfacing
trials later as a trial run twice or a group left waiting."""
from __future__ import annotations

LOG_SHOWN = 12          # events printed with a violation (the newest)


class Checks:
    """The invariants over the shared State (state.py), with the Loop's log to tell how
    the machine got there."""

    def __init__(self, state, loop):
        self.st, self.loop = state, loop

    def validate_state(self) -> None:
        """Raise AssertionError where an invariant does not hold (see `violations`)."""
        broken = self.violations()
        if broken:
            raise AssertionError("scheduler state: " + "; ".join(broken) + "\n" + self.story())

    def story(self, last: int = LOG_SHOWN) -> str:
        """The newest events handled, each with the instructions it gave."""
        lines = [f"{type(e).__name__}: {[type(i).__name__ for i in out]}"
                 for e, out in list(self.loop.stimulus_log)[-last:]]
        return "last events:\n  " + "\n  ".join(lines)

    def violations(self) -> list[str]:
        """Each group's state agrees with what it holds (groups.py: the idle queue holds
        the waiting groups, a Running the running ones); a trial sent ahead goes to a
        running group; no trial runs on two groups; an exclusive job never has more trials
        started than its budget."""
        st = self.st
        out = st.groups.violations()
        running, ahead = st.groups.running, st.ahead.trials
        if not set(ahead) <= set(running):
            out.append(f"trials sent ahead to groups that run none: {sorted(set(ahead) - set(running))}")
        ids = [r.trial_id for r in (*running.values(), *ahead.values()) if not r.refit]
        if len(set(ids)) != len(ids):
            out.append(f"a trial on two groups: {sorted(ids)}")
        started = st.outcomes.finished + len(ids) + st.finishing
        if st.shared is None and started > st.limits.trials:
            out.append(f"{started} trials started, budget {st.limits.trials}")
        return out
