"""A Gaussian-process surrogate whose cost stays bounded as a study grows.

Why not skopt's GP: it re-optimises the kernel hyperparameters (with restarts) on every
tell and predicts the spread with an einsum over the full inverse, so one suggestion
costs seconds at a few hundred points (benchmarks/results/quality_suite.md). Here the
expensive part (maximising the marginal likelihood: scikit-learn's, computed by
_Likelihood for the default kernel) runs only on a schedule and on a capped subset; in
between, the fitted kernel is reused and a posterior is one Cholesky factorisation, so
adding constant-liar points for pending suggestions costs milliseconds.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
from scipy.linalg import cho_solve, cholesky, solve_triangular
from scipy.optimize import minimize
from scipy.spatial.distance import cdist, pdist, squareform
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

_JITTER = 1e-10     # added to the kernel's diagonal: a Cholesky of near-duplicate points holds
# The length scales' log-normal prior (median, log-sd), in units of the unit range: a median
# of half the range keeps a few points in several dimensions from a spiky or a blind model
# (see _length_scale_prior); the dimension-scaled prior of Hvarfner et al. 2024 lost on the
# quality suite (benchmarks/results/quality_suite.md).
LS_PRIOR_MEDIAN = 0.5
LS_PRIOR_SIGMA = 1.0
NOISE_MIN = 1e-8    # the white noise's lower bound: a noise-free objective may be fitted exactly
# L-BFGS iterations per start: the likelihood surface is flat near its top, and a warm
# start from the previous kernel needs few steps
_MAX_ITER = {True: 100, False: 40}
_SAMPLE_ROWS = 400  # candidates in one joint posterior draw at most (see Posterior.sample)
# Points a local posterior conditions on (Believed.local): laGP's default local design size
# (Gramacy & Apley 2015, `end = 50`); beyond the nearest few dozen, points barely correlate
# with a neighbourhood of a point
LOCAL_POINTS = 50


def default_kernel(n_cols: int, base=None):
    """Amplitude x Matern-5/2 with one length scale per column (or `base`), plus fitted
    noise."""
    if base is None:
        base = Matern52(length_scale=np.ones(n_cols),
                        length_scale_bounds=[(0.01, 100.0)] * n_cols, nu=2.5)
    return (ConstantKernel(1.0, (0.01, 1000.0)) * base
            + WhiteKernel(1e-3, (NOISE_MIN, 1.0)))


def fit_kernel(kernel, X: np.ndarray, y: np.ndarray, restarts: int, seed: int):
    """Maximise the marginal likelihood; returns the fitted kernel (start: `kernel`, then
    `restarts` random starts drawn as scikit-learn draws them)."""
    likelihood = _Likelihood.of(kernel, X, y)
    if likelihood is None:
        return _fit_sklearn(kernel, X, y, restarts, seed)
    optimise = _optimiser(kernel, restarts)
    bounds, rng = kernel.bounds, np.random.RandomState(seed)
    starts = [kernel.theta] + [rng.uniform(bounds[:, 0], bounds[:, 1]) for _ in range(restarts)]
    optima = [optimise(likelihood, start, bounds) for start in starts]
    return kernel.clone_with_theta(min(optima, key=lambda o: o[1])[0])


def _optimiser(kernel, restarts: int):
    """L-BFGS-B on the negative log likelihood plus the length scales' prior, with
    scikit-learn's optimizer signature."""
    maxiter = _MAX_ITER[restarts > 0]
    prior = _length_scale_prior(kernel)

    def lbfgs(obj_func, initial_theta, bounds):
        res = minimize(lambda t: prior(t, *obj_func(t)), initial_theta, method="L-BFGS-B",
                       jac=True, bounds=bounds, options={"maxiter": maxiter})
        return res.x, res.fun

    return lbfgs


def _fit_sklearn(kernel, X, y, restarts: int, seed: int):
    """scikit-learn's fit, for kernels _Likelihood does not know (the Hamming kernel)."""
    gpr = GaussianProcessRegressor(kernel=kernel, normalize_y=True,
                                   optimizer=_optimiser(kernel, restarts),
                                   n_restarts_optimizer=restarts, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        gpr.fit(X, y)
    return gpr.kernel_


class _Likelihood:
    """The negative log marginal likelihood and its gradient in the log-hyperparameters
    for default_kernel's shape (amplitude x anisotropic Matern-5/2 + white noise), as
    scikit-learn's GaussianProcessRegressor(normalize_y=True) computes them (the same
    standardised values, the same 1e-10 on the diagonal, the same formulas), without
    its per-evaluation kernel cloning and parameter bookkeeping, which cost several
    times the arithmetic on the tens to a few hundred points a fit sees; and the length
    scales' gradient from column sums (O(n^2 d)) instead of an n x n x d tensor.
    tests/test_searchers.py checks both against scikit-learn's."""

    _ALPHA = 1e-10                  # GaussianProcessRegressor's default alpha

    def __init__(self, X: np.ndarray, y: np.ndarray):
        self.X = X
        std = float(np.std(y))
        self.y = (y - np.mean(y)) / (std if std != 0.0 else 1.0)

    @classmethod
    def of(cls, kernel, X: np.ndarray, y: np.ndarray):
        """The likelihood for `kernel`, or None where its shape is not default_kernel's."""
        from sklearn.gaussian_process.kernels import Product, Sum

        shaped = (isinstance(kernel, Sum) and isinstance(kernel.k1, Product)
                  and isinstance(kernel.k2, WhiteKernel)
                  and isinstance(kernel.k1.k1, ConstantKernel)
                  and type(kernel.k1.k2) is Matern52 and kernel.k1.k2.nu == 2.5
                  and kernel.k1.k2.anisotropic and y.ndim == 1
                  and kernel.n_dims == X.shape[1] + 2)      # (no hyperparameter fixed)
        return cls(X, y) if shaped else None

    def __call__(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        amp, ls, noise = np.exp(theta[0]), np.exp(theta[1:-1]), np.exp(theta[-1])
        Z = self.X / ls
        r = squareform(pdist(Z)) * math.sqrt(5)
        decay = np.exp(-r)
        M = (1.0 + r + r * r / 3.0) * decay               # Matern-5/2's correlation
        K = amp * M
        K[np.diag_indices_from(K)] += noise + self._ALPHA
        try:
            L = cholesky(K, lower=True, check_finite=False)
        except np.linalg.LinAlgError:                     # (scikit-learn's answer)
            return np.inf, np.zeros_like(theta)
        a = cho_solve((L, True), self.y, check_finite=False)
        n = len(self.y)
        lml = (-0.5 * float(self.y @ a) - float(np.log(np.diag(L)).sum())
               - n / 2 * math.log(2 * math.pi))
        W = np.outer(a, a) - cho_solve((L, True), np.eye(n), check_finite=False)
        grad = np.empty_like(theta)
        grad[0] = 0.5 * amp * float(np.sum(W * M))
        # d K / d log l_j = amp * 5/3 * D_j * (1 + r) * exp(-r), D_j the squared scaled gap
        E = W * (1.0 + r) * decay * (amp * 5.0 / 3.0)
        grad[1:-1] = E.sum(axis=1) @ (Z * Z) - ((E @ Z) * Z).sum(axis=0)   # (half of 2 x ...)
        grad[-1] = 0.5 * noise * float(np.trace(W))
        return -lml, -grad


def _length_scale_prior(kernel):
    """A log-normal prior on every length scale, added to the negative log likelihood.

    With a dozen points in six dimensions the likelihood alone often drives length scales
    to their bounds (0.01: a spiky model that explores at random; 100: a dimension
    ignored), and the search then wastes tens of evaluations. The prior (median
    LS_PRIOR_MEDIAN of the unit range, LS_PRIOR_SIGMA in log space) only matters while the
    data are few; the likelihood takes over as points accumulate.
    """
    idx, offset = [], 0
    for hp in kernel.hyperparameters:
        if hp.fixed:
            continue
        if hp.name.endswith("length_scale"):
            idx.extend(range(offset, offset + hp.n_elements))
        offset += hp.n_elements
    idx = np.array(idx, dtype=int)
    mu, var = np.log(LS_PRIOR_MEDIAN), LS_PRIOR_SIGMA ** 2

    def penalised(theta, value, grad):
        d = theta[idx] - mu
        grad = np.array(grad, dtype=float)
        grad[idx] += d / var
        value = value + 0.5 * float(d @ d) / var
        return value, grad

    return penalised


class Matern52(Matern):
    """scikit-learn's Matern-5/2 with its arrays computed in place: the same operations in
    the same order, so the same numbers, without the temporary arrays (n x n x d ones for
    the gradient, the kernel fit's inner loop; candidates x n ones for predictions), which
    cost several times the arithmetic at a hundred points and more. Other orders of
    smoothness are scikit-learn's own code."""

    def __call__(self, X, Y=None, eval_gradient=False):
        if self.nu != 2.5 or (eval_gradient and (Y is not None or not self.anisotropic
                                                 or self.hyperparameter_length_scale.fixed)):
            return super().__call__(X, Y, eval_gradient)
        X = np.atleast_2d(X)
        length_scale = np.squeeze(self.length_scale).astype(float)   # (as scikit-learn's)
        if Y is None:
            K = pdist(X / length_scale, metric="euclidean")
        else:
            K = cdist(X / length_scale, Y / length_scale, metric="euclidean")
        K *= math.sqrt(5)             # scikit-learn's (1 + K + K**2 / 3) * exp(-K)
        square = np.square(K)
        square /= 3.0
        out = K + 1.0
        out += square
        np.negative(K, out=K)
        np.exp(K, out=K)
        out *= K
        if Y is None:
            out = squareform(out)
            np.fill_diagonal(out, 1)
        if not eval_gradient:
            return out
        D = X[:, np.newaxis, :] - X[np.newaxis, :, :]
        np.square(D, out=D)
        D /= length_scale**2          # D: the squared scaled distance per column
        tmp = np.sqrt(5 * D.sum(-1))[..., np.newaxis]
        D *= 5.0 / 3.0                # scikit-learn's 5/3 * D * (tmp + 1) * exp(-tmp)
        D *= tmp + 1
        D *= np.exp(-tmp)
        return out, D


class Posterior:
    """GP posterior for a fixed kernel: one Cholesky at construction, cheap predictions."""

    def __init__(self, kernel, X: np.ndarray, y: np.ndarray):
        self.signal = kernel.k1  # amplitude x correlation; kernel.k2 is the white noise
        self.X = X
        self.mean = float(np.mean(y))
        self.scale = float(np.std(y)) or 1.0
        K = kernel(X)
        K[np.diag_indices_from(K)] += _JITTER
        self.L = cholesky(K, lower=True, check_finite=False)
        self.z = (y - self.mean) / self.scale       # the values, standardised
        self.alpha = cho_solve((self.L, True), self.z, check_finite=False)
        self.prior_var = float(self.signal.diag(X[:1])[0])
        # the white noise (kernel.k2), standardised: what a believed point adds to its variance
        self.noise = float(getattr(kernel.k2, "noise_level", 0.0)) + _JITTER

    def moments(self, Xs: np.ndarray):
        """(mean, variance, V) at rows Xs in standardised units, V = L^-1 k(X, Xs): the
        factor Believed conditions with."""
        Ks = self.signal(Xs, self.X)
        mu = Ks @ self.alpha
        v = solve_triangular(self.L, Ks.T, lower=True, check_finite=False)
        return mu, np.maximum(self.prior_var - np.einsum("ij,ij->j", v, v), 1e-12), v

    def predict(self, Xs: np.ndarray, normalized: bool = False):
        """(mean, std) at rows Xs; normalized=True gives them in standardised units."""
        mu, var, _ = self.moments(Xs)
        std = np.sqrt(var)
        if normalized:
            return mu, std
        return mu * self.scale + self.mean, std * self.scale

    def sample(self, Xs: np.ndarray, rng: np.random.Generator, count: int | None = None) -> np.ndarray:
        """One joint draw of the latent function at rows Xs (objective units), where it
        can be the draw's minimum; +inf elsewhere (`count`: that many independent draws,
        one per row of the result, for the price of one factorisation).

        A joint draw costs a Cholesky of the candidates' covariance (cubic in their
        number). Only rows whose lower bound mean - 4 sd lies below the
        lowest upper bound mean + 4 sd can hold the minimum (each bound fails with
        probability 3e-5), so the draw is made there alone, on at most _SAMPLE_ROWS
        rows with the lowest lower bounds: the argmin is the same in all but rare cases.
        """
        mu, std = self.predict(Xs, normalized=True)
        lower = mu - 4.0 * std
        keep = np.flatnonzero(lower <= np.min(mu + 4.0 * std))
        if len(keep) > _SAMPLE_ROWS:
            keep = keep[np.argsort(lower[keep], kind="stable")[:_SAMPLE_ROWS]]
        out = np.full((1 if count is None else count, len(Xs)), np.inf)
        out[:, keep] = self._joint_draws(Xs[keep], rng, len(out))
        return out[0] if count is None else out

    def _joint_draws(self, Xs: np.ndarray, rng: np.random.Generator, count: int) -> np.ndarray:
        Ks = self.signal(Xs, self.X)
        v = solve_triangular(self.L, Ks.T, lower=True, check_finite=False)
        cov = self.signal(Xs) - v.T @ v
        z = rng.standard_normal((len(Xs), count)) if count > 1 else rng.standard_normal(len(Xs))
        draw = (Ks @ self.alpha)[:, None] + (root(cov) @ z).reshape(len(Xs), count)
        return (draw * self.scale + self.mean).T


def root(cov: np.ndarray) -> np.ndarray:
    """A lower Cholesky factor of a covariance (a draw is mean + root @ z), with growing
    jitter where it is numerically singular; independent draws as the last resort."""
    for jitter in (1e-8, 1e-6, 1e-4):
        try:
            return cholesky(cov + jitter * np.eye(len(cov)), lower=True, check_finite=False)
        except np.linalg.LinAlgError:
            continue
    return np.diag(np.sqrt(np.maximum(np.diag(cov), 0.0)))   # (independent draws still explore)


def root_or_none(K: np.ndarray) -> np.ndarray | None:
    """The lower Cholesky factor of K, or None where it is numerically singular."""
    try:
        return cholesky(K, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        return None


class Believed:
    """The posterior at candidate rows as suggestions join it one at a time, each
    believed (its value the posterior mean there: the kriging believer).

    A believed value leaves the posterior mean unchanged everywhere (for the same prior
    mean); only the variance falls, near the new point. So a batch needs one
    factorisation (the Posterior's) and then, per suggestion, one covariance column over
    the rows (GP-BUCB's hallucinated observations, Desautels et al. 2014): the k-th pick
    conditions on the k-1 before it, and on every pending point the Posterior holds,
    exactly. New rows (a local search round a pick) are conditioned on the picks so far
    (`candidates`), and the one chosen joins (`append`: room for one a pick). Standardised
    units, as Posterior.moments."""

    def __init__(self, post: Posterior, rows: np.ndarray, picks: int):
        self.post, self.size = post, len(rows)
        room, picks = len(rows) + picks, max(1, picks)
        mean, var, v = post.moments(rows)
        self._rows = np.zeros((room, rows.shape[1]))
        self._mean, self._var = np.zeros(room), np.zeros(room)
        self._vt = np.zeros((room, v.shape[0]))       # rows x model points: V^T
        self._g = np.zeros((room, picks))             # each pick's innovation column
        # the picks' own rows of _rows, _vt and _g (lower triangular, their sd on the
        # diagonal), kept in pick order as they join: every new row is conditioned on them
        self._picked = _Picked(picks, rows.shape[1], v.shape[0])
        self._rows[:self.size], self._mean[:self.size], self._var[:self.size] = rows, mean, var
        self._vt[:self.size] = v.T
        self.picks: list[int] = []                    # the rows believed, in order

    rows = property(lambda self: self._rows[:self.size])
    mean = property(lambda self: self._mean[:self.size])
    var = property(lambda self: self._var[:self.size])

    def add(self, i: int) -> None:
        """Row i joins (believed): every row's variance drops by its covariance with it."""
        n, size = len(self.picks), self.size
        if n == self._g.shape[1]:             # more picks than sized for: double the columns
            self._g = np.hstack([self._g, np.zeros_like(self._g)])
        vt, g = self._vt[:size], self._g[:size]
        sd = math.sqrt(max(float(self._var[i]), 0.0) + self.post.noise)
        self._picked.add(self._rows[i], vt[i], g[i, :n], sd)
        cov = self.post.signal(self.rows, self.rows[i:i + 1])[:, 0] - vt @ vt[i]
        if n:
            cov -= g[:, :n] @ g[i, :n]
        g[:, n] = cov / sd
        self._var[:size] = np.maximum(self._var[:size] - g[:, n] ** 2, 1e-12)
        self.picks.append(i)

    def joint(self, keep: np.ndarray) -> np.ndarray:
        """The covariance of rows `keep`, conditioned on the picks so far."""
        n, rows, vt, g = len(self.picks), self.rows[keep], self._vt[keep], self._g[keep]
        return self.post.signal(rows) - vt @ vt.T - g[:, :n] @ g[:, :n].T

    def candidates(self, rows: np.ndarray) -> tuple:
        """(mean, variance, V^T, innovations) at new rows, conditioned on the picks so far:
        each pick's innovation at them by forward substitution (not stored)."""
        mean, var, v = self.post.moments(rows)
        vt = np.ascontiguousarray(v.T)
        n = len(self.picks)
        g = np.zeros((len(rows), self._g.shape[1]))
        if n:
            p = self._picked
            cov = self.post.signal(rows, p.rows[:n]) - vt @ p.vt[:n].T
            g[:, :n] = solve_triangular(p.among[:n, :n], cov.T, lower=True, check_finite=False).T
            var = np.maximum(var - np.einsum("ij,ij->i", g[:, :n], g[:, :n]), 1e-12)
        return mean, var, vt, g

    def local(self, rows: np.ndarray, centre: int) -> tuple[np.ndarray, np.ndarray]:
        """(mean, variance) at `rows` near row `centre` from a local posterior: the same
        kernel conditioned on the LOCAL_POINTS model points and picks that correlate most
        with the centre (a local approximate GP, Gramacy & Apley 2015), each pick at its
        believed value. Its cost does not grow with the model points, where the exact
        posterior at a new row costs a triangular solve against all of them; conditioning
        on fewer points only raises the variance, and far points hardly move either
        moment near the centre. For screening steps round a pick: the one that joins is
        conditioned exactly (`candidates`)."""
        post, picks = self.post, self._picked.rows[:len(self.picks)]
        points = np.vstack([post.X, picks]) if len(picks) else post.X
        values = np.concatenate([post.z, self._mean[self.picks]])
        near = post.signal(self._rows[centre:centre + 1], points)[0]
        if len(near) > LOCAL_POINTS:
            near = np.argpartition(-near, LOCAL_POINTS - 1)[:LOCAL_POINTS]
        else:
            near = np.arange(len(near))
        K = post.signal(points[near])
        K[np.diag_indices_from(K)] += post.noise
        L = root_or_none(K)
        Ks = post.signal(rows, points[near])
        if L is None:                          # (numerically singular: the prior's moments)
            return np.zeros(len(rows)), np.full(len(rows), post.prior_var)
        v = solve_triangular(L, Ks.T, lower=True, check_finite=False)
        mean = v.T @ solve_triangular(L, values[near], lower=True, check_finite=False)
        return mean, np.maximum(post.prior_var - np.einsum("ij,ij->j", v, v), 1e-12)

    def append(self, found: tuple, rows: np.ndarray, j: int) -> int:
        """Row j of a `candidates` answer (for `rows`) joins the rows; returns its index."""
        mean, var, vt, g = found
        i = self.size
        if i == len(self._rows):              # more rows than sized for: double the room
            self._grow()
        self._rows[i], self._mean[i], self._var[i] = rows[j], mean[j], var[j]
        self._vt[i], self._g[i] = vt[j], g[j]
        self.size += 1
        return i

    def _grow(self) -> None:
        for name in ("_rows", "_mean", "_var", "_vt", "_g"):
            a = getattr(self, name)
            setattr(self, name, np.concatenate([a, np.zeros_like(a)]))


class _Picked:
    """Believed's picks in the order they joined: their rows, their V^T rows, and their
    innovations at each other (lower triangular, each pick's sd on the diagonal), each
    stored once as it joins, so that conditioning a new row on them reads contiguous
    arrays instead of gathering them from every row at every pick."""

    def __init__(self, room: int, cols: int, points: int):
        self.rows, self.vt = np.zeros((room, cols)), np.zeros((room, points))
        self.among = np.zeros((room, room))
        self.n = 0

    def add(self, row: np.ndarray, vt: np.ndarray, g: np.ndarray, sd: float) -> None:
        n = self.n
        if n == len(self.rows):                  # more picks than sized for: double the room
            self.rows = np.concatenate([self.rows, np.zeros_like(self.rows)])
            self.vt = np.concatenate([self.vt, np.zeros_like(self.vt)])
            among = np.zeros((2 * n, 2 * n))
            among[:n, :n] = self.among
            self.among = among
        self.rows[n], self.vt[n] = row, vt
        self.among[n, :n], self.among[n, n] = g, sd
        self.n += 1


def loo_agreement(kernel, X: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation of the leave-one-out posterior means with y (closed form:
    mean_i = y_i - [K^-1 y]_i / [K^-1]_ii, Rasmussen & Williams 2006, eq. 5.12)."""
    from scipy.stats import spearmanr

    K = kernel(X)
    K[np.diag_indices_from(K)] += _JITTER
    z = (y - np.mean(y)) / (np.std(y) or 1.0)
    try:
        L = cholesky(K, lower=True, check_finite=False)
    except np.linalg.LinAlgError:      # (numerically singular: no evidence either way)
        return 0.5
    inv = cho_solve((L, True), np.eye(len(y)), check_finite=False)
    loo = z - (inv @ z) / np.diag(inv)
    if np.ptp(z) == 0 or np.ptp(loo) == 0:
        # (a plateau: every result alike, as from a model that never learns; the rank
        # correlation is undefined, and scipy would warn on stderr at every suggestion)
        return 0.0
    rho = spearmanr(loo, z).statistic
    return float(rho) if np.isfinite(rho) else 0.0


class Standardised:
    """A posterior's predictions in standardised units (told values: mean 0, std 1)."""

    def __init__(self, post, mean: float, scale: float):
        self.post, self.mean, self.scale = post, mean, scale

    def predict(self, rows):
        mu, std = self.post.predict(rows)
        return (mu - self.mean) / self.scale, std / self.scale
