"""A Gaussian-process surrogate whose cost stays bounded as a study grows.

Why not skopt's GP: it re-optimises the kernel hyperparameters (with restarts) on every
tell and predicts the spread with an einsum over the full inverse, which is what made one
suggestion cost ~3 s at 200 points. Here the expensive part (maximising the marginal
likelihood with scikit-learn) runs only on a schedule and on a capped subset; in between,
the fitted kernel is reused and a posterior is one Cholesky factorisation, so adding
constant-liar points for pending suggestions costs milliseconds.
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
from sklearn.gaussian_process.kernels import ConstantKernel, Hyperparameter, Matern, WhiteKernel

_JITTER = 1e-10
LS_PRIOR_MEDIAN = 0.5
LS_PRIOR_SIGMA = 1.0
# Hvarfner et al. 2024's length-scale prior instead (median e^sqrt2 x sqrt(d), log-sd
# sqrt3; BoTorch's default since 0.12): off, see benchmarks/RESULTS.md
LS_PRIOR_DIM_SCALED = False
# A log-normal prior (log-mean, log-sd) on the noise variance in standardised units, and
# its floor. Without one the fit puts the noise at either end (1e-8 on a noisy objective,
# or ~1 early on); BoTorch's prior (-4, 1) with a 1e-4 floor fixed that on hartmann6-noisy
# but cost smooth problems their last digits (benchmarks/RESULTS.md), so it is off.
NOISE_PRIOR = None
NOISE_MIN = 1e-8
# Input warping (Snoek et al. 2014; HEBO, Cowen-Rivers et al. 2022): every numeric column
# through a Kumaraswamy CDF whose two shape parameters are fitted with the kernel, with a
# log-normal prior (log-mean 0: no warping; log-sd WARP_PRIOR_SIGMA, BoTorch's) within
# WARP_BOUNDS. Off, see benchmarks/RESULTS.md
INPUT_WARPING = False
WARP_PRIOR_SIGMA = 0.75 ** 0.5
WARP_BOUNDS = (0.1, 10.0)
_WARP_EPS = 1e-6
# L-BFGS iterations per start: the likelihood surface is flat near its top, and a warm
# start from the previous kernel needs few steps
_MAX_ITER = {True: 100, False: 40}
_SAMPLE_ROWS = 400  # candidates in one joint posterior draw at most (see Posterior.sample)


def default_kernel(n_cols: int, base=None, numeric_cols=()):
    """Amplitude x Matern-5/2 with one length scale per column, plus fitted noise (the
    numeric columns warped when INPUT_WARPING is on)."""
    if base is None and INPUT_WARPING and len(numeric_cols):
        base = WarpedMatern(length_scale=np.ones(n_cols),
                            length_scale_bounds=[(0.01, 100.0)] * n_cols,
                            warp_cols=np.asarray(numeric_cols, dtype=int))
    if base is None:
        base = Matern52(length_scale=np.ones(n_cols),
                        length_scale_bounds=[(0.01, 100.0)] * n_cols, nu=2.5)
    return (ConstantKernel(1.0, (0.01, 1000.0)) * base
            + WhiteKernel(1e-3, (NOISE_MIN, 1.0)))


def fit_kernel(kernel, X: np.ndarray, y: np.ndarray, restarts: int, seed: int):
    """Maximise the marginal likelihood; returns the fitted kernel (start: `kernel`)."""
    maxiter = _MAX_ITER[restarts > 0]
    prior = _length_scale_prior(kernel)

    def _lbfgs(obj_func, initial_theta, bounds):
        res = minimize(lambda t: prior(t, *obj_func(t)), initial_theta, method="L-BFGS-B",
                       jac=True, bounds=bounds, options={"maxiter": maxiter})
        return res.x, res.fun

    gpr = GaussianProcessRegressor(kernel=kernel, normalize_y=True, optimizer=_lbfgs,
                                   n_restarts_optimizer=restarts, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        gpr.fit(X, y)
    return gpr.kernel_


def _length_scale_prior(kernel):
    """A log-normal prior on every length scale, added to the negative log likelihood.

    With a dozen points in six dimensions the likelihood alone often drives length scales
    to their bounds (0.01: a spiky model that explores at random; 100: a dimension
    ignored), and the search then wastes tens of evaluations. The prior (median
    LS_PRIOR_MEDIAN of the unit range, LS_PRIOR_SIGMA in log space) only matters while the
    data are few; the likelihood takes over as points accumulate. NOISE_PRIOR, when set,
    adds a log-normal prior on the white-noise variance the same way.
    """
    idx, warp, noise, offset, n_ls = [], [], None, 0, 0
    for hp in kernel.hyperparameters:
        if hp.fixed:
            continue
        if hp.name.endswith("length_scale"):
            idx.extend(range(offset, offset + hp.n_elements))
            n_ls = hp.n_elements
        elif hp.name.endswith(("warp_a", "warp_b")):
            warp.extend(range(offset, offset + hp.n_elements))
        elif hp.name.endswith("noise_level"):
            noise = offset
        offset += hp.n_elements
    idx, warp = np.array(idx, dtype=int), np.array(warp, dtype=int)
    if LS_PRIOR_DIM_SCALED:
        mu, var = np.sqrt(2.0) + 0.5 * np.log(max(1, n_ls)), 3.0
    else:
        mu, var = np.log(LS_PRIOR_MEDIAN), LS_PRIOR_SIGMA ** 2
    noise_prior = NOISE_PRIOR if noise is not None else None

    def penalised(theta, value, grad):
        d = theta[idx] - mu
        grad = np.array(grad, dtype=float)
        grad[idx] += d / var
        value = value + 0.5 * float(d @ d) / var
        if len(warp):
            w = theta[warp] / WARP_PRIOR_SIGMA ** 2
            grad[warp] += w
            value += 0.5 * float(theta[warp] @ w)
        if noise_prior is not None:
            m, sd = noise_prior
            e = theta[noise] - m
            grad[noise] += e / sd ** 2
            value += 0.5 * e * e / sd ** 2
        return value, grad

    return penalised


class Matern52(Matern):
    """scikit-learn's Matern-5/2 with its arrays computed in place: the same operations in
    the same order, so the same numbers, without the temporary arrays (n x n x d ones for
    the gradient, the kernel fit's inner loop; candidates x n ones for predictions). At 150
    points in 20 dimensions a call with the gradient took 12.6 ms in scikit-learn's and
    3.4 ms here. Other orders of smoothness are scikit-learn's own code."""

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


class WarpedMatern(Matern):
    """Matern-5/2 on inputs whose `warp_cols` pass through a Kumaraswamy CDF,
    w(x) = 1 - (1 - x^a)^b, with a and b per column fitted as hyperparameters.

    Why: the unit-cube encoding fixes how far apart two settings are, but a model's error
    often changes fast at one end of a range (a learning rate near divergence, a tree's
    depth near 1) and hardly at all elsewhere; one stationary length scale per column
    cannot fit both. a, b = 1 is no warping; the prior keeps them there until the data say
    otherwise. The gradient with respect to log a and log b is analytic (chain rule
    through the Matern's dependence on the squared distance), so the fit costs one more
    n x n array per warped column and parameter.
    """

    def __init__(self, length_scale=1.0, length_scale_bounds=(1e-5, 1e5), nu=2.5,
                 warp_cols=(), warp_a=None, warp_b=None, warp_bounds=None):
        super().__init__(length_scale, length_scale_bounds, nu)
        self.warp_cols = np.asarray(warp_cols, dtype=int)
        n = len(self.warp_cols)
        self.warp_a = np.ones(n) if warp_a is None else np.asarray(warp_a, dtype=float)
        self.warp_b = np.ones(n) if warp_b is None else np.asarray(warp_b, dtype=float)
        self.warp_bounds = WARP_BOUNDS if warp_bounds is None else warp_bounds

    @property
    def hyperparameter_warp_a(self):
        return Hyperparameter("warp_a", "numeric", self.warp_bounds, len(self.warp_cols))

    @property
    def hyperparameter_warp_b(self):
        return Hyperparameter("warp_b", "numeric", self.warp_bounds, len(self.warp_cols))

    def warp(self, X):
        X = np.array(X, dtype=float)
        x = np.clip(X[:, self.warp_cols], _WARP_EPS, 1.0 - _WARP_EPS)
        X[:, self.warp_cols] = 1.0 - (1.0 - x ** self.warp_a) ** self.warp_b
        return X

    def is_stationary(self):
        return False

    def __call__(self, X, Y=None, eval_gradient=False):
        W = self.warp(X)
        if not eval_gradient:
            return super().__call__(W, None if Y is None else self.warp(Y))
        K, grad_ls = super().__call__(W, None, eval_gradient=True)
        if self.hyperparameter_warp_a.fixed:
            return K, grad_ls
        # dk/dw_i (point p, column c) = g_pq (w_pc - w_qc) / l_c^2, with the Matern-5/2
        # g = -(5/3)(1 + sqrt5 r) exp(-sqrt5 r); r the scaled distance
        ls = np.broadcast_to(np.asarray(self.length_scale, dtype=float), (X.shape[1],))
        diff = (W[:, None, :] - W[None, :, :]) / ls
        r = np.sqrt(np.sum(diff ** 2, axis=-1))
        g = -(5.0 / 3.0) * (1.0 + np.sqrt(5.0) * r) * np.exp(-np.sqrt(5.0) * r)
        x = np.clip(np.asarray(X, dtype=float)[:, self.warp_cols], _WARP_EPS, 1.0 - _WARP_EPS)
        a, b = self.warp_a, self.warp_b
        xa = x ** a
        base = 1.0 - xa
        dw_dloga = a * b * base ** (b - 1.0) * xa * np.log(x)
        dw_dlogb = -b * base ** b * np.log(base)
        grads = []
        for dw in (dw_dloga, dw_dlogb):
            cols = []
            for j, c in enumerate(self.warp_cols):
                dd = diff[:, :, c] / ls[c]
                cols.append(g * dd * (dw[:, None, j] - dw[None, :, j]))
            grads.append(np.stack(cols, axis=-1))
        return K, np.concatenate([grad_ls] + grads, axis=-1)

    def __repr__(self):
        return (f"WarpedMatern(length_scale={np.round(self.length_scale, 3).tolist()}, "
                f"a={np.round(self.warp_a, 3).tolist()}, b={np.round(self.warp_b, 3).tolist()})")


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
        self.alpha = cho_solve((self.L, True), (y - self.mean) / self.scale, check_finite=False)
        self.prior_var = float(self.signal.diag(X[:1])[0])

    def predict(self, Xs: np.ndarray, normalized: bool = False):
        """(mean, std) at rows Xs; normalized=True gives them in standardised units."""
        Ks = self.signal(Xs, self.X)
        mu = Ks @ self.alpha
        v = solve_triangular(self.L, Ks.T, lower=True, check_finite=False)
        var = np.maximum(self.prior_var - np.einsum("ij,ij->j", v, v), 1e-12)
        std = np.sqrt(var)
        if normalized:
            return mu, std
        return mu * self.scale + self.mean, std * self.scale

    def sample(self, Xs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One joint draw of the latent function at rows Xs (objective units), where it
        can be the draw's minimum; +inf elsewhere.

        A joint draw costs a Cholesky of the candidates' covariance (cubic: 1,256
        candidates took 66 ms). Only rows whose lower bound mean - 4 sd lies below the
        lowest upper bound mean + 4 sd can hold the minimum (each bound fails with
        probability 3e-5), so the draw is made there alone, on at most _SAMPLE_ROWS
        rows with the lowest lower bounds: the argmin is the same in all but rare cases.
        """
        mu, std = self.predict(Xs, normalized=True)
        lower = mu - 4.0 * std
        keep = np.flatnonzero(lower <= np.min(mu + 4.0 * std))
        if len(keep) > _SAMPLE_ROWS:
            keep = keep[np.argsort(lower[keep], kind="stable")[:_SAMPLE_ROWS]]
        out = np.full(len(Xs), np.inf)
        out[keep] = self._joint_draw(Xs[keep], rng)
        return out

    def _joint_draw(self, Xs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        Ks = self.signal(Xs, self.X)
        v = solve_triangular(self.L, Ks.T, lower=True, check_finite=False)
        cov = self.signal(Xs) - v.T @ v
        z = rng.standard_normal(len(Xs))
        for jitter in (1e-8, 1e-6, 1e-4):
            try:
                root = cholesky(cov + jitter * np.eye(len(Xs)), lower=True, check_finite=False)
                break
            except np.linalg.LinAlgError:
                continue
        else:  # numerically not positive definite: independent draws still explore
            root = np.diag(np.sqrt(np.maximum(np.diag(cov), 0.0)))
        draw = Ks @ self.alpha + root @ z
        return draw * self.scale + self.mean


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
