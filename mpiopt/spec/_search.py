"""`search`: the algorithm, its budget and options, queued and warm-start trials."""
from __future__ import annotations



from mpiopt.search.options import OPTIONS
from mpiopt.space import Space, SpaceError
from mpiopt.spec._reader import _Section, _duration, _show
from mpiopt.spec._types import ALGORITHMS, SearchSpec

SEARCH_KEYS = ("algorithm", "trials", "seed", "target", "time_limit", "max_initial_failures",
               "trial_timeout", "grace", "max_attempts", "initial_trials",
               "warm_start", "keep_models") + ALGORITHMS


def _search(top: _Section, space: Space) -> SearchSpec:
    sec = top.section("search", SEARCH_KEYS)
    algorithm = sec.text("algorithm", "auto", choices=ALGORITHMS)
    trials = sec.integer("trials", minimum=1)
    options = {name: _algorithm_options(sec, name, space) for name in ALGORITHMS}
    return SearchSpec(
        algorithm=algorithm,
        trials=trials,
        seed=sec.integer("seed", 0, minimum=0),
        target=sec.number("target", None),
        time_limit=_duration(sec, "time_limit"),
        max_initial_failures=sec.integer("max_initial_failures", 5, minimum=1),
        options=options[algorithm],
        trial_timeout=_duration(sec, "trial_timeout"),
        grace=_duration(sec, "grace") or 300.0,
        max_attempts=sec.integer("max_attempts", 2, minimum=1),
        initial_trials=_initial_trials(sec, space),
        warm_start=sec.text("warm_start", None),
        keep_models=sec.integer("keep_models", 1, minimum=0),
    )


def _initial_trials(sec: _Section, space: Space) -> tuple:
    """search.initial_trials: complete parameter sets inside the space, each error naming
    `search.initial_trials[i].name`."""
    entries = sec.raw("initial_trials", [])
    if entries is None:
        return ()
    if not isinstance(entries, list):
        sec.fail("initial_trials", f"expected a list of parameter mappings, got {_show(entries)}")
    out = []
    for i, entry in enumerate(entries):
        try:
            out.append(space.parameter_set(entry))
        except SpaceError as exc:
            field = "" if exc.field == "params" else f".{exc.field}"
            sec.fail(f"initial_trials[{i}]{field}", exc.message)
    return tuple(out)


def _algorithm_options(search: _Section, algorithm: str, space: Space) -> dict:
    """`search.<algorithm>`, validated from the one declaration of the searchers' options
    (mpiopt.search.options), plus the rules that tie two options or the space together."""
    declared = OPTIONS[algorithm]
    sec = search.section(algorithm, tuple(o.name for o in declared), default={})
    opts = {o.name: o.read(sec) for o in declared}
    if algorithm == "evolutionary":
        if opts["tournament"] > opts["population"]:
            sec.fail("tournament", f"must not exceed population ({opts['population']}), got {opts['tournament']}")
        if opts["elitism"] >= opts["population"]:
            sec.fail("elitism", f"must be less than population ({opts['population']}), got {opts['elitism']}")
        if opts["cma"]:
            other = [d.name for d in space if type(d).__name__ != "Real"]
            if other:
                sec.fail("cma", f"CMA-ES needs an all-real search space; '{other[0]}' is not real")
    return opts


