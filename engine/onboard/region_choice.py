"""The repeated region of a program, chosen by evidence: a loop around the collectives (or around the replay
of a captured graph), in main() or in a helper it calls, timed by a timer just before or after it; else a
straight-line section between two timer statements. Loops that capture graphs, walk the devices, sweep sizes
or warm up are listed as alternatives with what they are; `--region FILE:LINE` picks a loop by hand."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remote.errors import InputError

from . import api
from .loops import LOOPS, Section, inside, is_timer, loop_calls, loop_var, op_in, timed
from .model import Op, Unresolved
from .node_text import plain_name, text_or_none
from .source import SourceFile, call_args, call_name, identifiers

CAPTURE_WHAT = "graph capture: what the replay loop launches"


@dataclass
class Region:
    """The region picked (node None: none found) in its file, and the loops and sections it was picked over."""

    src: SourceFile
    node: Any
    alternatives: list[tuple[SourceFile, Any, str]] = field(default_factory=list)

    def replays(self) -> bool:
        """The region launches captured CUDA graphs (what it runs is what the captures recorded)."""
        return self.node is not None and loop_calls(self.src, self.node, api.GRAPH_LAUNCH)

    def captures(self) -> list:
        """(source, node) of each capture the replay region's graphs come from: a loop that captures, or
        the statements of one block from cudaStreamBeginCapture to cudaStreamEndCapture."""
        if not self.replays():
            return []
        return [(s, cap) for s, cap, what in self.alternatives if what == CAPTURE_WHAT]


@dataclass(frozen=True)
class RegionScope:
    """What the choice reads: main's file and definition, the bodies followed (main's first) and the ops."""

    main_src: SourceFile
    main: Any
    bodies: list
    ops: list[Op]


def pick_region(scope: RegionScope, region_at: str | None, unresolved: list[Unresolved]) -> Region:
    """The repeated region (`region_at`: the loop `--region` names), with the captures written as
    straight-line statements listed beside the capture loops."""
    region = _Picker(scope, unresolved).pick(region_at)
    _straight_captures(scope, region)
    return region


class _Picker:
    def __init__(self, scope: RegionScope, unresolved: list[Unresolved]):
        self.scope, self.unresolved = scope, unresolved
        self.alternatives: list[tuple[SourceFile, Any, str]] = []

    def pick(self, region_at: str | None) -> Region:
        loops = [
            (src, n)
            for src, body in self.scope.bodies
            for t in LOOPS
            for n in src.nodes(t, body)
            if self._loop_has_comm(src, n) or loop_calls(src, n, api.GRAPH_LAUNCH)
        ]
        loops.sort(key=lambda sn: (sn[0] is not self.scope.main_src, sn[1].start_byte))
        if region_at is not None:
            return self._chosen_region(region_at, loops)
        candidates = self._candidates(
            loops, [pair for pair in loops if not any(o is not pair and self._nested(pair, o) for o in loops)]
        )
        if not any(timed(s, node) for s, node in candidates):
            section = self._timed_section()
            if section is not None:
                for src, loop in candidates:
                    what = (
                        "warm-up: untimed, before the timed section"
                        if src is section[0] and loop.start_byte < section[1].start_byte
                        else "another loop around the collectives"
                    )
                    self.alternatives.append((src, loop, what))
                return Region(section[0], section[1], self.alternatives)
        if not candidates:
            self._no_region()
            return Region(self.scope.main_src, None, self.alternatives)
        chosen = [c for c in candidates if timed(*c)]
        psrc, pick = (chosen or candidates)[-1]
        for src, loop in candidates:
            if loop is not pick:
                before = src is psrc and loop.start_byte < pick.start_byte
                what = (
                    "warm-up: untimed, before the timed loop"
                    if before and not timed(src, loop)
                    else "another loop around the collectives"
                )
                self.alternatives.append((src, loop, what))
        return Region(psrc, pick, self.alternatives)

    def _no_region(self) -> None:
        self.unresolved.append(
            Unresolved(
                self.scope.main_src.at(self.scope.main),
                "no loop around the collectives",
                "the repeated region is one loop iteration; wrap the timed part in a loop",
            )
        )
        for src, loop, what in self.alternatives:
            self.unresolved.append(
                Unresolved(src.at(loop), f"not a repeated region: {what}", "--region FILE:LINE takes it anyway")
            )

    def _candidates(self, loops, outer) -> list:
        out = []
        for src, loop in outer:
            inner = [
                pair
                for pair in loops
                if pair[1] is not loop
                and self._nested(pair, (src, loop))
                and not any(
                    m[1] is not loop and m is not pair and self._nested(pair, m) and self._nested(m, (src, loop))
                    for m in loops
                )
            ]
            if loop_calls(src, loop, api.CAPTURE):
                self.alternatives.append((src, loop, CAPTURE_WHAT))
            elif self._per_device(src, loop):
                self.alternatives.append(
                    (src, loop, "per-device loop: one process driving every GPU, not a repetition")
                )
            elif inner and self._allocates(src, loop):
                var = loop_var(src, loop)
                self.alternatives.append(
                    (src, loop, f"size sweep: each size is a config{f' (its loop variable {var})' if var else ''}")
                )
                out += self._candidates(loops, inner)
            else:
                out.append((src, loop))
        return out

    def _chosen_region(self, region_at: str, loops) -> Region:
        want_file, _, want_line = region_at.rpartition(":")
        chosen = [
            (s, node)
            for s, node in loops
            if want_line == str(node.start_point[0] + 1) and Path(want_file).resolve() == Path(s.path).resolve()
        ]
        if not chosen:
            raise InputError(
                region_at,
                "--region",
                "no loop around the collectives starts here; "
                f"the loops are at {', '.join(s.at(node) for s, node in loops) or 'none'}",
            )
        for s, node in loops:
            if node is not chosen[0][1]:
                self.alternatives.append((s, node, "another loop around the collectives"))
        return Region(chosen[0][0], chosen[0][1], self.alternatives)

    def _nested(self, inner, outer) -> bool:
        """A loop runs inside another: in its text, or called from inside it (a helper's loop)."""
        (isrc, il), (osrc, ol) = inner, outer
        if il is ol:
            return False
        if isrc is osrc and inside(il, ol):
            return True
        for op in self.scope.ops:  # called from inside it: the outer loop holds an earlier call of the chain
            i = next((k for k, (s, n) in enumerate(op.chain) if s is isrc and inside(n, il)), None)
            o = next((k for k, (s, n) in enumerate(op.chain) if s is osrc and inside(n, ol)), None)
            if i is not None and o is not None and o < i:
                return True
        return False

    def _timed_section(self):
        """The widest run of statements of one block between two timer statements with communication
        between them (the region of a program that times straight-line code with events)."""
        best = None
        for src, body in self.scope.bodies:
            for block in [body] + src.nodes("compound_statement", body):
                stmts = [c for c in block.named_children if c.type != "comment"]
                marks = [
                    i for i, st in enumerate(stmts) if any(is_timer(src, c) for c in src.nodes("call_expression", st))
                ]
                if len(marks) < 2:
                    continue
                span = Section(stmts[marks[0] : marks[-1] + 1])
                if self._loop_has_comm(src, span):
                    if best is None or span.end_byte - span.start_byte > best[1].end_byte - best[1].start_byte:
                        best = (src, span)
        return best

    def _loop_has_comm(self, src, loop) -> bool:
        return any(op.kind in ("collective", "p2p") and op_in(op, src, loop) for op in self.scope.ops)

    def _allocates(self, src, loop) -> bool:
        return any(call_name(n, src) in api.DEVICE_ALLOC for n in src.nodes("call_expression", loop))

    def _per_device(self, src, loop) -> bool:
        """A loop over the devices of one process: it selects device `i`, or indexes the communicators
        ncclCommInitAll made (`comms[i]`)."""
        var = loop_var(src, loop)
        if var is None:
            return False
        comm_arrays = {
            plain_name(call_args(o.node)[0])
            for o in self.scope.ops
            if o.name == "ncclCommInitAll" and call_args(o.node)
        }
        for sub in src.nodes("subscript_expression", loop):
            arg, idx = sub.child_by_field_name("argument"), sub.child_by_field_name("indices")
            if (
                arg is not None
                and text_or_none(arg) in comm_arrays
                and idx is not None
                and any(i.text.decode() == var for i in identifiers(idx))
            ):
                return True
        return any(
            call_name(n, src) in api.DEVICE_SELECT
            and any(i.text.decode() == var for a in call_args(n) for i in identifiers(a))
            for n in src.nodes("call_expression", loop)
        )


def _straight_captures(scope: RegionScope, region: Region) -> None:
    """Captures written as straight-line statements (begin, the work, end) rather than in a loop:
    listed with the capture loops, as what the replay loop launches."""
    if not region.replays():
        return
    loops = [cap for s, cap, what in region.alternatives if what == CAPTURE_WHAT]
    for src, body in scope.bodies:
        for block in [body] + src.nodes("compound_statement", body):
            stmts = [c for c in block.named_children if c.type != "comment"]
            begin = None
            for i, st in enumerate(stmts):
                names = {call_name(n, src) for n in src.nodes("call_expression", st)}
                if begin is None and names & api.CAPTURE and not names & api.CAPTURE_END:
                    begin = i
                elif begin is not None and names & api.CAPTURE_END:
                    span = Section(stmts[begin : i + 1])
                    if not any(inside(span, loop) for loop in loops):
                        region.alternatives.append((src, span, CAPTURE_WHAT))
                    begin = None


def region_json(region: Region, main_src: SourceFile, ops: list[Op], functions: dict) -> dict | None:
    """The region as `cuco analyze --json` shows it: where, what kind, timed, iterations, the alternatives,
    the function holding it (outside main's file) and what its graph launches replay."""
    loop, src = region.node, region.src
    if loop is None:
        return None
    iters = var = None
    if loop.type == "for_statement":
        cond = loop.child_by_field_name("condition")
        if cond is not None and cond.type == "binary_expression":
            iters = text_or_none(cond.child_by_field_name("right"))
        var = loop_var(src, loop)
    warmups = [o.at for o in ops if o.kind in ("collective", "p2p") and not o.in_region]
    out = {
        "at": src.at(loop),
        "end": f"{src.path}:{loop.end_point[0] + 1}",
        "kind": loop.type.replace("_statement", ""),
        "timed": timed(src, loop),
        "iterations": iters,
        "loop_variable": var,
        "outside_collectives": warmups,
        "alternatives": [{"at": s.at(node), "what": what} for s, node, what in region.alternatives],
    }
    if src is not main_src:
        out["in_function"] = next((n for n, (s, f) in functions.items() if s is src and inside(loop, f)), None)
    if loop_calls(src, loop, api.GRAPH_LAUNCH):
        out["replays"] = [
            {
                "at": s.at(cap),
                "captures": [
                    {"name": o.name, "at": o.at}
                    for o in ops
                    if op_in(o, s, cap) and o.kind in ("kernel", "collective", "p2p", "memcpy", "memset")
                ],
            }
            for s, cap in region.captures()
        ]
    return out
