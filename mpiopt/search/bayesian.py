"""Bayesian optimisation with pending points handled for parallel groups.

One suggestion per busy group must be distinct and informative. skopt's own constant-liar
batch ask often returns two points almost on top of each other, and each of its GP
suggestions refits everything. Here:

* Pending suggestions enter a throwaway posterior with a lie: by default the model's own
  mean there ("kriging believer"), which removes the uncertainty around them without
  bending the surface; a constant lie (the told values' mean, min or max) distorts the
  model exactly where it matters. The chosen point must lie at least `min_distance` (1%
  of the scaled range, max-norm = `Space.distance`) from every pending suggestion; if the
  best candidate is too close, the next best is taken. Told points only exclude exact
  repeats (a 1% box around a told point can swallow a whole narrow optimum).
* Every second suggestion is the minimiser of one posterior (Thompson) sample instead of
  the acquisition's best, so some groups keep probing other basins while the others refine
  the incumbent (not in auto's portfolio, where CMA-ES explores: see portfolio.py).
* Kernel hyperparameters (with a log-normal prior on the length scales, see _gp) are
  re-fitted on a schedule (every tell while the study is small, then every ~10% growth,
  warm-started), on at most `hyper_points` points; in between a posterior is one Cholesky
  with the kept kernel. At most `max_points` told points enter the model (the best half
  and the most recent half).
* The acquisition is maximised over a few thousand random candidates plus Gaussian
  perturbations of the best told points and of the best candidates, at shrinking scales:
  no L-BFGS restarts. BLAS runs single-threaded meanwhile (see _blas.single_thread).
* `gp_hedge` mixes EI, LCB and PI like skopt (softmax over gains, gains lowered by the
  model's mean at each function's previous choice), in standardised units; `xi` is in the
  objective's units as in skopt.
* Batches (ask_batch: the background thread asks for as many as the groups need before
  its next fit): one posterior (told and pending points, lied in once), one candidate
  pool, then each pick the acquisition's best candidate with the picks before it
  believed, as pending points are: the kriging believer, made incremental. A believed
  value is the posterior mean, so it moves no mean; it only lowers the variance near the
  pick, one covariance column over the shortlisted candidates (_gp.Believed; GP-BUCB's
  hallucinated observations, Desautels et al. 2014). A batch of q costs one fit and q
  columns instead of q fits, and spreads as q asks in a row would. Thompson turns (plain
  `bayesian`) are independent posterior draws' minima, as in Kandasamy et al. 2018.
  At most `max_points` pending points (the most recent) enter a fit; every pending point
  keeps the distance rule (a k-d tree), so neither a fit nor a batch grows with the
  groups.

Tree surrogates (RF, ET, GBRT) come from skopt and are refitted at every suggestion.
Figures for these choices, and the variants that lost: benchmarks/results/quality_suite.md.
"""
from __future__ import annotations

import numpy as np

from mpiopt.search.scaling import in_range
from mpiopt.search import _gp, _skopt, pareto
from mpiopt.search._base import Searcher, check_options
from mpiopt.search._bayes_options import validate
from mpiopt.search._blas import controller, single_thread
from mpiopt.search._warping import warp
from mpiopt.search.options import defaults as declared

DEFAULTS = declared("bayesian")   # declared in mpiopt.search.options
_HEDGED = ("EI", "LCB", "PI")
_LOCAL_SCALES = (0.1, 0.03, 0.01, 0.003)   # perturbations round the best, coarse to fine
_TOLD_MIN_DISTANCE = 1e-9  # only exact repeats of a told point are refused
_RESTARTS = 2              # random restarts of a full kernel fit (the likelihood is multimodal)
_RESTART_UNTIL = 100       # full fits only while the study is this small (then warm starts)
# Every 2nd suggestion a Thompson sample (0: never): some groups probe other basins while
# the others refine (figures: benchmarks/results/quality_suite.md)
_EXPLORE_EVERY = 2
_THOMPSON_CANDIDATES = 1000   # random candidates a posterior sample is minimised over
_DESIGN_SIZE = 64          # points of the initial Sobol design (a power of two)
# A batch picks from each acquisition's best _SHORTLIST_PER_PICK x picks candidates (at
# least _SHORTLIST_MIN): the cost of a pick grows with them (see _shortlist)
_SHORTLIST_PER_PICK, _SHORTLIST_MIN = 2, 128
# _INITIAL note: the initial suggestions (`initial_design`) are the first points of a
# scrambled Sobol sequence (seeded by the study's seed) not yet known: the first k points
# of a Sobol sequence cover the cube evenly for every k, which random samples do not, and
# need no maximin step (which in 6-D pushes the points into corners). SMAC3, Ax/BoTorch
# and HEBO start from Sobol points too.


class BayesianSearcher(Searcher):
    """Surrogate model + acquisition; see the module docstring for the parallel handling."""

    algorithm = "bayesian"

    def __init__(self, space, options: dict | None = None, seed: int = 0):
        super().__init__(space, options, seed)
        self.options = validate(check_options(self.algorithm, options, DEFAULTS))
        self.encoder = _skopt.Encoder(space)
        self._rows: list[np.ndarray] = []
        self._spent_rows: list[np.ndarray] = []   # suggestions that came back without a value
        self._stacked = np.zeros((0, self.encoder.n_cols))   # _rows as one array (_told_rows)
        self._kernel = None
        self._kernel_n = 0
        self._restart_n = 0
        self._gains = np.zeros(len(_HEDGED))
        self._hedge_last: np.ndarray | None = None
        self._design: np.ndarray | None = None
        self.thompson_every = _EXPLORE_EVERY   # (0 in auto's portfolio: see there)
        self._agreement: tuple | None = None   # loo_agreement's (told count, kernel, value)
        self._warp_cache: tuple | None = None  # _warped: (the values' bytes, warp of them)
        self._encoded: dict[tuple, np.ndarray] = {}   # pending key -> its row (_pending_rows)

    # ---- bookkeeping ----------------------------------------------------------------
    def _on_tell(self, params, value, was_pending) -> None:
        self._rows.append(self.encoder.encode([params])[0])

    def _on_forget(self, params) -> None:
        self._spent_rows.append(self.encoder.encode([params])[0])

    def replay(self, trials, pending=(), next_number=None) -> None:
        """As Searcher.replay; the failed trials' points are kept away from, as in the run."""
        trials = list(trials)
        super().replay(trials, pending, next_number)
        failed = [p for p, _ in trials if self.key(p) in self.spent]
        if failed:
            self._spent_rows += list(self.encoder.encode(failed))

    # ---- suggestion -------------------------------------------------------------------
    def designing(self) -> bool:
        """Whether the next suggestion is a point of the initial design."""
        known = len(self.told) + len(self.pending)
        return known < self.options["initial_points"] or len(self.told) < 2

    def _suggest(self) -> dict:
        if self.designing():
            return self._initial_point()  # see _INITIAL note
        with single_thread():
            X, y = self._training_set()
            model = self._surrogate(X, y)
            if self._explore_now(model):
                return self.encoder.decode(self._thompson(model, X, y))
            return self.encoder.decode(self._maximise(model.predict, X, y))

    def _initial_point(self) -> dict:
        return next(self._design_points())

    def _design_points(self):
        """The design points not yet told, pending or spent (a failed one is not given
        again), first to last, then random ones: deterministic from the seed and what is
        known, so a resumed study continues the same design. What is known is read once
        (a batch of thousands takes its points from one pass)."""
        if self.options["initial_design"] == "random":
            while True:
                yield self.space.sample(self.rng)
        if self._design is None:
            from scipy.stats import qmc

            self._design = qmc.Sobol(len(self.space.dimensions), scramble=True,
                                     seed=self.seed).random(_DESIGN_SIZE)
        known = set(self.pending) | self.spent | {self.key(p) for p, _ in self.told}
        for genes in self._design:
            params = self.space.from_genome(genes.tolist())
            if self.key(params) not in known:
                known.add(self.key(params))
                yield params
        while True:
            yield self.space.sample(self.rng)   # (a small discrete space: the design is used up)

    def warm_up(self) -> None:
        """The first design's and the first fit's one-time costs (see Searcher.warm_up):
        scipy's Sobol direction numbers, the thread pools' controller, the modules and
        first calls of a fit, a posterior and a batch's picks (on a few random rows, with
        a generator of its own). Paid on the first batches instead, every group would
        wait for them: for the first design batch, and again for the first model batch
        after the design's results."""
        from scipy.stats import qmc

        qmc.Sobol(len(self.space.dimensions), scramble=True, seed=0).random(2)
        controller()
        if self.options["estimator"] == "GP":
            from scipy.spatial import cKDTree

            from mpiopt.search import _batch  # noqa: F401

            rng = np.random.default_rng(0)
            X, y = self.encoder.sample(8, rng), rng.random(8)
            with single_thread():
                kernel = _gp.fit_kernel(self._initial_kernel(), X, y, 1, 0)
                _gp.Posterior(kernel, X, y).predict(X)
            cKDTree(X).query(X, k=1)

    # ---- batches (one fit, many suggestions: see the module docstring) ------------------
    def _suggest_batch(self, numbers: list[int]):
        if not self._batchable():
            yield from super()._suggest_batch(numbers)   # each as ask() would make it
            return
        numbers, design = list(numbers), self._design_points()
        while numbers and self.designing():
            self.number = numbers.pop(0)
            yield next(design)
        if numbers:
            yield from self._believed_batch(numbers)

    def _batchable(self) -> bool:
        """One fit serves a batch where a believed point changes no mean: a GP with the
        believer liar, on one objective. Trees are refitted per suggestion anyway, a
        constant lie moves the mean, and ParEGO draws its scalarization per suggestion."""
        vector = bool(self.told) and isinstance(self.told[0][1], tuple)
        return (self.options["estimator"] == "GP" and self.options["liar"] == "believer"
                and not vector)

    def _believed_batch(self, numbers: list[int]):
        """One fit, one candidate pool, then each pick given the picks before it (see
        mpiopt.search._batch)."""
        from mpiopt.search._batch import Batch

        with single_thread():
            X, y = self._training_set()
            model = self._surrogate(X, y)
            names = self._names()
            if self._hedge_last is not None and len(names) > 1:
                self._gains -= model.predict(self._hedge_last)[0]
            cand, _, _, scores, y_opt = self._pool(model.predict, X, y, names)
            rows = cand[self._shortlist(scores, len(numbers))]
            draws = any(self._explores(n) for n in numbers)
            if draws:                                     # Thompson turns: their own rows too
                rows = np.vstack([rows, self._thompson_rows(X, y)])
            batch = Batch(self, model, rows, len(numbers), y_opt, names, draws)
            picked = []
            for number in numbers:
                self.number = number
                picked.append(batch.pick(number))
        yield from self.encoder.decode_rows(np.array(picked))

    def _shortlist(self, scores: dict, picks: int) -> np.ndarray:
        """The candidates a batch picks from: the best _SHORTLIST_PER_PICK x picks (at
        least _SHORTLIST_MIN) of each acquisition. Each pick costs one covariance column
        over them; the rest scored too low to be reached by the batch."""
        k = max(_SHORTLIST_MIN, _SHORTLIST_PER_PICK * picks)
        tops = [np.argsort(-s, kind="stable")[:k] for s in scores.values()]
        return np.unique(np.concatenate(tops))

    def _distance_rule(self):
        """A test of rows that a suggestion may not be: a told point's exact repeat, or
        within min_distance of a pending one (all of them, however many: k-d trees,
        built once for a batch)."""
        from scipy.spatial import cKDTree

        trees = [(cKDTree(known), limit) for known, limit in
                 ((self._never_rows(), _TOLD_MIN_DISTANCE),
                  (self._pending_rows(), self.options["min_distance"]))
                 if len(known) and limit > 0]

        def too_near(rows: np.ndarray) -> np.ndarray:
            out = np.zeros(len(rows), dtype=bool)
            for tree, limit in trees:
                out |= tree.query(rows, k=1, p=np.inf)[0] < limit
            return out

        return too_near

    def loo_agreement(self) -> float | None:
        """How well the GP predicts each told value from the others (Spearman's rank
        correlation of its leave-one-out means with the values), with the kernel fitted
        last; None before a kernel is fitted. Near 1 on smooth surfaces, lower on rugged
        ones, where the model's suggestions are worth less."""
        if self._kernel is None or self.options["estimator"] != "GP" or len(self._rows) < 5:
            return None
        n, kernel = len(self._rows), self._kernel
        if self._agreement is None or self._agreement[0] != n or self._agreement[1] is not kernel:
            X, y = self._training_set()
            with single_thread():      # (an inverse of up to max_points rows: BLAS work)
                self._agreement = (n, kernel, _gp.loo_agreement(kernel, X, y))
        return self._agreement[2]

    def _explore_now(self, model) -> bool:
        return hasattr(model.post, "sample") and self._explores(self.number)

    def _explores(self, number: int) -> bool:
        every = self.thompson_every
        return every > 0 and number % every == every - 1

    def _thompson(self, model, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Argmin of one posterior sample over random and near-best candidates.

        Every few suggestions one is drawn this way instead of by the acquisition: a
        sample is low wherever the optimum may plausibly be, so some groups keep probing
        other basins while the rest refine the incumbent (EI alone settles in the first
        good basin it finds, e.g. Hartmann-6's -3.20 local minimum)."""
        cand = self._thompson_rows(X, y)
        draw = model.post.sample(cand, self.rng)
        return self._first_allowed(cand, -draw, self._known_rows())

    def _thompson_rows(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """A Thompson draw's candidates: random rows and steps round the best told ones."""
        best_rows = X[np.argsort(y, kind="stable")[:4]]
        return np.vstack([self.encoder.sample(_THOMPSON_CANDIDATES, self.rng),
                          self._around(best_rows, 16)])

    def _known_rows(self) -> np.ndarray:
        """The told and spent points' rows (_first_allowed's first n_never), then the
        pending ones'."""
        rows = list(self._never_rows()) + [r for r in self._pending_rows()]
        return np.array(rows) if rows else np.zeros((0, self.encoder.n_cols))

    def _never_rows(self) -> np.ndarray:
        """Rows a suggestion may never repeat exactly: the told points', and those of
        suggestions that came back without a value (failed, interrupted), which a model
        that never learnt of them could otherwise suggest again (see Searcher.spent)."""
        if not self._spent_rows:
            return self._told_rows()
        return np.vstack([self._told_rows(), np.array(self._spent_rows)])

    def _told_rows(self) -> np.ndarray:
        """The told points encoded, one array, grown by the rows told since the last call
        (tens of thousands with thousands of groups: not stacked anew at every fit)."""
        if len(self._stacked) < len(self._rows):
            self._stacked = np.vstack([self._stacked, np.array(self._rows[len(self._stacked):])])
        return self._stacked

    def _pending_rows(self, recent: int | None = None) -> np.ndarray:
        """The pending points encoded (only the `recent` last ones, where given), each
        encoded once while it is pending: with thousands of groups, thousands are."""
        keys = list(self.pending)[-recent:] if recent else list(self.pending)
        if not keys:
            return np.zeros((0, self.encoder.n_cols))
        new = [k for k in keys if k not in self._encoded]
        if new:
            self._encoded.update(zip(new, self.encoder.encode([self.pending[k] for k in new])))
        if len(self._encoded) > 2 * len(self.pending):
            self._encoded = {k: self._encoded[k] for k in self.pending if k in self._encoded}
        return np.array([self._encoded[k] for k in keys])

    def _training_set(self) -> tuple[np.ndarray, np.ndarray]:
        """Told rows, capped at max_points: the best half and the most recent half."""
        X = self._told_rows()
        y = self._values()
        cap = self.options["max_points"]
        if len(y) > cap:
            best = np.argsort(y, kind="stable")[: cap // 2]
            recent = np.arange(len(y) - (cap - len(best)), len(y))
            keep = np.union1d(best, recent)
            extra = np.setdiff1d(np.argsort(y, kind="stable"), keep)[: cap - len(keep)]
            keep = np.union1d(keep, extra)
            X, y = X[keep], y[keep]
        return X, (self._warped(y) if self.options["output_warping"] else y)

    def _warped(self, y: np.ndarray) -> np.ndarray:
        """warp(y), kept for the same values: a suggestion and the portfolio's
        loo_agreement both ask for it between two tells, and its exponent's fit (a bounded
        search of ~20 likelihood evaluations, yeojohnson_exponent) is not free."""
        key = y.tobytes()
        if self._warp_cache is None or self._warp_cache[0] != key:
            self._warp_cache = (key, warp(y))
        return self._warp_cache[1]

    def _values(self) -> np.ndarray:
        """The told values, one number each. With several objectives: ParEGO (Knowles,
        2006): an augmented Chebyshev scalarization with weights drawn for this ask (the
        ask's keyed stream), so successive suggestions aim at different parts of the
        front. Infeasible trials rank after every feasible one, by their violation (a
        share of the largest), so the model learns where the feasible region ends."""
        told = [v for _, v in self.told]
        if not told or not isinstance(told[0], tuple):
            return in_range(np.array(told, dtype=float))
        values = in_range(np.array([tuple(v) for v in told], dtype=float))
        broken = np.array([getattr(v, "violation", 0.0) for v in told])
        ok = broken <= 0
        y = np.zeros(len(told))
        if ok.any():
            weights = pareto.simplex_weights(values.shape[1], self.rng)
            y[ok] = pareto.chebyshev(values[ok], weights)
        if (~ok).any():
            top = y[ok].max() if ok.any() else 0.0
            y[~ok] = top + broken[~ok] / broken[~ok].max()
        return y

    # ---- surrogate ---------------------------------------------------------------------
    def _surrogate(self, X: np.ndarray, y: np.ndarray):
        """A predict(rows) -> (mean, std) in standardised units, pending points lied in:
        the `max_points` most recent (they were picked with the model nearest this one,
        where the next picks go); all of them keep the distance (_first_allowed,
        _distance_rule). So a fit's cost does not grow with the groups."""
        P = self._pending_rows(recent=self.options["max_points"])
        mean, scale = float(np.mean(y)), float(np.std(y)) or 1.0
        if self.options["estimator"] == "GP":
            self._refit_kernel(X, y)
            make = lambda X_, y_: _gp.Posterior(self._kernel, X_, y_)  # noqa: E731
        else:
            seed = int(self.rng.integers(2**31))
            make = lambda X_, y_: _skopt.TreePosterior(  # noqa: E731
                self.options["estimator"], self.encoder, X_, y_, seed)
        if not len(P):
            post = make(X, y)
        else:
            told = make(X, y) if self.options["liar"] == "believer" else None
            post = make(np.vstack([X, P]), np.concatenate([y, self._lies(told, P, y)]))

        return _gp.Standardised(post, mean, scale)

    def _lies(self, post, P: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Values pending points pretend to have: the model's own mean (kriging believer)
        or a constant (mean / min / max of the told values)."""
        liar = self.options["liar"]
        if liar == "believer":
            return post.predict(P)[0]
        return np.full(len(P), {"mean": np.mean, "min": np.min, "max": np.max}[liar](y))

    def _refit_kernel(self, X: np.ndarray, y: np.ndarray) -> None:
        """Maximise the likelihood again only when the schedule says so (see _schedule)."""
        n = len(y)
        restarts = self._schedule(n)
        if restarts is None:
            return
        idx = np.arange(n)
        cap = self.options["hyper_points"]
        if n > cap:
            idx = np.sort(self.rng.choice(n, cap, replace=False))
        start = self._kernel if self._kernel is not None else self._initial_kernel()
        self._kernel = _gp.fit_kernel(start, X[idx], y[idx], restarts,
                                      int(self.rng.integers(2**31)))
        self._kernel_n = n
        if restarts:
            self._restart_n = n

    def _schedule(self, n: int) -> int | None:
        """Restarts for a refit now, or None to keep the kernel.

        The first fit starts from the default kernel alone: under MPI every group waits
        for it (the design's results come together), and the random restarts come with
        the next fit, made while the groups train. Then random restarts (costly)
        whenever the data doubled while the study is small (n <= _RESTART_UNTIL);
        otherwise a warm start from the kept kernel every `refit_every` tells (auto:
        every tell up to 20 points, then every ~10%).
        """
        if self._kernel is None:
            return 0
        if n <= _RESTART_UNTIL and n >= 2 * self._restart_n:
            return _RESTARTS
        every = self.options["refit_every"] or max(1, self._kernel_n // 10)
        return 0 if n - self._kernel_n >= every else None

    def _initial_kernel(self):
        base = _skopt.hamming_kernel(self.encoder.n_cols) if self.encoder.all_categorical else None
        return _gp.default_kernel(self.encoder.n_cols, base)

    # ---- acquisition -------------------------------------------------------------------
    def _maximise(self, predict, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Best candidate of the acquisition that respects the distance rules."""
        names = self._names()
        if self._hedge_last is not None and len(names) > 1:
            self._gains -= predict(self._hedge_last)[0]
        cand, _, _, scores, _ = self._pool(predict, X, y, names)
        avoid = self._known_rows()
        picks = np.array([self._first_allowed(cand, scores[n], avoid) for n in names])
        choice = self._hedge_choice(len(names))
        self._hedge_last = picks if len(names) > 1 else None
        return picks[choice]

    def _names(self) -> tuple[str, ...]:
        return _HEDGED if self.options["acquisition"] == "gp_hedge" else (self.options["acquisition"],)

    def _pool(self, predict, X: np.ndarray, y: np.ndarray, names) -> tuple:
        """The acquisition's candidates: random rows and steps round the best told rows,
        then steps round the best candidates of each function (coarse to fine); returns
        (candidates, mean, std, {function: scores}, the best value standardised)."""
        scale = float(np.std(y)) or 1.0
        y_opt = float((np.min(y) - np.mean(y)) / scale)
        self._xi = self.options["xi"] / scale  # xi is in the objective's units, as in skopt
        best_rows = X[np.argsort(y, kind="stable")[:3]]
        cand = np.vstack([self.encoder.sample(self.options["candidates"], self.rng),
                          self._around(best_rows, 32)])
        mu, std = predict(cand)
        scores = {n: self._acq(n, mu, std, y_opt) for n in names}
        seeds = np.vstack([cand[np.argsort(-s)[:3]] for s in scores.values()] + [best_rows[:1]])
        local = self._around(seeds, 48)
        mu2, std2 = predict(local)
        cand = np.vstack([cand, local])
        for n in names:
            scores[n] = np.concatenate([scores[n], self._acq(n, mu2, std2, y_opt)])
        return cand, np.concatenate([mu, mu2]), np.concatenate([std, std2]), scores, y_opt

    def _acq(self, name, mu, std, y_opt):
        return _skopt.acquisition(name, mu, std, y_opt, self._xi, self.options["kappa"])

    def _around(self, rows: np.ndarray, per_scale: int) -> np.ndarray:
        reps = np.repeat(rows, per_scale, axis=0)
        return np.vstack([self.encoder.perturb(reps, s, self.rng) for s in _LOCAL_SCALES])

    def _hedge_choice(self, k: int) -> int:
        if k == 1:
            return 0
        logits = self._gains - self._gains.max()
        p = np.exp(logits)
        return int(self.rng.choice(k, p=p / p.sum()))

    def _first_allowed(self, cand: np.ndarray, score: np.ndarray, avoid: np.ndarray) -> np.ndarray:
        """Highest-scoring candidate far enough from pending (1%) and told or spent (no
        repeat) rows."""
        n_never = len(self._rows) + len(self._spent_rows)
        limits = np.concatenate([np.full(n_never, _TOLD_MIN_DISTANCE),
                                 np.full(len(avoid) - n_never, self.options["min_distance"])])
        order = np.argsort(-score, kind="stable")
        for i in order:
            if len(avoid) == 0 or np.all(np.abs(avoid - cand[i]).max(axis=1) >= limits):
                return cand[i]
        return self.encoder.sample(1, self.rng)[0]
