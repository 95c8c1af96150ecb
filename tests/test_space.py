"""Search-space dimensions: validation, skopt and genome round trips, sampling, membership."""
from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest

from mpiopt.search._skopt import from_point, skopt_dimensions, to_point
from mpiopt.space import Categorical, Integer, Real, Space, SpaceError

N = 500  # random parameter sets per property check


@pytest.fixture
def space():
    return Space([
        Real("lr", 1e-5, 1.0, "log-uniform"),
        Real("dropout", 0.0, 0.5),
        Integer("layers", 1, 6),
        Integer("units", 8, 1024, "log-uniform"),
        Integer("offset", -3, 3),
        Categorical("optimizer", ["adam", "sgd", "rmsprop"]),
        Categorical("kernel", [3, 5, 7]),
        Categorical("scale", [0.5, 2.0]),
        Categorical("batch_norm", [True, False]),
    ])


def samples(space, n=N, seed=0):
    rng = np.random.default_rng(seed)
    return [space.sample(rng) for _ in range(n)]


def assert_native(space, params):
    for d in space:
        value = params[d.name]
        if isinstance(d, Real):
            assert type(value) is float
        elif isinstance(d, Integer):
            assert type(value) is int
        else:
            assert type(value) is type(d.choices[d.index(value)])
    json.dumps(params)  # numpy scalars would fail here


def assert_same(space, got, expected):
    """Equal, up to float rounding in real dimensions (log/exp and skopt transforms)."""
    for name in space.names:
        if isinstance(space[name], Real):
            assert got[name] == pytest.approx(expected[name], rel=1e-9, abs=1e-12)
        else:
            assert got[name] == expected[name]


# ----------------------------------------------------------------------------- construction
@pytest.mark.parametrize("make, field, fragment", [
    (lambda: Real("x", 1.0, 1.0), "x.low", "less than high"),
    (lambda: Real("x", 2.0, 1.0), "x.low", "less than high"),
    (lambda: Integer("n", 5, 5), "n.low", "less than high"),
    (lambda: Real("x", 0.0, 1.0, "log-uniform"), "x.low", "low > 0"),
    (lambda: Integer("n", -1, 10, "log-uniform"), "n.low", "low > 0"),
    (lambda: Real("x", 0.0, 1.0, "log"), "x.prior", "uniform, log-uniform"),
    (lambda: Real("x", True, 2.0), "x.low", "a number"),
    (lambda: Integer("n", 1, True), "n.high", "an integer"),
    (lambda: Integer("n", 1.0, 4), "n.low", "an integer"),
    (lambda: Real("x", "0", 1.0), "x.low", "a number"),
    (lambda: Real("x", 0.0, math.inf), "x.high", "finite"),
    (lambda: Categorical("c", []), "c.choices", "at least one"),
    (lambda: Categorical("c", ["a", "b", "a"]), "c.choices[2]", "duplicate"),
    (lambda: Categorical("c", [1, True]), "c.choices[1]", "duplicate"),
    (lambda: Categorical("c", [1, 1.0]), "c.choices[1]", "duplicate"),
    (lambda: Categorical("c", [None]), "c.choices[0]", "string, number or boolean"),
    (lambda: Categorical("c", [[1]]), "c.choices[0]", "string, number or boolean"),
    (lambda: Categorical("c", "ab"), "c.choices", "a list"),
])
def test_invalid_dimensions(make, field, fragment):
    with pytest.raises(SpaceError) as info:
        make()
    assert info.value.field == field
    assert fragment in info.value.message


TOP = 1.7976931348623157e308          # the largest float
NORMAL = 2.2250738585072014e-308      # the smallest normal float


@pytest.mark.parametrize("make, field, fragment", [
    (lambda: Real("x", -1e308, 1e308), "x", "too wide: high - low and high + low must stay "
                                           "within ±1.798e+308, the largest float"),
    (lambda: Real("x", -TOP, TOP), "x", "too wide"),
    (lambda: Real("x", 1e308, TOP), "x", "too wide"),          # the sum overflows
    (lambda: Real("x", 5e-324, 1e-323), "x", "too narrow: high - low (4.941e-324) must be at "
                                             "least 2.225e-308, the smallest normal float"),
    (lambda: Real("x", 0.0, 1e-310), "x", "too narrow"),
    (lambda: Real("x", NORMAL, math.nextafter(NORMAL, 1.0)), "x", "too narrow"),
    (lambda: Real("x", math.nextafter(TOP, 0.0), TOP, "log-uniform"), "x",
     "too narrow: log(high) - log(low) (0) must be at least 2.225e-308"),
    (lambda: Real("x", 1e-200, 1e-150, "log-uniform"), "x.low",
     "low × high of at least 4.9e-324, the smallest float"),
    (lambda: Real("x", 5e-324, 1e-323, "log-uniform"), "x.low", "underflows to 0"),
    (lambda: Real("x", 0, 10**400), "x.high", "expected a finite number (within ±1.798e+308)"),
    (lambda: Integer("n", 0, 10**23), "n.high", "beyond ±2**53 (9007199254740992)"),
    (lambda: Integer("n", -2**53 - 1, 0), "n.low", "beyond ±2**53"),
    (lambda: Integer("n", 2**60, 2**60 + 3), "n.low", "beyond ±2**53"),
    (lambda: Integer("n", 0, 10**400), "n.high", "beyond ±2**53"),
    (lambda: Integer("n", 2**53 - 1, 2**53, "log-uniform"), "n",
     "too narrow: log(high) - log(low) (0) must be at least 2.225e-308, the smallest normal "
     "float (a uniform prior takes this range)"),
    (lambda: Categorical("c", [1, 10**400]), "c.choices[1]", "within ±1.798e+308"),
])
def test_ranges_searchers_cannot_compute_with_are_refused(make, field, fragment):
    """Each range here passed once and then crashed a searcher mid-study (an OverflowError
    in tpe and cmaes, NaN in bayesian's model, a division by zero in evolutionary)."""
    with pytest.raises(SpaceError) as info:
        make()
    assert info.value.field == field
    assert fragment in info.value.message, info.value.message


def test_duplicate_names_and_empty_space():
    with pytest.raises(SpaceError, match="duplicate"):
        Space([Real("x", 0, 1), Integer("x", 0, 1)])
    with pytest.raises(SpaceError, match="at least one"):
        Space([])


def test_bounds_become_native_floats_and_ints():
    assert Real("x", 0, 1).to_dict() == {"type": "real", "low": 0.0, "high": 1.0, "prior": "uniform"}
    assert type(Real("x", 0, 1).low) is float
    assert type(Integer("n", np.int64(1), 3).low) is int


# ----------------------------------------------------------------------------- skopt
def test_skopt_dimensions_keep_order_and_names(space):
    dims = skopt_dimensions(space)
    assert [d.name for d in dims] == space.names
    assert dims[0].prior == "log-uniform" and dims[3].prior == "log-uniform"


def test_skopt_point_round_trip(space):
    for params in samples(space):
        point = to_point(space, params)
        assert point == [params[n] for n in space.names]
        back = from_point(space, point)
        assert back == params
        assert_native(space, back)


def test_points_drawn_by_skopt_come_back_native_and_inside(space):
    from skopt.space import Space as SkSpace

    sk = SkSpace(skopt_dimensions(space))
    for point in sk.rvs(N, random_state=1):
        params = from_point(space, point)
        assert space.contains(params), params
        assert_native(space, params)
    # skopt's own transform / inverse transform (what its optimizer works in)
    points = [to_point(space, p) for p in samples(space, 100)]
    for params, point in zip(samples(space, 100), sk.inverse_transform(sk.transform(points))):
        back = from_point(space, point)
        assert_native(space, back)
        assert_same(space, back, params)


def test_from_point_checks_length(space):
    with pytest.raises(ValueError):
        from_point(space, [1.0])


# ----------------------------------------------------------------------------- genome
def test_genome_round_trip(space):
    for params in samples(space):
        genome = space.to_genome(params)
        assert len(genome) == len(space)
        assert all(0.0 <= g <= 1.0 and type(g) is float for g in genome)
        back = space.from_genome(genome)
        assert_native(space, back)
        assert_same(space, back, params)


def test_any_genome_decodes_inside_the_space(space):
    rng = np.random.default_rng(3)
    for _ in range(N):
        genome = rng.uniform(-0.5, 1.5, len(space))  # mutation may step outside [0, 1]
        params = space.from_genome(genome)
        assert space.contains(params)
        assert_native(space, params)
    for edge in ([0.0] * len(space), [1.0] * len(space), [math.nan] * len(space)):
        assert space.contains(space.from_genome(edge))


def test_genome_clips_to_the_bounds():
    real, integer, cat = Real("x", -1.0, 3.0), Integer("n", 2, 9), Categorical("c", ["a", "b", "c"])
    assert real.decode(-7.0) == -1.0 and real.decode(7.0) == 3.0
    assert integer.decode(-0.1) == 2 and integer.decode(1.1) == 9
    assert cat.decode(-1) == "a" and cat.decode(1.0) == "c" and cat.decode(2) == "c"


def test_log_prior_genome_is_log_scale():
    lr = Real("lr", 1e-4, 1.0, "log-uniform")
    assert lr.decode(0.5) == pytest.approx(1e-2)
    assert lr.encode(1e-3) == pytest.approx(0.25)
    units = Integer("units", 1, 1000, "log-uniform")
    assert units.decode(0.5) == round(math.sqrt(0.5 * 1000.5))


def test_integer_genome_bins_are_equal_and_round_to_nearest():
    n = Integer("n", 1, 4)
    counts = Counter(n.decode(g) for g in np.linspace(0, 1, 40001))
    assert set(counts) == {1, 2, 3, 4}
    assert max(counts.values()) - min(counts.values()) <= 2  # endpoints are not half-weighted
    assert [n.decode(n.encode(v)) for v in range(1, 5)] == [1, 2, 3, 4]
    assert n.decode(0.2499) == 1 and n.decode(0.2501) == 2  # boundary between bins


def test_categorical_bins():
    c = Categorical("c", ["a", "b", "c", "d"])
    assert [c.encode(v) for v in "abcd"] == [0.125, 0.375, 0.625, 0.875]
    assert [c.decode(g) for g in (0.0, 0.26, 0.5, 0.99)] == ["a", "b", "c", "d"]


# ----------------------------------------------------------------------------- sampling
def test_sampling_is_reproducible(space):
    assert samples(space, 50, seed=7) == samples(space, 50, seed=7)
    assert samples(space, 50, seed=7) != samples(space, 50, seed=8)


def test_sampling_respects_priors():
    space = Space([Real("lr", 1e-6, 1.0, "log-uniform"), Real("u", 0.0, 1.0),
                   Integer("k", 1, 4), Categorical("c", ["x", "y"])])
    draws = samples(space, 4000, seed=1)
    logs = np.log10([d["lr"] for d in draws])
    assert abs(np.median(logs) + 3) < 0.2  # log-uniform: median at the geometric mean
    assert abs(np.mean([d["u"] for d in draws]) - 0.5) < 0.03
    ks = Counter(d["k"] for d in draws)
    assert all(abs(ks[k] / 4000 - 0.25) < 0.04 for k in range(1, 5))
    assert abs(Counter(d["c"] for d in draws)["x"] / 4000 - 0.5) < 0.04


# ----------------------------------------------------------------------------- membership
@pytest.mark.parametrize("change, name", [
    ({"layers": True}, "layers"),          # bool is not an int
    ({"layers": 2.0}, "layers"),
    ({"layers": 7}, "layers"),
    ({"lr": 2.0}, "lr"),
    ({"lr": "0.1"}, "lr"),
    ({"lr": math.nan}, "lr"),
    ({"optimizer": "adamw"}, "optimizer"),
    ({"kernel": 3.0}, "kernel"),            # 3.0 == 3, but kernel is an int choice...
    ({"batch_norm": 1}, "batch_norm"),      # ...and 1 is not True
    ({"extra": 1}, "extra"),
])
def test_check_names_the_parameter(space, change, name):
    params = dict(samples(space, 1)[0], **change)
    if name == "kernel":  # a float equal to an int choice is accepted and normalized
        assert space.contains(params) and from_point(space, to_point(space, params))["kernel"] == 3
        return
    assert not space.contains(params)
    with pytest.raises(ValueError, match=rf"^{name}:"):
        space.check(params)


def test_check_missing_parameter(space):
    params = samples(space, 1)[0]
    del params["units"]
    with pytest.raises(SpaceError, match="^units: missing"):
        space.check(params)


def test_numpy_values_are_accepted_and_normalized(space):
    params = dict(samples(space, 1)[0], layers=np.int64(2), lr=np.float64(0.01),
                  optimizer=np.str_("sgd"))
    assert space.contains(params)
    back = from_point(space, to_point(space, params))
    assert_native(space, back)


# ----------------------------------------------------------------------------- description
def test_dict_round_trip_and_fingerprint(space):
    d = space.to_dict()
    assert json.loads(json.dumps(d)) == d
    again = Space.from_dict(json.loads(json.dumps(d)))
    assert again == space and again.names == space.names
    assert again.fingerprint() == space.fingerprint()
    assert len(space.fingerprint()) == 64


def test_fingerprint_ignores_order_but_not_bounds(space):
    reordered = Space(list(reversed(space.dimensions)))
    assert reordered.fingerprint() == space.fingerprint()
    changed = Space([Real("lr", 1e-5, 0.5, "log-uniform")] + space.dimensions[1:])
    assert changed.fingerprint() != space.fingerprint()


def test_diff(space):
    other = Space([Real("lr", 1e-5, 0.5, "log-uniform")] + space.dimensions[1:-1]
                  + [Integer("epochs", 1, 9)])
    lines = space.diff(other)
    assert "changed lr: real [1e-05, 1.0] log-uniform -> real [1e-05, 0.5] log-uniform" in lines
    assert "removed batch_norm: categorical [True, False]" in lines
    assert "added epochs: integer [1, 9] uniform" in lines
    assert space.diff(space) == []


def test_distance(space):
    a = samples(space, 1)[0]
    assert space.distance(a, a) == 0.0
    b = dict(a, optimizer="sgd" if a["optimizer"] != "sgd" else "adam")
    assert space.distance(a, b) == 1.0
    c = dict(a, lr=1e-5)
    d = dict(a, lr=1e-3)
    assert space.distance(c, d) == pytest.approx(0.4)  # two of five decades
    for x, y in zip(samples(space, 100, 1), samples(space, 100, 2)):
        assert 0.0 <= space.distance(x, y) <= 1.0


def test_from_dict_rejects_bad_entries():
    with pytest.raises(SpaceError, match="type"):
        Space.from_dict({"x": {"type": "float", "low": 0, "high": 1}})
    with pytest.raises(SpaceError):
        Space.from_dict({"x": [1, 2]})


def test_point_set_nearest_matches_space_distance_through_adds_and_discards():
    """PointSet (numpy, by column, free slots at +inf) gives Space.distance's minimum, also
    after discards and when it grows past its first 16 slots."""
    from mpiopt.space import PointSet

    space = Space.from_dict({"lr": {"type": "real", "low": 1e-4, "high": 1.0, "prior": "log-uniform"},
                             "units": {"type": "integer", "low": 1, "high": 64},
                             "act": {"type": "categorical", "choices": ["relu", "tanh", "elu"]}})
    rng = np.random.default_rng(3)
    points, kept = PointSet(space), {}
    assert points.nearest(space.sample(rng)) == math.inf
    for i in range(60):
        p = space.sample(rng)
        points.add(i, p)
        kept[i] = p
        if i % 3 == 0:
            gone = int(rng.choice(list(kept)))
            points.discard(gone)
            del kept[gone]
        q = space.sample(rng)
        want = min(space.distance(q, other) for other in kept.values()) if kept else math.inf
        assert points.nearest(q) == pytest.approx(want)
    assert points.nearest(next(iter(kept.values()))) == 0.0
