"""The rules that tie `search.algorithm: pbt` to the other sections.

Why each refusal: a round continues another trial's checkpoint, so PBT needs a Keras
model with checkpoints, one fold (the folds' splits follow each trial's seed, so a
parent's fold would hold a child's validation data), and a single value per round.
Pruning and early stopping are refused because exploiting the bottom of the population
already replaces them; a conditional space because explore would have to switch
branches of a trained network.
"""
from __future__ import annotations

from mpiopt.errors import SpecError


def read_lists(sec, declared) -> dict:
    """search.pbt's list options: `perturb` (positive numbers) and `explore` (names,
    checked against the space by check_pbt)."""
    out = {}
    for name, kind in (("perturb", "numbers"), ("explore", "names")):
        raw = sec.raw(name, declared[name].default)
        items = [raw] if isinstance(raw, (str, int, float)) and not isinstance(raw, bool) else raw
        if not isinstance(items, (list, tuple)):
            sec.fail(name, f"expected a list, got {raw!r}")
        if kind == "names":
            if not all(isinstance(v, str) and v for v in items):
                sec.fail(name, f"expected a list of search_space names, got {raw!r}")
            out[name] = list(items)
        else:
            if not items or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                    and v > 0 for v in items):
                sec.fail(name, f"expected a list of positive numbers, got {raw!r}")
            out[name] = [float(v) for v in items]
    return out


def check_pbt(source: str, objective, search, training, space) -> None:
    from mpiopt.search import traits

    if not traits(search.algorithm).rounds:
        return

    def fail(field: str, message: str):
        raise SpecError(f"{source}: {field}: {message}")

    if objective.function:
        fail("objective.function", "pbt continues each round from a checkpoint; it needs a "
                                   "Keras model (objective.model and objective.data)")
    if training.kfold > 1:
        fail("training.kfold", f"pbt trains one model per member; use kfold: 1 (a holdout or "
                               f"validation set), got {training.kfold}")
    if training.pruning is not None:
        fail("training.pruning", "pbt replaces pruning (the bottom of the population copies "
                                 "the top); remove it")
    if training.early_stopping is not None:
        fail("training.early_stopping", "pbt trains every round for search.pbt.interval "
                                        "epochs; remove it")
    if training.checkpoint_every < 1:
        fail("training.checkpoint_every", "pbt starts each round from a checkpoint; it must "
                                          "be at least 1")
    if training.refit:
        fail("training.refit", "pbt's best model is its best round's own; leave refit off")
    if space.conditional:
        fail("search_space", "pbt needs a space without conditions (explore cannot switch "
                             "a trained network's branches)")
    if search.warm_start or search.initial_trials:
        which = "warm_start" if search.warm_start else "initial_trials"
        fail(f"search.{which}", "pbt's population starts from its own random members")
    for name in search.options.get("explore", ()):
        if name not in space.names:
            fail("search.pbt.explore", f"'{name}' is not a search_space parameter")
