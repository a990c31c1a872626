"""Which of the program's own buffers must be registered with NCCL in the workload, and when.

In the harness the inputs and outputs are NCCL symmetric windows, and a window is also a local registration
(`ncclCommRegister`). NCCL requires the buffers of one communication call to be all registered or all not:
a send from a registered buffer to a peer's unregistered receive buffer (or the reverse) mixes the two, which
NCCL leaves undefined, and for the point-to-point path (ncclSend/ncclRecv, ncclAlltoAll) it hangs: the
registered side waits for a peer buffer address the other side never publishes. A program that dispatches
from an input into its own receive buffer (an MoE all-to-all) does exactly that once the input is a window.

So every program buffer that shares a call (or a group of sends and receives, whose buffers pair across
ranks) with a harness buffer, directly or through other such buffers, is allocated with ncclMemAlloc and
registered where the harness's buffers are windows (`cuco_c->inputs[i].win`); where they are not (the
harness's reference run, on plain copies) it stays unregistered, like them. A buffer the workload cannot
allocate itself (a helper's per-call scratch) turns local registration off for the whole workload instead
(UNREGISTERED_ENV in its launch environment).
"""

from __future__ import annotations

from dataclasses import dataclass

REGISTERABLE_ALLOCS = ("cudaMalloc", "ncclMemAlloc")
# Where a buffer tied to the harness's cannot be allocated by the workload (a helper's scratch, allocated per
# call): no local registration at all (ncclCommRegister, and the one each window makes, become no-ops; the
# symmetric windows themselves stay), so no host call of the workload mixes registered and unregistered buffers.
UNREGISTERED_ENV = {"NCCL_LOCAL_REGISTER": "0"}


@dataclass(frozen=True)
class Registration:
    buffer: str
    condition: str  # C++: true where the harness's buffers of its calls are registered (windows)
    handle: str  # the member holding ncclCommRegister's handle
    reason: str  # the call that ties it to a harness buffer (file:line)


def units(ops) -> list[tuple[list[str], str]]:
    """The sets of buffers whose registration must agree, one per communication call, except that the sends
    and receives of one NCCL group pair across ranks (so are one set), as do ungrouped ones: (buffers, at)."""
    out: list[tuple[list[str], str]] = []
    grouped: dict[object, tuple[list[str], str]] = {}
    for op in ops:
        if op.kind not in ("collective", "p2p"):
            continue
        names = list(dict.fromkeys(op.reads + op.writes))
        if op.kind == "p2p":
            key = op.detail.get("group") or "ungrouped"
            if key not in grouped:
                grouped[key] = ([], op.at)
                out.append(grouped[key])
            grouped[key][0].extend(n for n in names if n not in grouped[key][0])
        else:
            out.append((names, op.at))
    return out


def plan(ops, harness: dict[str, str], own: set[str]) -> tuple[list[Registration], list[str]]:
    """`harness`: harness buffer name -> its window expression (`cuco_c->inputs[0].win`); `own`: the program
    buffers the workload can allocate with ncclMemAlloc. Returns the registrations and, for a buffer that
    must be registered but cannot be, why (file:line)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    tied_at: dict[str, str] = {}
    for names, at in units(ops):
        for n in names:
            tied_at.setdefault(n, at)
            parent[find(n)] = find(names[0])
    window: dict[str, str] = {}
    for name, win in harness.items():
        if name in parent:
            window.setdefault(find(name), win)
    regs, blocked = [], []
    for name in sorted(parent, key=lambda n: (tied_at[n], n)):
        root = find(name)
        if name in harness or root not in window:
            continue
        if name in own:
            regs.append(Registration(name, f"{window[root]} != nullptr", f"cuco_reg_{name}", tied_at[name]))
        else:
            blocked.append(
                f"{tied_at[name]}: {name} shares NCCL calls with the harness's registered buffers but is "
                "not allocated by a cudaMalloc the workload can make an ncclMemAlloc"
            )
    return regs, blocked
