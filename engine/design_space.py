"""The design space as a data structure: dimensions, a candidate's descriptor, its archive cell."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import blocks


@dataclass(frozen=True)
class Dimension:
    name: str
    values: tuple[str, ...]
    default: str
    knob: bool = False  # realised by rewriting a `// cuco:knob` value; else by variants/annotations

    def index(self, value: str) -> int:
        return self._positions.get(value, -1)

    @property
    def _positions(self) -> dict[str, int]:
        cached = self.__dict__.get("_pos")
        if cached is None:
            cached = {v: i for i, v in enumerate(self.values)}
            object.__setattr__(self, "_pos", cached)  # frozen dataclass: a cache, not state
        return cached


@dataclass(frozen=True)
class Variant:
    name: str
    file: str
    point: dict[str, str]
    bodies: dict[str, str] = field(default_factory=dict, hash=False, compare=False)


@dataclass
class DesignSpace:
    dimensions: dict[str, Dimension]
    archive_dims: tuple[str, ...]
    variants: list[Variant] = field(default_factory=list)

    @property
    def structural(self) -> list[Dimension]:
        return [d for d in self.dimensions.values() if not d.knob]

    @property
    def knobs(self) -> list[Dimension]:
        return [d for d in self.dimensions.values() if d.knob]

    def descriptor(self, source: str) -> dict[str, str]:
        """A candidate's point: annotations and knob values found in its blocks, defaults elsewhere.
        Values outside the declared ones are kept as they are (an LLM may invent a new point)."""
        point = {name: d.default for name, d in self.dimensions.items()}
        try:
            point.update({k: v for k, v in blocks.design_annotations(source).items() if k in self.dimensions})
            knobs = blocks.knob_values(source)
        except blocks.BlockError:
            return point
        for d in self.knobs:
            if d.name in knobs:
                point[d.name] = knobs[d.name]
        return point

    def cell(self, descriptor: dict[str, str]) -> str:
        """The MAP-Elites cell: the archive dimensions' values, in order."""
        return "|".join(f"{d}={descriptor.get(d, '?')}" for d in self.archive_dims)

    def variant_at(self, point: dict[str, str]) -> Variant | None:
        for v in self.variants:
            if all(point.get(k) == val for k, val in v.point.items()):
                return v
        return None
