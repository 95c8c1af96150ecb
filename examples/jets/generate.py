"""Generate the jets example data: calorimeter images of boosted jets, two classes.

Signal jets are hadronic W-boson decays: two hard prongs whose angular separation shrinks
as the jet's transverse momentum grows (dR ~ 2 m_W / pT) and which share the momentum
evenly. Background jets are QCD quark/gluon jets: one hard core with soft, wide radiation
and now and then a much softer second prong. Each jet is a 16 x 16 image in (eta, phi)
around the jet axis, pixel = summed pT of the particles that hit it, normalised to the jet
pT. Everything comes from a fixed seed per file, so every rank that generates a missing
file writes the same bytes; files are written atomically.

    python examples/jets/generate.py              # writes examples/jets/data/jets_{0..3}.h5
    python examples/jets/generate.py --root       # and the same jets as data/root/jets_*.root
    python examples/jets/generate.py --particles  # jets as particle lists: data/particles/
    python examples/jets/generate.py --big 2      # 2 GB of jets in data/big/part_*/ (.npy)

The ROOT files hold a TTree `Events` with a fixed-size branch `image` (256 floats per
entry: a flat branch) and `label`. The particle-list files hold the jets' particles
(jagged branches, a list per jet), flat jet branches, a generator weight and the label,
as an RNTuple and, in a second folder, as a TTree. The big data set is made by
`blob_jets`, a vectorised version of the same physics (prongs as Gaussian blobs, no
particle sampling), about a thousand times faster, for data sets larger than memory.
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


def jet_particles(rng, signal: bool):
    """(jet pT, the particles' (eta, phi) around the jet axis, their pT fractions)."""
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
    return pt, np.concatenate(hits), np.concatenate(weights)


def jet_image(rng, signal: bool) -> np.ndarray:
    _, hits, weights = jet_particles(rng, signal)
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


def ensure_root() -> list[Path]:
    """The jets of the HDF5 files as ROOT files (uproot: pip install 'mpiopt[uproot]')."""
    import uproot

    out = []
    for i in range(FILES):
        file = DATA / "root" / f"jets_{i}.root"
        if not file.exists():
            images, labels = make_file(i)
            file.parent.mkdir(parents=True, exist_ok=True)
            tmp = file.with_name(f".{file.name}.tmp")
            with uproot.recreate(tmp) as f:
                f.mktree("Events", {"image": (np.float32, (PIXELS * PIXELS,)), "label": np.int64})
                f["Events"].extend({"image": images.reshape(len(images), -1), "label": labels})
            tmp.replace(file)
        out.append(file)
    return out


def particle_events(index: int) -> dict:
    """The jets of file `index` as particle lists, the branches a physicist's ntuple has:
    per particle part_pt (GeV), part_ptrel (pT / jet pT), part_deta, part_dphi (around
    the jet axis); per jet jet_pt, jet_mass (of the massless particles), n_part, a
    generator weight (a falling pT spectrum, 5% of the events negative, as NLO
    generators write them) and label (1 = W jet)."""
    import awkward as ak

    rng = np.random.default_rng(2000 + index)
    labels = rng.integers(0, 2, JETS_PER_FILE)
    jets = [jet_particles(rng, bool(s)) for s in labels]
    pt = np.array([j[0] for j in jets])
    counts = np.array([len(j[2]) for j in jets])
    frac = np.concatenate([j[2] for j in jets])
    where = np.concatenate([j[1] for j in jets])
    part_pt = frac * np.repeat(pt, counts)
    sign = np.where(rng.random(JETS_PER_FILE) < 0.05, -1.0, 1.0)

    def jagged(values):
        return ak.unflatten(values.astype(np.float32), counts)

    return {"jet_pt": pt.astype(np.float32), "jet_mass": _mass(part_pt, where, counts),
            "n_part": counts.astype(np.int32), "weight": sign * (pt / 250.0) ** -4,
            "label": labels.astype(np.int64), "part_pt": jagged(part_pt),
            "part_ptrel": jagged(frac), "part_deta": jagged(where[:, 0]),
            "part_dphi": jagged(where[:, 1])}


def _mass(pt, where, counts) -> np.ndarray:
    """The invariant mass of each jet's (massless) particles."""
    eta, phi = where[:, 0], where[:, 1]
    jet = np.repeat(np.arange(len(counts)), counts)
    p = [np.bincount(jet, c, len(counts)) for c in
         (pt * np.cosh(eta), pt * np.cos(phi), pt * np.sin(phi), pt * np.sinh(eta))]
    return np.sqrt(np.maximum(p[0] ** 2 - p[1] ** 2 - p[2] ** 2 - p[3] ** 2, 0)).astype(np.float32)


def ensure_particles() -> dict:
    """The particle-list jets as ROOT files, in both of ROOT's formats (uproot: pip
    install 'mpiopt[uproot]'): data/particles/rntuple/jets_*.root hold an RNTuple (what
    `f["Events"] = {...}` writes), data/particles/ttree/jets_*.root a TTree of the same
    jets (`mktree`, then `extend`)."""
    import awkward as ak
    import uproot

    out = {"rntuple": [], "ttree": []}
    for i in range(FILES):
        events = None
        for form in out:
            file = DATA / "particles" / form / f"jets_{i}.root"
            if not file.exists():
                events = events or particle_events(i)
                file.parent.mkdir(parents=True, exist_ok=True)
                tmp = file.with_name(f".{file.name}.tmp")
                with uproot.recreate(tmp) as f:
                    if form == "rntuple":
                        f["Events"] = events
                    else:
                        f.mktree("Events", {k: str(ak.type(v).content) if isinstance(v, ak.Array)
                                            else v.dtype for k, v in events.items()})
                        f["Events"].extend(events)
                tmp.replace(file)
            out[form].append(file)
    return out


def blob_jets(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n jet images (n, 16, 16, 1) and labels, vectorised: each prong a Gaussian blob of
    its momentum fraction (W jets: two prongs at dR ~ 2 m_W / pT; QCD: one core, a softer
    second prong in 60% of them), plus a soft wide halo, with exponential pixel noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    pt = rng.uniform(250.0, 500.0, n)
    signal = labels == 1
    z = np.where(signal, rng.uniform(0.1, 0.9, n), rng.uniform(0.05, 0.35, n))
    z = np.where(signal | (rng.random(n) < 0.6), z, 0.0)
    dr = np.where(signal, np.minimum(2 * M_W / pt * rng.uniform(0.9, 1.3, n), 0.7),
                  rng.uniform(0.1, 0.6, n))
    angle = rng.uniform(0, 2 * np.pi, n)
    d = dr[:, None] * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    centers = np.linspace(-HALF_WIDTH, HALF_WIDTH, PIXELS + 1)
    centers = (centers[:-1] + centers[1:]) / 2
    eta, phi = np.meshgrid(centers, centers, indexing="ij")

    def blob(pos, width):
        r2 = (eta[None] - pos[:, 0, None, None]) ** 2 + (phi[None] - pos[:, 1, None, None]) ** 2
        return np.exp(-r2 / (2 * width ** 2))

    first = np.where(signal[:, None], -(z[:, None]) * d, 0.0)
    image = (1 - z)[:, None, None] * blob(first, 0.07) + z[:, None, None] * blob(first + d, 0.07)
    image += 0.1 * blob(np.zeros((n, 2)), 0.35) * rng.exponential(1.0, (n, 1, 1))
    image *= rng.exponential(1.0, image.shape)      # particles, not a smooth blob
    image /= image.sum(axis=(1, 2), keepdims=True)
    return image[..., None].astype(np.float32), labels.astype(np.int64)


def ensure_big(gigabytes: float, folder: Path | None = None, part_jets: int = 100_000) -> list:
    """About `gigabytes` of blob jets as .npy directories part_NNN/{images,labels}.npy
    (float32, 1 KiB a jet), written one part at a time (memory: one part)."""
    folder = folder or DATA / "big"
    parts = max(1, int(round(gigabytes * 2**30 / (part_jets * PIXELS * PIXELS * 4))))
    out = []
    for i in range(parts):
        part = folder / f"part_{i:03d}"
        if not (part / "labels.npy").exists():
            images, labels = blob_jets(5000 + i, part_jets)
            part.mkdir(parents=True, exist_ok=True)
            np.save(part / "images.npy", images)
            np.save(part / "labels.npy", labels)   # last: its presence marks a whole part
        out.append(part)
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    for path in ensure():
        print(path)
    if "--root" in args:
        for path in ensure_root():
            print(path)
    if "--particles" in args:
        for paths in ensure_particles().values():
            for path in paths:
                print(path)
    if "--big" in args:
        print(f"{len(ensure_big(float(args[args.index('--big') + 1])))} parts in {DATA / 'big'}")
    sys.exit(0)
