"""`mpiopt validate SPEC [--set NAME=VALUE ...]`: check a spec and print it resolved.

The output is the spec exactly as a study would store it (defaults filled in, includes
expanded, paths absolute), so it doubles as documentation of what a short spec means;
where the data section selects or weighs events, comment lines after it say how many
events the files hold and how many the selection keeps.
A function objective is also imported, to catch import errors before a cluster job does;
a Keras model file is only checked statically (importing it would import TensorFlow).
"""
from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "validate", help="check a spec file and print it with every default filled in",
        description="Check a spec file; print the resolved spec as YAML, or one error line "
        "(exit status 2).")
    parser.add_argument("spec", metavar="SPEC", help="path to the spec YAML file")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
        help="override a field by its dotted path, e.g. --set search.trials=10 "
        "--set search_space.lr.high=0.5 (VALUE is read as YAML); repeatable")
    parser.set_defaults(func=run)


def run(args) -> int:
    from mpiopt.refs import load_callable
    from mpiopt.cli.common import read_spec
    from mpiopt.spec import parse_overrides

    spec = read_spec(args.spec, parse_overrides(args.overrides))
    if spec.objective.function:
        load_callable(spec.objective.function, spec.base_dir, spec.source, "objective.function")
    print(spec.to_yaml(), end="")
    if spec.objective.data is not None:      # comments: the output stays the resolved spec
        from mpiopt.training.data import describe

        for line in describe(spec.objective.data, spec.base_dir):
            print(f"# {line}")
    return 0
