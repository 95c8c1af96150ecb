"""Two searchers sharing the trials: the Gaussian-process searcher and CMA-ES, or TPE where
the space has a categorical parameter (`auto`'s choice; mpiopt.search.auto says why).

On rugged, multimodal problems a GP settles in the first good basin and ends near random
search, while CMA-ES, a population method, keeps moving (benchmarks/quality_suite.py, at
1, 4 and 16 pending); on smooth problems the GP is far ahead. Nobody knows beforehand
which kind a study is, so `auto` runs both, as algorithm portfolios do (Nevergrad's NGOpt;
Meunier et al. 2021). Every result is told to both, so the GP also learns from the points
CMA-ES chose, and every pending point is pending in both (`Searcher.hold`), so their
suggestions keep away from each other's: the GP lies about them, TPE's constant liar
counts them as bad results (CMA-ES samples its generation regardless).

Who suggests a trial: in turn (trial n to member n mod 2) until the GP has a fitted kernel;
then the GP with probability equal to how well it predicts the results it has: Spearman's
rank correlation of its leave-one-out means with the told values (closed form from the
one factorisation, Rasmussen & Williams eq. 5.12), kept within [MIN_SHARE, 1 - MIN_SHARE].
On a smooth surface the model predicts the next results well (0.9-1.0 on Hartmann-6 and
Rosenbrock after 30 results) and gets three turns in four; on a rugged one it predicts
poorly (about 0.5 on Rastrigin) and CMA-ES keeps at least half. Every result is evidence
here, unlike "who improved the best value last", a rare event that moved the shares on a
few early results (that rule, by Thompson sampling, was measured and dropped: RESULTS.md).
Measured on the quality suite against turns by parity (2026-11-25, 10 seeds, 1 / 4 / 16
pending): mean rank 1.50 / 1.33 / 1.44 against 1.44 / 1.50 / 1.67, mean normalized score
0.836 / 0.852 / 0.775 against 0.837 / 0.832 / 0.768; on the six held-out problems 1.17 /
1.50 / 2.00 against 1.83 / 1.33 / 2.17, scores 0.703 / 0.639 / 0.444 against 0.652 /
0.647 / 0.361.

Here the GP makes no Thompson draws (on its own, every second suggestion is one, to probe
other basins): CMA-ES's turns already explore, and every GP turn goes to refining. Measured
on the quality suite (2026-11-25, 18 problems, 10 seeds): with a Thompson draw at every
second GP turn the pair's mean rank was 2.06 / 1.56 / 1.89 at 1 / 4 / 16 pending against
1.44 / 1.50 / 1.67 without, and 7 problems fell short of the best peer instead of 6.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from mpiopt.search._base import Searcher

# Each member keeps at least this share of the turns, whatever the model's agreement: a
# model can look good on a few points, and a member starved of turns cannot show that it
# helps (the floor of probability matching in adaptive operator selection; Thierens 2005).
MIN_SHARE = 0.25
# Every suggestion from the GP's space-filling design until it is used up (no member
# knows anything yet), instead of in turn from the first one: see benchmarks/RESULTS.md
DESIGN_FIRST = False
# Shares by each member's own results instead of the GP's predictions: the GP's share is
# the probability that a result of its suggestions beats one of the partner's (the
# Mann-Whitney statistic over each member's last CREDIT_WINDOW results; rank-based credit
# in adaptive operator selection, Fialho et al. 2010), once each has CREDIT_MIN results.
# Measured and dropped: see benchmarks/RESULTS.md
CREDIT = False
CREDIT_WINDOW = 30
CREDIT_MIN = 5


class PortfolioSearcher(Searcher):
    algorithm = "portfolio"
    slow = True

    def __init__(self, space, members: list[Searcher], seed: int = 0):
        super().__init__(space, {}, seed)
        self.members = members
        for member in members:
            if hasattr(member, "thompson_every"):
                member.thompson_every = 0
        # the model whose predictions decide the shares, and the other member (a pair only)
        models = [m for m in members if hasattr(m, "loo_agreement")]
        self._model = models[0] if len(members) == 2 and models else None
        self._other = next((m for m in members if m is not self._model), None)
        self.owner: dict[tuple, Searcher] = {}
        self._replaying = False
        self._results = {id(m): deque(maxlen=CREDIT_WINDOW) for m in members}   # (CREDIT)

    def _pick(self) -> Searcher:
        """The member that suggests this trial: in turn until the GP has a fitted kernel,
        then the GP with probability equal to its leave-one-out agreement (kept within
        [MIN_SHARE, 1 - MIN_SHARE]), CMA-ES otherwise."""
        if DESIGN_FIRST and self._model is not None and self._model.designing():
            return self._model
        rho = self._model.loo_agreement() if self._model is not None else None
        credit = self._credit() if CREDIT and rho is not None else None
        rho = credit if credit is not None else rho
        if rho is None:
            return self.members[self.number % len(self.members)]
        share = min(max(rho, MIN_SHARE), 1 - MIN_SHARE)
        return self._model if self.rng.random() < share else self._other

    def _credit(self) -> float | None:
        """P(a result of the GP's suggestions < one of the partner's), ties half."""
        mine, theirs = self._results[id(self._model)], self._results[id(self._other)]
        if len(mine) < CREDIT_MIN or len(theirs) < CREDIT_MIN:
            return None
        a, b = np.array(mine), np.array(theirs)
        wins = (a[:, None] < b[None, :]).sum() + 0.5 * (a[:, None] == b[None, :]).sum()
        return float(wins / (len(a) * len(b)))

    def _suggest(self) -> dict:
        member = self._pick()
        params = member.ask(self.number)
        key = self.key(params)
        self.owner[key] = member
        for other in self.members:
            if other is not member:
                other.hold(params)                 # so the others keep away from it
        return params

    def _on_tell(self, params, value, was_pending) -> None:
        if not self._replaying:                 # (a replay went to the members already)
            for member in self.members:
                member.tell(params, value)
        member = self.owner.pop(self.key(params), None)
        if CREDIT and member is not None and not isinstance(value, tuple):
            self._results[id(member)].append(float(value))

    def _on_hold(self, params) -> None:
        for member in self.members:
            member.hold(params)

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
