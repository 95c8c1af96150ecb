"""Data at scale: streamed against in memory, memory per node, ROOT against HDF5.

Jets-like data (examples/jets/generate.py's blob_jets: 16x16 float32 images, 1 KiB a jet)
is written as .npy parts into a temporary folder, removed at the end. Side by side in one
run:

  throughput   samples/s of `data.in_memory: true` and `false` on the first parts (data
               that fits), the same ranks, model and batches; then the whole data set
               with `in_memory: auto` by ranks whose RLIMIT_DATA (`prlimit --data`) is
               well under its size. RLIMIT_DATA counts a rank's own memory (heap,
               anonymous maps), not the page cache of files it maps read-only, and
               TensorFlow runs under it (it does not under RLIMIT_AS).
  memory       the node's peak PSS (/proc/PID/smaps_rollup: shared pages divided among
               their sharers): the ranks' PSS summed at one instant, sampled every 50 ms
               from outside, its largest sum ("node peak"); beside it each rank's own peak
               summed ("sum of rank peaks": an upper bound, the ranks peak at different
               times, and a page's share falls as more ranks touch it); for 1..4 ranks, streamed and
               in memory on the data that fits, and streamed on the whole data set, split
               into "mapped" (the PSS of the data files' mappings: the data's pages) and
               "other" (the rest: each rank's Python, TensorFlow and training memory);
               "base" is the ranks' PSS after importing Keras, before any data, "data"
               the peak less that.
  gather       samples/s of one thread gathering a rank's share of shuffled batches from
               every memory-mapped part (the prefetch thread's work), against indexing
               an array in memory
  read         seconds to read the same arrays through mpiopt's readers, in windowed
               batches as training does: HDF5 (contiguous, memory-mapped), ROOT written
               by uproot uncompressed (memory-mapped baskets), HDF5 gzip and ROOT with
               uproot's default compression (zlib); each ROOT file against its HDF5 pair.
  collections  seconds to read particle lists padded to 32 with a mask, in windowed
               batches: from ROOT (an RNTuple and a TTree, uproot's default compression),
               padded as they are read, against the same arrays already padded in HDF5.
  chunked      the same jets as chunked gzip HDF5 (one file a part, CHUNK_JETS jets a
               chunk), every data field at its default: samples/s of `in_memory: true`
               and `false` on the data that fits (--fit-gb); then `--mem-gb` of them
               trained by `--ranks` ranks with `in_memory: auto`, the node's peak PSS
               against the data's bytes and the ranks' runtimes ("base": their PSS after
               importing Keras): "x data" is (node peak - base) / data. Beside the
               defaults, streamed with `split_by: sample` (folds by sample, which share
               every chunk), and streamed without the `deflate` package (h5py's read
               inflates the chunks with zlib); "epoch samples/s" counts the validation's
               time too. MPIOPT_THREADS=1 --ranks 1: one training thread, so the
               prefetch thread has the other core of a 2-core machine.
  chunked-cpu  CPU time per trained sample, load-independent: each rank's streamed reads
               of an epoch of those parts, and the model's train step; with every core
               busy, streamed / in memory is at most step / (step + read); with a
               free core per rank (the prefetch thread's), step / max(step, read).
  inflate      CPU time per sample to inflate the first part's gzip chunks with each zlib
               library installed (Python's zlib, libdeflate, ISA-L, cramjam), beside
               h5py's read of them.

The model is a small dense network, so that the data path, not the model, sets the pace.

    python benchmarks/data_throughput.py                       # 4 GB: the issue's figures
    python benchmarks/data_throughput.py --gb 1 --pss-ranks 1,2 # a quick look
    python benchmarks/data_throughput.py --sections read        # ROOT against HDF5 only
    python benchmarks/data_throughput.py --sections collections # particle lists only
    python benchmarks/data_throughput.py --sections chunked --mem-gb 2.25  # gzip HDF5
    python benchmarks/data_throughput.py --sections chunked-cpu --keep /tmp/jets  # reuse
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BIN, ROOT, env, machine, table  # noqa: E402

sys.path.insert(0, str(ROOT / "examples" / "jets"))
from generate import blob_jets, ensure_big  # noqa: E402

MODEL = '''
def build(params):
    import keras
    model = keras.Sequential([keras.Input((16, 16, 1)), keras.layers.Flatten(),
                              keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(keras.optimizers.Adam(1e-3), "binary_crossentropy", metrics=["accuracy"])
    return model
'''
PART_JETS = 50_000          # 49 MiB a part
CHUNK_JETS = 1024           # jets a chunk of the chunked HDF5 parts: 1 MiB
ROOT_BASKET = 10_000        # entries per basket: 10 MB, near ROOT's default 30 MB clusters
PAIRS = {"root (uncompressed)": "hdf5 (contiguous)",   # read in place, both
         "root (uproot default)": "hdf5 (gzip)"}       # decompressed by block, both


# ----------------------------------------------------------------------- one mpiexec job
def worker(config: dict) -> None:
    """Under mpiexec: train one epoch (+ validation) and report samples/s and PSS."""
    from mpi4py import MPI

    from mpiopt.spec import load_spec
    from mpiopt.training import run_training
    from mpiopt.training.data import load_data
    from mpiopt.training.stream import streamed

    for name in config.get("hide", ()):   # as if not installed: `import name` fails
        sys.modules[name] = None
    comm = MPI.COMM_WORLD
    import keras  # noqa: F401  (TensorFlow's pages belong to the baseline)
    base = pss()
    peak = Peak()
    spec = load_spec(config["spec"])
    result = run_training(spec, {"u": 1.0}, comm, seed=1)
    peak.stop()
    comm.Barrier()         # every rank still maps its files: their pages' sharers are all here
    mapped = mapped_pss(config["folder"])
    # after the peak: a Dataset held here would be a second one beside the training's
    data = load_data(spec.objective.data, spec.base_dir)
    is_streamed = streamed(data.x)
    ranks = comm.gather({"base": base, "peak": peak.value, "mapped": mapped}, root=0)
    if comm.Get_rank() == 0:
        t = result["timing"]
        Path(config["out"]).write_text(json.dumps({
            "samples_s": t["samples"] / t["train_s"], "streamed": is_streamed,
            "epoch_samples_s": t["samples"] / (t["train_s"] + t["val_s"]),
            "data_bytes": int(data.x.nbytes + data.y.nbytes), "window": data.window,
            "chunk_splits": data.chunks is not None,
            "pss_mb": sum(r["peak"] for r in ranks) / 2**20,
            "data_mb": sum(r["peak"] - r["base"] for r in ranks) / 2**20,
            "mapped_mb": sum(r["mapped"] for r in ranks) / 2**20,
            "other_mb": sum(r["peak"] - r["mapped"] for r in ranks) / 2**20,
            "base_mb": sum(r["base"] for r in ranks) / 2**20,
            "value": result["value"]}))


def pss(rollup: str = "/proc/self/smaps_rollup") -> int:
    """A process's proportional set size in bytes."""
    for line in Path(rollup).read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


def mapped_pss(folder: str) -> int:
    """PSS in bytes of this process's mappings of files under folder (the data files)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            inside = len(head) >= 6 and head[5].startswith(folder)
        elif inside and line.startswith("Pss:"):
            total += int(head[1]) * 1024
    return total


class Peak:
    """The largest PSS seen, sampled every 50 ms on a daemon thread."""

    def __init__(self):
        self.value, self._stop = pss(), threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while not self._stop.wait(0.05):
            self.value = max(self.value, pss())

    def stop(self):
        self._stop.set()
        self.value = max(self.value, pss())


def run_job(tmp: Path, name: str, parts: str, ranks: int, in_memory, limit: int | None,
            epochs: int, batch: int, node_peak: bool = False, kind: str = "npy",
            data: dict | None = None, hide: tuple = ()) -> dict:
    """node_peak: sample the node's PSS from outside (memory runs only: reading the ranks'
    page tables every 50 ms takes CPU time from them). kind: the parts' format; data: more
    fields of the data section; hide: modules the ranks run without (as if not installed)."""
    spec = tmp / f"{name}.yaml"
    import yaml
    spec.write_text(yaml.safe_dump({
        "study": {"name": name},
        "objective": {"model": "model.py:build", "metric": "val_loss",
                      "data": {kind: parts, "features": "images", "labels": "labels",
                               "in_memory": in_memory, **(data or {})}},
        "search_space": {"u": {"type": "real", "low": 0.0, "high": 1.0}},
        "search": {"algorithm": "random", "trials": 1},
        "training": {"epochs": epochs, "batch_size": batch, "holdout": 0.1},
    }))
    out = tmp / f"{name}.json"
    cmd = [str(BIN / "mpiexec"), "-n", str(ranks), sys.executable, __file__, "--worker",
           json.dumps({"spec": str(spec), "out": str(out), "folder": str(tmp), "hide": hide})]
    if limit:
        cmd = ["prlimit", f"--data={limit}", *cmd]
    start = time.monotonic()
    with NodePeak(str(out), ranks, active=node_peak) as node:
        proc = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0 or not out.exists():
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    return {**json.loads(out.read_text()), "node_mb": node.value / 2**20,
            "wall_s": time.monotonic() - start}


class NodePeak:
    """The largest sum of the ranks' PSS at one instant: every 50 ms the ranks whose
    worker configuration holds `marker` (those of one job) are read together."""

    def __init__(self, marker: str, ranks: int, active: bool = True):
        self.marker, self.ranks, self.active = marker, ranks, active
        self.value, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        if self.active:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self.active:
            self._thread.join()

    def _run(self):
        pids: list = []
        while not self._stop.wait(0.05):
            if len(pids) < self.ranks:            # until every rank has started
                pids = _ranks(self.marker)
            total = 0
            for pid in pids:
                try:
                    total += pss(f"/proc/{pid}/smaps_rollup")
                except OSError:          # the rank ended between the scan and the read
                    pass
            self.value = max(self.value, total)


def _ranks(marker: str) -> list[str]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            args = cmdline.split(b"\0")     # python THIS_FILE --worker CONFIG: a rank
            if len(args) > 3 and args[1:3] == [__file__.encode(), b"--worker"] \
                    and marker.encode() in args[3]:
                pids.append(entry.name)
    return pids


# ----------------------------------------------------------------------- ROOT vs HDF5
def _read_all(arr, order, batch) -> float:
    """Seconds to read every sample in `order`, batch by batch (a fresh block cache)."""
    arr._blocks.clear()
    start = time.perf_counter()
    for b in range(0, len(order), batch):
        arr[order[b:b + batch]]
    return time.perf_counter() - start


def read_speeds(tmp: Path, jets: int, batch: int = 512, window: int = 65536,
                repeat: int = 3) -> list[dict]:
    """Seconds to read `jets` jets in windowed-shuffle batches, per format (the best of
    `repeat` reads, the files in the page cache)."""
    import h5py
    import uproot

    from mpiopt.spec import DataSpec
    from mpiopt.training.data import _opened, load_data
    from mpiopt.training.stream import window_order

    x, y = blob_jets(7, jets)
    flat = x.reshape(jets, -1)
    files = {}
    with h5py.File(tmp / "r.h5", "w") as h5:
        h5["images"], h5["labels"] = flat, y
    files["hdf5 (contiguous)"] = ({"hdf5": [str(tmp / "r.h5")]}, tmp / "r.h5")
    with h5py.File(tmp / "rz.h5", "w") as h5:
        h5.create_dataset("images", data=flat, chunks=(4096, 256), compression="gzip")
        h5["labels"] = y
    files["hdf5 (gzip)"] = ({"hdf5": [str(tmp / "rz.h5")]}, tmp / "rz.h5")
    for label, compression in (("root (uncompressed)", None), ("root (uproot default)", "d")):
        path = tmp / f"r{len(files)}.root"
        opts = {} if compression else {"compression": None}
        with uproot.recreate(path, **opts) as f:
            f.mktree("Events", {"images": (np.float32, (256,)), "labels": np.int64})
            for s in range(0, jets, ROOT_BASKET):     # one basket per branch and extend
                f["Events"].extend({"images": flat[s:s + ROOT_BASKET],
                                    "labels": y[s:s + ROOT_BASKET]})
        files[label] = ({"root": [str(path)], "features": ["images"]}, path)
    rows = []
    order = window_order(jets, 0, 0, window)
    for label, (data, path) in files.items():
        _opened.clear()
        spec = DataSpec(**{"features": "images", **data}, labels="labels", in_memory=False)
        x = load_data(spec).x
        seconds = min(_read_all(x, order, batch) for _ in range(repeat))
        rows.append({"format": label, "file MB": path.stat().st_size / 2**20,
                     "memory-mapped": x.sources[0].mapped is not None, "read s": seconds,
                     "MB/s": flat.nbytes / 2**20 / seconds})
    seconds = {r["format"]: r["read s"] for r in rows}
    for r in rows:
        r["x hdf5 (contiguous)"] = r["read s"] / rows[0]["read s"]
        pair = PAIRS.get(r["format"])
        r["x its hdf5 pair"] = r["read s"] / seconds[pair] if pair else "-"
    return rows


def particle_lists(events: int, length: int, seed: int = 8):
    """Jets as particle lists (about `length` particles each, Poisson): the jagged
    branches part_pt, part_eta, part_phi and label, and the same padded as mpiopt pads them
    (sorted by pT, cut or padded to `length`, a mask channel last): (events, length, 4)."""
    import awkward as ak

    rng = np.random.default_rng(seed)
    counts = rng.poisson(length, events)
    total = int(counts.sum())
    branches = {name: ak.unflatten(values.astype(np.float32), counts) for name, values in
                (("part_pt", rng.exponential(10.0, total)), ("part_eta", rng.normal(0, 1, total)),
                 ("part_phi", rng.uniform(-np.pi, np.pi, total)))}
    order = ak.argsort(branches["part_pt"], axis=1, ascending=False, stable=True)
    padded = np.zeros((events, length, 4), np.float32)
    for j, name in enumerate(branches):
        cut = ak.pad_none(branches[name][order], length, axis=1, clip=True)
        padded[:, :, j] = ak.to_numpy(ak.fill_none(cut, 0.0))
    padded[:, :, 3] = np.arange(length) < counts[:, None]
    return {**branches, "label": rng.integers(0, 2, events)}, padded


def collection_speeds(tmp: Path, events: int, batch: int = 512, window: int = 65536,
                      length: int = 32, repeat: int = 3) -> list[dict]:
    """Seconds to read `events` padded particle lists in windowed-shuffle batches: from
    ROOT (an RNTuple and a TTree, uproot's default compression), padded by mpiopt as it
    reads, against the same arrays already padded in HDF5 (gzip, and contiguous); the
    best of `repeat` rounds, each round reading every format in turn."""
    import awkward as ak
    import h5py
    import uproot

    from mpiopt.spec import DataSpec
    from mpiopt.spec._types import CollectionSpec
    from mpiopt.training.data import _opened, load_data
    from mpiopt.training.stream import window_order

    branches, padded = particle_lists(events, length)
    files = {}
    with h5py.File(tmp / "c.h5", "w") as h5:
        h5["particles"], h5["labels"] = padded, branches["label"]
    files["hdf5 padded (contiguous)"] = {"hdf5": [str(tmp / "c.h5")], "features": "particles"}
    with h5py.File(tmp / "cz.h5", "w") as h5:
        h5.create_dataset("particles", data=padded, chunks=(4096, length, 4), compression="gzip")
        h5["labels"] = branches["label"]
    files["hdf5 padded (gzip)"] = {"hdf5": [str(tmp / "cz.h5")], "features": "particles"}
    coll = CollectionSpec("particles", ("part_pt", "part_eta", "part_phi"), length,
                          sort_by="part_pt")
    for form in ("rntuple", "ttree"):
        path = tmp / f"c-{form}.root"
        with uproot.recreate(path) as f:
            for s in range(0, events, ROOT_BASKET):    # a cluster per extend
                piece = {k: v[s:s + ROOT_BASKET] for k, v in branches.items()}
                if s == 0 and form == "rntuple":
                    f["Events"] = piece
                    continue
                if s == 0:
                    f.mktree("Events", {k: str(ak.type(v).content) if isinstance(v, ak.Array)
                                        else v.dtype for k, v in branches.items()})
                f["Events"].extend(piece)
        files[f"root {form} (uproot default)"] = {"root": [str(path)], "features": None,
                                                  "collections": (coll,)}
    order = window_order(events, 0, 0, window)
    arrays = {}
    for label, data in files.items():
        _opened.clear()
        x = load_data(DataSpec(**data, labels="label" if "root" in data else "labels",
                               in_memory=False)).x
        arrays[label] = x.parts["particles"] if hasattr(x, "parts") else x
        assert np.array_equal(arrays[label][order[:batch]], padded[order[:batch]]), label
    seconds = {label: [] for label in files}
    for _ in range(repeat):          # alternated: a busy moment weighs on every format
        for label, array in arrays.items():
            seconds[label].append(_read_all(array, order, batch))
    rows = [{"format": label, "file MB": Path(next(iter(data.values()))[0]).stat()
             .st_size / 2**20, "read s": min(seconds[label]),
             "samples/s": events / min(seconds[label])} for label, data in files.items()]
    best = {r["format"]: r["read s"] for r in rows}
    for r in rows:
        r["x hdf5 padded (gzip)"] = r["read s"] / best["hdf5 padded (gzip)"]
        r["x hdf5 padded (contiguous)"] = r["read s"] / best["hdf5 padded (contiguous)"]
    return rows


def gather_speed(tmp: Path, size: int, batches: int = 2000) -> list[dict]:
    """Samples/s of one thread gathering a rank's share of shuffled batches (`size`
    random samples each) from every memory-mapped part, against the same indexing of an
    array in memory (the first parts)."""
    from mpiopt.spec import DataSpec
    from mpiopt.training.data import load_data

    x = load_data(DataSpec(npy=[str(tmp / "big" / "part_*")], features="images",
                           labels="labels", in_memory=False)).x
    order = np.resize(np.random.default_rng(0).permutation(len(x)), batches * size)
    memory = np.concatenate([s.read(0, s.n) for s in x.sources[:4]])
    in_memory = np.resize(np.random.default_rng(0).permutation(len(memory)), batches * size)
    rows = []
    for label, gather, idx in (("streamed, all parts", x.gather, order),
                               ("in memory, 4 parts", memory.__getitem__, in_memory)):
        gather(idx[:size])
        start = time.perf_counter()
        for b in range(batches):
            gather(idx[b * size:(b + 1) * size])
        rows.append({"gather": label, "parts": len(x.sources) if "all" in label else 4,
                     "samples a gather": size,
                     "samples/s": batches * size / (time.perf_counter() - start)})
    return rows


# ----------------------------------------------------------------------- the run
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--gb", type=float, default=4.0, help="the whole data set (GiB)")
    ap.add_argument("--fit-gb", type=float, default=0.5, help="the part that fits (GiB)")
    ap.add_argument("--limit-gb", type=float, default=1.5,
                    help="RLIMIT_DATA of each rank streaming the whole set (GiB)")
    ap.add_argument("--ranks", type=int, default=2, help="ranks of the throughput runs")
    ap.add_argument("--pss-ranks", default="1,2,3,4", help="on the data that fits")
    ap.add_argument("--pss-full-ranks", default="1,2,4",
                    help="streamed, on the whole data set ('' for none)")
    ap.add_argument("--mem-gb", type=float, default=2.25,
                    help="chunked: the data trained in memory with the defaults (GiB)")
    ap.add_argument("--sections", default="throughput,memory,gather,read,collections,chunked,chunked-cpu,inflate",
                    help="which parts to run (comma-separated)")
    ap.add_argument("--read-jets", type=int, default=400_000)
    ap.add_argument("--collection-jets", type=int, default=200_000,
                    help="jets of the particle-list reads (section collections)")
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each throughput case")
    ap.add_argument("--tmp", default=None, help="where the data is written (removed after)")
    ap.add_argument("--keep", default=None,
                    help="a folder for the data, kept after and reused by the next run "
                         "(writing gigabytes of gzip HDF5 takes minutes)")
    args = ap.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return 0
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        return _run(args, Path(args.keep).resolve())
    tmp = Path(tempfile.mkdtemp(prefix="mpiopt-data-", dir=args.tmp))
    try:
        return _run(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(args, tmp: Path) -> int:
    t0 = time.monotonic()
    sections = set(args.sections.split(","))
    tables = []
    if sections & {"throughput", "memory", "gather"}:
        (tmp / "model.py").write_text(MODEL)
        parts = ensure_big(args.gb, tmp / "big", part_jets=PART_JETS)
        size = sum(f.stat().st_size for p in parts for f in p.iterdir())
        fit = min(len(parts), max(1, int(round(args.fit_gb * 2**30 / (PART_JETS * 1024)))))
        (tmp / "fit").mkdir(exist_ok=True)
        for p in parts[:fit]:                  # the data that fits: the first parts
            if not (tmp / "fit" / p.name).exists():
                (tmp / "fit" / p.name).symlink_to(p)
        print(f"{machine()}; {len(parts)} parts, {size / 2**30:.2f} GiB in {tmp} "
              f"({time.monotonic() - t0:.0f} s to write)", flush=True)
    if "throughput" in sections:
        tables.append(throughput(args, tmp, fit, size))
    if "memory" in sections:
        tables.append(memory(args, tmp))
    if "gather" in sections:
        tables.append(gather_speed(tmp, args.batch // args.ranks))
    if "read" in sections:
        tables.append(read_speeds(tmp, args.read_jets, args.batch))
    if "collections" in sections:
        tables.append(collection_speeds(tmp, args.collection_jets, args.batch))
    if "chunked" in sections:
        tables.extend(chunked(args, tmp))
    if "chunked-cpu" in sections:
        tables.append(chunked_cpu(args, tmp))
    if "inflate" in sections:
        tables.append(inflate_speeds(args, tmp))
    for rows in tables:
        print(table(rows))
    print(f"({time.monotonic() - t0:.0f} s)")
    return 0


def throughput(args, tmp: Path, fit: int, size: int) -> list[dict]:
    """Streamed against in memory on the data that fits; the whole set under RLIMIT_DATA."""
    fit_glob = str(tmp / "fit" / "part_*")
    runs = {True: [], False: []}
    for _ in range(args.repeat):   # alternated, the best of each: a shared machine's load
        for mode in (True, False):
            runs[mode].append(run_job(tmp, f"fit{int(mode)}", fit_glob, args.ranks, mode,
                                      None, 2, args.batch))
    rows = []
    for mode in (True, False):
        r = max(runs[mode], key=lambda r: r.get("samples_s", 0))
        rows.append({"data": f"{fit * PART_JETS * 1024 / 2**30:.2f} GiB",
                     "path": "in memory" if mode else "streamed", "ranks": args.ranks,
                     "RLIMIT_DATA": "-", **_cells(r)})
        print(rows[-1], [round(x.get("samples_s", 0)) for x in runs[mode]], flush=True)
    limit = int(args.limit_gb * 2**30)
    r = run_job(tmp, "all", str(tmp / "big" / "part_*"), args.ranks, "auto", limit, 1, args.batch)
    rows.append({"data": f"{size / 2**30:.2f} GiB", "path": "auto", "ranks": args.ranks,
                 "RLIMIT_DATA": f"{args.limit_gb:g} GiB", **_cells(r)})
    print(rows[-1], flush=True)
    if "samples/s" in rows[0] and "samples/s" in rows[1]:
        print(f"streamed / in memory: {rows[1]['samples/s'] / rows[0]['samples/s']:.2f}x")
    return rows


def chunked_parts(tmp: Path, gigabytes: float) -> list[Path]:
    """About `gigabytes` of the jets as chunked gzip HDF5, one file a part."""
    import h5py

    out = []
    for part in ensure_big(gigabytes, tmp / "big", part_jets=PART_JETS):
        path = tmp / "h5" / f"{part.name}.h5"
        if not path.exists():
            path.parent.mkdir(exist_ok=True)
            images = np.load(part / "images.npy", mmap_mode="r")
            part_tmp = path.with_suffix(".tmp")          # a whole file or none (--keep)
            with h5py.File(part_tmp, "w") as h5:
                h5.create_dataset("images", data=images, compression="gzip",
                                  chunks=(CHUNK_JETS, *images.shape[1:]))
                h5["labels"] = np.load(part / "labels.npy")
            part_tmp.rename(path)
        out.append(path)
    return out


def chunked(args, tmp: Path) -> list[list[dict]]:
    """Chunked gzip HDF5 at the defaults: streamed against in memory on the data that
    fits (--fit-gb, 0: not run), then --mem-gb in memory (auto) with the node's peak PSS
    (0: not run)."""
    (tmp / "model.py").write_text(MODEL)
    tables = []
    if args.fit_gb:
        tables.append(chunked_speeds(args, tmp))
    if args.mem_gb:
        tables.append([chunked_memory(args, tmp)])
    return tables


# name, in_memory, more data fields, modules hidden from the ranks
CHUNKED_CASES = (("in_memory: true", True, {}, ()), ("in_memory: false", False, {}, ()),
                 ("in_memory: false, split_by: sample", False, {"split_by": "sample"}, ()),
                 ("in_memory: false, without deflate (h5py inflates)", False, {}, ("deflate",)))


def chunked_speeds(args, tmp: Path) -> list[dict]:
    """Samples/s of in_memory: true and false at the defaults, streamed with folds by
    sample (split_by: sample), and streamed without the `deflate` package (h5py's own
    read inflates the chunks), alternated, the best and the median of each; "epoch
    samples/s" counts the validation's time too."""
    fit = chunked_parts(tmp, args.fit_gb)
    (tmp / "h5fit").mkdir(exist_ok=True)
    for p in fit:
        if not (tmp / "h5fit" / p.name).exists():
            (tmp / "h5fit" / p.name).symlink_to(p)
    runs: dict = {name: [] for name, *_ in CHUNKED_CASES}
    for _ in range(args.repeat):   # alternated, the best of each: a shared machine's load
        for i, (name, mode, data, hide) in enumerate(CHUNKED_CASES):
            runs[name].append(run_job(tmp, f"h5fit{i}", str(tmp / "h5fit" / "*.h5"),
                                      args.ranks, mode, None, 2, args.batch, kind="hdf5",
                                      data=data, hide=hide))
    rows = []
    for name, *_ in CHUNKED_CASES:
        r = max(runs[name], key=lambda r: r.get("samples_s", 0))
        rows.append({"data": f"{len(fit) * PART_JETS * 1024 / 2**30:.2f} GiB", "path": name,
                     "ranks": args.ranks, **_cells(r, ("samples_s", "epoch_samples_s")),
                     "median samples/s": float(np.median([x.get("samples_s", 0)
                                                          for x in runs[name]])),
                     "shuffle window": r.get("window"), "chunk splits": r.get("chunk_splits")})
        print(rows[-1], [round(x.get("samples_s", 0)) for x in runs[name]], flush=True)
    for row in rows[1:]:
        for key in ("samples/s", "epoch samples/s", "median samples/s"):
            if key in rows[0] and key in row:
                row[f"x in memory ({key})"] = row[key] / rows[0][key]
    print(f"chunked HDF5, streamed / in memory: "
          f"{rows[1].get('x in memory (samples/s)', float('nan')):.2f}x (best), "
          f"{rows[1].get('x in memory (median samples/s)', float('nan')):.2f}x (median)",
          flush=True)
    return rows


def chunked_memory(args, tmp: Path) -> dict:
    """--mem-gb trained by --ranks ranks with in_memory: auto: the node's peak PSS."""
    t0 = time.monotonic()
    parts = chunked_parts(tmp, args.mem_gb)
    print(f"{len(parts)} chunked HDF5 parts ({time.monotonic() - t0:.0f} s to write)", flush=True)
    (tmp / "h5mem").mkdir(exist_ok=True)
    for p in parts:
        if not (tmp / "h5mem" / p.name).exists():
            (tmp / "h5mem" / p.name).symlink_to(p)
    r = run_job(tmp, "h5all", str(tmp / "h5mem" / "*.h5"), args.ranks, "auto", None, 1,
                args.batch, node_peak=True, kind="hdf5")
    row = {"data": f"{len(parts) * PART_JETS * 1024 / 2**30:.2f} GiB",
           "path": "in_memory: auto", "ranks": args.ranks,
           **_cells(r, ("samples_s", "node_mb", "base_mb"))}
    if "error" not in r:
        data_mb = r["data_bytes"] / 2**20
        row.update({"data MB": data_mb, "x data": (r["node_mb"] - r["base_mb"]) / data_mb,
                    "wall s": r["wall_s"]})
    print(row, flush=True)
    return row


def chunked_cpu(args, tmp: Path) -> list[dict]:
    """CPU time per trained sample, which load on a shared machine does not change: each
    rank's streamed reads of one epoch of the data that fits (--fit-gb) as the training
    reads them (holdout 0.1, the window shuffle at its default, each rank its shard of
    every global batch; with a holdout of 0.1 and 3 folds, the splits at their default,
    whole chunks, and by sample; and the held-out samples' validation reads), and a
    train step of the model on a rank's share of a batch.
    Where the cores are all busy, streamed / in memory is at most step / (step + read);
    where each rank has a free core for its prefetch thread, step / max(step, read)."""
    import os

    from mpiopt.spec import DataSpec, TrainingSpec
    from mpiopt.training import stream
    from mpiopt.training.data import _opened, load_data
    from mpiopt.training.folds import make_splits

    fit = chunked_parts(tmp, args.fit_gb)
    rows = []
    for split in ("auto", "sample"):     # the default, and folds by sample
        _opened.clear()
        spec = DataSpec(hdf5=[str(p) for p in fit], features="images", in_memory=False,
                        split_by=split)
        data = load_data(spec)
        for training, how in ((TrainingSpec(holdout=0.1), "holdout 0.1"),
                              (TrainingSpec(kfold=3), "kfold 3")):
            train, val = make_splits(data, training, 1).pairs[0]
            x = stream.take(data.x, train)
            rows += _epoch_reads(args, data, x, train, f"{how}, split_by: {split}")
            rows.append(_validation_reads(args, data, val, f"{how}, split_by: {split}"))
        train, _ = make_splits(data, TrainingSpec(holdout=0.1), 1).pairs[0]
        x = stream.take(data.x, train)
    os.environ.update(TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="1",
                      OMP_NUM_THREADS="1", KERAS_BACKEND="tensorflow")
    namespace: dict = {}
    exec(MODEL, namespace)
    model = namespace["build"]({})
    share = args.batch // args.ranks
    xb, yb = x[np.arange(share)], data.y[train[:share]]
    for _ in range(20):
        model.train_on_batch(xb, yb)
    start, steps = time.process_time(), 200
    for _ in range(steps):
        model.train_on_batch(xb, yb)
    step = (time.process_time() - start) / (steps * share) * 1e6
    rows.append({"what": f"train step (Keras train_on_batch, {share} samples, 1 thread)",
                 "samples": steps * share, "us/sample": step})
    read = float(np.mean([r["us/sample"] for r in rows[:args.ranks]]))   # the defaults' reads
    print(f"CPU-bound ceiling of streamed / in memory: {step / (step + read):.2f}x with every "
          f"core busy, {step / max(step, read):.2f}x with a free core per rank", flush=True)
    return rows


def _epoch_reads(args, data, x, train, what: str) -> list[dict]:
    """CPU time of each rank's streamed reads of one epoch, per trained sample."""
    from mpiopt.training.data import batches, epoch_order, shard

    order = epoch_order(len(train), 1, 0, True, data.window, args.batch)
    rows = []
    for rank in range(args.ranks):
        data.x._blocks.clear()
        read = _counting(data.x)
        start = time.process_time()
        n = 0
        for b in batches(len(order), args.batch):
            part = order[b][shard(len(order[b]), args.ranks, rank)]
            n += len(x[part])
        cpu = time.process_time() - start
        rows.append({"what": f"rank {rank} of {args.ranks}: streamed reads of an epoch, {what}",
                     "samples": n, "us/sample": cpu / n * 1e6,
                     "decompressed per sample": read["samples"] / n})
        del data.x._block
    return rows


def _validation_reads(args, data, val, what: str) -> dict:
    """CPU time of one rank validating a fold's held-out samples, batch by batch."""
    from mpiopt.training import stream
    from mpiopt.training.data import batches

    data.x._blocks.clear()
    read = _counting(data.x)
    x = stream.take(data.x, val)
    start = time.process_time()
    for b in batches(len(val), args.batch):
        x[np.arange(b.start, b.stop)]
    cpu = time.process_time() - start
    del data.x._block
    return {"what": f"validation reads of an epoch, {what}", "samples": len(val),
            "us/sample": cpu / len(val) * 1e6, "decompressed per sample": read["samples"] / len(val)}


INFLATERS = {   # name: (module, inflate(raw chunk, its size inflated)); those installed run
    "zlib (Python's)": ("zlib", lambda m: lambda raw, n: m.decompress(raw, bufsize=n)),
    "libdeflate (deflate)": ("deflate", lambda m: m.zlib_decompress),
    "ISA-L (isal)": ("isal.isal_zlib", lambda m: lambda raw, n: m.decompress(raw, bufsize=n)),
    "cramjam": ("cramjam", lambda m: lambda raw, n: m.zlib.decompress(raw, output_len=n)),
}


def inflate_speeds(args, tmp: Path, repeat: int = 3) -> list[dict]:
    """CPU time to inflate every chunk of the first chunked part (its raw bytes read once,
    read_direct_chunk), per sample, the best of `repeat`, with each zlib library
    installed; and h5py's read of the same chunks (its own zlib, and the file read)."""
    import importlib

    import h5py

    part = chunked_parts(tmp, args.fit_gb or 0.05)[0]
    with h5py.File(part, "r") as h5:
        ds = h5["images"]
        raws = [ds.id.read_direct_chunk(ds.id.get_chunk_info(i).chunk_offset)[1]
                for i in range(ds.id.get_num_chunks())]
        n, size = ds.shape[0], int(np.prod(ds.chunks)) * ds.dtype.itemsize
        rows = [{"how": "h5py's read, by chunk",
                 "us/sample": _best_cpu(lambda: [ds[s:s + ds.chunks[0]] for s in
                                                 range(0, n, ds.chunks[0])], repeat) / n * 1e6}]
    for name, (module, inflater) in INFLATERS.items():
        try:
            inflate = inflater(importlib.import_module(module))
        except ImportError:
            continue
        cpu = _best_cpu(lambda: [inflate(raw, size) for raw in raws], repeat)
        rows.append({"how": name, "us/sample": cpu / n * 1e6})
    for row in rows:
        row["x zlib"] = row["us/sample"] / rows[1]["us/sample"]
    return rows


def _best_cpu(work, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best


def _counting(array) -> dict:
    """Counts the samples array's block reads decompress (a block cache miss each)."""
    read = {"samples": 0}
    plain = type(array)._block

    def block(f, b, edges):
        with array._lock:
            cached = (f, b) in array._blocks
        if not cached:
            read["samples"] += int(edges[b + 1] - edges[b])
        return plain(array, f, b, edges)

    array._block = block
    return read


MEMORY_KEYS = ("node_mb", "pss_mb", "mapped_mb", "other_mb", "base_mb", "data_mb")


def memory(args, tmp: Path) -> list[dict]:
    """Peak PSS per node: in memory and streamed on the data that fits, then streamed on
    the whole set."""
    fit_glob = str(tmp / "fit" / "part_*")
    rows = []
    for ranks in map(int, filter(None, args.pss_ranks.split(","))):
        for mode in (True, False):
            r = run_job(tmp, f"pss{ranks}{int(mode)}", fit_glob, ranks, mode, None, 1, args.batch,
                        node_peak=True)
            rows.append({"path": "in memory" if mode else "streamed", "ranks": ranks,
                         **_cells(r, MEMORY_KEYS)})
            print(rows[-1], flush=True)
    for ranks in map(int, filter(None, args.pss_full_ranks.split(","))):
        r = run_job(tmp, f"full{ranks}", str(tmp / "big" / "part_*"), ranks, False, None,
                    1, args.batch, node_peak=True)
        rows.append({"path": "streamed, all", "ranks": ranks, **_cells(r, MEMORY_KEYS)})
        print(rows[-1], flush=True)
    for row in rows:
        one = next((m for m in rows if m["path"] == row["path"] and m["ranks"] == 1), {})
        for key in ("node peak MB", "PSS MB", "mapped MB", "other MB"):
            if key in row and key in one and one[key] > 1:
                row[f"{key.split()[0]} / 1 rank"] = row[key] / one[key]
    return rows


def _cells(r: dict, keys=("samples_s", "pss_mb")) -> dict:
    if "error" in r:
        return {"error": " ".join(r["error"])[:120]}
    names = {"samples_s": "samples/s", "epoch_samples_s": "epoch samples/s",
             "pss_mb": "PSS MB", "data_mb": "data MB",
             "node_mb": "node peak MB",
             "mapped_mb": "mapped MB", "other_mb": "other MB", "base_mb": "base MB"}
    out = {names[k]: r[k] for k in keys}
    if "streamed" in r:
        out["streamed"] = r["streamed"]
    return out


if __name__ == "__main__":
    sys.exit(main())
