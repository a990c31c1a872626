"""A candidate of a workload made by `cuco init`, back in the user's files: the schedule rewrites at the
candidate's design point, applied to the program as init found it, as a unified diff. A candidate whose
blocks differ from that point's variant (an LLM edit, a hand edit) cannot be mapped back: refused with
where it differs, never dropped silently."""

from __future__ import annotations

from pathlib import Path

import yaml

from .. import blocks
from .patch import unified_diff
from .rewrites import RewriteError, rewrite_program
from .rewrites.attach import DIMENSION, NONE, point_names, program_facts

PROGRAM_KNOBS = ("comm_ctas",)


def _comparable(body: str) -> list[str]:
    """A block without what the search may change freely: knob values and descriptor lines."""
    return [
        line.rstrip()
        for line in body.split("\n")
        if "// cuco:knob" not in line and not line.lstrip().startswith("// cuco:design") and line.strip()
    ]


def patch_for(source: str, workload_root: Path, label: str) -> tuple[str, list[str]]:
    spec = yaml.safe_load((Path(workload_root) / "workload.yaml").read_text())
    point = blocks.design_annotations(source).get(DIMENSION, NONE)
    seed = blocks.block_bodies((Path(workload_root) / spec["candidate"]).read_text())
    expected = dict(seed)
    if point != NONE:
        variant = next((v for v in spec.get("variants", []) if v.get("point", {}).get(DIMENSION) == point), None)
        if variant is None:
            raise RewriteError(f"{label}: its point {DIMENSION}={point} has no variant in the workload")
        expected.update(blocks.block_bodies((Path(workload_root) / variant["file"]).read_text()))
    got = blocks.block_bodies(source)
    for name, body in expected.items():
        a, b = _comparable(body), _comparable(got.get(name, ""))
        if a != b:
            i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            where = b[i].strip() if i < len(b) else "(the block ends early)"
            raise RewriteError(
                f"{label}: its {name} block differs from the rewrites at its point "
                f"({DIMENSION}={point}) at {where!r}: it was edited beyond them, so it cannot be "
                "written back into your files; export its source instead (cuco export without --patch)"
            )
    if point == NONE:
        raise RewriteError(f"{label}: it is your program as it is ({DIMENSION}={NONE}): there is nothing to patch")
    program = program_facts(spec, str(Path(workload_root) / "workload.yaml"))
    # The knobs the rewrites read in the candidate (its `// cuco:knob` values) carry over to the program.
    knobs = {k: v for k, v in blocks.knob_values(source).items() if k in PROGRAM_KNOBS}
    texts, notes = rewrite_program(program, point_names(point), knobs)
    return unified_diff(program.texts, texts), notes
