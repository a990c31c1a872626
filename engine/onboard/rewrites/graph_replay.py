"""Graph replay: the device work of each stretch of the region between host synchronisation points is
captured once as a CUDA graph and replayed, one graph per value of the host variables it reads that change
inside the loop (the swapped buffers of a ping-pong, a flag), so the launches cost one graph launch.

Preconditions: a stretch's device statements declare nothing and do not leave the loop (break, continue,
return); its host statements (hoisted before the capture, in order) do not change what an earlier device
statement of the stretch read; no device statement reads a variable the loop changes on every iteration
(its counter), which would make every iteration a new graph; every stream it enqueues on is the region's
or one forked from it by an event (the communication stream of boundary_first).
"""

from __future__ import annotations

from .base import Edit, Offer, Refusal, RewriteError, Rewritten
from .facts import CONTROL_FLOW, ScheduleFacts, Stmt

NAME = "graph_replay"
MAX_GRAPHS = 16  # distinct keys kept per stretch; past that a stretch runs uncaptured (correct, slower)
KEY_BYTES = 64  # the key: the bytes of the host values the captured work reads


def _stretches(facts: ScheduleFacts) -> list[list[int]]:
    out: list[list[int]] = []
    cur: list[int] = []
    for i, s in enumerate(facts.stmts):
        if s.host_sync:
            out.append(cur)
            cur = []
        else:
            cur.append(i)
    out.append(cur)
    return [st for st in out if any(facts.stmts[i].device for i in st)]


def _loop_changed(facts: ScheduleFacts) -> set[str]:
    changed = set()
    for s in facts.stmts:
        changed |= set(s.writes) | set(s.declares)
    return changed


def _every_iteration(facts: ScheduleFacts) -> set[str]:
    """Names incremented unconditionally by a top-level statement of the body (`iter++`), and the loop's
    own counter (`for (...; ...; ++i)`)."""
    out = set()
    for s in facts.stmts:
        t = s.text.replace(" ", "")
        for name in s.writes:
            if t in (f"{name}++;", f"++{name};", f"{name}+=1;", f"{name}--;", f"--{name};"):
                out.add(name)
    head = facts.text[facts.loop_start : facts.body_start].decode()
    if head.lstrip().startswith("for"):
        parts = head.split(";")
        if len(parts) >= 3:
            out |= {w.strip("+-() {") for w in parts[2].replace("+", " ").replace("-", " ").split()}
    return out


def plan(facts: ScheduleFacts) -> list[dict] | str:
    if not facts.repeats:
        return (
            f"{facts.at(facts.loop_start)}: the region is a timed section that runs once: a graph captured for "
            "one replay saves no launch"
        )
    launches = [x for x in facts.stmts if any(c.name == "cudaGraphLaunch" for c in x.calls)]
    if launches:
        return f"{facts.path}:{launches[0].line}: the region replays CUDA graphs already"
    stretches = _stretches(facts)
    if not stretches:
        held = [x for x in facts.stmts if x.host_sync and x.device]
        if held:
            return (
                f"{facts.path}:{held[0].line}: its device work sits with a host synchronisation "
                f"({', '.join(held[0].sync_calls)}, inside the call), which a capture cannot hold"
            )
        return "the region enqueues no device work between its host synchronisations"
    changed, per_iter = _loop_changed(facts), _every_iteration(facts)
    forked = {facts.stream, "cuco_comm_stream"}
    plans = []
    for st in stretches:
        device = [facts.stmts[i] for i in st if facts.stmts[i].device]
        host = [facts.stmts[i] for i in st if not facts.stmts[i].device]
        for d in device:
            if d.declares:
                return f"{facts.path}:{d.line}: a captured statement declares {', '.join(d.declares)}"
            if CONTROL_FLOW.search(d.text.encode()):
                return f"{facts.path}:{d.line}: a captured statement can leave the loop (break/continue/return)"
            hot = sorted(set(d.names) & per_iter)
            if hot:
                return (
                    f"{facts.path}:{d.line}: the captured work reads {hot[0]}, which changes every "
                    "iteration: each iteration would be a new graph"
                )
            streams = {
                c.args[-1].text.strip()
                for c in d.calls
                if c.name.startswith(
                    (
                        "cudaMemsetAsync",
                        "cudaMemcpyAsync",
                        "ncclSend",
                        "ncclRecv",
                        "ncclAllReduce",
                        "ncclAllGather",
                        "ncclReduceScatter",
                        "ncclAlltoAll",
                        "ncclBroadcast",
                    )
                )
            }
            stray = sorted(streams - forked)
            if stray:
                return (
                    f"{facts.path}:{d.line}: work on stream {stray[0]}, which the capture of "
                    f"{facts.stream} does not fork"
                )
        order = [facts.stmts[i] for i in st]
        for k, h in enumerate(order):
            if h.device:
                continue
            earlier = [d for d in order[:k] if d.device]
            clash = [d for d in earlier if set(h.writes) & set(d.names)]
            if clash:
                return (
                    f"{facts.path}:{h.line}: host code changes {sorted(set(h.writes) & set(clash[0].names))[0]} "
                    f"after device work at line {clash[0].line} read it; it cannot move before the capture"
                )
            reads_device = [d for d in earlier if set(d.writes) & set(h.names)]
            if reads_device:
                return f"{facts.path}:{h.line}: host code reads what the call at line {reads_device[0].line} set"
        key = sorted({n for d in device for n in d.names} & changed)
        plans.append(dict(device=device, host=host, key=key))
    return plans


class GraphReplay:
    name = NAME
    summary = "capture the region's device work as CUDA graphs (one per set of swapped buffers) and replay them"

    def check(self, facts: ScheduleFacts) -> Offer | Refusal:
        p = plan(facts)
        if isinstance(p, str):
            return Refusal(NAME, p)
        keys = "; ".join(", ".join(x["key"]) or "nothing" for x in p)
        return Offer(NAME, f"{len(p)} stretch(es) captured, one graph per value of: {keys}")

    def rewrite(self, facts: ScheduleFacts, knobs: dict[str, str]) -> Rewritten:
        p = plan(facts)
        if isinstance(p, str):
            raise RewriteError(f"{NAME}: {p}")
        ind, s = facts.indent, facts.stream
        edits: list[Edit] = []
        members, teardown = [], []
        for n, st in enumerate(p):
            cache, count = f"cuco_graphs_{n}", f"cuco_graphs_{n}_n"
            members += [
                f"struct {{ unsigned char key[{KEY_BYTES}]; cudaGraphExec_t exec; }} {cache}[{MAX_GRAPHS}]{{}};"
                f"   // cuco rewrite {NAME}: captured graphs by key",
                f"int {count}{{}};",
            ]
            teardown.append(
                f"for (int cuco_i = 0; cuco_i < {count}; ++cuco_i) "
                + facts.wrap_cuda(f"cudaGraphExecDestroy({cache}[cuco_i].exec)")
            )
            device: list[Stmt] = st["device"]
            body = "\n".join(d.text for d in device)
            hoisted = "\n".join(h.text for h in st["host"])
            key = st["key"]
            size = " + ".join(f"sizeof({k})" for k in key) or "0"
            key_lines = [
                f"    for (unsigned cuco_b = 0; cuco_b < sizeof({k}); ++cuco_b) "
                f"cuco_key[cuco_len++] = reinterpret_cast<const unsigned char*>(&{k})[cuco_b];"
                for k in key
            ]
            block = "\n".join(
                [
                    *([hoisted] if hoisted else []),
                    f"// cuco rewrite {NAME}: the device work below is captured once per value of "
                    f"({', '.join(key) or 'nothing'}) and replayed",
                    "{",
                    f'    static_assert({size} <= {KEY_BYTES}, "graph_replay: the key\'s variables exceed its bytes");',
                    f"    unsigned char cuco_key[{KEY_BYTES}] = {{}};",
                    "    unsigned cuco_len = 0;",
                    *key_lines,
                    "    (void)cuco_len;",
                    "    cudaGraphExec_t cuco_exec = nullptr;",
                    f"    for (int cuco_i = 0; cuco_i < {count} && cuco_exec == nullptr; ++cuco_i) {{",
                    "        bool cuco_same = true;",
                    f"        for (int cuco_b = 0; cuco_b < {KEY_BYTES}; ++cuco_b) cuco_same = cuco_same && {cache}[cuco_i].key[cuco_b] == cuco_key[cuco_b];",
                    f"        if (cuco_same) cuco_exec = {cache}[cuco_i].exec;",
                    "    }",
                    f"    if (cuco_exec == nullptr && {count} < {MAX_GRAPHS}) {{",
                    "        cudaGraph_t cuco_graph;",
                    "        " + facts.wrap_cuda(f"cudaStreamBeginCapture({s}, cudaStreamCaptureModeGlobal)"),
                    "        " + body.replace("\n", "\n        "),
                    "        " + facts.wrap_cuda(f"cudaStreamEndCapture({s}, &cuco_graph)"),
                    "        "
                    + facts.wrap_cuda(
                        "cudaGraphInstantiateWithFlags(&cuco_exec, cuco_graph, cudaGraphInstantiateFlagUseNodePriority)"
                    ),
                    "        " + facts.wrap_cuda("cudaGraphDestroy(cuco_graph)"),
                    "        " + facts.wrap_cuda(f"cudaGraphUpload(cuco_exec, {s})"),
                    f"        for (int cuco_b = 0; cuco_b < {KEY_BYTES}; ++cuco_b) {cache}[{count}].key[cuco_b] = cuco_key[cuco_b];",
                    f"        {cache}[{count}++].exec = cuco_exec;",
                    "    }",
                    "    if (cuco_exec != nullptr) {",
                    "        " + facts.wrap_cuda(f"cudaGraphLaunch(cuco_exec, {s})"),
                    "    } else {",
                    "        " + body.replace("\n", "\n        "),
                    "    }",
                    "}",
                ]
            )
            # The stretch's statements are replaced by the block: the first one's place takes it, the
            # others (and only they: what lies between is comments) are removed.
            idx = sorted(facts.stmts.index(x) for x in st["device"] + st["host"])
            if idx != list(range(idx[0], idx[-1] + 1)):
                raise RewriteError(f"{NAME}: a statement inside the stretch is neither device nor host work")
            first, last = facts.stmts[idx[0]], facts.stmts[idx[-1]]
            edits.append(Edit(facts.path, first.start, last.end, block.replace("\n", "\n" + ind)))
        keys = "; ".join(", ".join(x["key"]) or "nothing" for x in p)
        note = (
            f"{NAME}: {len(p)} stretch(es) of the region (split at its host synchronisations) captured on "
            f"{s} and replayed by cudaGraphLaunch, one graph per value of ({keys}), at most {MAX_GRAPHS} "
            "each (past that the stretch runs as written); host statements of a stretch run before its "
            "graph, in their order; a statement-like macro inside a stretch (an NVTX range) runs each "
            "iteration outside the graph."
        )
        return Rewritten(edits, note, members, [], teardown)
