"""`search`: the algorithm, its budget and options, queued and warm-start trials."""
from __future__ import annotations



from mpiopt.field import REQUIRED, Field, Fields
from mpiopt.search.options import OPTIONS
from mpiopt.space import Space, SpaceError
from mpiopt.spec._reader import _Section, _show
from mpiopt.spec._types import ALGORITHMS, SearchSpec

SEARCH = Fields(
    Field("algorithm", "auto", "text", "`auto` (chooses, see \"Choosing a searcher\"), "
          "`bayesian` (a Gaussian process, scikit-optimize's kernels), `tpe` and `cmaes` "
          "(Optuna's samplers), `evolutionary` (DEAP), `random`, or `pbt` (population-based "
          "training of Keras models, see \"Population-based training\").", choices=ALGORITHMS),
    Field("trials", REQUIRED, "integer", "Number of finished trials to run. A resumed study "
          "counts the trials already done. A space of integer and categorical parameters only "
          "runs each parameter set once and ends when all were tried, if that comes first "
          "(see \"Finite spaces\"). With `pbt` a trial is one round of one member, so "
          "the compute is `trials` x `pbt.interval` group-epochs.", low=1),
    Field("seed", 0, "integer", "The same spec and seed give the same suggestions.", low=0),
    Field("target", None, "number", "Stop once a trial's value reaches this (or better, per "
          "`direction`)."),
    Field("time_limit", None, "duration", "Seconds, or a duration `90s`, `10m`, `2h`, `1h30m`, "
          "`1d`. After it no new trial starts; running trials finish."),
    Field("max_initial_failures", 5, "integer", "Stop the study if this many trials fail before "
          "any succeeds, once no trial started before the last of them is still running (it "
          "may yet succeed: settings that fail in seconds, as a batch size that runs out of "
          "memory, report before those that train).", low=1),
    Field("max_failures_in_a_row", 10, "integer", "After a trial has succeeded, stop the "
          "study once this many trials in a row have failed (an objective that broke, a data "
          "file gone): the rest of the budget would fail the same way. The closing line says "
          "how to run the failed trials again (`--retry-failed`).", low=1),
    Field("trial_timeout", None, "duration", "A trial past it is FAILED (\"timed out after "
          "10m\") and never run again. A sandboxed function is killed at once; a function in "
          "the rank's process gets a SIGALRM; a Keras trial stops at its next epoch end. One "
          "that does not stop within min(1 min, max(5 s, the timeout)) ends the job (recorded "
          "FAILED) with the resume command."),
    Field("grace", 300.0, "duration", "The time limit's hard edge: by `time_limit + grace` the "
          "job has ended, running trials recorded INTERRUPTED (they run again on resume), so a "
          "batch job ends before its walltime."),
    Field("max_attempts", 2, "integer", "How many times a trial runs whose job died under it "
          "(see \"When things go wrong\"); then it is FAILED.", low=1),
    Field("initial_trials", [], "list", "Parameter sets to run first, e.g. `[{x: 1.0, units: "
          "64}, ...]`: the defaults you trust, or last study's best. Each must give every "
          "parameter inside the space (errors name `search.initial_trials[i].name`). Queued "
          "when the study is created, as `mpiopt enqueue` does (see \"Managing studies\")."),
    Field("warm_start", None, "text", "The name of another study in the same database whose "
          "finished results (COMPLETE, PRUNED) the searcher is told first, so a follow-up study "
          "over a changed space does not pay again for what is known. A result is told when "
          "every parameter of this space is present and inside it (parameters this space lacks "
          "are dropped); the header says how many were told and skipped. The other study must "
          "have the same metric and direction. Its results are not this study's trials and do "
          "not count toward the budget; they are read again on every resume."),
    Field("keep_models", 1, "integer", "Keras studies: keep the trained models of the best this "
          "many COMPLETE trials in the artifact store (`0`: none); see \"What training "
          "keeps\".", low=0),
    *(Field(name, {}, "mapping", "Options of each algorithm (below). All sections present are "
            "checked; the chosen algorithm's one is used (and appears, filled in, in the "
            "resolved spec).", shown="see below") for name in ALGORITHMS),
)


def _search(top: _Section, space: Space) -> SearchSpec:
    sec = top.section("search", SEARCH.names)
    given = SEARCH.read(sec)
    options = {name: _algorithm_options(sec, name, space) for name in ALGORITHMS}
    return SearchSpec(**given, options=options[given["algorithm"]],
                      initial_trials=_initial_trials(sec, space))


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
    sec = search.section(algorithm, declared.names, default={})
    opts = declared.read(sec)
    if algorithm == "pbt":
        from mpiopt.spec._pbt import read_lists

        opts.update(read_lists(sec, declared))
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


