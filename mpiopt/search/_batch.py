"""Several suggestions from one Gaussian-process fit (BayesianSearcher.ask_batch).

The method: greedy picks with the kriging believer (Ginsbourger et al. 2010), the rule a
suggestion asked alone already follows for the pending points, made incremental. Each
pick is the acquisition's best candidate given the picks before it believed; a believed
value moves no mean and lowers the variance near its point only (mpiopt.search._gp.Believed:
one covariance column per pick), so the batch spreads out where it is uncertain as q asks
in a row would, for one fit and q columns instead of q fits. The candidates are the ask's
own (random rows, steps round the best told points and round the acquisition's best),
shortlisted once, plus a few steps round each pick (`_refined`), since the best of a
fixed pool after a few picks lies where no step was tried.

Thompson turns are independent draws from the fit's posterior (told and pending points),
as in asynchronous parallel Thompson sampling (Kandasamy et al. 2018): their spread comes
from the draws' randomness, and a draw's minimum among the rows not near a pick. So the
covariance of the rows a draw can hold its minimum at is factorised once per batch, and a
turn costs one matrix-vector product instead of a factorisation. Figures:
benchmarks/results/quality_suite.md and simulate.md.
"""
from __future__ import annotations

import numpy as np

from mpiopt.search import _gp

# Steps round a pick at each of bayesian's local scales. Screened on a local posterior
# (Batch._refined), they cost little each; with 4 a scale, a batch lost to one suggestion
# at a time on the quality suite at 16 pending, with 16 it did not
# (benchmarks/results/quality_suite.md)
_STEPS_PER_SCALE = 16


class Batch:
    """The state of one batch: the believed posterior, the rows a pick may not be."""

    def __init__(self, searcher, model, rows: np.ndarray, picks: int, y_opt: float, names,
                 draws: bool = False):
        self.s, self.model, self.y_opt, self.names = searcher, model, y_opt, names
        self.believed = _gp.Believed(model.post, rows, picks)
        self.too_near = searcher._distance_rule()
        self._blocked = np.zeros(len(rows) + picks, dtype=bool)
        self._blocked[:len(rows)] = self.too_near(rows)
        self.picked: list[np.ndarray] = []
        self.last = None                 # each acquisition's previous pick (gp_hedge)
        self._draws = self._draw_rows() if draws else None   # Thompson turns' (rows, root)

    @property
    def blocked(self) -> np.ndarray:
        return self._blocked[:self.believed.size]

    def pick(self, number: int) -> np.ndarray:
        """The row for trial `number`; it is believed from now on."""
        i = self._thompson() if self.s._explores(number) else self._acquisition()
        if i is None:                             # every candidate taken: a random point
            return self.s.encoder.sample(1, self.s.rng)[0]
        row = self.believed.rows[i].copy()
        self.picked.append(row)
        self._blocked[:self.believed.size] |= self._near_picks(self.believed.rows, [row])
        self.believed.add(i)
        return row

    def _standard(self, mean: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The posterior's units to the told values' standardised ones (the acquisition's)."""
        post, m = self.model.post, self.model
        return (mean * post.scale + post.mean - m.mean) / m.scale, np.sqrt(var) * post.scale / m.scale

    def _acquisition(self) -> int | None:
        """Each acquisition's best allowed row; gp_hedge's choice among them (each
        function's gain lowered by the mean at its previous pick, as between asks),
        then steps round it."""
        s, b = self.s, self.believed
        mu, std = self._standard(b.mean, b.var)
        scores = {n: s._acq(n, mu, std, self.y_opt) for n in self.names}
        picks = [_best_allowed(sc, self.blocked) for sc in scores.values()]
        if any(i is None for i in picks):
            return None
        choice = 0
        if len(picks) > 1:
            if self.last is not None:
                s._gains -= mu[self.last]
            choice = s._hedge_choice(len(picks))
            self.last = np.array(picks)
            s._hedge_last = b.rows[self.last]
        name = list(scores)[choice]
        return self._refined(picks[choice], name, scores[name][picks[choice]])

    def _refined(self, i: int, name: str, score: float) -> int:
        """Gaussian steps round row i at bayesian's scales, screened on a local posterior
        (_gp.Believed.local: its cost does not grow with the model points, where the exact
        one's does, a triangular solve against all of them per pick; with thousands of
        groups a pick must cost less than the results' spacing). The step the screen
        ranks best above row i is conditioned exactly, given the picks so far, and joins
        the rows where it beats row i there too; else row i."""
        s, b = self.s, self.believed
        steps = s._around(b.rows[i:i + 1], _STEPS_PER_SCALE)
        mu, std = self._standard(*b.local(np.vstack([b.rows[i:i + 1], steps]), i))
        screen = s._acq(name, mu, std, self.y_opt)
        banned = self.too_near(steps) | self._near_picks(steps, self.picked)
        j = _best_allowed(screen[1:], banned)
        if j is None or screen[1 + j] <= screen[0]:
            return i
        found = b.candidates(steps[j:j + 1])
        mu, std = self._standard(found[0], found[1])
        if s._acq(name, mu, std, self.y_opt)[0] <= score:
            return i
        return b.append(found, steps[j:j + 1], 0)

    def _draw_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The allowed rows where a posterior draw's minimum can be (Posterior.sample's
        rule), and a root of their covariance: every Thompson turn draws from it."""
        b = self.believed
        std = np.sqrt(b.var)
        lower = b.mean - 4.0 * std
        keep = np.flatnonzero(~self.blocked)
        if len(keep):
            keep = keep[lower[keep] <= np.min((b.mean + 4.0 * std)[keep])]
            keep = keep[np.argsort(lower[keep], kind="stable")[:_gp._SAMPLE_ROWS]]
        return keep, _gp.root(b.joint(keep)) if len(keep) else np.zeros((0, 0))

    def _thompson(self) -> int | None:
        """The minimum of one posterior draw over those rows not near a pick."""
        keep, root = self._draws
        allowed = ~self.blocked[keep]
        if not allowed.any():
            return None
        draw = self.believed.mean[keep] + root @ self.s.rng.standard_normal(len(keep))
        draw[~allowed] = np.inf
        return int(keep[np.argmin(draw)])

    def _near_picks(self, rows: np.ndarray, picks: list) -> np.ndarray:
        """Rows within min_distance (max-norm) of any of `picks`."""
        if not picks:
            return np.zeros(len(rows), dtype=bool)
        gaps = np.abs(rows[:, None, :] - np.array(picks)[None, :, :]).max(axis=2)
        return gaps.min(axis=1) < self.s.options["min_distance"]


def _best_allowed(score: np.ndarray, blocked: np.ndarray) -> int | None:
    """The highest-scoring row not blocked (the first of equals), or None."""
    free = np.flatnonzero(~blocked)
    return int(free[np.argmax(score[free])]) if len(free) else None
