"""Communication on its own high-priority stream: the region's communication step (one collective, or
one ncclGroupStart ... ncclGroupEnd bracket) is enqueued on a stream of the greatest priority after an
event on the region's stream, and the region's stream waits for it only where the dataflow needs it: at
the first later statement of the iteration that names a buffer the step moves, or synchronises the host,
or at the end of the iteration. The device work in between runs beside the communication.

Preconditions: the step is on the region's stream and moves buffers named by variables; at least one
statement with device work lies between the step and that join (otherwise nothing would overlap)."""

from __future__ import annotations

import re

from .base import Edit, Offer, Refusal, RewriteError, Rewritten, priority_stream
from .facts import ScheduleFacts

NAME = "comm_stream"
COLLECTIVES = {
    "ncclAllReduce",
    "ncclAllGather",
    "ncclReduceScatter",
    "ncclBroadcast",
    "ncclReduce",
    "ncclAlltoAll",
    "ncclBcast",
    "ncclSend",
    "ncclRecv",
}
DATA_ARGS = {"ncclSend": (0,), "ncclRecv": (0,), "ncclBcast": (0,)}
_BASE = re.compile(r"^\s*\(?\s*&?\s*([A-Za-z_]\w*)")


def _step(facts: ScheduleFacts) -> tuple[int, int] | str:
    """The statement indices of the communication step (first, last)."""
    starts = [i for i, s in enumerate(facts.stmts) if any(c.name == "ncclGroupStart" for c in s.calls)]
    ends = [i for i, s in enumerate(facts.stmts) if any(c.name == "ncclGroupEnd" for c in s.calls)]
    comm = [i for i, s in enumerate(facts.stmts) if any(c.name in COLLECTIVES for c in s.calls)]
    if len(starts) == 1 and len(ends) == 1 and starts[0] < ends[0]:
        if any(not starts[0] < i < ends[0] for i in comm):
            return "the region communicates outside its one group as well"
        return starts[0], ends[0]
    if starts or ends:
        return "the region has more than one ncclGroupStart ... ncclGroupEnd bracket"
    if len(comm) != 1:
        return (
            "the region's own statements hold no communication step"
            if not comm
            else "the region has more than one collective outside a group"
        )
    return comm[0], comm[0]


def _streams(facts: ScheduleFacts) -> list[str]:
    """The program's stream variables the region names."""
    declared = set(re.findall(r"cudaStream_t\s+([A-Za-z_]\w*)", facts.text.decode("utf-8", "replace")))
    return sorted({n for st in facts.stmts for n in st.names} & declared)


def plan(facts: ScheduleFacts) -> dict | str:
    streams = _streams(facts)
    if len(streams) > 1:
        return (
            f"the region already runs on several streams ({', '.join(streams)}): its communication "
            "schedule is the program's own"
        )
    step = _step(facts)
    if isinstance(step, str):
        return step
    first, last = step
    calls = [c for i in range(first, last + 1) for c in facts.stmts[i].calls if c.name in COLLECTIVES]
    buffers: set[str] = set()
    for c in calls:
        if re.sub(r"\s", "", c.args[-1].text) != re.sub(r"\s", "", facts.stream):
            return f"{facts.path}:{c.line}: {c.name} is not on the region's stream {facts.stream}"
        for i in DATA_ARGS.get(c.name, (0, 1)):
            m = _BASE.match(c.args[i].text) if i < len(c.args) else None
            if m is None:
                return f"{facts.path}:{c.line}: {c.name} moves {c.args[i].text}, not a buffer named by a variable"
            buffers.add(m.group(1))
    join = len(facts.stmts)
    for i in range(last + 1, len(facts.stmts)):
        s = facts.stmts[i]
        if s.host_sync or buffers & set(s.names):
            join = i
            break
    between = [s for s in facts.stmts[last + 1 : join] if s.device]
    if not between:
        nxt = facts.stmts[join] if join < len(facts.stmts) else None
        why = (
            f"the next statement ({facts.path}:{nxt.line}) "
            + ("synchronises the host" if nxt.host_sync else f"uses {', '.join(sorted(buffers & set(nxt.names)))}")
            if nxt
            else "nothing follows it in the iteration"
        )
        return f"no device work lies between the communication and what depends on it: {why}; nothing would overlap"
    return dict(first=first, last=last, calls=calls, buffers=sorted(buffers), join=join, between=between)


class CommStream:
    name = NAME
    summary = "run the communication on its own high-priority stream; join only where its data is used"

    def check(self, facts: ScheduleFacts) -> Offer | Refusal:
        p = plan(facts)
        if isinstance(p, str):
            return Refusal(NAME, p)
        lines = ", ".join(str(s.line) for s in p["between"])
        return Offer(
            NAME, f"{p['calls'][0].name} at {facts.path}:{p['calls'][0].line} beside the device work at line(s) {lines}"
        )

    def rewrite(self, facts: ScheduleFacts, knobs: dict[str, str]) -> Rewritten:
        p = plan(facts)
        if isinstance(p, str):
            raise RewriteError(f"{NAME}: {p}")
        ind, s = facts.indent, facts.stream
        first, last = facts.stmts[p["first"]], facts.stmts[p["last"]]
        edits = [
            Edit(
                facts.path,
                first.start,
                first.start,
                "\n".join(
                    [
                        f"// cuco rewrite {NAME}: the communication on its own high-priority stream",
                        facts.wrap_cuda(f"cudaEventRecord(cuco_ready, {s})"),
                        facts.wrap_cuda("cudaStreamWaitEvent(cuco_comm_stream, cuco_ready, 0)"),
                        "",
                    ]
                ).replace("\n", "\n" + ind),
            )
        ]
        for c in p["calls"]:
            a = c.args[-1]
            edits.append(Edit(facts.path, a.start, a.end, "cuco_comm_stream"))
        edits.append(
            Edit(
                facts.path,
                last.end,
                last.end,
                "\n" + ind + facts.wrap_cuda("cudaEventRecord(cuco_comm_done, cuco_comm_stream)"),
            )
        )
        join = "\n".join(
            [
                f"// cuco rewrite {NAME}: what follows uses the communication's buffers",
                facts.wrap_cuda(f"cudaStreamWaitEvent({s}, cuco_comm_done, 0)"),
            ]
        )
        if p["join"] < len(facts.stmts):
            at = facts.stmts[p["join"]].start
            edits.append(Edit(facts.path, at, at, join.replace("\n", "\n" + ind) + "\n" + ind))
        else:
            at = facts.stmts[-1].end
            edits.append(Edit(facts.path, at, at, "\n" + ind + join.replace("\n", "\n" + ind)))
        members = [
            f"cudaStream_t cuco_comm_stream{{}};   // cuco rewrite {NAME}: the communication's stream",
            "cudaEvent_t cuco_ready{}, cuco_comm_done{};",
        ]
        setup, teardown = priority_stream(facts, NAME, "the communication", ["cuco_ready", "cuco_comm_done"])
        where = (
            f"before line {facts.stmts[p['join']].line}"
            if p["join"] < len(facts.stmts)
            else "at the end of the iteration"
        )
        note = (
            f"{NAME}: {', '.join(sorted({c.name for c in p['calls']}))} ({facts.path}:{p['calls'][0].line}) on a "
            f"high-priority stream (cuco_comm_stream) after an event on {s}; {s} waits for it {where}, so the "
            f"device work at line(s) {', '.join(str(x.line) for x in p['between'])} runs beside it"
        )
        return Rewritten(edits, note, members, setup, teardown)
