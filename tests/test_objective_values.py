"""What an objective may return as its value: any real number, never a flag or a list."""
import decimal
import fractions

import numpy as np
import pytest

from mpiopt.objective.evaluate import _number


@pytest.mark.parametrize("value, expected", [
    (2, 2.0), (2.5, 2.5), (np.float32(0.5), 0.5), (np.int64(3), 3.0), (np.array(1.5), 1.5),
    (fractions.Fraction(1, 4), 0.25), (decimal.Decimal("0.125"), 0.125),
])
def test_a_real_number_of_any_kind_is_a_value(value, expected):
    assert _number(value, "loss") == expected


@pytest.mark.parametrize("value", [True, "0.5", None, [0.5], (0.5, 1.0), np.array([0.5]),
                                   1 + 2j])
def test_anything_else_names_its_type_and_the_metric(value):
    with pytest.raises(TypeError, match=f"objective returned {type(value).__name__} for 'loss'"):
        _number(value, "loss")
