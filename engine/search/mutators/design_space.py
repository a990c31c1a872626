"""The built-in mutator: moves a candidate through the workload's design space, no LLM needed.

Moves: a structural step (swap in the shipped variant at a neighbouring point, keeping the parent's
knob values), a knob step (rewrite a `// cuco:knob` value), both at once, and a crossover (one
parent's structure with the other's knobs). Exploration favours structural steps, exploitation knobs.
"""

from __future__ import annotations

import random

from ... import blocks
from ...design_space import DesignSpace, Variant
from .base import CandidateView, Proposal, ProposalContext

MAX_TRIES = 30
MAX_KNOB_TRIES = 64
MAX_KNOWN_MOVES = 100_000  # remembered (parent source, move) pairs; forgotten all at once past this


def _with_knobs(source: str, knobs: dict[str, str]) -> str:
    current = blocks.knob_values(source)
    for name, value in knobs.items():
        if name in current and current[name] != value:
            source = blocks.set_knob(source, name, value)
    return source


def _variants_with_seed(space: DesignSpace, seed_source: str) -> list[Variant]:
    seed_point = {d.name: d.default for d in space.structural}
    seed_point.update({k: v for k, v in blocks.design_annotations(seed_source).items() if k in seed_point})
    seed = Variant("seed", "", seed_point, blocks.block_bodies(seed_source))
    return [seed, *space.variants]


def _knob_order(n: int, here: int, rng: random.Random, explore: bool) -> list[int]:
    """Indices of the values to try, at most MAX_KNOB_TRIES, never `here`. Exploring draws at random;
    exploiting tries the nearest values first, then a random few of the rest. Drawn by index: a knob may
    have a thousand values and only a few are tried."""
    if here < 0 or explore:
        picks = rng.sample(range(n), min(n, MAX_KNOB_TRIES + 1))
        return [j for j in picks if j != here][:MAX_KNOB_TRIES]
    near = [j for d in range(1, 4) for j in (here - d, here + d) if 0 <= j < n]
    taken = set(near) | {here}
    rest = [j for j in rng.sample(range(n), min(n, 32 + len(taken))) if j not in taken][:32]
    return near + rest


class DesignSpaceMutator:
    name = "design-space"

    def __init__(self, space: DesignSpace, seed_source: str):
        self.space = space
        self.variants = _variants_with_seed(space, seed_source)
        # Moves whose child the run already has. A known child stays known, so a saturated knob is
        # skipped without rebuilding and hashing its children again. Keys hold the parent's source
        # object (the engine hands out the same one), so a lookup hashes no text.
        self._known_moves: set[tuple] = set()

    async def propose(self, ctx: ProposalContext) -> Proposal | None:
        parent = ctx.parent
        explore = ctx.phase == "explore"
        for _ in range(MAX_TRIES):
            roll = ctx.rng.random()
            if ctx.second_parent is not None and roll < 0.15:
                child, op = self._cross(parent, ctx.second_parent, ctx.rng), "cross"
            elif roll < (0.65 if explore else 0.3):
                child, op = self._structural(parent, ctx.rng), "variant"
                if child is not None and ctx.rng.random() < 0.3:
                    child, op = self._knob(child, ctx.rng, explore, ctx.known, remember=False), "variant+knob"
            else:
                child, op = self._knob(parent.source, ctx.rng, explore, ctx.known), "knob"
            if child is not None and child != parent.source and not ctx.known(child):
                return Proposal(child, op, self.name)
        return None

    def _remember(self, move: tuple) -> None:
        if len(self._known_moves) >= MAX_KNOWN_MOVES:
            self._known_moves.clear()
        self._known_moves.add(move)

    def _structural(self, parent: CandidateView, rng: random.Random) -> str | None:
        dims = self.space.structural
        if not dims:
            return None
        here = {d.name: parent.descriptor.get(d.name, d.default) for d in dims}
        dim = rng.choice(dims)
        others = [v for v in dim.values if v != here[dim.name]]
        if not others:
            return None
        target = dict(here, **{dim.name: rng.choice(others)})
        # The shipped variant nearest the target that is not where the parent already is.
        options = [v for v in self.variants if any(v.point.get(k) != here[k] for k in v.point)]
        if not options:
            return None
        score = lambda v: (sum(v.point.get(k) == target[k] for k in target), rng.random())  # noqa: E731
        variant = max(options, key=score)
        knobs = blocks.knob_values(parent.source)
        child = blocks.replace_blocks(parent.source, variant.bodies)
        return _with_knobs(child, knobs)

    def _knob(
        self, source: str, rng: random.Random, explore: bool, known=lambda source: False, remember: bool = True
    ) -> str | None:
        """A child one knob step away. `remember` only for a source the engine keeps (a parent's): the
        memo must not hold on to throwaway intermediate sources."""
        present = blocks.knob_values(source)
        knobs = [d for d in self.space.knobs if d.name in present and len(d.values) > 1]
        if not knobs:
            return None
        dim = rng.choice(knobs)
        values = dim.values
        for j in _knob_order(len(values), dim.index(present[dim.name]), rng, explore):
            move = (source, dim.name, values[j])
            if remember and move in self._known_moves:
                continue
            child = blocks.set_knob(source, dim.name, values[j])
            if not known(child):
                return child
            if remember:
                self._remember(move)
        return None

    def _cross(self, a: CandidateView, b: CandidateView, rng: random.Random) -> str | None:
        first, second = (a, b) if rng.random() < 0.5 else (b, a)
        try:
            return _with_knobs(first.source, blocks.knob_values(second.source))
        except blocks.BlockError:
            return None
