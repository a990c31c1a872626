"""Attach the schedule rewrites to a workload `cuco init` wrote: each set of rewrites offered both on the
user's program and on the workload's candidate becomes a variant (variants/rw_*.cu, its schedule block
rewritten) at a point of a `rewrites` dimension the design-space mutator moves along; workload.yaml
records the user's files (with their hashes) and the region, so `cuco export --patch` can write the
chosen candidate's rewrites back into them."""

from __future__ import annotations

import hashlib
import itertools
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from ... import blocks
from . import BY_NAME, REGISTRY, Offer, Refusal, RewriteError, check_all, rewrite_program
from .facts import FactsError, ScheduleFacts, build_facts, build_harness_facts, facts_from_analysis

DIMENSION = "rewrites"
NONE = "none"
SCHEDULE_BLOCK = "schedule"


@dataclass
class Attached:
    offers: list[Offer | Refusal]  # on the user's program
    points: list[str]  # the variants written (rewrites joined by '+')
    notes: list[str]  # one line each: what a rewrite does, or why it is not searched


def point_name(names: list[str]) -> str:
    return "+".join(names) if names else NONE


def point_names(point: str) -> list[str]:
    return [] if point == NONE else point.split("+")


def _with_point(body: str, point: str, notes: list[str]) -> str:
    """The block at its point, saying what its rewrites did (the candidate's own notes: an LLM shown it
    reads them, and so does whoever exports it)."""
    said = "".join(f"// {n}\n" for n in notes)
    lines = body.split("\n")
    for i, line in enumerate(lines):
        if line.lstrip().startswith("// cuco:design"):
            lines[i] = line + f" {DIMENSION}={point}\n" + said.rstrip("\n")
            return "\n".join(lines)
    return f"// cuco:design {DIMENSION}={point}\n" + said + body


def _include_headers(cand_path: Path, headers: set[str]) -> None:
    """The headers a searched rewrite's code needs, included by the candidate outside its blocks (a variant
    replaces only the blocks, and a block may hold no directive)."""
    text = cand_path.read_text()
    missing = [h for h in sorted(headers) if f"<{h}>" not in text]
    if not missing:
        return
    at = text.find("#include <nccl.h>")
    at = text.find("\n", at) + 1 if at >= 0 else 0
    cand_path.write_text(text[:at] + "".join(f"#include <{h}>\n" for h in missing) + text[at:])


def attach_rewrites(prog, root: Path) -> Attached:
    root = Path(root)
    spec_path = root / "workload.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    try:
        program = facts_from_analysis(prog)
    except FactsError as exc:
        return Attached([], [], [f"no schedule rewrite: {exc}"])
    offers = check_all(program)
    offered = [v.rewrite for v in offers if isinstance(v, Offer)]
    cand_path = root / spec["candidate"]
    cand_key = str(cand_path)
    try:
        harness = build_harness_facts(
            {cand_key: cand_path.read_bytes()}, cand_key, program.stream, list(program.check_macros), program.texts
        )
        in_harness = {v.rewrite: v for v in check_all(harness)}
    except FactsError as exc:
        harness, in_harness = None, {r.name: Refusal(r.name, str(exc)) for r in REGISTRY}
    notes, searched = [], []
    for name in offered:
        v = in_harness[name]
        if isinstance(v, Refusal):
            notes.append(
                f"{name}: offered on the program, not searched in the harness ({v.reason}); "
                "export --patch can still apply it"
            )
        else:
            searched.append(name)
    points: list[str] = []
    (root / "variants").mkdir(exist_ok=True)
    variants = []
    for k in range(1, len(searched) + 1):
        for subset in itertools.combinations(searched, k):
            names = [r.name for r in REGISTRY if r.name in subset]
            assert harness is not None  # only rewrites the harness's facts offered are searched
            try:
                texts, rnotes = rewrite_program(harness, names)
            except (RewriteError, FactsError) as exc:
                notes.append(f"{point_name(names)}: not offered together ({exc})")
                continue
            bodies = blocks.block_bodies(texts[cand_key].decode())
            seed_bodies = blocks.block_bodies(harness.texts[cand_key].decode())
            point = point_name(names)
            rel = f"variants/rw_{point.replace('+', '_')}.cu"
            body = _with_point(bodies[SCHEDULE_BLOCK], point, [n.replace(cand_key, cand_path.name) for n in rnotes])
            # the schedule block always (it names the point); another block where a rewrite changed it (a
            # helper the region calls, in the kernels block)
            others = "".join(
                f"// EVOLVE-BLOCK-START {name}\n{b}// EVOLVE-BLOCK-END\n\n"
                for name, b in bodies.items()
                if name != SCHEDULE_BLOCK and b != seed_bodies.get(name)
            )
            (root / rel).write_text(f"{others}// EVOLVE-BLOCK-START {SCHEDULE_BLOCK}\n{body}// EVOLVE-BLOCK-END\n")
            variants.append({"name": f"rw_{point.replace('+', '_')}", "file": rel, "point": {DIMENSION: point}})
            points.append(point)
    _include_headers(cand_path, {h for p in points for n in point_names(p) for h in getattr(BY_NAME[n], "headers", ())})
    if not points and not any((root / "variants").iterdir()):
        (root / "variants").rmdir()
    ds = spec.setdefault("design_space", {})
    ds.setdefault("dimensions", {})[DIMENSION] = {"values": [NONE, *points], "default": NONE}
    if points:
        ds["archive"] = [DIMENSION, *ds.get("archive", [])]
        spec["variants"] = [*spec.get("variants", []), *variants]
    spec["program"] = {
        "files": [
            {"path": os.path.abspath(p), "sha256": hashlib.sha256(t).hexdigest()} for p, t in program.texts.items()
        ],
        "region": f"{os.path.abspath(program.path)}:{program.line_of(program.loop_start)}",
        "stream": program.stream,
        "check_macros": list(program.check_macros),
        "rewrites": offered,
    }
    header = "".join(line + "\n" for line in spec_path.read_text().splitlines() if line.startswith("#"))
    tmp = spec_path.with_suffix(".yaml.tmp")
    tmp.write_text(header + yaml.safe_dump(spec, sort_keys=False, width=120))
    os.replace(tmp, spec_path)
    return Attached(offers, points, notes)


def program_facts(spec: dict, where: str) -> ScheduleFacts:
    """The user's program as init saw it (refused if a file changed since: the patch would not apply)."""
    prog = spec.get("program")
    if not isinstance(prog, dict):
        raise RewriteError(
            f"{where}: the workload records no program (it was not made by cuco init from your "
            "files): there is nothing to patch"
        )
    texts = {}
    for f in prog["files"]:
        p = Path(f["path"])
        if not p.is_file():
            raise RewriteError(f"{p}: the program's file is gone; run the command where cuco init found it")
        data = p.read_bytes()
        if hashlib.sha256(data).hexdigest() != f["sha256"]:
            raise RewriteError(f"{p}: changed since cuco init; run cuco init again so the patch matches it")
        texts[str(p)] = data
    path, line = prog["region"].rsplit(":", 1)
    return build_facts(texts, path, int(line), prog["stream"], list(prog["check_macros"]))
