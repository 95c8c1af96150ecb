"""Population-based training (Jaderberg et al., 2017), asynchronous, as a pure ask/tell object.

Why each round is a trial: a trial is what the coordinator already dispatches, records,
reruns after a kill and shows. A member of the population trains in rounds (segments) of
`interval` epochs; each round is one trial whose lineage says which member it belongs to,
its round, and the trial whose checkpoint it starts from (`lineage(number)`). Round r
trains epochs r*interval+1 .. (r+1)*interval; its value is the metric at its last epoch.

When a member's round finishes, its next round is decided at once against the other
members' latest finished rounds (never waiting for the population, as in the paper):
a member in the bottom `quantile` copies a top-quantile member's latest trial (exploit:
its checkpoint and hyperparameters) and perturbs them (explore: numbers x perturb
factors within bounds, categoricals resampled with `resample_probability`); any other
member continues from its own latest trial with its own hyperparameters. A member whose
round failed exploits too. Budget: search.trials counts rounds (trials), so the compute
is trials x interval group-epochs.

Rounds are told by trial number, not by parameters (`numbered`): members often share
hyperparameters. Randomness is keyed by trial number like every searcher's, and
`replay_numbered` rebuilds the population from the stored trials on resume.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from mpiopt.search._base import _ASK, Searcher, check_options


@dataclass
class Segment:
    """One round of one member: a trial."""

    number: int
    member: int
    round: int
    parent: int | None
    params: dict
    value: float | None = None     # lower is better; None until told (or failed)
    done: bool = False


class PBTSearcher(Searcher):
    algorithm = "pbt"

    def __init__(self, space, options: dict | None = None, seed: int = 0):
        super().__init__(space, options, seed)
        from mpiopt.search.options import defaults

        self.options = check_options(self.algorithm, options, defaults(self.algorithm))
        o = self.options
        self.population, self.interval = int(o["population"]), int(o["interval"])
        self.quantile = float(o["quantile"])
        self.perturb = tuple(float(f) for f in o["perturb"])
        self.resample = float(o["resample_probability"])
        self.explore_names = list(o["explore"]) or list(self.names)
        self.segments: dict[int, Segment] = {}
        self.latest: dict[int, int] = {}      # member -> its latest finished round's number
        self.busy: dict[int, int] = {}        # member -> its running round's number
        self.failed: set[int] = set()         # members whose last round failed
        self.decisions: dict[int, str] = {}   # number -> start | continue | exploit

    # ---- ask / tell by number ------------------------------------------------------
    def ask(self, number: int | None = None) -> dict | None:
        """The next round for the idle member that is furthest behind; None when every
        member is training (more groups than members: the group waits)."""
        self.number = self.next_number if number is None else int(number)
        member = self._next_member()
        if member is None:
            return None
        self._reseed(_ASK, self.number)
        seg = self._plan(member)
        self.segments[seg.number] = seg
        self.busy[member] = seg.number
        self.next_number = max(self.next_number, self.number + 1)
        return dict(seg.params)

    def lineage(self, number: int) -> dict:
        """{member, round, parent} of trial `number` (asked or replayed)."""
        seg = self.segments.get(number)
        if seg is None:
            return {}
        return {"member": seg.member, "round": seg.round, "parent": seg.parent}

    def renumber(self, numbers: dict[int, int]) -> None:
        """{asked number: stored number}: the storage numbered some trials otherwise (a
        queued trial took a number). All are moved at once, so shifted numbers never clash."""
        moved = {new: self.segments.pop(old) for old, new in numbers.items()
                 if old != new and old in self.segments}
        for new, seg in moved.items():
            old, seg.number = seg.number, new
            self.decisions[new] = self.decisions.pop(old, "")
            if self.busy.get(seg.member) == old:
                self.busy[seg.member] = new
        self.segments.update(moved)

    def tell_trial(self, number: int, params: dict, value: float) -> None:
        seg = self.segments.get(number)
        if seg is None:          # not a round of the population (an enqueued set)
            return
        assert math.isfinite(value), f"searcher told a non-finite value {value!r}"
        seg.value, seg.done = float(value), True
        self.told.append((dict(seg.params), float(value)))
        if self.busy.get(seg.member) == number:
            del self.busy[seg.member]
        self.latest[seg.member] = number
        self.failed.discard(seg.member)

    def forget_trial(self, number: int, params: dict) -> None:
        """A round failed or was interrupted: its member is idle again and exploits next."""
        seg = self.segments.pop(number, None)
        if seg is None:
            return
        self.decisions.pop(number, None)
        if self.busy.get(seg.member) == number:
            del self.busy[seg.member]
        self.failed.add(seg.member)

    def replay_numbered(self, trials, next_number: int) -> None:
        """Rebuild the population on resume from (number, params, value, lineage, finished)
        in number order: value None with finished = a failed round; unfinished rounds
        will run again (their members are busy)."""
        for number, params, value, lineage, finished in trials:
            if not lineage or lineage.get("member") is None:
                continue
            seg = Segment(number, int(lineage["member"]), int(lineage["round"]),
                          lineage.get("parent"), dict(params))
            self.segments[number] = seg
            self.busy[seg.member] = number
            if finished and value is not None and math.isfinite(value):
                self.tell_trial(number, params, value)
            elif finished:
                self.forget_trial(number, params)
        self.next_number = int(next_number)

    def needed(self) -> set[int]:
        """Trials whose checkpoints a round may still start from: every member's latest
        finished round and the parents of rounds still running."""
        keep = set(self.latest.values())
        keep.update(self.segments[n].parent for n in self.busy.values()
                    if n in self.segments and self.segments[n].parent is not None)
        return keep

    # ---- the plan ----------------------------------------------------------------------
    def _next_member(self) -> int | None:
        started = {s.member for s in self.segments.values()} | set(self.latest) | self.failed
        for m in range(self.population):
            if m not in started and m not in self.busy:
                return m
        idle = [m for m in range(self.population) if m not in self.busy]
        if not idle:
            return None
        return min(idle, key=lambda m: (self._round_of(m), m))

    def _round_of(self, member: int) -> int:
        n = self.latest.get(member)
        return -1 if n is None else self.segments[n].round

    def _ranked(self) -> list[Segment]:
        """Every member's latest finished round, best first."""
        return sorted((self.segments[n] for n in self.latest.values()),
                      key=lambda s: (s.value, s.number))

    def _plan(self, member: int) -> Segment:
        own = self.segments.get(self.latest.get(member, -1))
        ranked = self._ranked()
        cut = max(1, math.ceil(self.quantile * len(ranked)))
        top = [s for s in ranked[:cut] if s.member != member]
        bottom = own is not None and len(ranked) >= 2 and own in ranked[-cut:] and own not in ranked[:cut]
        if top and (bottom or member in self.failed):
            donor = top[int(self.rng.integers(len(top)))]
            self.decisions[self.number] = "exploit"
            return Segment(self.number, member, donor.round + 1, donor.number,
                           self.explore(donor.params))
        if own is not None:
            self.decisions[self.number] = "continue"
            return Segment(self.number, member, own.round + 1, own.number, dict(own.params))
        self.decisions[self.number] = "start"        # round 0 (or a restart after failures)
        return Segment(self.number, member, 0, None, self.space.sample(self.rng))

    def explore(self, params: dict) -> dict:
        """params perturbed: each explored number times a perturb factor (integers move at
        least one step), clipped to its bounds; each explored categorical resampled with
        resample_probability."""
        out = dict(params)
        for name in self.explore_names:
            dim = self.space[name]
            value = out[name]
            kind = type(dim).__name__
            if kind == "Categorical":
                if self.rng.random() < self.resample:
                    out[name] = dim.choices[int(self.rng.integers(len(dim.choices)))]
                continue
            factor = self.perturb[int(self.rng.integers(len(self.perturb)))]
            if kind == "Integer":
                new = int(round(value * factor))
                if new == value and factor != 1.0:
                    new = value + (1 if factor > 1 else -1)
                out[name] = int(min(max(new, dim.low), dim.high))
            else:
                out[name] = float(min(max(value * factor, dim.low), dim.high))
        return out

    def _suggest(self) -> dict:      # ask() is overridden; kept for the abstract base
        return self.space.sample(self.rng)
