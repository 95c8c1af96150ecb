"""Which search-space parameters the user's build_model really read.

Why: a parameter that build_model never looks at (a typo, `lr` searched but `learning_rate`
read) changes nothing, and a study spends its budget on a dimension that does not exist.
The coordinator warns once (parallel.scheduler). Iterating over the parameters or copying
them counts as reading all of them: then nothing can be said.
"""
from __future__ import annotations


class ReadTracker(dict):
    """A dict of parameters that remembers which keys were read."""

    def __init__(self, params: dict):
        super().__init__(params)
        self.read: set = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key) -> bool:
        self.read.add(key)
        return super().__contains__(key)

    def _all(self):
        self.read.update(super().keys())

    def __iter__(self):
        self._all()
        return super().__iter__()

    def keys(self):
        self._all()
        return super().keys()

    def items(self):
        self._all()
        return super().items()

    def values(self):
        self._all()
        return super().values()

    def copy(self):
        self._all()
        return dict(super().items())

    def pop(self, key, *default):
        self.read.add(key)
        return super().pop(key, *default)

    def unread(self) -> list[str]:
        return [k for k in super().keys() if k not in self.read]
