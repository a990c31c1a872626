"""Host sends and receives made device-initiated: each group of the region (`ncclGroupStart`; `ncclSend` /
`ncclRecv` statements; `ncclGroupEnd`) becomes one kernel launched where the group was (its data is ready
there, in stream order) that stores every send's bytes straight into the receive buffer the peer posted
for it, over NVLink, through NCCL's device API (LSA: the receive buffers are NCCL symmetric windows;
`ncclGetPeerPointer` gives a peer's copy).

The matching is done at run time, as NCCL does it: a send from rank r to peer p lands in the k-th receive
p posted from r in the same group, k counting r's earlier sends to p. Each rank writes its receives'
descriptors (source rank, window, byte offset, bytes) into a small symmetric table window; a first LSA
barrier publishes them (and waits until every peer has reached the group: what its stream did before,
its last use of its buffers, is done); each sender reads its peer's table, takes the k-th receive posted
from itself, and copies only if the byte counts agree and the receive lies inside its window (otherwise
it copies nothing and raises an error flag, host memory the host reads at the next group and after the
loop: NCCL's invalid-usage error, through the program's own check); a second barrier waits until every
peer's stores have landed and every peer is done with this rank's table. One table per CTA: each CTA
pairs with the peers' CTAs of its index only, through its own barrier.

Preconditions: the group's calls are statements of their own among the region's statements, one
send or receive each (at most 16 of each), all on one stream (the region's, or the one a previous rewrite
gave the communication); no send or receive of the region outside such a group; one communicator, a
variable; every receive buffer is `B` or `B + expr`, B a harness buffer (a window already) or a buffer
the program allocates by `cudaMalloc(&B, bytes)` statements of one size before the region (they become
`ncclMemAlloc`, and B is registered as a window before the timer), as is B's ping-pong partner (swapped
with it in the region). The datatype's size is taken at run time (a datatype NCCL does not define: its
invalid-usage error). The kernel's barriers span every rank, where NCCL's sends pair two ranks only: every
rank must run the region's iterations alike (an SPMD loop), and every rank must reach every other by
load/store (one node; checked when the device communicator is made). Where the region's file is not CUDA
source (NVIDIA's Jacobi: jacobi.cpp, built by the host compiler), the kernel goes into the program's one
`.cu` file and the region's file declares what it calls."""

from __future__ import annotations

import re

from .base import Edit, Offer, Refusal, RewriteError, Rewritten
from .facts import P2P, Call, ScheduleFacts, Stmt
from .lsa_collective import CTAS, THREADS, harness_buffers, own_window_edits, window_of

NAME = "lsa_sendrecv"
MAX_CALLS = 16  # sends, and receives, of one group (the kernel's parameter and table sizes)
MAX_WINDOWS = 8
_IDENT = re.compile(r"[A-Za-z_]\w*")
_BASE_PLUS = re.compile(r"([A-Za-z_]\w*)\s*(\+.*)?", re.S)
CUDA_SUFFIXES = (".cu", ".cuh")

# The host's half: plain C++ (the region's file may be built by the host compiler).
HOST_CODE = f"""// cuco rewrite {NAME}: a group of sends and receives as one kernel storing each send into the receive the
// peer posted for it (NCCL device API, LSA)
struct cuco_p2p_window {{ ncclWindow_t win; const char* base; size_t bytes; }};   // a window receives land in
struct cuco_p2p_recv {{ unsigned long long offset, bytes; int peer, win; }};          // a receive: its window and offset
struct cuco_p2p_group {{   // one group's sends and receives, in the order the program posted them
  enum {{ kMax = {MAX_CALLS}, kWindows = {MAX_WINDOWS} }};
  int ns, nr, nwin;
  const void* src[kMax];
  unsigned long long sbytes[kMax];
  int speer[kMax];
  cuco_p2p_recv r[kMax];
  ncclWindow_t win[kWindows];
  unsigned long long winbytes[kWindows];
  const cuco_p2p_window* host;   // the windows, to place a receive (read on the host only)
  cuco_p2p_group(const cuco_p2p_window* w, int n) : ns(0), nr(0), nwin(n), host(w) {{
    for (int i = 0; i < n; i++) {{ win[i] = w[i].win; winbytes[i] = w[i].bytes; }}
  }}
  static size_t elem(ncclDataType_t t) {{   // by NCCL's enum values: older headers lack the fp8 names
    switch ((int)t) {{
      case 0: case 1: case 10: case 11: return 1;
      case 6: case 9: return 2;
      case 2: case 3: case 7: return 4;
      case 4: case 5: case 8: return 8;
      default: return 0;
    }}
  }}
  ncclResult_t send(const void* buf, size_t count, ncclDataType_t type, int peer) {{
    if (ns == kMax || elem(type) == 0) return ncclInvalidUsage;
    src[ns] = buf; sbytes[ns] = count * elem(type); speer[ns++] = peer;
    return ncclSuccess;
  }}
  ncclResult_t recv(void* buf, size_t count, ncclDataType_t type, int peer) {{
    const size_t bytes = count * elem(type);
    const char* p = (const char*)buf;
    if (nr == kMax || elem(type) == 0) return ncclInvalidUsage;
    for (int i = 0; i < nwin; i++) {{   // the window the receive lies in, whole: a peer stores only there
      if (p >= host[i].base && bytes <= host[i].bytes && (size_t)(p - host[i].base) <= host[i].bytes - bytes) {{
        r[nr++] = cuco_p2p_recv{{(unsigned long long)(p - host[i].base), bytes, peer, i}};
        return ncclSuccess;
      }}
    }}
    return ncclInvalidUsage;
  }}
}};
struct cuco_p2p_state;   // the device communicator, the receive tables' window, the error flag
ncclResult_t cuco_p2p_create(ncclComm_t comm, int ctas, cuco_p2p_state** out);
ncclResult_t cuco_p2p_launch(cuco_p2p_state* st, const cuco_p2p_group& g, cudaStream_t stream);
ncclResult_t cuco_p2p_destroy(ncclComm_t comm, cuco_p2p_state* st);"""

# The device's half, and the host functions that touch the device communicator (CUDA source only).
DEVICE_CODE = f"""// cuco rewrite {NAME}: the kernel of the host's sends and receives (NCCL device API, LSA)
struct cuco_p2p_table {{ int n; cuco_p2p_recv r[cuco_p2p_group::kMax]; }};   // one rank's receives, read by its peers
struct cuco_p2p_state {{ ncclDevComm dev; ncclWindow_t tables; void* mem; int* err; int ctas; }};

__global__ void __launch_bounds__({THREADS}) cuco_lsa_sendrecv(cuco_p2p_group g, ncclWindow_t tables, int* err,
                                                     ncclDevComm dev_comm) {{
  ncclLsaBarrierSession<ncclCoopCta> bar{{ncclCoopCta(), dev_comm, ncclTeamTagLsa(), blockIdx.x}};
  const int me = dev_comm.rank, n = dev_comm.nRanks;
  const size_t at = blockIdx.x * sizeof(cuco_p2p_table);   // this CTA's table: the peers' CTAs of its index read it
  cuco_p2p_table* mine = (cuco_p2p_table*)ncclGetLocalPointer(tables, at);
  for (int i = threadIdx.x; i < g.nr; i += blockDim.x) mine->r[i] = g.r[i];
  if (threadIdx.x == 0) mine->n = g.nr;
  // release: this table, to the peers; acquire: theirs. Every peer has reached this launch, so what its stream did
  // before (its last use of its receive buffers) is done; no peer still reads this table from the previous launch (it
  // left that one through its second barrier, after its reads).
  bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
  __shared__ char* dst[cuco_p2p_group::kMax];
  if (threadIdx.x < g.ns) {{
    const int s = threadIdx.x, peer = g.speer[s];
    char* d = nullptr;
    unsigned long long want = 0;   // the bytes of the receive matched (0: none posted)
    if (0 <= peer && peer < n) {{
      int k = 0;   // this send is the k-th of the group to peer: NCCL pairs it with the k-th receive peer posted from me
      for (int j = 0; j < s; j++) k += g.speer[j] == peer;
      const cuco_p2p_table* theirs = (const cuco_p2p_table*)ncclGetPeerPointer(tables, at, peer);
      const int nr = min(theirs->n, (int)cuco_p2p_group::kMax);
      for (int j = 0; j < nr; j++) {{
        const cuco_p2p_recv r = theirs->r[j];
        if (r.peer != me || k-- > 0) continue;
        want = r.bytes;
        if (r.bytes == g.sbytes[s] && 0 <= r.win && r.win < g.nwin && r.offset <= g.winbytes[r.win] &&
            r.bytes <= g.winbytes[r.win] - r.offset)
          d = (char*)ncclGetPeerPointer(g.win[r.win], r.offset, peer);
        break;
      }}
    }}
    if (d == nullptr && blockIdx.x == 0) {{   // nothing stored: said once, the flag read by the host
      printf("cuco {NAME}: rank %d's send %d to rank %d (%llu bytes) has no receive of its size there (%llu)\\n", me, s,
             peer, g.sbytes[s], want);
      *(volatile int*)err = 1;
    }}
    dst[s] = d;
  }}
  if (blockIdx.x == 0 && threadIdx.x >= 32) {{   // every receive a peer posted from me has a send
    for (int p = threadIdx.x - 32; p < n; p += blockDim.x - 32) {{
      int sends = 0, recvs = 0;
      for (int j = 0; j < g.ns; j++) sends += g.speer[j] == p;
      const cuco_p2p_table* theirs = (const cuco_p2p_table*)ncclGetPeerPointer(tables, at, p);
      const int nr = min(theirs->n, (int)cuco_p2p_group::kMax);
      for (int j = 0; j < nr; j++) recvs += theirs->r[j].peer == me;
      if (recvs > sends) {{
        printf("cuco {NAME}: rank %d posted %d receives from rank %d, which sends it %d\\n", p, recvs, me, sends);
        *(volatile int*)err = 1;
      }}
    }}
  }}
  __syncthreads();
  const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, nth = (size_t)gridDim.x * blockDim.x;
  for (int s = 0; s < g.ns; s++) {{
    char* d = dst[s];
    const char* src = (const char*)g.src[s];
    const size_t bytes = g.sbytes[s];
    if (d == nullptr) continue;
    if ((((size_t)src | (size_t)d | bytes) & 15) == 0) {{
      for (size_t i = tid; i < bytes / 16; i += nth) ((int4*)d)[i] = ((const int4*)src)[i];
    }} else if ((((size_t)src | (size_t)d | bytes) & 3) == 0) {{
      for (size_t i = tid; i < bytes / 4; i += nth) ((int*)d)[i] = ((const int*)src)[i];
    }} else {{
      for (size_t i = tid; i < bytes; i += nth) d[i] = src[i];
    }}
  }}
  // release: these stores, to the peers; acquire: theirs into my buffers, landed before what follows on the stream
  // reads them; and every peer is done with this CTA's table
  bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
}}

ncclResult_t cuco_p2p_create(ncclComm_t comm, int ctas, cuco_p2p_state** out) {{
  cuco_p2p_state* st = new cuco_p2p_state{{}};
  *out = st;
  st->ctas = ctas;
  ncclDevCommRequirements reqs{{}};
  reqs.lsaBarrierCount = ctas;   // one barrier per CTA
  ncclResult_t r = ncclDevCommCreate(comm, &reqs, &st->dev);
  int nranks = 0;
  if (r == ncclSuccess) r = ncclCommCount(comm, &nranks);
  if (r == ncclSuccess && st->dev.lsaSize != nranks) r = ncclInvalidUsage;   // a rank not reachable by load/store
  const size_t bytes = (size_t)ctas * sizeof(cuco_p2p_table);
  if (r == ncclSuccess) r = ncclMemAlloc(&st->mem, bytes);
  if (r == ncclSuccess) r = ncclCommWindowRegister(comm, st->mem, bytes, &st->tables, NCCL_WIN_COLL_SYMMETRIC);
  if (r == ncclSuccess && cudaMallocHost((void**)&st->err, sizeof(int)) != cudaSuccess) r = ncclUnhandledCudaError;
  if (r == ncclSuccess) *st->err = 0;
  return r;
}}

ncclResult_t cuco_p2p_launch(cuco_p2p_state* st, const cuco_p2p_group& g, cudaStream_t stream) {{
  if (*(volatile int*)st->err) return ncclInvalidUsage;   // an earlier group's send had no receive of its size
  cuco_lsa_sendrecv<<<st->ctas, {THREADS}, 0, stream>>>(g, st->tables, st->err, st->dev);
  return cudaGetLastError() == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}}

ncclResult_t cuco_p2p_destroy(ncclComm_t comm, cuco_p2p_state* st) {{
  ncclResult_t r = cudaDeviceSynchronize() == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
  if (r == ncclSuccess && *(volatile int*)st->err) r = ncclInvalidUsage;   // the last groups' sends, checked
  ncclResult_t d = ncclCommWindowDeregister(comm, st->tables);
  if (r == ncclSuccess) r = d;
  d = ncclMemFree(st->mem);
  if (r == ncclSuccess) r = d;
  d = ncclDevCommDestroy(comm, &st->dev);
  if (r == ncclSuccess) r = d;
  if (cudaFreeHost(st->err) != cudaSuccess && r == ncclSuccess) r = ncclUnhandledCudaError;
  delete st;
  return r;
}}"""


def _strip_parens(text: str) -> str:
    t = text.strip()
    while t.startswith("(") and t.endswith(")"):
        depth = 0
        for i, ch in enumerate(t):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and i < len(t) - 1:
                return t  # `(a) + (b)`: the outer parentheses are not one pair
        t = t[1:-1].strip()
    return t


def _only(stmt: Stmt, call: Call, facts: ScheduleFacts) -> bool:
    """The statement makes this call alone (through the program's NCCL check, if it has one)."""
    return not ({x.name for x in stmt.calls} - {call.name, facts.nccl_check or call.name})


def _groups(facts: ScheduleFacts) -> list[dict] | str:
    stmts, groups, i = facts.stmts, [], 0
    while i < len(stmts):
        s = stmts[i]
        start = next((c for c in s.calls if c.name == "ncclGroupStart"), None)
        if start is None:
            stray = next((c for c in s.calls if c.name in P2P or c.name == "ncclGroupEnd"), None)
            if stray is not None:
                return (
                    f"{facts.path}:{stray.line}: {stray.name} is not in a group of the region's own statements "
                    "(ncclGroupStart; one ncclSend or ncclRecv a statement; ncclGroupEnd)"
                )
            i += 1
            continue
        if not _only(s, start, facts):
            return f"{facts.path}:{start.line}: ncclGroupStart shares its statement with other calls"
        calls, j = [], i + 1
        while j < len(stmts) and not any(c.name == "ncclGroupEnd" for c in stmts[j].calls):
            t = stmts[j]
            p2p = [c for c in t.calls if c.name in P2P]
            if len(p2p) != 1 or not _only(t, p2p[0], facts) or t.masked_macro:
                return f"{facts.path}:{t.line}: the group holds a statement other than one ncclSend or ncclRecv"
            calls.append((t, p2p[0]))
            j += 1
        if j == len(stmts):
            return f"{facts.path}:{start.line}: the group has no ncclGroupEnd among the region's statements"
        end = next(c for c in stmts[j].calls if c.name == "ncclGroupEnd")
        if not _only(stmts[j], end, facts):
            return f"{facts.path}:{end.line}: ncclGroupEnd shares its statement with other calls"
        if calls:
            groups.append(dict(start=s, end=stmts[j], calls=calls))
        i = j + 1
    if not groups:
        return (
            "the region's own statements hold no group of ncclSend / ncclRecv (one inside a called function is "
            "not rewritten)"
        )
    return groups


def _partners(facts: ScheduleFacts, names: list[str]) -> list[str]:
    """The buffers swapped with `names` in the region (a ping-pong's other half): a receive lands in either."""
    out = list(names)
    for s in facts.stmts:
        for c in s.calls:
            if c.name == "swap" and len(c.args) == 2:
                pair = [a.text.strip() for a in c.args]
                for a, b in (pair, pair[::-1]):
                    if a in out and b not in out and _IDENT.fullmatch(b):
                        out.append(b)
    return out


def _cuda_file(facts: ScheduleFacts) -> str | None:
    """Where the kernel goes: the region's file if it is CUDA source, else the program's one `.cu` file."""
    if facts.members_at is not None or facts.path.endswith(CUDA_SUFFIXES):
        return facts.path
    cu = [p for p in facts.texts if p.endswith(".cu")]
    return cu[0] if len(cu) == 1 else None


def plan(facts: ScheduleFacts) -> dict | str:
    groups = _groups(facts)
    if isinstance(groups, str):
        return groups
    cuda_file = _cuda_file(facts)
    if cuda_file is None:
        return (
            f"{facts.path} is not CUDA source and the program has {'no' if not any(p.endswith('.cu') for p in facts.texts) else 'several'} "
            ".cu file to hold the kernel"
        )
    harness = harness_buffers(facts)
    comms: set[str] = set()
    bases: list[str] = []
    first_use: dict[str, str] = {}  # a receive buffer -> the receive that names it first
    for g in groups:
        streams = set()
        sends = [c for _, c in g["calls"] if c.name == "ncclSend"]
        recvs = [c for _, c in g["calls"] if c.name == "ncclRecv"]
        if len(sends) > MAX_CALLS or len(recvs) > MAX_CALLS:
            return f"{facts.path}:{g['start'].line}: the group has more than {MAX_CALLS} sends or receives"
        for _, c in g["calls"]:
            where = f"{facts.path}:{c.line}"
            if len(c.args) != 6:
                return f"{where}: {c.name} does not have the six arguments of NCCL's signature"
            buf, _count, _dtype, _peer, comm, stream = (a.text.strip() for a in c.args)
            if not _IDENT.fullmatch(comm):
                return f"{where}: the communicator {comm} is not a plain variable"
            comms.add(comm)
            streams.add(re.sub(r"\s", "", stream))
            if c.name == "ncclRecv":
                m = _BASE_PLUS.fullmatch(_strip_parens(buf))
                if m is None:
                    return f"{where}: the receive buffer {buf} is not B or B + offset, B a variable"
                if m.group(1) not in bases:
                    bases.append(m.group(1))
                    first_use[m.group(1)] = where
        if len(streams) != 1:
            return f"{facts.path}:{g['start'].line}: the group's calls are on several streams"
        stream = streams.pop()
        if stream not in (re.sub(r"\s", "", facts.stream), "cuco_comm_stream"):
            return f"{facts.path}:{g['start'].line}: the group is not on the region's stream {facts.stream}"
        g["stream"] = stream
    if len(comms) != 1:
        return f"the groups use several communicators ({', '.join(sorted(comms))})"
    if len({g["stream"] for g in groups}) != 1:
        # their kernels could run at once, and they share the barriers and the tables
        return "the groups are on different streams"
    windows: dict[str, dict] = {}
    for b in _partners(facts, bases):
        w = window_of(facts, b, harness, first_use.get(b, facts.at(facts.loop_start)), "cuco_p2p_win_")
        if isinstance(w, str):
            return w
        windows[b] = w
    if len(windows) > MAX_WINDOWS:
        return f"the receives land in more than {MAX_WINDOWS} buffers"
    own = {re.sub(r"\s", "", w["bytes"]) for w in windows.values() if w["allocs"]}
    if len(own) > 1:
        return f"the receive buffers and their ping-pong partners ({', '.join(windows)}) have different sizes"
    return dict(groups=groups, windows=windows, comm=comms.pop(), cuda_file=cuda_file)


def _replace(facts: ScheduleFacts, stmt: Stmt, lines: list[str]) -> Edit:
    line_start = facts.text.rfind(b"\n", 0, stmt.start) + 1
    ind = facts.text[line_start : stmt.start].decode()
    return Edit(facts.path, stmt.start, stmt.end, f"\n{'' if ind.strip() else ind}".join(lines))


def _includes(path: str, data: bytes, headers: list[str]) -> list[Edit]:
    missing = [h for h in headers if f"<{h}>".encode() not in data]
    if not missing:
        return []
    at = data.find(b"#include")
    at = 0 if at < 0 else data.find(b"\n", at) + 1
    return [Edit(path, at, at, "".join(f"#include <{h}>\n" for h in missing))]


class LsaSendrecv:
    name = NAME
    headers = ("nccl_device.h",)  # the candidate includes them outside its blocks where this is searched
    summary = (
        "replace a group of host sends and receives by a kernel that stores each send into the receive its "
        "peer posted for it, in the peer's NCCL window (LSA)"
    )

    def check(self, facts: ScheduleFacts) -> Offer | Refusal:
        p = plan(facts)
        if isinstance(p, str):
            return Refusal(NAME, p)
        said = ", ".join(
            f"the group at {facts.path}:{g['start'].line}-{g['end'].line} "
            f"({sum(c.name == 'ncclSend' for _, c in g['calls'])} sends, "
            f"{sum(c.name == 'ncclRecv' for _, c in g['calls'])} receives)"
            for g in p["groups"]
        )
        return Offer(NAME, f"{said} as LSA stores into {', '.join(p['windows'])}", knobs={"comm_ctas": CTAS})

    def rewrite(self, facts: ScheduleFacts, knobs: dict[str, str]) -> Rewritten:
        p = plan(facts)
        if isinstance(p, str):
            raise RewriteError(f"{NAME}: {p}")
        knob_line = re.search(rb"constexpr\s+int\s+kCommCtas\s*=", facts.text)
        ctas = "kCommCtas" if facts.members_at is not None and knob_line else knobs.get("comm_ctas", "16")
        if ctas != "kCommCtas" and ctas not in CTAS:
            raise RewriteError(f"{NAME}: comm_ctas must be one of {CTAS}")
        comm, windows = p["comm"], p["windows"]
        edits: list[Edit] = []
        for g in p["groups"]:
            edits.append(
                _replace(
                    facts,
                    g["start"],
                    [
                        f"{{   // cuco rewrite {NAME}: this group as one kernel storing each send into the receive "
                        "its peer posted for it (LSA)",
                        f"cuco_p2p_group cuco_g(cuco_p2p_wins, {len(windows)});",
                    ],
                )
            )
            for stmt, c in g["calls"]:
                buf, count, dtype, peer = (a.text.strip() for a in c.args[:4])
                op = "send" if c.name == "ncclSend" else "recv"
                edits.append(_replace(facts, stmt, [facts.wrap_nccl(f"cuco_g.{op}({buf}, {count}, {dtype}, {peer})")]))
            edits.append(
                _replace(
                    facts,
                    g["end"],
                    [facts.wrap_nccl(f"cuco_p2p_launch(cuco_p2p, cuco_g, {g['stream']})"), "}"],
                )
            )
        members = [
            f"cuco_p2p_state* cuco_p2p = nullptr;   // cuco rewrite {NAME}: the device communicator, the tables",
            f"cuco_p2p_window cuco_p2p_wins[{len(windows)}] = {{}};   // cuco rewrite {NAME}: where receives land",
        ]
        setup = [
            f"{{   // cuco rewrite {NAME}: a device communicator with one LSA barrier per CTA, the receive windows",
            "    " + facts.wrap_nccl(f"cuco_p2p_create({comm}, {ctas}, &cuco_p2p)"),
        ]
        teardown = [facts.wrap_nccl(f"cuco_p2p_destroy({comm}, cuco_p2p)")]
        for i, (b, w) in enumerate(windows.items()):
            if w["allocs"]:
                m, su, td, ed = own_window_edits(facts, b, w, comm, NAME)
                members += m
                setup += su
                teardown += td
                edits += ed
                setup.append(
                    f"    cuco_p2p_wins[{i}] = cuco_p2p_window{{{w['win']}, (const char*){b}, (size_t)({w['bytes']})}};"
                )
            else:
                hb = w["buffer"]
                setup.append(
                    f"    cuco_p2p_wins[{i}] = cuco_p2p_window{{{hb}.win, (const char*){hb}.ptr, {hb}.bytes}};"
                )
        setup.append("}")
        own = [b for b, w in windows.items() if w["allocs"]]
        where = ", ".join(f"{facts.path}:{g['start'].line}" for g in p["groups"])
        note = (
            f"{NAME}: the group of sends and receives at {where} made device-initiated: a kernel of {ctas} CTAs "
            f"launched where the group was stores each send into the receive the peer posted for it (matched at "
            f"run time through a table of receives in a symmetric window), between two LSA barriers"
            + (f"; {', '.join(own)} allocated with ncclMemAlloc and registered as symmetric windows" if own else "")
        )
        if p["cuda_file"] == facts.path:
            # one translation unit: the helpers internal (the harness admits no other definition)
            code = (HOST_CODE + "\n\n" + DEVICE_CODE).replace(
                "\nncclResult_t cuco_p2p_", "\nstatic ncclResult_t cuco_p2p_"
            )
            return Rewritten(
                edits,
                note,
                members,
                setup,
                teardown,
                headers=list(self.headers),
                definitions=[code],
            )
        # The region's file is built by the host compiler: it gets the host's half; the kernel goes to the
        # program's CUDA file, after the host's half again (the same declarations in both).
        cu, data = p["cuda_file"], facts.texts[p["cuda_file"]]
        program_only = _includes(cu, data, ["nccl.h", "nccl_device.h"])
        program_only.append(Edit(cu, len(data), len(data), f"\n{HOST_CODE}\n\n{DEVICE_CODE}\n"))
        note += f"; the kernel is in {cu}, which now includes NCCL's headers (its compiler needs their path)"
        return Rewritten(edits, note, members, setup, teardown, program_only=program_only, definitions=[HOST_CODE])
