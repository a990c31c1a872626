"""A host collective made device-initiated: each ncclAlltoAll / ncclAllGather of the region becomes a kernel
launched where the collective was (its data is ready there, in stream order) that stores this rank's
blocks straight into every peer's receive buffer over NVLink, through NCCL's device API (LSA: the receive
buffer is an NCCL symmetric window; `ncclGetLsaPointer` gives a peer's copy of it), between two LSA
barriers: the first waits until every peer has finished with its buffer (everything before its own
launch), the second until every peer's stores have landed. The kernel is the shipped all-gather's push
(`../shared/examples/lsa_allgather/lsa_ag.cu`, the LSA variants of the shipped workloads), generalised to
an all-to-all by the source offset.

Preconditions: the call is a statement of its own among the region's statements, on the region's stream;
its datatype is a literal NCCL type; its receive buffer is a variable that is either a harness buffer (a
window already) or allocated by `cudaMalloc(&R, bytes)` statements before the region (in the function that
holds it, or in the candidate's setup()), freed only by `cudaFree(R)` statements; its communicator is a
variable. At run time every rank must reach every other by load/store (one node): checked after the
device communicator is made (`lsaSize` against the rank count), an NCCL error otherwise."""

from __future__ import annotations

import re

from ..api import NCCL_DTYPE_BYTES
from .base import Edit, Offer, Refusal, RewriteError, Rewritten
from .facts import Call, ScheduleFacts

NAME = "lsa_collective"
KINDS = {"ncclAlltoAll": 0, "ncclAllGather": 1}  # the kernel's `gather` flag
ALLOCS = ("cudaMalloc", "ncclMemAlloc")  # ncclMemAlloc: the memory a window needs already (kept as it is)
CTAS = ("4", "8", "16", "32", "64")
THREADS = 512
_IDENT = re.compile(r"[A-Za-z_]\w*")
_HARNESS_BUFFER = re.compile(r"\b([A-Za-z_]\w*)\s*=\s*\([^()]*\)\s*cuco_c->(inputs|outputs)\[(\d+)\]\.ptr\s*;")

KERNEL = f"""// cuco rewrite {NAME}: a host all-to-all / all-gather as stores into the peers' windows (NCCL device API)
__global__ void __launch_bounds__({THREADS}) cuco_lsa_push(const void* send, ncclWindow_t recvwin, size_t bytes,
                                                   int gather, ncclDevComm dev_comm) {{
  ncclLsaBarrierSession<ncclCoopCta> bar{{ncclCoopCta(), dev_comm, ncclTeamTagLsa(), blockIdx.x}};
  bar.sync(ncclCoopCta(), cuda::memory_order_acquire);     // every peer is done with its buffer
  const int me = dev_comm.lsaRank, n = dev_comm.lsaSize;
  const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, nth = (size_t)gridDim.x * blockDim.x;
  for (int k = 0; k < n; k++) {{
    const int peer = (me + k) % n;                          // staggered: spreads the NVLink traffic
    const char* src = (const char*)send + (gather ? 0 : (size_t)peer * bytes);
    char* dst = (char*)ncclGetLsaPointer(recvwin, (size_t)me * bytes, peer);
    if ((((size_t)src | (size_t)dst | bytes) & 15) == 0) {{
      const int4* s = (const int4*)src; int4* d = (int4*)dst;
      for (size_t i = tid; i < bytes / 16; i += nth) d[i] = s[i];
    }} else {{
      for (size_t i = tid; i < bytes; i += nth) dst[i] = src[i];
    }}
  }}
  bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);     // every peer's stores have landed
}}"""


def _alloc_range(facts: ScheduleFacts) -> tuple[int, int]:
    """Where the receive buffers' allocations may be: before the region in the function that holds it (the
    user's program), or anywhere outside run() (the harness's candidate: setup())."""
    if facts.members_at is not None:
        return 0, len(facts.text)
    return facts.function[0], facts.loop_start


def harness_buffers(facts: ScheduleFacts) -> dict[str, str]:
    """In the harness's candidate: each variable set from a harness buffer -> that buffer (`cuco_c->outputs[1]`),
    a symmetric window already ({} in the user's program)."""
    if facts.members_at is None:
        return {}
    text = facts.text.decode("utf-8", "replace")
    return {m.group(1): f"cuco_c->{m.group(2)}[{m.group(3)}]" for m in _HARNESS_BUFFER.finditer(text)}


def window_of(facts: ScheduleFacts, buf: str, harness: dict[str, str], where: str, prefix: str) -> dict | str:
    """How the device buffer `buf` becomes (or already is) an NCCL symmetric window: a harness buffer, or
    the program's own `cudaMalloc(&buf, bytes)` statements of one size before the region (ncclMemAlloc
    ones kept), to become ncclMemAlloc; `cudaFree(buf)` statements, to become ncclMemFree. A refusal
    otherwise."""
    if buf in harness:
        return dict(win=f"{harness[buf]}.win", buffer=harness[buf], allocs=[], frees=[])
    lo, hi = _alloc_range(facts)
    allocs = [
        a
        for a in facts.calls
        if a.name in ALLOCS
        and len(a.args) == 2
        and lo <= a.start < hi
        and re.sub(r"\s|\(void\s*\*\*\)|[()]", "", a.args[0].text) == f"&{buf}"
    ]
    if not allocs:
        return (
            f"{where}: the receive buffer {buf} is not allocated by cudaMalloc(&{buf}, ...) before the "
            "region, nor by ncclMemAlloc (it must become an NCCL window)"
        )
    if any(facts.call_stmts.get(a.start) is None for a in allocs):
        return f"{facts.path}:{allocs[0].line}: the {allocs[0].name} of {buf} is not a statement of its own"
    if len({re.sub(r"\s", "", a.args[1].text) for a in allocs}) != 1:
        return f"{facts.path}:{allocs[0].line}: {buf} is allocated with different sizes"
    flo, fhi = (0, len(facts.text)) if facts.members_at is not None else facts.function
    frees = [
        f
        for f in facts.calls
        if f.name == "cudaFree" and f.args and f.args[0].text.strip() == buf and flo <= f.start < fhi
    ]
    if any(facts.call_stmts.get(f.start) is None for f in frees):
        return f"{facts.path}:{frees[0].line}: the cudaFree of {buf} is not a statement of its own"
    return dict(win=f"{prefix}{buf}", allocs=allocs, frees=frees, bytes=allocs[0].args[1].text.strip())


def own_window_edits(facts: ScheduleFacts, buf: str, w: dict, comm: str, who: str) -> tuple[list, list, list, list]:
    """A buffer of the program's own made a symmetric window: (members, set-up, teardown, edits): the
    handle, its registration before the timer, its deregistration after the loop, and ncclMemAlloc /
    ncclMemFree where the program called cudaMalloc / cudaFree."""
    members = [f"ncclWindow_t {w['win']}{{}};   // cuco rewrite {who}: {buf} as an NCCL symmetric window"]
    setup = [
        "    "
        + facts.wrap_nccl(f"ncclCommWindowRegister({comm}, {buf}, {w['bytes']}, &{w['win']}, NCCL_WIN_COLL_SYMMETRIC)")
    ]
    teardown = [facts.wrap_nccl(f"ncclCommWindowDeregister({comm}, {w['win']})")]
    edits = []
    for a in (a for a in w["allocs"] if a.name == "cudaMalloc"):
        start, end = facts.call_stmts[a.start]
        edits.append(_replace(facts, start, end, [facts.wrap_nccl(f"ncclMemAlloc((void**)&{buf}, {a.args[1].text})")]))
    for f in w["frees"]:
        start, end = facts.call_stmts[f.start]
        edits.append(_replace(facts, start, end, [facts.wrap_nccl(f"ncclMemFree({buf})")]))
    return members, setup, teardown, edits


def dev_comm_setup(facts: ScheduleFacts, comm: str, ctas: str, var: str, who: str) -> list[str]:
    """Set-up lines (a block) making `var`, a device communicator on `comm` with one LSA barrier per CTA,
    and checking that every rank is reachable by load/store (one node), else NCCL's invalid-usage error."""
    return [
        f"{{   // cuco rewrite {who}: a device communicator with one LSA barrier per CTA",
        "    ncclDevCommRequirements cuco_reqs{};",
        f"    cuco_reqs.lsaBarrierCount = {ctas};",
        "    " + facts.wrap_nccl(f"ncclDevCommCreate({comm}, &cuco_reqs, &{var})"),
        "    int cuco_nranks = 0;",
        "    " + facts.wrap_nccl(f"ncclCommCount({comm}, &cuco_nranks)"),
        "    // every rank reachable by load/store (one node), else NCCL's invalid-usage error",
        "    " + facts.wrap_nccl(f"{var}.lsaSize == cuco_nranks ? ncclSuccess : ncclInvalidUsage"),
    ]


def _calls(facts: ScheduleFacts) -> list[tuple[int, Call]] | str:
    found = [(i, c) for i, s in enumerate(facts.stmts) for c in s.calls if c.name in KINDS]
    if not found:
        return "the region's own statements hold no ncclAlltoAll or ncclAllGather (one inside a called function is not rewritten)"
    return found


def plan(facts: ScheduleFacts) -> dict | str:
    found = _calls(facts)
    if isinstance(found, str):
        return found
    if any(c.name in ("ncclGroupStart", "ncclGroupEnd") for s in facts.stmts for c in s.calls):
        return "the region groups NCCL calls (ncclGroupStart): a grouped collective is not made device-initiated"
    harness = harness_buffers(facts)
    comms, steps = set(), []
    windows: dict[str, dict] = {}  # receive buffer -> its window, allocations and frees
    for i, c in found:
        where = f"{facts.path}:{c.line}"
        stmt = facts.stmts[i]
        if {x.name for x in stmt.calls} - {c.name, facts.nccl_check or c.name}:
            return f"{where}: {c.name} shares its statement with other calls"
        if len(c.args) != 6:
            return f"{where}: {c.name} does not have the six arguments of NCCL's signature"
        send, recv, count, dtype, comm, stream = (a.text.strip() for a in c.args)
        if re.sub(r"\s", "", stream) != re.sub(r"\s", "", facts.stream):
            return f"{where}: {c.name} is not on the region's stream {facts.stream}"
        if dtype not in NCCL_DTYPE_BYTES:
            return f"{where}: the datatype {dtype} is not a literal NCCL type (its size is needed)"
        if not _IDENT.fullmatch(recv) or not _IDENT.fullmatch(comm):
            return f"{where}: {c.name} receives into {recv} on {comm}; both must be plain variables"
        if recv == send:
            return f"{where}: {c.name} is in place"
        comms.add(comm)
        if recv not in windows:
            w = window_of(facts, recv, harness, where, "cuco_win_")
            if isinstance(w, str):
                return w
            windows[recv] = w
        steps.append(dict(stmt=stmt, call=c, send=send, recv=recv, count=count, elem=NCCL_DTYPE_BYTES[dtype]))
    if len(comms) != 1:
        return f"the collectives use several communicators ({', '.join(sorted(comms))})"
    return dict(steps=steps, windows=windows, comm=comms.pop())


def _replace(facts: ScheduleFacts, start: int, end: int, lines: list[str]) -> Edit:
    line_start = facts.text.rfind(b"\n", 0, start) + 1
    ind = facts.text[line_start:start].decode()
    return Edit(facts.path, start, end, f"\n{'' if ind.strip() else ind}".join(lines))


class LsaCollective:
    name = NAME
    headers = ("nccl_device.h",)  # the candidate includes them outside its blocks where this is searched
    summary = "replace a host all-to-all / all-gather by a kernel that stores into the peers' NCCL windows (LSA)"

    def check(self, facts: ScheduleFacts) -> Offer | Refusal:
        p = plan(facts)
        if isinstance(p, str):
            return Refusal(NAME, p)
        said = ", ".join(f"{s['call'].name} at {facts.path}:{s['call'].line}" for s in p["steps"])
        return Offer(NAME, f"{said} as LSA stores into {', '.join(p['windows'])}", knobs={"comm_ctas": CTAS})

    def rewrite(self, facts: ScheduleFacts, knobs: dict[str, str]) -> Rewritten:
        p = plan(facts)
        if isinstance(p, str):
            raise RewriteError(f"{NAME}: {p}")
        # In the harness's candidate the CTA count is the workload's comm_ctas knob (the search moves it).
        knob_line = re.search(rb"constexpr\s+int\s+kCommCtas\s*=", facts.text)
        ctas = "kCommCtas" if facts.members_at is not None and knob_line else knobs.get("comm_ctas", "16")
        if ctas != "kCommCtas" and ctas not in CTAS:
            raise RewriteError(f"{NAME}: comm_ctas must be one of {CTAS}")
        comm, s = p["comm"], facts.stream
        edits = []
        for st in p["steps"]:
            c = st["call"]
            win = p["windows"][st["recv"]]["win"]
            edits.append(
                _replace(
                    facts,
                    st["stmt"].start,
                    st["stmt"].end,
                    [
                        f"// cuco rewrite {NAME}: {c.name} as stores into the peers' {st['recv']} (LSA)",
                        f"cuco_lsa_push<<<{ctas}, {THREADS}, 0, {s}>>>({st['send']}, {win}, (size_t)({st['count']}) * "
                        f"{st['elem']}, {KINDS[c.name]}, cuco_dev_comm);",
                        facts.wrap_cuda("cudaGetLastError()"),
                    ],
                )
            )
        members = [f"ncclDevComm cuco_dev_comm{{}};   // cuco rewrite {NAME}: the device communicator"]
        setup = dev_comm_setup(facts, comm, ctas, "cuco_dev_comm", NAME)
        teardown = []
        own = {r: w for r, w in p["windows"].items() if w["allocs"]}
        for r, w in own.items():
            m, su, td, ed = own_window_edits(facts, r, w, comm, NAME)
            members += m
            setup += su
            teardown += td
            edits += ed
        setup.append("}")
        teardown.append(facts.wrap_nccl(f"ncclDevCommDestroy({comm}, &cuco_dev_comm)"))
        moved = "; ".join(f"{st['call'].name} ({facts.path}:{st['call'].line}) into {st['recv']}" for st in p["steps"])
        note = (
            f"{NAME}: {moved} made device-initiated: a kernel of {ctas} CTAs launched where the call was "
            f"stores this rank's blocks into every peer's window between two LSA barriers"
            + (f"; {', '.join(own)} allocated with ncclMemAlloc and registered as symmetric windows" if own else "")
        )
        return Rewritten(edits, note, members, setup, teardown, headers=list(self.headers), definitions=[KERNEL])
