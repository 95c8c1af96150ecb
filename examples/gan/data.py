"""Generated calorimeter showers: a miniature of the data the 3D calorimeter GANs learn.

The GANs of the seeds learn electron showers in a 25 x 25 x 25 cell electromagnetic
calorimeter, conditioned on the primary energy. Here the calorimeter has 8 x 8 x 8 cells
and a shower is drawn from the shapes that matter for the figure of merit:

- longitudinal: a gamma profile over depth whose maximum moves deeper with log(E), as an
  electromagnetic shower's does, with a fluctuating shower maximum;
- transverse: a Gaussian core around an impact point jittered by a fraction of a cell,
  widening with depth;
- the deposit: a sampling fraction of 0.9 with a stochastic resolution of 10%/sqrt(E),
  and cell-to-cell fluctuations.

load() returns (images, energies): images (n, 8, 8, 8) in GeV per cell (x, y, depth),
energies (n,) in units of 100 GeV, the condition the generator and the figure of merit
use (the model reads them as the labels).
"""
import numpy as np

SIZE = 8                      # cells along x, y and depth
EVENTS = 2000
E_MIN, E_MAX = 10.0, 100.0    # the primary electron's energy, GeV
SAMPLING = 0.9                # the fraction of the energy the cells see


def showers(n: int = EVENTS, seed: int = 0):
    """n showers: (images (n, SIZE, SIZE, SIZE) float32 GeV, energies (n,) float32 / 100 GeV)."""
    rng = np.random.default_rng(seed)
    energy = rng.uniform(E_MIN, E_MAX, n)
    depth = np.arange(SIZE) + 0.5
    shower_max = 1.0 + 0.9 * np.log(energy / E_MIN) + rng.normal(0.0, 0.3, n)
    shape = 3.0
    rate = (shape - 1.0) / np.clip(shower_max, 0.5, None)
    longitudinal = depth[None, :] ** (shape - 1.0) * np.exp(-rate[:, None] * depth[None, :])
    longitudinal /= longitudinal.sum(axis=1, keepdims=True)                   # (n, z)

    centre = (SIZE - 1) / 2 + rng.normal(0.0, 0.3, (n, 2))
    width = 0.5 + 0.15 * depth                                                # per layer
    cells = np.arange(SIZE)
    gx = np.exp(-(cells[None, None, :] - centre[:, 0, None, None]) ** 2 / (2 * width[None, :, None] ** 2))
    gy = np.exp(-(cells[None, None, :] - centre[:, 1, None, None]) ** 2 / (2 * width[None, :, None] ** 2))
    gx /= gx.sum(axis=2, keepdims=True)                                       # (n, z, x)
    gy /= gy.sum(axis=2, keepdims=True)                                       # (n, z, y)

    deposit = SAMPLING * energy * (1.0 + rng.normal(0.0, 0.1, n) / np.sqrt(energy))
    images = np.einsum("n,nz,nzx,nzy->nxyz", deposit, longitudinal, gx, gy)
    images *= rng.gamma(25.0, 1.0 / 25.0, images.shape)                      # cell fluctuations
    return images.astype(np.float32), (energy / 100.0).astype(np.float32)


def load():
    return showers()
