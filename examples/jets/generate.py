"""Generate the jets example data: calorimeter images of boosted jets, two classes.

Signal jets are hadronic W-boson decays: two hard prongs whose angular separation shrinks
as the jet's transverse momentum grows (dR ~ 2 m_W / pT) and which share the momentum
evenly. Background jets are QCD quark/gluon jets: one hard core with soft, wide radiation
and now and then a much softer second prong. Each jet is a 16 x 16 image in (eta, phi)
around the jet axis, pixel = summed pT of the particles that hit it, normalised to the jet
pT. Everything comes from a fixed seed per file, so every rank that generates a missing
file writes the same bytes; files are written atomically.

    python examples/jets/generate.py            # writes examples/jets/data/jets_{0..3}.h5
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"
FILES, JETS_PER_FILE, PIXELS, HALF_WIDTH = 4, 1000, 16, 0.8
M_W = 80.4


def _prongs(rng, signal: bool, pt: float):
    """(eta, phi, momentum fraction, width) of the hard prongs of one jet."""
    if signal:
        z = rng.uniform(0.2, 0.8)
        dr = min(2.0 * M_W / pt * rng.uniform(0.9, 1.3), 0.7)
        angle = rng.uniform(0, 2 * np.pi)
        d = dr * np.array([np.cos(angle), np.sin(angle)])
        return [(*(-(1 - z) * d), z, 0.04), (*(z * d), 1 - z, 0.04)]
    prongs = [(0.0, 0.0, 1.0, 0.07)]
    if rng.random() < 0.4:
        z = rng.uniform(0.02, 0.12)
        dr = rng.uniform(0.1, 0.6)
        angle = rng.uniform(0, 2 * np.pi)
        prongs = [(0.0, 0.0, 1 - z, 0.07), (dr * np.cos(angle), dr * np.sin(angle), z, 0.05)]
    return prongs


def jet_image(rng, signal: bool) -> np.ndarray:
    pt = rng.uniform(250.0, 500.0)
    hits, weights = [], []
    for eta, phi, frac, width in _prongs(rng, signal, pt):
        n = max(2, rng.poisson(12 * frac + 4))
        share = rng.dirichlet(np.full(n, 0.6)) * frac
        hits.append(rng.normal((eta, phi), width, size=(n, 2)))
        weights.append(share)
    n_soft = rng.poisson(6 if signal else 10)  # soft wide-angle radiation, more from gluons
    hits.append(rng.normal(0.0, 0.35, size=(n_soft, 2)))
    weights.append(rng.exponential(0.01, n_soft))
    hits, weights = np.concatenate(hits), np.concatenate(weights)
    edges = np.linspace(-HALF_WIDTH, HALF_WIDTH, PIXELS + 1)
    image, _, _ = np.histogram2d(hits[:, 0], hits[:, 1], bins=(edges, edges), weights=weights)
    return (image / max(image.sum(), 1e-9)).astype(np.float32)


def make_file(index: int):
    """The images (N, 16, 16, 1) and labels (1 = W jet) of file `index`."""
    rng = np.random.default_rng(1000 + index)
    labels = rng.integers(0, 2, JETS_PER_FILE)
    images = np.stack([jet_image(rng, bool(s)) for s in labels])[..., None]
    return images, labels.astype(np.int64)


def files() -> list[Path]:
    return [DATA / f"jets_{i}.h5" for i in range(FILES)]


def ensure() -> list[Path]:
    """Write whatever file is missing; return the file list."""
    from mpiopt.training.data import write_hdf5

    for i, file in enumerate(files()):
        if not file.exists():
            write_hdf5(file, *make_file(i), features="images", labels="labels")
    return files()


if __name__ == "__main__":
    for path in ensure():
        print(path)
    sys.exit(0)
