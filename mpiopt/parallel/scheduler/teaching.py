"""Telling the searcher what became of its suggestions: a part the parts share
(parallel/scheduler/state.py: `State.teacher`), with its own state (what was said once),
which hands back the lines to say as instructions instead of giving them itself."""
from __future__ import annotations

from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.parallel.scheduler.outcomes import Outcomes, usable
from mpiopt.trial import FrozenTrial


class Teacher:
    def __init__(self, searcher, outcomes: Outcomes):
        self.searcher, self.outcomes = searcher, outcomes
        self.numbered = searcher.numbered        # pbt: told and forgotten by trial number
        self.failures_said: set[str] = set()
        self.warned_unread = False

    def teach(self, trial: FrozenTrial) -> None:
        """Tell the searcher; it never sees a non-finite value or a failed trial's params."""
        value = self.outcomes.told_value(trial) if usable(trial) else None
        if value is not None and self.numbered:
            self.searcher.tell_trial(trial.number, trial.params, value)
        elif value is not None:
            self.searcher.tell(trial.params, value)
        else:
            self.forget(trial.number, trial.params)

    def forget(self, number: int, params: dict) -> None:
        if self.numbered:
            self.searcher.forget_trial(number, params)
        else:
            self.searcher.forget(params)

    def needed(self) -> set | None:
        """Finished trials whose checkpoints must stay (pbt: rounds may start from them)."""
        return self.searcher.needed() if self.numbered else None

    def failures_to_say(self) -> list[ins.Say]:
        """What the searcher failed at and worked round (mpiopt.search._base), each kind
        said once per run: one that fails at every ask would say it with every trial."""
        out = []
        for kind, line in self.searcher.take_failures():
            if kind not in self.failures_said:
                self.failures_said.add(kind)
                out.append(ins.Say(f"warning: {line} (said once)"))
        return out

    def unread_warning(self, names: list[str]) -> list[ins.Say]:
        """Once per run: search-space parameters the model never read change nothing."""
        if not names or self.warned_unread:
            return []
        self.warned_unread = True
        listed = ", ".join(f"'{n}'" for n in names)
        return [ins.Say(f"warning: build_model never read search_space parameter(s) "
                        f"{listed}: they change nothing (a misspelt name?)")]
