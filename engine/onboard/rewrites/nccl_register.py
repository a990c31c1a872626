"""NCCL buffer registration: the buffers the region's NCCL calls send from and receive into (and the
buffers swapped with them in the loop, a ping-pong's other half) are allocated with ncclMemAlloc and
registered with the communicator (ncclCommRegister), so NCCL moves them without staging copies; their
cudaFree becomes ncclCommDeregister + ncclMemFree.

Preconditions: each such buffer is allocated by `cudaMalloc(&B, bytes)` as a statement of its own in the
region's file, after the one ncclCommInitRank, outside the region, and freed (if at all) by `cudaFree(B)`
statements; an allocation by ncclMemAlloc already there (another path of the program) is left alone."""

from __future__ import annotations

import re

from .base import Edit, Offer, Refusal, RewriteError, Rewritten
from .facts import Call, ScheduleFacts

NAME = "nccl_register"
NCCL_DATA = {
    "ncclSend": (0,),
    "ncclRecv": (0,),
    "ncclAllReduce": (0, 1),
    "ncclAllGather": (0, 1),
    "ncclReduceScatter": (0, 1),
    "ncclBroadcast": (0, 1),
    "ncclReduce": (0, 1),
    "ncclAlltoAll": (0, 1),
    "ncclBcast": (0,),
}
_BASE = re.compile(r"^\s*\(?\s*&?\s*([A-Za-z_]\w*)")


def _buffers(facts: ScheduleFacts) -> list[str]:
    names: list[str] = []
    for s in facts.stmts:
        for c in s.calls:
            for i in NCCL_DATA.get(c.name, ()):
                if i < len(c.args):
                    m = _BASE.match(c.args[i].text)
                    if m and m.group(1) not in names:
                        names.append(m.group(1))
    for s in facts.stmts:  # the other half of a ping-pong
        for c in s.calls:
            if c.name == "swap" and len(c.args) == 2:
                pair = [a.text.strip() for a in c.args]
                for a, b in (pair, pair[::-1]):
                    if a in names and b not in names:
                        names.append(b)
    return names


def plan(facts: ScheduleFacts) -> dict | str:
    if facts.comm_init is None or facts.comm_init_stmt is None:
        return "no single ncclCommInitRank statement in the region's file to register the buffers with"
    comm = facts.comm_init.args[0].text.strip().lstrip("&").strip()
    if not re.fullmatch(r"[A-Za-z_]\w*", comm):
        return f"{facts.path}:{facts.comm_init.line}: the communicator {facts.comm_init.args[0].text} is not a plain variable"
    lo, hi = facts.function
    if not lo <= facts.comm_init.start < hi:
        return (
            f"{facts.path}:{facts.comm_init.line}: the communicator is made outside the function that holds the region"
        )
    if not any(c.name in NCCL_DATA for st in facts.stmts for c in st.calls):
        return (
            "the region's own statements make no NCCL call that moves data (one inside a called function "
            "is not rewritten)"
        )
    buffers = _buffers(facts)
    if not buffers:
        return "the region's NCCL calls move no buffer named by a variable"
    allocs, frees = {}, {}
    for b in buffers:
        sites = [
            c
            for c in facts.calls
            if c.name == "cudaMalloc"
            and c.args
            and lo <= c.start < hi
            and re.sub(r"\s|\(void\s*\*\*\)", "", c.args[0].text) == f"&{b}"
        ]
        if not sites:
            return f"{b} is not allocated by cudaMalloc(&{b}, ...) in {facts.path}"
        for c in sites:
            if facts.loop_start <= c.start < facts.loop_end:
                return f"{facts.path}:{c.line}: {b} is allocated inside the region"
            if c.start < facts.comm_init.start:
                return (
                    f"{facts.path}:{c.line}: {b} is allocated before the communicator exists "
                    f"({facts.path}:{facts.comm_init.line}); registration needs it"
                )
            stmt = facts.call_stmts.get(c.start)
            if stmt is None or len(c.args) != 2:
                return f"{facts.path}:{c.line}: the cudaMalloc of {b} is not a statement of its own"
        allocs[b] = sites
        frees[b] = [
            c
            for c in facts.calls
            if c.name == "cudaFree" and c.args and c.args[0].text.strip() == b and lo <= c.start < hi
        ]
        for c in frees[b]:
            if facts.call_stmts.get(c.start) is None:
                return f"{facts.path}:{c.line}: the cudaFree of {b} is not a statement of its own"
    return dict(comm=comm, buffers=buffers, allocs=allocs, frees=frees, init_stmt=facts.comm_init_stmt)


def _statement(facts: ScheduleFacts, call_start: int) -> tuple[int, int]:
    return facts.call_stmts[call_start]


def _replace_statement(facts: ScheduleFacts, call: Call, lines: list[str]) -> Edit:
    """The statement of `call` replaced by `lines`, each at the statement's indent (none when code precedes
    it on its line)."""
    start, end = _statement(facts, call.start)
    line_start = facts.text.rfind(b"\n", 0, start) + 1
    ind = facts.text[line_start:start].decode()
    if ind.strip():
        ind = ""
    return Edit(facts.path, start, end, f"\n{ind}".join(lines))


class NcclRegister:
    name = NAME
    summary = "allocate the buffers NCCL moves with ncclMemAlloc and register them with the communicator"

    def check(self, facts: ScheduleFacts) -> Offer | Refusal:
        p = plan(facts)
        if isinstance(p, str):
            return Refusal(NAME, p)
        return Offer(NAME, f"{', '.join(p['buffers'])} by ncclMemAlloc, registered with {p['comm']}")

    def rewrite(self, facts: ScheduleFacts, knobs: dict[str, str]) -> Rewritten:
        p = plan(facts)
        if isinstance(p, str):
            raise RewriteError(f"{NAME}: {p}")
        edits, decls = [], []
        comm = p["comm"]
        for b in p["buffers"]:
            handle = f"cuco_reg_{b}"
            decls.append(f"void* {handle} = nullptr;   // cuco rewrite {NAME}: {b}'s registration with {comm}")
            for c in p["allocs"][b]:
                size = c.args[1].text
                edits.append(
                    _replace_statement(
                        facts,
                        c,
                        [
                            facts.wrap_nccl(f"ncclMemAlloc((void**)&{b}, {size})"),
                            facts.wrap_nccl(f"ncclCommRegister({comm}, {b}, {size}, &{handle})"),
                        ],
                    )
                )
            for c in p["frees"][b]:
                edits.append(
                    _replace_statement(
                        facts,
                        c,
                        [
                            facts.wrap_nccl(f"ncclCommDeregister({comm}, {handle})"),
                            facts.wrap_nccl(f"ncclMemFree({b})"),
                        ],
                    )
                )
        # The handles live for the whole of the function that makes the communicator: declared right after
        # the communicator's own declaration statement (or its creation), so every allocation and free
        # sees them.
        init_start, _ = p["init_stmt"]
        line_start = facts.text.rfind(b"\n", 0, init_start) + 1
        ind = facts.text[line_start:init_start].decode()
        edits.append(Edit(facts.path, line_start, line_start, "".join(f"{ind}{d}\n" for d in decls)))
        note = (
            f"{NAME}: {', '.join(p['buffers'])} allocated with ncclMemAlloc and registered with {comm} "
            f"(ncclCommRegister) where the program called cudaMalloc; freed with ncclCommDeregister + "
            "ncclMemFree where it called cudaFree"
        )
        return Rewritten([], note, program_only=edits)
