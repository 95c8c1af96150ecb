"""Two searchers sharing the trials: the Gaussian-process searcher and CMA-ES, or TPE where
the space has a categorical parameter (`auto`'s choice; mpiopt.search.auto says why).

On rugged, multimodal problems a GP settles in the first good basin and ends near random
search, while CMA-ES, a population method, keeps moving; on smooth problems the GP is far
ahead. Nobody knows beforehand which kind a study is, so `auto` runs both, as algorithm
portfolios do (Nevergrad's NGOpt; Meunier et al. 2021). Every result is told to both, so
the GP also learns from the points CMA-ES chose, and every pending point is pending in
both (`Searcher.hold`), so their suggestions keep away from each other's: the GP lies
about them, TPE's constant liar counts them as bad results (CMA-ES samples its generation
regardless).

Who suggests a trial: in turn (trial n to member n mod 2) until the GP has a fitted kernel;
then the GP with probability equal to how well it predicts the results it has: Spearman's
rank correlation of its leave-one-out means with the told values (closed form from the
one factorisation, Rasmussen & Williams eq. 5.12), kept within [MIN_SHARE, 1 - MIN_SHARE].
On a smooth surface the model predicts the next results well and gets up to three turns
in four; on a rugged one it predicts poorly and the partner keeps at least half. Every
result is evidence here, unlike "who improved the best value last", a rare event that
would move the shares on a few early results.

Here the GP makes no Thompson draws (on its own, every second suggestion is one, to probe
other basins): the partner's turns already explore, and every GP turn goes to refining.

Figures for both rules, and the variants that lost to them: benchmarks/results/quality_suite.md.
"""
from __future__ import annotations

from mpiopt.search._base import _ASK, Searcher

# Each member keeps at least this share of the turns, whatever the model's agreement: a
# model can look good on a few points, and a member starved of turns cannot show that it
# helps (the floor of probability matching in adaptive operator selection; Thierens 2005).
MIN_SHARE = 0.25


class PortfolioSearcher(Searcher):
    algorithm = "portfolio"

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

    def _pick(self) -> Searcher:
        """The member that suggests this trial: in turn until the GP has a fitted kernel,
        then the GP with probability equal to its leave-one-out agreement (kept within
        [MIN_SHARE, 1 - MIN_SHARE]), CMA-ES otherwise."""
        rho = self._model.loo_agreement() if self._model is not None else None
        if rho is None:
            return self.members[self.number % len(self.members)]
        share = min(max(rho, MIN_SHARE), 1 - MIN_SHARE)
        return self._model if self.rng.random() < share else self._other

    def _suggest(self) -> dict:
        member = self._pick()
        params = member.ask(self.number)
        self._given(member, params)
        return params

    def warm_up(self) -> None:
        for member in self.members:
            member.warm_up()

    def _suggest_batch(self, numbers: list[int]):
        """Each trial's member drawn as for one ask (from that trial's own stream), then
        each member's trials asked together: the partner's first, so that the model's
        batch, made from one fit, keeps away from them."""
        turns: dict[int, list[int]] = {id(m): [] for m in self.members}
        for number in numbers:
            self.number = number
            self._reseed(_ASK, number)
            turns[id(self._pick())].append(number)
        made = {}
        for member in sorted(self.members, key=lambda m: m is self._model):
            mine = turns[id(member)]
            for number, params in zip(mine, member.ask_batch(mine)):
                self._given(member, params)
                made[number] = params
        for number in numbers:
            yield made[number]

    def _given(self, member: Searcher, params: dict) -> None:
        """`member` suggested params: it owns them, and the others keep away from them."""
        self.owner[self.key(params)] = member
        for other in self.members:
            if other is not member:
                other.hold(params)

    def _on_tell(self, params, value, was_pending) -> None:
        if not self._replaying:                 # (a replay went to the members already)
            for member in self.members:
                member.tell(params, value)
        self.owner.pop(self.key(params), None)

    def _on_hold(self, params) -> None:
        for member in self.members:
            member.hold(params)

    def _on_forget(self, params) -> None:
        for member in self.members:
            member.forget(params)
        self.owner.pop(self.key(params), None)

    def take_failures(self) -> list[tuple[str, str]]:
        """Its own and its members' (a member that fails suggests at random in its turn)."""
        return [*super().take_failures(), *(f for m in self.members for f in m.take_failures())]

    def replay(self, trials, pending=(), next_number=None) -> None:
        trials, pending = list(trials), list(pending)
        for member in self.members:
            member.replay(trials, pending, next_number)
        self._replaying = True
        try:
            super().replay(trials, pending, next_number)
        finally:
            self._replaying = False
