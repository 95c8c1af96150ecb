"""Search-space dimensions (real, integer, categorical, with priors), the conversions every
searcher needs (dimensions), and conditional parameters that exist only for some values
of others (conditions)."""
from mpiopt.errors import SpaceError
from mpiopt.space.dimensions import (CHOICE_TYPES, NEUTRAL, PRIORS, Categorical, Dimension,
                                     Integer, PointSet, Real, Space, dimension_from_dict)

__all__ = ["CHOICE_TYPES", "NEUTRAL", "PRIORS", "Categorical", "Dimension", "Integer",
           "PointSet", "Real", "Space", "SpaceError", "dimension_from_dict"]
