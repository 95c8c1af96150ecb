"""Search-space dimensions (real, integer, categorical, with priors: dimensions), the space
they make with the conversions every searcher needs (search_space), and conditional
parameters that exist only for some values of others (conditions)."""
from mpiopt.errors import SpaceError
from mpiopt.space.dimensions import (CHOICE_TYPES, NEUTRAL, PRIORS, Categorical, Dimension,
                                     Integer, Real, dimension_from_dict)
from mpiopt.space.search_space import PointSet, Space

__all__ = ["CHOICE_TYPES", "NEUTRAL", "PRIORS", "Categorical", "Dimension", "Integer",
           "PointSet", "Real", "Space", "SpaceError", "dimension_from_dict"]
