"""objective.data.selection's expressions: what they may say, what they refuse, never eval.

The expressions run on every rank of a cluster job; these tests pin the grammar (a
whitelist of operators and numpy functions over branch names) and that everything else is
refused in one line before anything is evaluated."""
from __future__ import annotations

import numpy as np
import pytest

from mpiopt.training.selection import Selection, SelectionError

COLUMNS = {"pt": np.array([10.0, 50.0, 300.0, 500.0]), "eta": np.array([0.1, -3.0, 1.0, 2.0]),
           "n": np.array([0, 2, 3, 1])}


@pytest.mark.parametrize("text,kept", [
    ("pt > 30", [0, 1, 1, 1]),
    ("30 < pt < 400", [0, 1, 1, 0]),
    ("(pt > 30) & (np.abs(eta) < 2.5)", [0, 0, 1, 1]),
    ("(pt > 30) & (numpy.abs(eta) < 2.5)", [0, 0, 1, 1]),
    ("pt > 30 and not n == 1", [0, 1, 1, 0]),
    ("sqrt(pt) > 5 or n >= 3", [0, 1, 1, 1]),
    ("~(pt > 30) | (n % 2 == 1)", [1, 0, 1, 1]),
    ("hypot(pt, eta) > 100", [0, 0, 1, 1]),
    ("where(n > 1, pt, 0) > 40", [0, 1, 1, 0]),
    ("pt < 10**10**10", [1, 1, 1, 1]),        # numpy's numbers: inf, not a hang
    ("(pt * 2 - 1) / 3 >= 33", [0, 1, 1, 1]),
])
def test_a_selection_keeps_the_events_its_expression_is_true_for(text, kept):
    assert Selection(text).evaluate(COLUMNS).tolist() == [bool(k) for k in kept]


def test_a_selection_names_the_branches_it_reads_once_each_in_order():
    assert Selection("(eta > 0) & (pt > eta) | (n > 1) & (abs(eta) < 2)").names == ("eta", "pt", "n")


@pytest.mark.parametrize("text,says", [
    ("pt >", "does not parse"),
    ("__import__('os').system('true')", "is not a function a selection may call"),
    ("__import__('os')", "'__import__' is not a function a selection may call"),
    ("eval('1')", "'eval' is not a function"),
    ("np.sum(pt) > 0", "'sum' is not a function"),
    ("pt.real > 0", "'pt.real' is not allowed"),
    ("().__class__", "is not allowed"),
    ("pt[0] > 1", "'pt[0]' is not allowed"),
    ("lambda: pt", "is not allowed"),
    ("[pt][0] > 1", "is not allowed"),
    ("'a' == pt", "only numbers, True and False are values"),
    ("abs(pt, eta) > 1", "abs takes 1 argument(s)"),     # numpy's `out`: it would write eta
    ("abs(x=pt) > 1", "abs takes 1 argument(s)"),
    ("abs > 1", "'abs' is a function"),
    ("1 < 2", "names no branch"),
    ("pt\x00 > 1", "does not parse"),
    ("(" * 300 + "pt" + ")" * 300 + " > 1", "does not parse"),
])
def test_anything_else_is_refused_in_one_line_before_it_runs(text, says):
    with pytest.raises(SelectionError) as info:
        Selection(text)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_a_selection_must_give_true_or_false_of_numbers_per_event():
    with pytest.raises(SelectionError, match="gives numbers, not true or false"):
        Selection("pt + 1").evaluate(COLUMNS)
    with pytest.raises(SelectionError, match="'pt' is not one number per event"):
        Selection("pt > 1").evaluate({"pt": np.ones((4, 2))})
    with pytest.raises(SelectionError, match="'pt' is not one number per event"):
        Selection("pt > 1").evaluate({"pt": np.array(["a"] * 4)})


def test_evaluating_reads_the_columns_and_never_writes_them():
    columns = {k: v.copy() for k, v in COLUMNS.items()}
    for v in columns.values():
        v.flags.writeable = False          # memory-mapped files are read-only
    Selection("(log(pt) > 3) & (minimum(eta, n) < 1) & isfinite(pt / n)").evaluate(columns)
    assert all(np.array_equal(columns[k], COLUMNS[k]) for k in COLUMNS)
