"""Telling the searcher what became of its suggestions: a part of the Scheduler
(parallel/scheduler/machine.py), apart to keep each file readable."""
from __future__ import annotations

from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.parallel.scheduler.outcomes import usable
from mpiopt.trial import FrozenTrial


class Teaching:
    def _teach(self, trial: FrozenTrial) -> None:
        """Tell the searcher; it never sees a non-finite value or a failed trial's params."""
        value = self.outcomes.told_value(trial) if usable(trial) else None
        if value is not None and self.numbered:
            self.searcher.tell_trial(trial.number, trial.params, value)
        elif value is not None:
            self.searcher.tell(trial.params, value)
        else:
            self._forget(trial.number, trial.params)

    def _forget(self, number: int, params: dict) -> None:
        if self.numbered:
            self.searcher.forget_trial(number, params)
        else:
            self.searcher.forget(params)

    def _needed(self) -> set | None:
        """Finished trials whose checkpoints must stay (pbt: rounds may start from them)."""
        return self.searcher.needed() if self.numbered else None

    def _say_searcher_failures(self) -> None:
        """What the searcher failed at and worked round (mpiopt.search._base), each kind
        said once per run: one that fails at every ask would say it with every trial."""
        for kind, line in self.searcher.take_failures():
            if kind not in self.searcher_failures_said:
                self.searcher_failures_said.add(kind)
                self._emit(ins.Say(f"warning: {line} (said once)"))

    def _warn_unread(self, names: list[str]) -> None:
        """Once per run: search-space parameters the model never read change nothing."""
        if names and not self.warned_unread:
            self.warned_unread = True
            listed = ", ".join(f"'{n}'" for n in names)
            self._emit(ins.Say(f"warning: build_model never read search_space parameter(s) "
                               f"{listed}: they change nothing (a misspelt name?)"))
