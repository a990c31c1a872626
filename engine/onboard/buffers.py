"""The program's device buffers (one per allocation into a named pointer), which operation reads and writes
each, and the role each plays in the repeated region: input, output, intermediate, carried (read before it is
written, or swapped with another each iteration) or unused."""

from __future__ import annotations

from . import api
from .loops import op_in
from .model import Buffer, Op, Unresolved
from .node_text import node_text, nth_arg, text_or_none
from .region_choice import Region
from .source import SourceFile, call_args, call_name
from .variables import Pointers


def collect_buffers(
    ops: list[Op], pointers: Pointers, sources: list[SourceFile], unresolved: list[Unresolved]
) -> dict[str, Buffer]:
    """A buffer per device allocation into a pointer the analysis can name, its element type and count."""
    buffers: dict[str, Buffer] = {}
    types = typedefs(sources)
    for op in ops:
        if op.kind != "alloc" or op.name not in api.DEVICE_ALLOC:
            continue
        pi, bi = api.DEVICE_ALLOC[op.name]
        ptr, size = nth_arg(op.node, pi), nth_arg(op.node, bi)
        name = pointers.base_name(ptr)
        if name is None or size is None:
            unresolved.append(
                Unresolved(
                    op.at,
                    f"{op.name} of an expression the analysis cannot name",
                    "allocate into a plain pointer variable",
                )
            )
            continue
        var = pointers.vars.get(name)
        elem = resolve_type(var.base_type, types) if var is not None else "unknown"
        buffers[name] = Buffer(name, op.at, op.name, elem, node_text(size), _count(size), alloc_stmt=op.stmt)
        op.writes = []
        op.detail = {"buffer": name, "bytes": node_text(size)}
    return buffers


def _count(size) -> str | None:
    """The element count of `n * sizeof(T)` (either way round)."""
    if size.type == "binary_expression" and text_or_none(size.child_by_field_name("operator")) == "*":
        left, right = size.child_by_field_name("left"), size.child_by_field_name("right")
        if right.type == "sizeof_expression":
            return text_or_none(left)
        if left.type == "sizeof_expression":
            return text_or_none(right)
    return None


def typedefs(sources: list[SourceFile]) -> dict[str, str]:
    """The file-scope `typedef T name;` and `using name = T;` of every source."""
    out: dict[str, str] = {}
    for src in sources:
        for node in src.tree.root_node.named_children:
            if node.type == "type_definition":
                t = node.child_by_field_name("type")
                for d in node.children_by_field_name("declarator"):
                    if t is not None and d.type == "type_identifier":
                        out[src.text(d)] = src.text(t)
            elif node.type == "alias_declaration":
                n, t = node.child_by_field_name("name"), node.child_by_field_name("type")
                if n is not None and t is not None:
                    out[src.text(n)] = src.text(t)
    return out


def resolve_type(name: str, types: dict[str, str]) -> str:
    """`real` of `typedef float real;` (or `using real = float;`) is float: the element type the
    harness fills and compares, whichever #if branch chose it."""
    seen = set()
    while name in types and name not in seen:
        seen.add(name)
        name = types[name]
    return name


def reads_writes(
    ops: list[Op],
    buffers: dict[str, Buffer],
    pointers: Pointers,
    kernel_access: dict,
    unresolved: list[Unresolved],
) -> None:
    """Which buffers each operation reads and writes (a kernel by what its body does with each parameter,
    a collective by its send and receive arguments, a copy by its destination and source), and the
    NCCL group each communication call belongs to."""

    def buf(node) -> str | None:
        name = pointers.base_name(node)
        return name if name in buffers else None

    for op in ops:
        if op.kind == "kernel":
            _kernel_access(op, buf, kernel_access, unresolved)
        elif op.kind in ("collective", "p2p"):
            _comm_access(op, buf)
        elif op.kind == "memcpy":
            a = call_args(op.node)
            d = buf(a[0]) if a else None
            s = buf(a[api.MEMCPY[op.name][1]]) if len(a) > 1 else None
            if d:
                op.writes.append(d)
            if s:
                op.reads.append(s)
        elif op.kind == "memset":
            a = call_args(op.node)
            d = buf(a[0]) if a else None
            if d:
                op.writes.append(d)
        for b in op.reads:
            buffers[b].readers.append(op.id)
        for b in op.writes:
            buffers[b].writers.append(op.id)
    _groups(ops)


def _kernel_access(op: Op, buf, kernel_access: dict, unresolved: list[Unresolved]) -> None:
    access = op.via.access if op.via is not None else kernel_access.get(op.name)
    args = call_args(op.node)
    if access is None:
        unresolved.append(
            Unresolved(
                op.at,
                f"kernel {op.name} is not defined in the given files",
                "pass the file that defines it to cuco analyze",
            )
        )
        access = ["rw"] * len(args)
    for a, acc in zip(args, access):
        b = buf(a)
        if b is None:
            continue
        if "r" in acc:
            op.reads.append(b)
        if "w" in acc:
            op.writes.append(b)
    op.detail["reads"], op.detail["writes"] = list(op.reads), list(op.writes)


def _comm_access(op: Op, buf) -> None:
    spec = api.NCCL_COMM[op.name]
    for key, pos, out in (("send", spec["send"], op.reads), ("recv", spec["recv"], op.writes)):
        b = buf(nth_arg(op.node, pos))
        if b is not None:
            out.append(b)
            op.detail[key + "_buffer"] = b
    if op.name == "ncclBcast" and op.writes:
        op.reads = list(op.writes)


def _groups(ops: list[Op]) -> None:
    group = None
    for op in ops:
        if op.kind == "group":
            if op.name == "ncclGroupStart":
                group = op.id
            else:
                op.detail["starts"] = group
                group = None
        elif op.kind in ("collective", "p2p"):
            op.detail["group"] = group


def roles(ops: list[Op], buffers: dict[str, Buffer], region: Region, pointers: Pointers) -> None:
    """Each buffer's role in the region's sequence of operations (a replay region's: what its graphs run)."""
    region_ops = [o for o in ops if o.in_region]
    if region.replays():  # what the graphs run, where the region first launches one
        replayed = [o for o in ops if any(op_in(o, s, cap) for s, cap in region.captures())]
        first = next((i for i, o in enumerate(region_ops) if o.kind == "graph_launch"), 0)
        region_ops = (
            [o for o in region_ops[:first] if o.kind != "graph_launch"]
            + replayed
            + [o for o in region_ops[first:] if o.kind != "graph_launch"]
        )
    swapped = _swapped(buffers, region, pointers)
    for b in buffers.values():
        b.role = "carried" if b.name in swapped else _role(b, region_ops)


def _role(b: Buffer, region_ops: list[Op]) -> str:
    seq = [("w" if b.name in o.writes else "") + ("r" if b.name in o.reads else "") for o in region_ops]
    seq = [s for s in seq if s]
    if not seq:
        return "unused"
    first_write = next((i for i, s in enumerate(seq) if "w" in s), None)
    if first_write is None:
        return "input"
    if (
        any("r" in s and "w" not in s for s in seq[:first_write])
        or seq[first_write] == "rw"
        and first_write == 0
        and _rw_reads_first(b, region_ops)
    ):
        return "carried"
    last_write = max(i for i, s in enumerate(seq) if "w" in s)
    return "intermediate" if any("r" in s for s in seq[last_write + 1 :]) else "output"


def _swapped(buffers: dict[str, Buffer], region: Region, pointers: Pointers) -> set[str]:
    """Buffers whose pointers the region swaps (`std::swap(a_new, a)`): each iteration reads what the
    previous one wrote."""
    if region.node is None:
        return set()
    out: set[str] = set()
    # a replayed capture swaps as it records (one graph per parity of the ping-pong)
    for src, node in [(region.src, region.node)] + region.captures():
        for n in src.nodes("call_expression", node):
            if call_name(n, src) != "swap":
                continue
            names = [pointers.base_name(a) for a in call_args(n)]
            swapped = [x for x in names if x is not None and x in buffers]
            if len(names) == 2 and len(swapped) == 2:
                out.update(swapped)
    return out


def _rw_reads_first(b: Buffer, region_ops: list[Op]) -> bool:
    """An op that reads and writes b first in the region (in place, e.g. ncclAllReduce(x, x)) reads a
    value carried over from the previous iteration, unless it is a kernel (which may write first)."""
    first = next(o for o in region_ops if b.name in o.writes or b.name in o.reads)
    return first.kind in ("collective", "p2p", "memcpy")
