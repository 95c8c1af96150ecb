"""`mpirun -n R mpiopt train SPEC --set name=value ...`: train one parameter set.

MPI_Learn's job on its own: the model of the spec trained with the spec's training section
(nested data-parallel training, K-fold) for one point of the search space, so a user can
check the model, the data and the scaling before a search. Rank 0 prints every epoch and
the figure of merit; nothing is written to a database.

--set NAME=VALUE sets a hyperparameter when NAME is one of the search space's parameters
(a searched training field too: --set training.batch_size=32 when the space has it), and
otherwise overrides a spec field by its dotted path (--set training.epochs=2); a field
this command does not use (training.checkpoint_every, training.refit) is refused with one
line, never ignored. Parameters not set take the middle of their range (geometric middle
for log priors, the middle choice of a categorical).

--save FILE writes the trained model (the last fold at its best epoch) as a file its
framework loads (FILE.keras for a Keras model, FILE.pt for a torch module's state_dict: the
suffix becomes the framework's), with a JSON note beside it (FILE with .json: fold, value,
epoch, seed, params).
"""
from __future__ import annotations

import sys

from mpiopt import jsontext


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "train", help="train one parameter set with the spec's model, data and training",
        description="Train the spec's model for one parameter set (under mpirun: data-parallel "
        "over all ranks, K-fold as in the spec) and print per-epoch metrics and the figure of merit.")
    parser.add_argument("spec", metavar="SPEC", help="path to the spec YAML file")
    parser.add_argument(
        "--set", dest="settings", action="append", default=[], metavar="NAME=VALUE",
        help="a hyperparameter (NAME in the search space) or a spec field by dotted path "
        "(e.g. training.epochs=2); VALUE is read as YAML; repeatable")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the initial weights, shuffles and folds (default: search.seed)")
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="table: epochs as they finish; json: one object at the end")
    parser.add_argument("--save", metavar="FILE", default=None,
                        help="write the trained model (the last fold at its best epoch) here")
    parser.set_defaults(func=run)


# Spec fields that only a study uses: refused here rather than silently ignored.
NOT_USED = {"training.checkpoint_every": "`mpiopt train` keeps no checkpoints",
            "training.refit": "`mpiopt train` trains one parameter set (--save keeps its model)",
            "search.keep_models": "`mpiopt train` keeps no study models (use --save FILE)"}


def split_settings(space_names, settings: dict) -> tuple[dict, dict]:
    """(hyperparameters, spec overrides) from the --set values."""
    from mpiopt.errors import SpecError

    for name in settings:
        if name in NOT_USED and name not in space_names:
            raise SpecError(f"--set {name}: {NOT_USED[name]}")
    params = {k: v for k, v in settings.items() if k in space_names}
    overrides = {k: v for k, v in settings.items() if k not in space_names}
    return params, overrides


def resolve_params(space, given: dict) -> dict:
    """The middle of the space, updated with the given values, checked against the space."""
    from mpiopt.errors import SpecError

    params = {d.name: d.decode(0.5) for d in space}    # then the inactive ones dropped
    params.update(given)
    params = space.active(params)
    try:
        dropped = [k for k in given if k not in params]
        if dropped:
            raise ValueError(f"{dropped[0]}: absent unless {space.condition_text(dropped[0])}")
        space.check(params)
    except ValueError as exc:
        raise SpecError(f"--set: {exc}") from None
    return params


def run(args) -> int:
    from mpiopt.errors import SpecError
    from mpiopt.spec import load_spec, parse_overrides

    settings = parse_overrides(args.settings)
    names = set(load_spec(args.spec).space.names)
    given, overrides = split_settings(names, settings)
    spec = load_spec(args.spec, overrides)
    if not spec.objective.model:
        raise SpecError(f"{args.spec}: objective.model: `mpiopt train` trains a model; "
                        "this spec has a function objective")
    params = resolve_params(spec.space, given)
    seed = spec.search.seed if args.seed is None else args.seed
    save = _save_path(args.save)
    return _train(spec, params, seed, args.format, save)


def _save_path(text: str | None):
    """--save: a .keras or .pt file in a folder that exists (checked before training starts)."""
    if text is None:
        return None
    from pathlib import Path

    from mpiopt.artifacts import MODEL_SUFFIXES
    from mpiopt.errors import SpecError     # (bad input, the same on every rank: said once)

    path = Path(text).resolve()
    if path.suffix not in MODEL_SUFFIXES:
        raise SpecError(f"--save {text}: the file name must end in .keras (a Keras model) or .pt "
                        "(a torch module's state_dict)")
    if not path.parent.is_dir():
        raise SpecError(f"--save {text}: the folder {path.parent} does not exist")
    return path


def _train(spec, params: dict, seed: int, fmt: str, save=None) -> int:
    from mpiopt.parallel import world
    from mpiopt.training.folds import fold_plan

    comm = world()
    leader = comm.Get_rank() == 0
    _native_log(spec.study.name)
    from mpiopt.training.searched import split

    t = split(spec, params)[0].training        # with searched training fields set
    if leader and fmt == "table":
        plan = fold_plan(t.kfold, comm.Get_size())
        layout = (f"{t.kfold} folds " + ("concurrently" if plan.concurrent else "in turn")
                  if t.kfold > 1 else "1 fold")
        print(f"training {spec.study.name}: {_show(params)}")
        print(f"{comm.Get_size()} rank(s), mode {t.mode}, {layout}, {t.epochs} epochs, "
              f"global batch {t.batch_size}, seed {seed}", flush=True)
    on_epoch = _epoch_printer(t) if fmt == "table" else None
    try:
        from mpiopt.training import run_training

        from mpiopt.artifacts import TrialArtifacts

        artifacts = TrialArtifacts(model=str(save)) if save else None
        result = run_training(spec, params, comm, seed, on_epoch=on_epoch, artifacts=artifacts)
    except Exception as exc:  # the model or the data failed: one line, exit 1
        if leader:
            print(f"mpiopt: training failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if leader:
        _print_result(spec, params, seed, result, fmt)
        if save and fmt == "table":
            from mpiopt.artifacts import with_model_suffix
            from mpiopt.training.frameworks import suffix_of

            print(f"model saved to {with_model_suffix(save, suffix_of(result['framework']))}",
                  flush=True)
    return 0


def _native_log(name: str) -> None:
    """The framework's native start-up lines go to ./NAME.train.log, not the terminal."""
    import os
    from pathlib import Path

    from mpiopt.names import file_stem
    from mpiopt.study.opening import NATIVE_LOG_ENV

    os.environ.setdefault(NATIVE_LOG_ENV, str(Path.cwd() / f"{file_stem(name)}.train.log"))


def _show(params: dict) -> str:
    return " ".join(f"{k}={_num(v)}" for k, v in params.items())


def _num(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _epoch_printer(training):
    """A line per fold and epoch, as the trainer reports them."""
    from mpiopt.trial import step_text

    def show(step, value: float, metrics: dict) -> None:
        print(f"{step_text(step, training.kfold)}  "
              + "  ".join(f"{k}={_num(v)}" for k, v in sorted(metrics.items())), flush=True)

    return show


def _print_result(spec, params, seed, result, fmt) -> None:
    from mpiopt.trial import by_fold

    metric = spec.objective.metric
    if fmt == "json":
        out = {"params": params, "seed": seed, "metric": metric,
               **{k: v for k, v in result.items() if k != "timing"},
               "intermediate": by_fold(result["intermediate"])}
        jsontext.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    folds = ", ".join(_num(v) for v in result["fold_values"])
    spread = f" ± {_num(result['value_std'])}" if len(result["fold_values"]) > 1 else ""
    timing = result.get("timing", {})
    rate = timing.get("samples", 0) / timing["train_s"] if timing.get("train_s") else 0.0
    print(f"figure of merit: {metric} = {_num(result['value'])}{spread} (folds: {folds})")
    print(f"trained {timing.get('samples', 0)} samples at {rate:.0f} samples/s", flush=True)
