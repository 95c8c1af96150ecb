"""Two searchers taking turns: the Gaussian-process searcher and CMA-ES (`auto`'s choice).

On rugged, multimodal problems a GP settles in the first good basin and ends near random
search, while CMA-ES, a population method, keeps moving (benchmarks/quality_suite.py, at
1, 4 and 16 pending); on smooth problems the GP is far ahead. Nobody knows beforehand
which kind a study is, so `auto` runs both, as algorithm portfolios do (Nevergrad's NGOpt;
Meunier et al. 2021): trial n goes to member n mod 2. Every result is told to both, so
the GP also learns from the points CMA-ES chose, and every pending point is pending in
the GP too, so its suggestions keep away from them.
"""
from __future__ import annotations

from mpiopt.search._base import Searcher


class PortfolioSearcher(Searcher):
    algorithm = "portfolio"
    slow = True

    def __init__(self, space, members: list[Searcher], seed: int = 0):
        super().__init__(space, {}, seed)
        self.members = members
        self.owner: dict[tuple, Searcher] = {}
        self._replaying = False

    def _suggest(self) -> dict:
        member = self.members[self.number % len(self.members)]
        params = member.ask(self.number)
        key = self.key(params)
        self.owner[key] = member
        for other in self.members:
            if other is not member:
                other.pending[key] = params        # so the others keep away from it
        return params

    def _on_tell(self, params, value, was_pending) -> None:
        if not self._replaying:                 # (a replay went to the members already)
            for member in self.members:
                member.tell(params, value)
        self.owner.pop(self.key(params), None)

    def _on_forget(self, params) -> None:
        for member in self.members:
            member.forget(params)
        self.owner.pop(self.key(params), None)

    def replay(self, trials, pending=(), next_number=None) -> None:
        trials, pending = list(trials), list(pending)
        for member in self.members:
            member.replay(trials, pending, next_number)
        self._replaying = True
        try:
            super().replay(trials, pending, next_number)
        finally:
            self._replaying = False
