"""Boundary rows first: split a launch wrapper's row range so the rows the halo exchange sends are computed
first, on a high-priority communication stream, and sent while the interior computes.

Preconditions (each from the text, or refused): the region has a group of ncclSend/ncclRecv on its stream;
a launch wrapper called before the group takes a row range (two adjacent integer arguments LO, HI) and
writes the buffer B the sends read; every send reads row LO or row HI-1 of B (`B + LO * W`,
`B + (HI - 1) * W`, W its count); every receive writes a row outside LO+1..HI-2 (`B`, `B + HI * W`,
`B + (LO - 1) * W`); the wrapper does not read what it writes (another argument than B is its input).
"""

from __future__ import annotations

import re

from .base import Edit, Offer, Refusal, RewriteError, Rewritten, priority_stream
from .facts import P2P, Call, ScheduleFacts, Stmt

NAME = "boundary_first"


def _norm(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _row_forms(buf: str, row: str, width: str) -> set[str]:
    forms = {
        f"{buf}+{row}*{width}",
        f"{buf}+({row})*{width}",
        f"{buf}+{width}*{row}",
        f"{buf}+{width}*({row})",
        f"{buf}+({row}*{width})",
        f"{buf}+({width}*{row})",
        f"&{buf}[{row}*{width}]",
        f"&{buf}[({row})*{width}]",
    }
    return {_norm(f) for f in forms}


def _group(facts: ScheduleFacts) -> tuple[int, int, list[tuple[int, Call]]] | str:
    """The region's one group of send/recv: (index of ncclGroupStart, of ncclGroupEnd, the p2p calls)."""
    starts = [i for i, s in enumerate(facts.stmts) if any(c.name == "ncclGroupStart" for c in s.calls)]
    ends = [i for i, s in enumerate(facts.stmts) if any(c.name == "ncclGroupEnd" for c in s.calls)]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        return (
            "the region's own statements hold no single ncclGroupStart ... ncclGroupEnd bracket of sends "
            "and receives (one inside a called function is not rewritten)"
        )
    calls = [(i, c) for i in range(starts[0] + 1, ends[0]) for c in facts.stmts[i].calls if c.name in P2P]
    others = [
        c.name
        for i in range(starts[0] + 1, ends[0])
        for c in facts.stmts[i].calls
        if c.name.startswith("nccl") and c.name not in P2P
    ]
    if not calls or others:
        return "the group holds other calls than ncclSend/ncclRecv" if others else "the group holds no send or receive"
    for _, c in calls:
        if len(c.args) != 6 or _norm(c.args[5].text) != _norm(facts.stream):
            return f"{facts.path}:{c.line}: {c.name} is not on the region's stream {facts.stream}"
    return starts[0], ends[0], calls


def plan(facts: ScheduleFacts) -> dict | str:
    """What the rewrite would do, or why it cannot."""
    group = _group(facts)
    if isinstance(group, str):
        return group
    g_start, g_end, p2p = group
    sends = [c for _, c in p2p if c.name == "ncclSend"]
    recvs = [c for _, c in p2p if c.name == "ncclRecv"]
    if not sends:
        return "the group sends nothing"
    width = _norm(sends[0].args[1].text)
    if any(_norm(c.args[1].text) != width for _, c in p2p):
        return "the sends and receives move different counts (not one row each)"
    reasons = []
    for i in range(g_start - 1, -1, -1):
        stmt: Stmt = facts.stmts[i]
        for call in stmt.calls:
            w = facts.wrappers.get(call.name)
            if w is None:
                continue
            if len(w.params) != len(call.args):
                reasons.append(f"{call.name}: {len(call.args)} arguments for {len(w.params)} parameters")
                continue
            if _norm(stmt.text.rstrip(";")) != _norm(facts.text[call.start : call.end].decode()):
                reasons.append(f"{facts.path}:{stmt.line}: the call to {call.name} is part of a larger statement")
                continue
            stream_i = [k for k, p in enumerate(w.params) if p.stream]
            if len(stream_i) != 1 or _norm(call.args[stream_i[0]].text) != _norm(facts.stream):
                reasons.append(f"{facts.path}:{stmt.line}: {call.name} does not take the region's stream")
                continue
            written = {_norm(call.args[k].text) for k, p in enumerate(w.params) if p.written}
            read_only = {_norm(call.args[k].text) for k, p in enumerate(w.params) if p.pointer and not p.written}
            for buf in sorted(written):
                if not re.fullmatch(r"[A-Za-z_]\w*", buf):
                    continue
                for k in range(len(call.args) - 1):
                    if w.params[k].pointer or w.params[k + 1].pointer or k in stream_i or k + 1 in stream_i:
                        continue
                    lo, hi = _norm(call.args[k].text), _norm(call.args[k + 1].text)
                    top, bottom = _row_forms(buf, lo, width), _row_forms(buf, f"{hi}-1", width)
                    send_ptrs = [_norm(c.args[0].text) for c in sends]
                    if not all(p in top | bottom for p in send_ptrs):
                        continue
                    halo = {buf} | _row_forms(buf, hi, width) | _row_forms(buf, f"{lo}-1", width)
                    bad = [c for c in recvs if _norm(c.args[0].text) not in halo]
                    if bad:
                        reasons.append(
                            f"{facts.path}:{bad[0].line}: a receive writes {bad[0].args[0].text}, "
                            "not a halo row outside the range the interior computes"
                        )
                        continue
                    if not read_only or buf in read_only:
                        reasons.append(
                            f"{facts.path}:{stmt.line}: {call.name} reads {buf} as well as writing it "
                            "(in place): the interior would read rows the boundary launches change"
                        )
                        continue
                    return dict(
                        stmt=i,
                        call=call,
                        wrapper=w,
                        lo_arg=k,
                        hi_arg=k + 1,
                        stream_arg=stream_i[0],
                        buffer=buf,
                        g_start=g_start,
                        g_end=g_end,
                        p2p=p2p,
                    )
        if stmt.host_sync:
            break
    if reasons:
        return reasons[0]
    return (
        "no launch wrapper before the group writes the rows it sends through a row-range argument "
        "(a direct <<<>>> launch computes its grid at the call, so it cannot be split here)"
    )


class BoundaryFirst:
    name = NAME
    summary = "compute the rows the halo exchange sends first, and send them while the interior computes"

    def check(self, facts: ScheduleFacts) -> Offer | Refusal:
        p = plan(facts)
        if isinstance(p, str):
            return Refusal(NAME, p)
        c = p["call"]
        return Offer(
            NAME,
            f"{c.name} at {facts.path}:{c.line} split at rows {c.args[p['lo_arg']].text} and "
            f"{c.args[p['hi_arg']].text}-1; the group on a high-priority stream",
        )

    def rewrite(self, facts: ScheduleFacts, knobs: dict[str, str]) -> Rewritten:
        p = plan(facts)
        if isinstance(p, str):
            raise RewriteError(f"{NAME}: {p}")
        ind, s = facts.indent, facts.stream
        call: Call = p["call"]
        lo, hi = call.args[p["lo_arg"]].text, call.args[p["hi_arg"]].text

        def launch(new_lo: str, new_hi: str, stream: str) -> str:
            args = [a.text for a in call.args]
            args[p["lo_arg"]], args[p["hi_arg"]], args[p["stream_arg"]] = new_lo, new_hi, stream
            return f"{call.name}({', '.join(args)});"

        stmt = facts.stmts[p["stmt"]]
        split = "\n".join(
            [
                f"// cuco rewrite {NAME}: the rows the halo exchange sends first, on the communication stream",
                facts.wrap_cuda(f"cudaEventRecord(cuco_ready, {s})"),
                facts.wrap_cuda("cudaStreamWaitEvent(cuco_comm_stream, cuco_ready, 0)"),
                launch(lo, f"({lo}) + 1", "cuco_comm_stream"),
                launch(f"({hi}) - 1", hi, "cuco_comm_stream"),
                facts.wrap_cuda("cudaEventRecord(cuco_boundary_done, cuco_comm_stream)"),
                launch(f"({lo}) + 1", f"({hi}) - 1", s),
                facts.wrap_cuda(f"cudaStreamWaitEvent({s}, cuco_boundary_done, 0)"),
            ]
        ).replace("\n", "\n" + ind)
        edits = [Edit(facts.path, stmt.start, stmt.end, split)]
        for _, c in p["p2p"]:
            a = c.args[5]
            edits.append(Edit(facts.path, a.start, a.end, "cuco_comm_stream"))
        end_stmt = facts.stmts[p["g_end"]]
        edits.append(
            Edit(
                facts.path,
                end_stmt.end,
                end_stmt.end,
                "\n"
                + ind
                + "\n".join(
                    [
                        facts.wrap_cuda("cudaEventRecord(cuco_comm_done, cuco_comm_stream)"),
                        facts.wrap_cuda(f"cudaStreamWaitEvent({s}, cuco_comm_done, 0)"),
                    ]
                ).replace("\n", "\n" + ind),
            )
        )
        members = [
            f"cudaStream_t cuco_comm_stream{{}};   // cuco rewrite {NAME}: the halo exchange's stream",
            "cudaEvent_t cuco_ready{}, cuco_boundary_done{}, cuco_comm_done{};",
        ]
        setup, teardown = priority_stream(
            facts, NAME, "the halo exchange", ["cuco_ready", "cuco_boundary_done", "cuco_comm_done"]
        )
        note = (
            f"{NAME}: {call.name} ({facts.path}:{call.line}) split into rows {lo} and {hi}-1 on a "
            f"high-priority stream (cuco_comm_stream), then the interior {lo}+1..{hi}-2 on {s}; the "
            f"send/recv group moved to cuco_comm_stream after the boundary rows; {s} waits for the boundary "
            "rows (before anything after the launch) and for the exchange (after the group). Needs at "
            "least 3 rows per rank."
        )
        return Rewritten(edits, note, members, setup, teardown)
