"""What stops `cuco init` from writing a workload of an analysed program, each as one line with the place and
what to do: graphs replayed but not captured in the given files (or captured outside main()), collectives run
inside a lambda, one process driving every GPU, a repeated region inside a helper."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .model import Op
from .region_choice import Region
from .source import SourceFile, call_name

BY_HAND = "write the workload by hand (docs/workload-format.md)"


@dataclass(frozen=True)
class InitFacts:
    """What the checks read of the analysis."""

    region: Region
    main_src: SourceFile
    main: Any
    ops: list[Op]
    lambdas: dict  # variables holding lambdas
    helper_calls: list[dict]  # the helper calls followed
    functions: dict  # name -> (source, definition)

    def in_main(self, src: SourceFile, node: Any) -> bool:
        return src is self.main_src and self.main.start_byte <= node.start_byte < self.main.end_byte

    def function_at(self, src: SourceFile, node: Any) -> str | None:
        """The name of the function definition holding `node`."""
        for name, (fsrc, fn) in self.functions.items():
            if fsrc is src and fn.start_byte <= node.start_byte < fn.end_byte:
                return name
        return None


def init_blockers(facts: InitFacts) -> list[str]:
    return _capture_blockers(facts) + _lambda_blockers(facts) + _process_blockers(facts) + _helper_blockers(facts)


def _capture_blockers(facts: InitFacts) -> list[str]:
    region, out = facts.region, []
    if region.replays() and not region.captures():
        out.append(
            f"the repeated region ({region.src.at(region.node)}) replays CUDA graphs whose "
            "capture (cudaStreamBeginCapture ... cudaStreamEndCapture) the analysis does not find in "
            f"the given files: pass the file that captures them, or {BY_HAND}"
        )
    for s, node in region.captures():
        if not facts.in_main(s, node):
            out.append(
                f"the graphs the region replays are captured outside main() ({s.at(node)}, in "
                f"{facts.function_at(s, node) or 'another function'}); cuco init writes a capture "
                f"made in main() before the region: move it there, or {BY_HAND}"
            )
    return out


def _lambda_blockers(facts: InitFacts) -> list[str]:
    through_lambdas = sorted(
        {
            f"{call_name(c, s)} at {s.at(c)}"
            for o in facts.ops
            if o.in_region and o.kind in ("collective", "p2p")
            for s, c in o.chain[:-1]
            if call_name(c, s) in facts.lambdas
        }
    )
    if not through_lambdas:
        return []
    return [
        f"the repeated region's collectives run inside a lambda ({', '.join(through_lambdas)}); cuco init "
        "carries functions, not lambdas: make it a function (it may take main()'s variables as "
        "parameters) and run cuco init again"
    ]


def _process_blockers(facts: InitFacts) -> list[str]:
    return [
        f"one process drives every GPU (ncclCommInitAll at {op.at}); the harness runs one "
        "process per GPU: give each GPU its own process and ncclCommInitRank"
        for op in facts.ops
        if op.name == "ncclCommInitAll"
    ]


def _helper_blockers(facts: InitFacts) -> list[str]:
    """The helpers the region in main() calls (and their helpers) are carried with compute-only and
    comm-only forms; a region inside a helper is not written yet."""
    region = facts.region
    if region.node is None or facts.in_main(region.src, region.node):
        return []
    names = ", ".join(sorted({c["name"] for c in facts.helper_calls}))
    where = (
        f"the region ({region.src.at(region.node)}) is not in main() but inside the helper "
        f"{facts.function_at(region.src, region.node) or 'function'}"
    )
    return [
        f"the repeated region runs inside helper functions ({names}): {where}; cuco init "
        "writes a region in main() and carries the helpers it calls: move the timed "
        f"section into main(), or {BY_HAND} from this analysis"
    ]
