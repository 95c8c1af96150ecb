"""Optuna's TPE and CMA-ES samplers behind mpiopt's ask/tell.

Why Optuna's and not our own: TPE (Bergstra et al. 2011; Watanabe 2023 for the
multivariate form) and CMA-ES (Hansen; Optuna runs the `cmaes` package) are what Optuna
users run, they are maintained there, and benchmarks/quality_suite.py shows where each
beats our Gaussian-process searcher (CMA-ES on rugged problems with many groups).
Writing them again would only add bugs.

- `tpe`: multivariate TPE (joint densities, so coupled parameters are learned together)
  with the constant liar for pending trials (Optuna's documented setting for parallel
  workers: running trials count as bad results, so groups spread out).
- `cmaes`: CMA-ES with Hansen's default population size, 4 + 3 ln d, whatever the number
  of groups: with more groups than that, later suggestions are drawn from the same
  generation and whichever results come first update it. A population as large as the
  groups leaves too few generations in a tuning budget. Real and integer dimensions;
  CMA-ES has no distribution for a categorical one, which is sampled on its own by
  univariate TPE (Optuna's independent sampler, random by default: Optuna's own advice
  for categorical parameters is TPE). Where every parameter is a number and none is
  conditional, the same rules run on the `cmaes` package directly (mpiopt.search._cma
  says why: Optuna's ask reads the whole study). Figures for both:
  benchmarks/results/quality_suite.md.

Conditional spaces: Optuna's own define-by-run. A trial asks only the active parameters,
parents first (`trial.suggest_*` in Space.order); TPE then models each parameter on the
trials that have it (with `multivariate`, `group=True`: one joint density per set of
parameters that occur together), and CMA-ES adapts its distribution over the parameters
every trial has, sampling the others independently (univariate TPE, see above).

The Optuna study lives in memory; mpiopt's database stays the record. Randomness is
keyed like every mpiopt searcher's: the sampler for trial n is seeded from (seed, n).
Replay adds the finished trials and the pending re-runs (RUNNING, which the liar sees) to
the in-memory study; CMA-ES then restarts its distribution at the best finished point
(its generations are not stored).
"""
from __future__ import annotations

import math

from mpiopt.search import _cma
from mpiopt.search._base import Searcher, check_options
from mpiopt.search.options import defaults as declared


class OptunaSearcher(Searcher):
    """One Optuna sampler through Optuna's ask/tell; subclasses build the sampler."""

    algorithm = "optuna"
    defaults: dict = {}

    def __init__(self, space, options: dict | None = None, seed: int = 0):
        super().__init__(space, options, seed)
        self.options = check_options(self.algorithm, options, self.defaults)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.ERROR)   # its notes are not the user's
        self._optuna = optuna
        self.dists = distributions(space)
        self.study = optuna.create_study(direction="minimize", sampler=self._sampler(seed))
        self.numbers: dict[tuple, int] = {}      # pending key -> Optuna trial number

    def _sampler(self, seed: int):
        raise NotImplementedError

    def _suggest(self) -> dict:
        self.study.sampler = self._sampler(int(self.rng.integers(2**31)))
        if self.space.conditional:
            trial, params = self._ask_active()
        else:
            trial = self.study.ask(self.dists)
            params = {n: _native(trial.params[n]) for n in self.names}
        self.numbers[self.key(params)] = trial.number
        return params

    def _ask_active(self):
        """Define-by-run: each parameter suggested only when its conditions hold on the
        values suggested before it (parents first)."""
        trial, values = self.study.ask(), {}
        for name in self.space.order:
            if self.space.is_on(name, values):
                values[name] = _native(_suggest(trial, name, self.dists[name]))
        return trial, {n: values[n] for n in self.names if n in values}

    def _on_tell(self, params, value, was_pending) -> None:
        number = self.numbers.pop(self.key(params), None)
        if number is not None:
            self.study.tell(number, value)
        else:                                   # replayed, or told without an ask
            self._add(params, value)

    def _on_forget(self, params) -> None:
        number = self.numbers.pop(self.key(params), None)
        if number is not None:
            self.study.tell(number, state=self._optuna.trial.TrialState.FAIL)

    def _on_replay(self, reruns: list[dict]) -> None:
        for params in reruns:
            self.numbers[self.key(params)] = self._add(params, None)

    def _add(self, params: dict, value: float | None) -> int:
        """A trial added to the in-memory study: COMPLETE with a value, else RUNNING."""
        state = self._optuna.trial.TrialState
        done = value is not None and math.isfinite(value)
        names = [n for n in self.names if n in params]   # (absent: not in the trial at all)
        self.study.add_trial(self._optuna.trial.create_trial(
            params={n: params[n] for n in names}, distributions={n: self.dists[n] for n in names},
            value=value if done else None, state=state.COMPLETE if done else state.RUNNING))
        # (not `study.trials`: it deep-copies every trial, a cost that grows with the study
        # at every tell)
        return self.study.get_trials(deepcopy=False)[-1].number


class TPESearcher(OptunaSearcher):
    algorithm = "tpe"
    defaults = declared("tpe")

    def _sampler(self, seed: int):
        import warnings

        o = self.options
        extra = {"group": True} if self.space.conditional and o["multivariate"] else {}
        with warnings.catch_warnings():      # multivariate and group are "experimental"
            warnings.simplefilter("ignore")
            return self._optuna.samplers.TPESampler(
                seed=int(seed), n_startup_trials=int(o["startup_trials"]),
                multivariate=bool(o["multivariate"]), constant_liar=bool(o["constant_liar"]),
                **extra)

    def _on_hold(self, params: dict) -> None:
        """A portfolio partner's pending suggestion enters the in-memory study as RUNNING,
        so the constant liar counts it as a bad result and TPE's suggestions spread away
        from it as from its own (told later, it completes; forgotten, it fails)."""
        if self.options["constant_liar"]:
            self.numbers[self.key(params)] = self._add(params, None)


class CmaEsSearcher(OptunaSearcher):
    """CMA-ES: on the `cmaes` package directly where every parameter is a number and none
    is conditional (mpiopt.search._cma: Optuna's rules, but an ask that does not grow
    with the study), else Optuna's CmaEsSampler, which samples the categorical and
    conditional parameters besides."""

    algorithm = "cmaes"
    defaults = declared("cmaes")

    def __init__(self, space, options: dict | None = None, seed: int = 0):
        self._x0 = None
        super().__init__(space, options, seed)
        self.direct = (_cma.Strategy(space, int(self.options["population"]), self.seed)
                       if _cma.numeric(space) else None)

    def _suggest(self) -> dict:
        if self.direct is None:
            return super()._suggest()
        params, generation = self.direct.suggest(self.rng, started=bool(self.told))
        self.direct.asked(self.key(params), generation)
        return params

    def _on_tell(self, params, value, was_pending) -> None:
        if self.direct is None:
            return super()._on_tell(params, value, was_pending)
        self.direct.told(self.key(params), params, value)

    def _on_forget(self, params) -> None:
        if self.direct is None:
            return super()._on_forget(params)
        self.direct.forgot(self.key(params))

    def _sampler(self, seed: int):
        import warnings

        pop = int(self.options["population"]) or _cma.default_population(len(self.names))
        kind = (self._optuna.samplers.CmaEsSampler if self.space.conditional
                else _fixed_space_cmaes(self._optuna))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sampler = kind(seed=int(seed), popsize=pop, n_startup_trials=0, x0=self._x0,
                           independent_sampler=self._optuna.samplers.TPESampler(seed=int(seed)))
        sampler.fixed_space = self.dists if self.told else {}   # (as the intersection of none)
        return sampler


_FIXED_SPACE_CMAES = None


def _fixed_space_cmaes(optuna):
    """Optuna's CmaEsSampler told the search space instead of working it out.

    Optuna infers the space CMA-ES models from every finished trial (the intersection of
    their distributions), anew for each new sampler, and the searcher makes a sampler per
    ask (its randomness keyed by the trial number): a scan of the whole study per ask,
    most of an ask's cost past a thousand trials. Where the space has no conditions
    every finished trial has every parameter with the same distribution, so the
    intersection is the space itself (its numeric, non-constant dimensions by name, as
    Optuna's own rule), or nothing before the first result."""
    global _FIXED_SPACE_CMAES
    if _FIXED_SPACE_CMAES is None:
        d = optuna.distributions

        class FixedSpaceCmaEsSampler(optuna.samplers.CmaEsSampler):
            fixed_space: dict = {}

            def infer_relative_search_space(self, study, trial):
                return {n: dist for n, dist in sorted(self.fixed_space.items())
                        if not dist.single()
                        and isinstance(dist, (d.FloatDistribution, d.IntDistribution))}

        _FIXED_SPACE_CMAES = FixedSpaceCmaEsSampler
    return _FIXED_SPACE_CMAES

    def _on_replay(self, reruns: list[dict]) -> None:
        if self.direct is None:
            super()._on_replay(reruns)
        if self.told:
            best = min(self.told, key=lambda t: t[1])[0]
            self._x0 = {n: best[n] for n, dist in self.dists.items()
                        if hasattr(dist, "high") and n in best}
            if self.direct is not None:
                self.direct.x0 = self.space.to_genome(best)


def distributions(space) -> dict:
    """Optuna distributions for mpiopt's dimensions (log-uniform priors become log=True)."""
    from optuna import distributions as d

    out = {}
    for dim in space.dimensions:
        kind = type(dim).__name__
        if kind == "Categorical":
            out[dim.name] = d.CategoricalDistribution(list(dim.choices))
        elif kind == "Integer":
            out[dim.name] = d.IntDistribution(int(dim.low), int(dim.high), log=dim.prior != "uniform")
        else:
            out[dim.name] = d.FloatDistribution(float(dim.low), float(dim.high),
                                                log=dim.prior != "uniform")
    return out


def _suggest(trial, name: str, dist):
    """trial.suggest_* for one of `distributions`' entries."""
    kind = type(dist).__name__
    if kind == "CategoricalDistribution":
        return trial.suggest_categorical(name, list(dist.choices))
    if kind == "IntDistribution":
        return trial.suggest_int(name, dist.low, dist.high, log=dist.log)
    return trial.suggest_float(name, dist.low, dist.high, log=dist.log)


def _native(value):
    return value.item() if hasattr(value, "item") else value
